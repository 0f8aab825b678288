"""The eta op table: every op declared once, with its arity, attributes and type rule.

The tracer, validator (Program.from_bytes), interpreter and every emitter are
driven from OPS; each backend holds one rule per op name and a test fails when a
backend lacks a rule for an op of a kind it supports. Code that needs a set of ops
(the elementwise ones, the runtime ones, ...) takes it from GroupOp at the end of
this file, derived from the rows, never spelled out by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Callable, NamedTuple

from ..dtypes import DType, dtype
from ..errors import ValidationError

MAX_RANK = 4
MAX_ELEMENTS = 1 << 30  # per tensor; keeps every flat index inside u32 arithmetic


class TType(NamedTuple):
    """The static type of a tensor: element dtype and shape."""

    dtype: DType
    shape: tuple

    def __repr__(self) -> str:
        return f"{self.dtype.name}{list(self.shape)}"

    @property
    def size(self) -> int:
        """Number of elements."""
        return prod(self.shape)


# Attribute kinds as they appear in program bytes.
A_INT, A_DTYPE, A_SHAPE, A_STR = "int", "dtype", "shape", "str"


@dataclass(frozen=True)
class OpDef:
    """One row of the op table."""

    name: str
    kind: str  # elementwise | reduce | scan | shape | index | scatter | order | linear | random | source | effect
    arity: int | None  # None: variadic (>= 1)
    attrs: tuple  # ((attr name, attr kind), ...)
    infer: Callable  # (op, [TType], attrs dict) -> TType | None (None for effects)
    doc: str = ""
    runtime: bool = False  # a runtime buffer (intrinsic, channel) that only a ForwardPass provides
    expensive: bool = False  # many instructions per element: worth storing once rather than recomputing
    free: bool = False  # no instructions (a reinterpretation of its input's bits): never worth storing


OPS: dict[str, OpDef] = {}


def fail(op: str, what: str, fix: str) -> None:
    """Raise the ValidationError every type rule uses: op, what is wrong, and the fix."""
    raise ValidationError(f"{op}: {what}. Fix: {fix}")


def check_shape(op: str, shape) -> tuple:
    """Validate a static shape: rank <= 4, every dim an int >= 1, bounded size."""
    try:
        shape = tuple(shape)
    except TypeError:
        fail(op, f"shape {shape!r} is not a sequence of ints", "pass a list such as [4, 8]")
    if len(shape) > MAX_RANK:
        fail(op, f"shape {list(shape)} has rank {len(shape)} > {MAX_RANK}", "reshape to rank 4 or less")
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            fail(op, f"shape {list(shape)} has dimension {d!r}; dims are static Python ints >= 1",
                 "use positive int dimensions")
    if prod(shape) > MAX_ELEMENTS:
        fail(op, f"shape {list(shape)} has {prod(shape)} elements (limit {MAX_ELEMENTS})",
             "split the tensor")
    return shape


def _def(name, kind, arity, attrs, infer, doc="", **flags):
    OPS[name] = OpDef(name, kind, arity, tuple(attrs), infer, doc, **flags)


# ---- dtype predicates used by the elementwise rules ------------------------------

def _need(op: str, t: TType, ok: Callable[[DType], bool], what: str, fix: str) -> None:
    if not ok(t.dtype):
        fail(op, f"needs {what} input, got {t!r}", fix)


NUM = (lambda d: d.is_numeric, "a numeric (f32, i32, u32)", "cast bool inputs with cast(x, dtype.i32)")
FLT = (lambda d: d.is_float, "an f32", "cast with cast(x, dtype.f32)")
INT = (lambda d: d.is_int, "an i32 or u32", "cast with cast(x, dtype.i32)")
BOOL = (lambda d: d.kind == "bool", "a bool", "compare first, e.g. gt(x, 0)")
ANY = (lambda d: True, "any", "")
SIGNED = (lambda d: d.kind in ("float", "int"), "a signed (f32, i32)", "cast u32 with cast(x, dtype.i32)")


def _same_types(op: str, ins: list) -> None:
    first = ins[0]
    for t in ins[1:]:
        if t.dtype != first.dtype:
            fail(op, f"dtype mismatch {first!r} vs {t!r}",
                 "cast one side with cast(x, dtype) so both have the same dtype")
        if t.shape != first.shape:
            fail(op, f"shape mismatch {first!r} vs {t!r} (core ops take equal shapes)",
                 "broadcast(x, shape) first; operators broadcast automatically")


def _unary(name: str, pred, out: DType | None = None, doc: str = "", expensive: bool = False):
    def infer(op, ins, attrs):
        _need(op, ins[0], pred[0], pred[1], pred[2])
        return TType(out or ins[0].dtype, ins[0].shape)
    _def(name, "elementwise", 1, (), infer, doc, expensive=expensive)


def _binary(name: str, pred, out: DType | None = None, doc: str = "", expensive: bool = False):
    def infer(op, ins, attrs):
        _same_types(op, ins)
        _need(op, ins[0], pred[0], pred[1], pred[2])
        return TType(out or ins[0].dtype, ins[0].shape)
    _def(name, "elementwise", 2, (), infer, doc, expensive=expensive)


for _n in ("neg", "abs_"):
    _unary(_n, NUM)
_unary("sign", NUM, doc="-1, 0 or 1 (NaN stays NaN)")
_unary("recip", FLT)
for _n in ("exp", "log", "sqrt", "rsqrt", "tanh"):
    _unary(_n, FLT, expensive=True)
_unary("floor", FLT)
for _n in ("sin", "cos"):  # GPU drivers reduce the argument in f32; beyond 2^24 every backend differs
    _unary(_n, FLT, doc="radians; accurate to ~1e-7 for |x| < 2^24 (1.7e7), implementation-defined beyond",
           expensive=True)
_unary("isnan", FLT, dtype.bool, "True where x is NaN")
_unary("isinf", FLT, dtype.bool, "True where x is +inf or -inf")
_unary("not_", BOOL)
_unary("bit_not", INT)
for _n in ("add", "sub", "mul", "div"):
    _binary(_n, NUM)
_binary("rem", NUM, expensive=True)  # f32 rem is an exact fmod: a loop over the exponent difference
for _n in ("maximum", "minimum"):
    _binary(_n, NUM)
_binary("pow", FLT, doc="C pow semantics: negative base allowed with integral exponent", expensive=True)
for _n in ("eq", "ne"):
    _binary(_n, ANY, dtype.bool)
for _n in ("lt", "le", "gt", "ge"):
    _binary(_n, NUM, dtype.bool)
for _n in ("and_", "or_"):
    _binary(_n, BOOL)
for _n in ("bit_and", "bit_or", "bit_xor", "shl", "shr"):
    _binary(_n, INT)


def _infer_select(op, ins, attrs):
    c, a, b = ins
    _need(op, c, BOOL[0], "a bool condition", "compare first, e.g. gt(x, 0)")
    _same_types(op, [a, b])
    if c.shape != a.shape:
        fail(op, f"condition shape {c!r} differs from value shape {a!r}", "broadcast the condition")
    return TType(a.dtype, a.shape)


_def("select", "elementwise", 3, (), _infer_select, "c ? a : b elementwise")


def _infer_cast(op, ins, attrs):
    to = attrs["to"]
    if to == dtype.f16:
        fail(op, "f16 is a storage type only", "cast to dtype.f32")
    return TType(to, ins[0].shape)


_def("cast", "elementwise", 1, (("to", A_DTYPE),), _infer_cast,
     "f32->int truncates toward zero and saturates (NaN -> 0); int<->int wraps; bool -> 0/1")
_def("bitcast", "elementwise", 1, (("to", A_DTYPE),),
     lambda op, ins, attrs: (_need(op, ins[0], lambda d: d.kind != "bool", "a 32-bit numeric", "cast bools first"),
                             attrs["to"].kind == "bool" and fail(op, "cannot bitcast to bool", "use ne(x, 0)"),
                             TType(attrs["to"], ins[0].shape))[-1],
     "reinterpret the 32 bits", free=True)


# ---- reductions and scans over the last axis -------------------------------------

def _reduce(name: str, pred, out: DType | None = None):
    def infer(op, ins, attrs):
        x = ins[0]
        if not x.shape:
            fail(op, f"cannot reduce a rank-0 tensor {x!r}", "reshape(x, [1]) first")
        _need(op, x, pred[0], pred[1], pred[2])
        return TType(out or x.dtype, x.shape[:-1])
    _def(name, "reduce", 1, (), infer, "over the last axis, which is dropped")


_reduce("reduce_sum", NUM)
_reduce("reduce_max", NUM)
_reduce("reduce_min", NUM)
_reduce("reduce_argmax", NUM, dtype.i32)
_reduce("reduce_argmin", NUM, dtype.i32)


def _scan(name: str):
    def infer(op, ins, attrs):
        x = ins[0]
        if not x.shape:
            fail(op, f"cannot scan a rank-0 tensor {x!r}", "reshape(x, [1]) first")
        _need(op, x, NUM[0], NUM[1], NUM[2])
        return x
    _def(name, "scan", 1, (), infer, "inclusive, over the last axis")


_scan("cumsum")
_scan("cumprod")


# ---- shape ops ---------------------------------------------------------------------

def _infer_reshape(op, ins, attrs):
    shape = check_shape(op, attrs["shape"])
    if prod(shape) != ins[0].size:
        fail(op, f"cannot reshape {ins[0]!r} ({ins[0].size} elements) to {list(shape)} ({prod(shape)})",
             "keep the element count equal")
    return TType(ins[0].dtype, shape)


def broadcast_ok(src: tuple, dst: tuple) -> bool:
    """True if `src` broadcasts to `dst` (right-aligned; each source dim is 1 or equal)."""
    if len(src) > len(dst):
        return False
    return all(s == 1 or s == d for s, d in zip(reversed(src), reversed(dst)))


def _infer_broadcast(op, ins, attrs):
    shape = check_shape(op, attrs["shape"])
    if not broadcast_ok(ins[0].shape, shape):
        fail(op, f"cannot broadcast {ins[0]!r} to {list(shape)}: each source dim (right-aligned) "
                 "must be 1 or equal", "reshape to insert size-1 dims where needed")
    return TType(ins[0].dtype, shape)


def _infer_transpose(op, ins, attrs):
    x = ins[0]
    if len(x.shape) != 2:
        fail(op, f"transpose takes a rank-2 tensor, got {x!r}", "reshape to [m, n] first")
    return TType(x.dtype, (x.shape[1], x.shape[0]))


def _infer_concat(op, ins, attrs):
    first = ins[0]
    if not first.shape:
        fail(op, "cannot concat rank-0 tensors", "reshape them to [1]")
    for t in ins[1:]:
        if t.dtype != first.dtype or len(t.shape) != len(first.shape) or t.shape[:-1] != first.shape[:-1]:
            fail(op, f"inputs {first!r} and {t!r} differ in dtype, rank or leading dims",
                 "concat joins along the last axis; match dtype and the other dims")
    return TType(first.dtype, first.shape[:-1] + (sum(t.shape[-1] for t in ins),))


def _infer_slice(op, ins, attrs):
    x, start, size = ins[0], attrs["start"], attrs["size"]
    if not x.shape or start < 0 or size < 1 or start + size > x.shape[-1]:
        fail(op, f"slice [{start}:{start + size}] out of range for {x!r}", "keep the slice inside the last axis")
    return TType(x.dtype, x.shape[:-1] + (size,))


_def("reshape", "shape", 1, (("shape", A_SHAPE),), _infer_reshape)
_def("broadcast", "shape", 1, (("shape", A_SHAPE),), _infer_broadcast)
_def("transpose", "shape", 1, (), _infer_transpose)
_def("concat", "shape", None, (), _infer_concat, "along the last axis")
_def("slice_last", "shape", 1, (("start", A_INT), ("size", A_INT)), _infer_slice, "x[..., start:start+size]")


# ---- indexing -------------------------------------------------------------------------

def _check_index(op: str, t: TType) -> None:
    if not t.dtype.is_int:
        fail(op, f"indices must be i32 or u32, got {t!r}", "cast(idx, dtype.i32); float indices are not allowed")


def _infer_gather(op, ins, attrs):
    src, idx = ins
    _check_index(op, idx)
    if not src.shape:
        fail(op, "gather needs a source of rank >= 1", "reshape the source to [n]")
    shape = idx.shape + src.shape[1:]
    check_shape(op, shape or (1,))
    return TType(src.dtype, shape)


def _infer_gather_row(op, ins, attrs):
    src, idx = ins
    _check_index(op, idx)
    if len(src.shape) != 2 or idx.shape != (src.shape[0],):
        fail(op, f"gather_row takes src[m, n] and idx[m], got {src!r} and {idx!r}", "reshape to those shapes")
    return TType(src.dtype, (src.shape[0],))


def _infer_take_last(op, ins, attrs):
    src, idx = ins
    _check_index(op, idx)
    if not src.shape or len(idx.shape) != len(src.shape) or idx.shape[:-1] != src.shape[:-1]:
        fail(op, f"take_last takes x[..., n] and idx[..., k] with equal leading dims, got {src!r}, {idx!r}",
             "match the leading dimensions")
    return TType(src.dtype, idx.shape)


def _infer_scatter(op, ins, attrs):
    dst, idx, vals = ins
    _check_index(op, idx)
    if not dst.shape:
        fail(op, "scatter needs a destination of rank >= 1", "reshape the destination to [n]")
    want = idx.shape + dst.shape[1:]
    if vals.dtype != dst.dtype or vals.shape != want:
        fail(op, f"values {vals!r} must be {dst.dtype.name}{list(want)} (idx shape + dst.shape[1:])",
             "broadcast or cast the values")
    if op == "scatter_add" and not dst.dtype.is_numeric:
        fail(op, f"cannot add into {dst!r}", "use scatter_set for bool, or cast to i32")
    return dst


_def("gather", "index", 2, (), _infer_gather, "src[idx] along axis 0; out of range reads 0")
_def("gather_row", "index", 2, (), _infer_gather_row, "src[i, idx[i]]; out of range reads 0")
_def("take_last", "index", 2, (), _infer_take_last, "x[..., idx[..., j]]; out of range reads 0")
_def("scatter_set", "scatter", 3, (), _infer_scatter, "dst[idx[j]] = vals[j]; last write wins; out of range skipped")
_def("scatter_add", "scatter", 3, (), _infer_scatter, "dst[idx[j]] += vals[j]; out of range skipped")


# ---- ordering, linear algebra, randomness ----------------------------------------------

def _infer_top_k(op, ins, attrs):
    x, k = ins[0], attrs["k"]
    if not x.shape:
        fail(op, "top_k needs rank >= 1", "reshape to [n]")
    _need(op, x, NUM[0], NUM[1], NUM[2])
    if not 1 <= k <= x.shape[-1]:
        fail(op, f"k={k} is outside 1..{x.shape[-1]} for {x!r}", f"pick k <= {x.shape[-1]}")
    return TType(dtype.i32, x.shape[:-1] + (k,))


_def("top_k_idx", "order", 1, (("k", A_INT),), _infer_top_k,
     "indices of the k largest along the last axis, descending; ties -> lower index; NaN as -inf")


def _infer_matmul(op, ins, attrs):
    a, b = ins
    if a.dtype != dtype.f32 or b.dtype != dtype.f32:
        fail(op, f"matmul is f32 only, got {a!r} @ {b!r}", "cast both to dtype.f32")
    if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
        fail(op, f"matmul takes a[m, k] and b[k, n], got {a!r} and {b!r}", "reshape or transpose")
    return TType(dtype.f32, (a.shape[0], b.shape[1]))


_def("matmul", "linear", 2, (), _infer_matmul)


def _infer_rng(op, ins, attrs):
    s = ins[0]
    if s.dtype != dtype.u32 or s.shape != (2,):
        fail(op, f"state must be u32[2] = [key, counter], got {s!r}", "pass a u32 tensor of shape [2]")
    return TType(dtype.f32, check_shape(op, attrs["shape"]))


_def("rng", "random", 1, (("shape", A_SHAPE),), _infer_rng,
     "uniform in (0, 1), a pure function of (key, counter, flat index)", expensive=True)  # four integer hashes


# ---- sources and effects --------------------------------------------------------------

def _infer_source(op, ins, attrs):
    return TType(attrs["dtype"], check_shape(op, attrs["shape"]))


def _infer_const(op, ins, attrs):
    return TType(attrs["dtype"], ())


def _infer_iota(op, ins, attrs):
    n = attrs["n"]
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        fail(op, f"iota(n) needs an int n >= 1, got {n!r}", "pass a positive int")
    return TType(dtype.u32, check_shape(op, (n,)))


_def("input", "source", 0, (("index", A_INT), ("dtype", A_DTYPE), ("shape", A_SHAPE)), _infer_source)
_def("const", "source", 0, (("dtype", A_DTYPE), ("bits", A_INT)), _infer_const,
     "a rank-0 constant; `bits` is its 32-bit pattern, so -0.0 and NaN payloads hash exactly")
_def("iota", "source", 0, (("n", A_INT),), _infer_iota, "0, 1, ..., n-1 as u32")
_def("intrinsic", "source", 0, (("name", A_STR), ("index", A_INT), ("dtype", A_DTYPE), ("shape", A_SHAPE)),
     _infer_source, "a value the runtime provides, e.g. the logits of readout row `index`", runtime=True)
_def("chan_take", "source", 0, (("slot", A_INT), ("seq", A_INT), ("dtype", A_DTYPE), ("shape", A_SHAPE)),
     _infer_source, "the seq-th oldest cell of a channel, consumed when the pass commits", runtime=True)
_def("chan_read", "source", 0, (("slot", A_INT), ("dtype", A_DTYPE), ("shape", A_SHAPE)),
     _infer_source, "the oldest cell of a channel, not consumed", runtime=True)


def _infer_put(op, ins, attrs):
    return None


_def("chan_put", "effect", 1, (("slot", A_INT), ("seq", A_INT)), _infer_put,
     "append a cell; all puts of one pass commit together", runtime=True)


def infer(name: str, ins: list, attrs: dict) -> TType | None:
    """Run the type rule of op `name`; the single entry point tracer and validator share."""
    opdef = OPS.get(name)
    if opdef is None:
        raise ValidationError(f"unknown op {name!r}. Fix: use one of {sorted(OPS)}")
    if opdef.arity is not None and len(ins) != opdef.arity:
        fail(name, f"takes {opdef.arity} inputs, got {len(ins)}", "pass the right number of tensors")
    if opdef.arity is None and not ins:
        fail(name, "takes at least one input", "pass a list of tensors")
    return opdef.infer(name, ins, attrs)


# ---- op groups: named sets of op names, derived from the rows above (tinygrad's GroupOp) ----

def _where(pred: Callable) -> tuple:
    return tuple(n for n, d in OPS.items() if pred(d))


def _kinds(*kinds: str) -> tuple:
    return _where(lambda d: d.kind in kinds)


class GroupOp:
    """Op names by role, in table order. Test membership here; never spell a set of op names out."""

    UNARY = _where(lambda d: d.kind == "elementwise" and d.arity == 1 and not d.attrs)
    BINARY = _where(lambda d: d.kind == "elementwise" and d.arity == 2)
    ELEMENTWISE = _kinds("elementwise")  # unary, binary, compare, logic, select, cast, bitcast
    EXPENSIVE = _where(lambda d: d.expensive)
    FREE = _where(lambda d: d.free)
    REDUCE = _kinds("reduce")
    SCAN = _kinds("scan")
    ORDER = _kinds("order")  # top-k and sorts
    LINEAR = _kinds("linear")
    SCATTER = _kinds("scatter")
    # Stored by a kernel template of their own (region boundaries); every other op is inlined.
    TEMPLATED = _kinds("reduce", "scan", "order", "linear", "scatter")
    SHAPE = _kinds("shape")
    INDEX = _kinds("index")
    SOURCE = _kinds("source")  # no inputs: program inputs, constants, runtime buffers
    RUNTIME = _where(lambda d: d.runtime)  # intrinsic and the channel ops: only a ForwardPass runs them
    CHANNEL = _where(lambda d: d.runtime and "slot" in dict(d.attrs))  # take, read, put
    COMMITTED = _where(lambda d: d.runtime and "seq" in dict(d.attrs))  # take, put: move a ring when the pass commits
