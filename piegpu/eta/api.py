"""The core eta ops as user functions (one per op-table row, plus top_k/sort_desc)."""

from __future__ import annotations

import sys

from ..dtypes import DType
from ..errors import ValidationError
from .ops import OPS, GroupOp, check_shape
from .tracer import Tensor, binary, broadcast_shapes, current, expand, to_tensor

_this = sys.modules[__name__]


def _unary_fn(op: str):
    def fn(x) -> Tensor:
        x = to_tensor(x, None, op)
        return x._b.add(op, [x])
    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = f"Elementwise {op}. {OPS[op].doc}".strip()
    return fn


def _binary_fn(op: str):
    def fn(a, b) -> Tensor:
        return binary(op, a, b)
    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = f"Elementwise {op} with broadcasting; Python scalars take the tensor's dtype. {OPS[op].doc}".strip()
    return fn


def _reduce_fn(op: str):
    def fn(x) -> Tensor:
        x = to_tensor(x, None, op)
        return x._b.add(op, [x])
    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = f"{op} over the last axis, which is dropped."
    return fn


UNARY = list(GroupOp.UNARY)
BINARY = list(GroupOp.BINARY)
REDUCE = list(GroupOp.REDUCE + GroupOp.SCAN)

for _n in UNARY:
    setattr(_this, _n, _unary_fn(_n))
for _n in BINARY:
    setattr(_this, _n, _binary_fn(_n))
for _n in REDUCE:
    setattr(_this, _n, _reduce_fn(_n))


def select(cond, if_true, if_false) -> Tensor:
    """Elementwise cond ? if_true : if_false, with broadcasting."""
    c = to_tensor(cond, None, "select")
    like = if_true if isinstance(if_true, Tensor) else if_false if isinstance(if_false, Tensor) else None
    a = to_tensor(if_true, like, "select")
    b = to_tensor(if_false, a if like is None else like, "select")
    shape = broadcast_shapes("select", broadcast_shapes("select", c.shape, a.shape), b.shape)
    return c._b.add("select", [expand(c, shape), expand(a, shape), expand(b, shape)])


def cast(x, to: DType) -> Tensor:
    """Convert to dtype `to` (f32->int truncates and saturates, NaN -> 0; bool -> 0/1; num -> bool is x != 0)."""
    x = to_tensor(x, None, "cast")
    if not hasattr(to, "code"):
        raise ValidationError(f"cast: {to!r} is not a piegpu dtype. Fix: use dtype.f32, dtype.i32, dtype.u32 or dtype.bool")
    return x if x.dtype == to else x._b.add("cast", [x], to=to)


def bitcast(x, to: DType) -> Tensor:
    """Reinterpret the 32 bits of each element as dtype `to`."""
    x = to_tensor(x, None, "bitcast")
    return x if x.dtype == to else x._b.add("bitcast", [x], to=to)


def reshape(x, shape) -> Tensor:
    """Same elements in row-major order, new static shape."""
    x = to_tensor(x, None, "reshape")
    shape = check_shape("reshape", shape)
    return x if x.shape == shape else x._b.add("reshape", [x], shape=shape)


def broadcast(x, shape) -> Tensor:
    """Broadcast a tensor or Python scalar to `shape` (right-aligned; source dims 1 or equal)."""
    shape = check_shape("broadcast", shape)
    x = to_tensor(x, None, "broadcast")
    return x if x.shape == shape else x._b.add("broadcast", [x], shape=shape)


def transpose(x) -> Tensor:
    """Swap the two axes of a rank-2 tensor."""
    x = to_tensor(x, None, "transpose")
    return x._b.add("transpose", [x])


def iota(n: int) -> Tensor:
    """u32 [n]: 0, 1, ..., n-1."""
    return current().add("iota", [], n=n)


