"""The numpy reference interpreter: the oracle that defines eta semantics."""

from __future__ import annotations

import numpy as np

from ..dtypes import dtype
from ..errors import ValidationError
from .counter_rng import rng_uniform
from .ops import GroupOp
from .program import Program, const_value

F32_I32_MAX = np.float32(2147483520.0)  # largest f32 below 2^31
F32_U32_MAX = np.float32(4294967040.0)  # largest f32 below 2^32


def _int64(a):
    return np.asarray(a).astype(np.int64)


def _div(node, a, b):
    if a.dtype == np.float32:
        return np.divide(a, b)
    a64, b64 = _int64(a), _int64(b)
    safe = np.where(b64 == 0, 1, b64)
    q = np.abs(a64) // np.abs(safe) * np.sign(a64) * np.sign(safe)
    return np.where(b64 == 0, a64, q).astype(a.dtype)  # int64 -> int32 wraps (MIN / -1 = MIN)


def _rem(node, a, b):
    if a.dtype == np.float32:
        return np.fmod(a, b)
    a64, b64 = _int64(a), _int64(b)
    safe = np.where(b64 == 0, 1, b64)
    r = a64 - (np.abs(a64) // np.abs(safe) * np.sign(a64) * np.sign(safe)) * safe
    return np.where(b64 == 0, 0, r).astype(a.dtype)


def _shift(fn):
    def rule(node, a, b):
        return fn(a, (b.astype(np.uint32) & np.uint32(31)).astype(a.dtype))
    return rule


def _cast(node, x):
    to = node.attr["to"].np
    if to == np.bool_:
        return x != 0
    if x.dtype == np.float32 and to in (np.int32, np.uint32):
        lo, hi = (np.float32(-2147483648.0), F32_I32_MAX) if to == np.int32 else (np.float32(0), F32_U32_MAX)
        return np.trunc(np.clip(np.nan_to_num(x, nan=0.0, posinf=hi, neginf=lo), lo, hi)).astype(to)
    if x.dtype == np.bool_ or to == np.float32:
        return x.astype(to)
    return x.astype(np.int64).astype(to)  # int <-> int wraps modulo 2^32


def _argkey(x, largest: bool):
    if x.dtype != np.float32:
        return x
    return np.where(np.isnan(x), np.float32(-np.inf if largest else np.inf), x)


def _top_k(node, x):
    k = node.attr["k"]
    key = _argkey(x, True)
    key = -key.astype(np.float64) if key.dtype != np.float32 else -key
    order = np.argsort(key, axis=-1, kind="stable")
    return order[..., :k].astype(np.int32)


def _in_range(idx, n):
    i = idx.astype(np.int64)
    return (i >= 0) & (i < n), np.clip(i, 0, n - 1)


def _gather(node, src, idx):
    ok, i = _in_range(idx, src.shape[0])
    out = src[i]
    mask = ok.reshape(ok.shape + (1,) * (src.ndim - 1))
    return np.where(mask, out, np.zeros((), src.dtype))


def _gather_row(node, src, idx):
    ok, i = _in_range(idx, src.shape[1])
    return np.where(ok, src[np.arange(src.shape[0]), i], np.zeros((), src.dtype))


def _take_last(node, src, idx):
    ok, i = _in_range(idx, src.shape[-1])
    return np.where(ok, np.take_along_axis(src, i, axis=-1), np.zeros((), src.dtype))


def _scatter(add: bool):
    def rule(node, dst, idx, vals):
        out = dst.copy()
        flat_idx = idx.reshape(-1).astype(np.int64)
        flat_vals = vals.reshape((flat_idx.size,) + dst.shape[1:])
        for j, i in enumerate(flat_idx):  # in order: the last write wins
            if 0 <= i < dst.shape[0]:
                if add:
                    out[i] = out[i] + flat_vals[j]
                else:
                    out[i] = flat_vals[j]
        return out
    return rule


def _sum(x):
    return np.sum(x, axis=-1, dtype=x.dtype)


IMPL = {
    "neg": lambda n, x: np.negative(x),
    "abs_": lambda n, x: np.abs(x),
    "sign": lambda n, x: np.sign(x),
    "recip": lambda n, x: np.float32(1.0) / x,
    "exp": lambda n, x: np.exp(x),
    "log": lambda n, x: np.log(x),
    "sqrt": lambda n, x: np.sqrt(x),
    "rsqrt": lambda n, x: np.float32(1.0) / np.sqrt(x),
    "sin": lambda n, x: np.sin(x),
    "cos": lambda n, x: np.cos(x),
    "tanh": lambda n, x: np.tanh(x),
    "floor": lambda n, x: np.floor(x),
    "isnan": lambda n, x: np.isnan(x),
    "isinf": lambda n, x: np.isinf(x),
    "not_": lambda n, x: np.logical_not(x),
    "bit_not": lambda n, x: np.invert(x),
    "add": lambda n, a, b: a + b,
    "sub": lambda n, a, b: a - b,
    "mul": lambda n, a, b: a * b,
    "div": _div,
    "rem": _rem,
    "maximum": lambda n, a, b: np.maximum(a, b),
    "minimum": lambda n, a, b: np.minimum(a, b),
    "pow": lambda n, a, b: np.power(a, b),
    "eq": lambda n, a, b: a == b,
    "ne": lambda n, a, b: a != b,
    "lt": lambda n, a, b: a < b,
    "le": lambda n, a, b: a <= b,
    "gt": lambda n, a, b: a > b,
    "ge": lambda n, a, b: a >= b,
    "and_": lambda n, a, b: np.logical_and(a, b),
    "or_": lambda n, a, b: np.logical_or(a, b),
    "bit_and": lambda n, a, b: a & b,
    "bit_or": lambda n, a, b: a | b,
    "bit_xor": lambda n, a, b: a ^ b,
    "shl": _shift(np.left_shift),
    "shr": _shift(np.right_shift),
    "select": lambda n, c, a, b: np.where(c, a, b),
    "cast": _cast,
    "bitcast": lambda n, x: x.view(n.attr["to"].np),
    "reduce_sum": lambda n, x: _sum(x),
    "reduce_max": lambda n, x: np.max(x, axis=-1),
    "reduce_min": lambda n, x: np.min(x, axis=-1),
    "reduce_argmax": lambda n, x: np.argmax(_argkey(x, True), axis=-1).astype(np.int32),
    "reduce_argmin": lambda n, x: np.argmin(_argkey(x, False), axis=-1).astype(np.int32),
    "cumsum": lambda n, x: np.cumsum(x, axis=-1, dtype=x.dtype),
    "cumprod": lambda n, x: np.cumprod(x, axis=-1, dtype=x.dtype),
    "reshape": lambda n, x: x.reshape(n.type.shape),
    "broadcast": lambda n, x: np.broadcast_to(x, n.type.shape),
    "transpose": lambda n, x: x.T,
    "concat": lambda n, *xs: np.concatenate(xs, axis=-1),
    "slice_last": lambda n, x: x[..., n.attr["start"]: n.attr["start"] + n.attr["size"]],
    "gather": _gather,
    "gather_row": _gather_row,
    "take_last": _take_last,
    "scatter_set": _scatter(False),
    "scatter_add": _scatter(True),
    "top_k_idx": _top_k,
    "matmul": lambda n, a, b: np.matmul(a, b),
    "rng": lambda n, s: rng_uniform(s, n.type.shape),
    "const": lambda n: np.array(const_value(n), dtype=n.type.dtype.np),
    "iota": lambda n: np.arange(n.type.shape[0], dtype=np.uint32),
}


def coerce_input(i: int, value, ty) -> np.ndarray:
    """Check a numpy input against its spec and return it as the spec's dtype."""
    arr = np.asarray(value)
    if arr.shape != ty.shape:
        raise ValidationError(f"input {i}: shape {list(arr.shape)} does not match spec {ty!r}. "
                              "Fix: pass an array of the traced shape")
    want = ty.dtype.np
    if arr.dtype == want:
        return arr
    if ty.dtype == dtype.bool or arr.dtype == np.bool_:
        raise ValidationError(f"input {i}: dtype {arr.dtype} does not match spec {ty!r}")
    if np.issubdtype(arr.dtype, np.floating) and not ty.dtype.is_float:
        raise ValidationError(f"input {i}: float array for integer spec {ty!r}. Fix: pass integers")
    if ty.dtype.is_int:
        a64 = arr.astype(np.int64)
        if a64.size and (a64.min() < -(1 << 31) or a64.max() >= (1 << 32)):
            raise ValidationError(f"input {i}: values do not fit 32 bits for spec {ty!r}")
        return a64.astype(want)
    return arr.astype(want)


def evaluate(prog: Program, inputs, env=None):
    """Run `prog` on numpy inputs; `env` supplies intrinsics and channel cells and collects puts."""
    vals: list = [None] * len(prog.nodes)
    types = prog.input_types
    if len(inputs) != len(types):
        raise ValidationError(f"program takes {len(types)} inputs, got {len(inputs)}. "
                              f"Fix: pass arrays for {types}")
    with np.errstate(all="ignore"):
        for i, node in enumerate(prog.nodes):
            if node.op == "input":
                idx = node.attr["index"]
                vals[i] = coerce_input(idx, inputs[idx], node.type)
            elif node.op in GroupOp.RUNTIME:  # values from (and puts to) the runtime
                if env is None:
                    raise ValidationError(f"node %{i} ({node.op}) needs the runtime (channels or intrinsics). "
                                          "Fix: run this program as an epilogue of a ForwardPass")
                vals[i] = env.external(node, [vals[j] for j in node.inputs])
            else:
                out = IMPL[node.op](node, *[vals[j] for j in node.inputs])
                vals[i] = np.asarray(out, dtype=node.type.dtype.np).reshape(node.type.shape)
    outs = [np.array(vals[i]) for i in prog.outputs]
    return outs


class _ScalarNode:
    """Stands in for a Node when folding one elementwise op on scalars."""

    def __init__(self, op: str, out_dtype):
        from .ops import TType
        self.op = op
        self.type = TType(out_dtype, ())
        self.attr = {"to": out_dtype}


def eval_scalar(op: str, args: list, out_dtype):
    """The interpreter's result of elementwise `op` on Python scalars (constant folding)."""
    arrs = [np.array(a, dtype=dt.np) for a, dt in args]
    with np.errstate(all="ignore"):
        out = IMPL[op](_ScalarNode(op, out_dtype), *arrs)
    return np.asarray(out, dtype=out_dtype.np).reshape(()).item()