def concat(xs) -> Tensor:
    """Join tensors along the last axis."""
    xs = list(xs)
    if not xs or not all(isinstance(x, Tensor) for x in xs):
        raise ValidationError("concat: pass a non-empty list of traced tensors. Fix: concat([a, b])")
    return xs[0] if len(xs) == 1 else xs[0]._b.add("concat", xs)


def slice_last(x, start: int, size: int) -> Tensor:
    """x[..., start:start+size] along the last axis (static bounds)."""
    x = to_tensor(x, None, "slice_last")
    if start == 0 and x.shape and size == x.shape[-1]:
        return x
    return x._b.add("slice_last", [x], start=int(start), size=int(size))


def gather(src, idx) -> Tensor:
    """src[idx] along axis 0: shape idx.shape + src.shape[1:]; out-of-range rows read 0."""
    src, idx = to_tensor(src, None, "gather"), to_tensor(idx, None, "gather")
    return src._b.add("gather", [src, idx])


def gather_row(src, idx) -> Tensor:
    """out[i] = src[i, idx[i]] for src[m, n], idx[m]; out of range reads 0."""
    src, idx = to_tensor(src, None, "gather_row"), to_tensor(idx, None, "gather_row")
    return src._b.add("gather_row", [src, idx])


def take_last(src, idx) -> Tensor:
    """out[..., j] = src[..., idx[..., j]] along the last axis; out of range reads 0."""
    src, idx = to_tensor(src, None, "take_last"), to_tensor(idx, None, "take_last")
    return src._b.add("take_last", [src, idx])


def _scatter(op: str, dst, idx, vals) -> Tensor:
    dst, idx = to_tensor(dst, None, op), to_tensor(idx, None, op)
    vals = to_tensor(vals, dst, op)
    want = idx.shape + dst.shape[1:]
    if vals.shape != want and vals.dtype == dst.dtype:
        try:
            vals = expand(vals, broadcast_shapes(op, vals.shape, want))
        except ValidationError:
            pass  # the type rule below gives the clear message
    return dst._b.add(op, [dst, idx, vals])


def scatter_set(dst, idx, vals) -> Tensor:
    """dst with rows idx[j] (axis 0) replaced by vals[j]; last write wins; out-of-range skipped."""
    return _scatter("scatter_set", dst, idx, vals)


def scatter_add(dst, idx, vals) -> Tensor:
    """dst with vals[j] added into rows idx[j] (axis 0); out-of-range skipped."""
    return _scatter("scatter_add", dst, idx, vals)


def top_k(x, k: int):
    """(values, indices) of the k largest along the last axis, descending; ties -> lower index."""
    x = to_tensor(x, None, "top_k")
    if isinstance(k, bool) or not isinstance(k, int):
        raise ValidationError(f"top_k: k must be a static Python int, got {type(k).__name__}. "
                              "Fix: pass a constant such as 40")
    idx = x._b.add("top_k_idx", [x], k=k)
    return take_last(x, idx), idx


def sort_desc(x):
    """(values, indices) of the whole last axis in descending order; ties -> lower index first."""
    x = to_tensor(x, None, "sort_desc")
    if not x.shape:
        raise ValidationError("sort_desc: cannot sort a rank-0 tensor. Fix: reshape(x, [1])")
    return top_k(x, x.shape[-1])


def matmul(a, b) -> Tensor:
    """f32 matrix product a[m, k] @ b[k, n]."""
    a, b = to_tensor(a, None, "matmul"), to_tensor(b, None, "matmul")
    return a._b.add("matmul", [a, b])


def rng(state, shape) -> Tensor:
    """Uniform f32 in (0, 1) of `shape`; a pure function of state = u32[2] [key, counter] and the index."""
    state = to_tensor(state, None, "rng")
    return state._b.add("rng", [state], shape=check_shape("rng", shape))


def gumbel(state, shape) -> Tensor:
    """Standard Gumbel noise -log(-log(u)) with u = rng(state, shape)."""
    u = rng(state, shape)
    return _this.neg(_this.log(_this.neg(_this.log(u))))  # generated from the op table above
