"""eta -> StableHLO: an MLIR text module, translated op by op from the eta program.

StableHLO is tensor-level, so this emitter works on the eta nodes directly, not on
the planned kernels. The module has one function, `func.func public @main`, taking the
program inputs in index order and returning its outputs in order. Types: f32 -> f32,
i32 -> i32, u32 -> ui32, bool -> i1.

Where StableHLO leaves a case implementation-defined, the rules pin eta's semantics
explicitly: integer x/0 = x, x%0 = 0, INT_MIN/-1 = INT_MIN (guarded with select);
float -> int casts clamp and map NaN to 0 before the convert; shift amounts are masked
with 31; gathers clamp their indices and select 0 where the index was out of range;
scatters send out-of-range updates to an extra row that is cut off afterwards, and
scatter_set picks the last writer per row with a max-scatter of update numbers, so no
row ever sees two competing writes.
"""

from __future__ import annotations

from math import prod

from ..errors import CompileError
from ..eta.counter_rng import KEY_SALT, M1, M2, STREAM_SALT
from ..eta.ops import OPS, GroupOp
from ..eta.program import Program, const_value
from ..kernel.plan import Limits
from ..kernel.render import Renderer
from .mlir import BOOL, F32, I32, U32, Builder, Val

VERSION = "stablehlo-2"

F32_LIMITS = {I32: (-2147483648.0, 2147483520.0), U32: (0.0, 4294967040.0)}  # eta's saturating casts
LOWEST = {F32: float("-inf"), I32: -(1 << 31), U32: 0}
HIGHEST = {F32: float("inf"), I32: (1 << 31) - 1, U32: 0xFFFFFFFF}


# ---- elementwise ----------------------------------------------------------------------------

def _neg(b: Builder, n, x: Val) -> Val:
    return b.ew("subtract", b.splat_like(0, x), x) if x.dtype == U32 else b.ew("negate", x)


def _abs(b: Builder, n, x: Val) -> Val:
    return x if x.dtype == U32 else b.ew("abs", x)


def _sign(b: Builder, n, x: Val) -> Val:
    if x.dtype == U32:
        return b.convert(b.compare(x, b.splat_like(0, x), "NE"), U32)
    return b.ew("sign", x)


def _recip(b: Builder, n, x: Val) -> Val:
    return b.ew("divide", b.splat_like(1.0, x), x)


def _float_class(b: Builder, x: Val, direction: str) -> Val:
    # On the bits: |x| > inf is NaN, |x| == inf is inf (independent of float compare modes)
    mag = b.ew("and", b.bitcast(x, U32), b.splat_like(0x7FFFFFFF, x, U32))
    return b.compare(mag, b.splat_like(0x7F800000, x, U32), direction)


def _div(b: Builder, n, x: Val, y: Val) -> Val:
    if x.dtype == F32:
        return b.ew("divide", x, y)
    zero = b.compare(y, b.splat_like(0, y), "EQ")
    if x.dtype == U32:
        q = b.ew("divide", x, b.select(zero, b.splat_like(1, y), y))
        return b.select(zero, x, q)
    minus1 = b.compare(y, b.splat_like(-1, y), "EQ")
    bad = b.ew("or", zero, minus1)
    q = b.ew("divide", x, b.select(bad, b.splat_like(1, y), y))
    q = b.select(minus1, b.ew("negate", x), q)  # negate wraps: INT_MIN / -1 = INT_MIN
    return b.select(zero, x, q)


def _rem(b: Builder, n, x: Val, y: Val) -> Val:
    if x.dtype == F32:
        return b.ew("remainder", x, y)
    bad = b.compare(y, b.splat_like(0, y), "EQ")
    if x.dtype == I32:
        bad = b.ew("or", bad, b.compare(y, b.splat_like(-1, y), "EQ"))
    r = b.ew("remainder", x, b.select(bad, b.splat_like(1, y), y))
    return b.select(bad, b.splat_like(0, x), r)


def _shift(b: Builder, n, x: Val, y: Val) -> Val:
    amount = b.ew("and", y, b.splat_like(31, y))
    if n.op == "shl":
        return b.ew("shift_left", x, amount)
    return b.ew("shift_right_arithmetic" if x.dtype == I32 else "shift_right_logical", x, amount)


def _cast(b: Builder, n, x: Val) -> Val:
    to = n.attr["to"]
    if to == x.dtype:
        return x
    if to == BOOL:
        return b.compare(x, b.splat_like(0, x), "NE")  # NaN != 0 is true
    if x.dtype == F32 and to in (I32, U32):
        lo, hi = F32_LIMITS[to]
        y = b.select(_float_class(b, x, "GT"), b.splat_like(0.0, x), x)
        y = b.ew("minimum", b.ew("maximum", y, b.splat_like(lo, x)), b.splat_like(hi, x))
        return b.convert(y, to)  # truncates toward zero
    if x.dtype in (I32, U32) and to in (I32, U32):
        return b.bitcast(x, to)  # wraps modulo 2^32
    return b.convert(x, to)


def _ew(name: str):
    def rule(b: Builder, n, *xs: Val) -> Val:
        return b.ew(name, *xs, dt=n.type.dtype)
    return rule


def _cmp(direction: str):
    def rule(b: Builder, n, x: Val, y: Val) -> Val:
        out = b.compare(x, y, direction)
        if x.dtype != F32:
            return out
        # XLA's CPU compiler folds float compares as if NaN did not exist (abs(x) >= 0 became
        # true for NaN x; found by scripts/fuzz.py). NaN tests on the bits cannot be folded, so
        # spell out IEEE's rule: every compare with a NaN is false, except != which is true.
        nan = b.ew("or", _float_class(b, x, "GT"), _float_class(b, y, "GT"))
        if direction == "NE":
            return b.ew("or", out, nan)
        return b.ew("and", out, b.ew("not", nan))
    return rule


# ---- reductions and scans -----------------------------------------------------------------

def _reduce(name: str):
    def rule(b: Builder, n, x: Val) -> Val:
        dt = x.dtype
        init = {"add": 0, "maximum": LOWEST[dt], "minimum": HIGHEST[dt]}[name]
        return b.reduce([x], [b.const(init, dt)], len(x.shape) - 1, lambda acc, v: b.ew(name, acc, v))[0]
    return rule


def _arg_key(b: Builder, x: Val, largest: bool) -> Val:
    """x with NaN replaced by -inf (argmax, sorts) or +inf (argmin)."""
    if x.dtype != F32:
        return x
    fill = float("-inf") if largest else float("inf")
    return b.select(_float_class(b, x, "GT"), b.splat_like(fill, x), x)


def _arg(largest: bool):
    def rule(b: Builder, n, x: Val) -> Val:
        dim = len(x.shape) - 1
        key = _arg_key(b, x, largest)
        idx = b.iota(I32, x.shape, dim)
        direction = "GT" if largest else "LT"

        def better(av, bv, ai, bi):  # region args come as (acc value, acc index, x value, x index)
            take = b.ew("or", b.compare(bv, av, direction),
                        b.ew("and", b.compare(bv, av, "EQ"), b.compare(bi, ai, "LT")))
            return b.select(take, bv, av), b.select(take, bi, ai)

        # The init loses to every element: worst value, and an index above every real one.
        inits = [b.const(LOWEST[x.dtype] if largest else HIGHEST[x.dtype], x.dtype), b.const((1 << 31) - 1, I32)]
        return b.reduce([key, idx], inits, dim, lambda av, ai, bv, bi: better(av, bv, ai, bi))[1]
    return rule


def _scan(name: str, identity):
    def rule(b: Builder, n, x: Val) -> Val:
        return b.prefix_scan(x, b.const(identity, x.dtype), lambda acc, v: b.ew(name, acc, v))
    return rule


# ---- shapes ---------------------------------------------------------------------------------

def _broadcast(b: Builder, n, x: Val) -> Val:
    shape = n.type.shape
    off = len(shape) - len(x.shape)
    return b.broadcast_in_dim(x, shape, range(off, len(shape)))


def _concat(b: Builder, n, *xs: Val) -> Val:
    return b.concatenate(list(xs), len(xs[0].shape) - 1)


def _slice_last(b: Builder, n, x: Val) -> Val:
    start, size = n.attr["start"], n.attr["size"]
    lead = list(x.shape[:-1])
    return b.slice(x, [0] * len(lead) + [start], lead + [start + size])


# ---- indexing -------------------------------------------------------------------------------

def _index(b: Builder, idx: Val, size: int) -> tuple:
    """(in range, clamped i32 index) of an i32/u32 index tensor against an axis of `size`."""
    if idx.dtype == I32:
        ok = b.ew("and", b.compare(idx, b.splat_like(0, idx), "GE"), b.compare(idx, b.splat_like(size, idx), "LT"))
        clamped = b.ew("minimum", b.ew("maximum", idx, b.splat_like(0, idx)), b.splat_like(size - 1, idx))
        return ok, clamped
    ok = b.compare(idx, b.splat_like(size, idx), "LT")
    return ok, b.convert(b.ew("minimum", idx, b.splat_like(size - 1, idx)), I32)


def _zero_where_not(b: Builder, ok: Val, v: Val) -> Val:
    okb = b.broadcast_in_dim(ok, v.shape, range(len(ok.shape)))
    return b.select(okb, v, b.splat_like(0, v))


def _gather(b: Builder, n, src: Val, idx: Val) -> Val:
    rows, rest = src.shape[0], src.shape[1:]
    m, inner = max(idx.size, 1), prod(rest)
    ok, at = _index(b, idx, rows)
    g = b.gather_rows(b.reshape(src, [rows, inner]), b.reshape(at, [m]))
    return _zero_where_not(b, ok, b.reshape(g, n.type.shape))


def _take_last(b: Builder, n, src: Val, idx: Val) -> Val:
    size = src.shape[-1]
    rows, k = max(prod(src.shape[:-1]), 1), idx.shape[-1]
    ok, at = _index(b, idx, size)
    row = b.ew("multiply", b.iota(I32, (rows, k), 0), b.const(size, I32, (rows, k)))
    flat = b.ew("add", row, b.reshape(at, [rows, k]))
    g = b.gather_rows(b.reshape(src, [rows * size, 1]), b.reshape(flat, [rows * k]))
    return _zero_where_not(b, ok, b.reshape(g, idx.shape))


def _gather_row(b: Builder, n, src: Val, idx: Val) -> Val:
    m = src.shape[0]
    col = b.reshape(idx, [m, 1])
    out = _take_last(b, n, src, col)
    return b.reshape(out, [m])


def _scatter(add: bool):
    def rule(b: Builder, n, dst: Val, idx: Val, vals: Val) -> Val:
        rows, inner = dst.shape[0], prod(dst.shape[1:])
        m = max(idx.size, 1)
        ok, at = _index(b, idx, rows)
        # Out-of-range updates go to row `rows`, an extra row that is cut off at the end.
        spare = b.const(rows, I32, (m,))
        target = b.select(b.reshape(ok, [m]), b.reshape(at, [m]), spare)
        zero = b.const(0, dst.dtype)
        padded = b.pad(b.reshape(dst, [rows, inner]), zero, [0, 0], [1, 0])
        upd = b.reshape(vals, [m, inner])
        if add:
            out = b.scatter_rows(padded, target, upd, lambda cur, new: b.ew("add", cur, new))
        else:
            # Last write wins: the highest update number per row claims it, the rest go to the spare row.
            number = b.ew("add", b.iota(I32, (m,), 0), b.const(1, I32, (m,)))
            table = b.scatter_rows(b.const(0, I32, (rows + 1, 1)), target, b.reshape(number, [m, 1]),
                                   lambda cur, new: b.ew("maximum", cur, new))
            winner = b.reshape(b.gather_rows(table, target), [m])
            target = b.select(b.compare(winner, number, "EQ"), target, spare)
            out = b.scatter_rows(padded, target, upd, lambda cur, new: new)
        return b.reshape(b.slice(out, [0, 0], [rows, inner]), dst.shape)
    return rule


# ---- ordering, linear algebra, randomness ------------------------------------------------

def _top_k(b: Builder, n, x: Val) -> Val:
    dim, k = len(x.shape) - 1, n.attr["k"]
    key = _arg_key(b, x, True)
    idx = b.iota(I32, x.shape, dim)

    def first(ka, kb, ia, ib):  # value descending, then index ascending
        return b.ew("or", b.compare(ka, kb, "GT"), b.ew("and", b.compare(ka, kb, "EQ"), b.compare(ia, ib, "LT")))

    order = b.sort([key, idx], dim, first)[1]
    return b.slice(order, [0] * (dim + 1), list(x.shape[:-1]) + [k])


def _matmul(b: Builder, n, x: Val, y: Val) -> Val:
    return b.dot(x, y)


def _mix32(b: Builder, x: Val) -> Val:
    """lowbias32 of piegpu.eta.counter_rng in ui32 ops."""
    for shift, mul in ((16, M1), (15, M2), (16, None)):
        x = b.ew("xor", x, b.ew("shift_right_logical", x, b.splat_like(shift, x)))
        if mul is not None:
            x = b.ew("multiply", x, b.splat_like(mul, x))
    return x


def _rng(b: Builder, n, state: Val) -> Val:
    shape = n.type.shape
    size = max(prod(shape), 1)
    key = b.reshape(b.slice(state, [0], [1]), [])
    counter = b.reshape(b.slice(state, [1], [2]), [])
    s = _mix32(b, b.ew("add", _mix32(b, b.ew("xor", key, b.const(KEY_SALT, U32))), counter))
    t = _mix32(b, b.ew("xor", s, b.const(STREAM_SALT, U32)))
    i = b.iota(U32, (size,), 0)
    h = _mix32(b, b.ew("add", i, b.broadcast_in_dim(s, (size,), [])))
    bits = _mix32(b, b.ew("xor", h, b.broadcast_in_dim(t, (size,), [])))
    hi = b.convert(b.ew("shift_right_logical", bits, b.splat_like(9, bits)), F32)  # < 2^23: exact
    u = b.ew("multiply", b.ew("add", hi, b.splat_like(0.5, hi)), b.splat_like(2.0 ** -23, hi))
    return b.reshape(u, shape)


def _const(b: Builder, n) -> Val:
    return b.const(const_value(n), n.type.dtype)


def _iota(b: Builder, n) -> Val:
    return b.iota(U32, n.type.shape, 0)


RULES = {
    "neg": _neg, "abs_": _abs, "sign": _sign, "recip": _recip,
    "exp": _ew("exponential"), "log": _ew("log"), "sqrt": _ew("sqrt"), "rsqrt": _ew("rsqrt"),
    "sin": _ew("sine"), "cos": _ew("cosine"), "tanh": _ew("tanh"), "floor": _ew("floor"),
    "isnan": lambda b, n, x: _float_class(b, x, "GT"), "isinf": lambda b, n, x: _float_class(b, x, "EQ"),
    "not_": _ew("not"), "bit_not": _ew("not"),
    "add": _ew("add"), "sub": _ew("subtract"), "mul": _ew("multiply"), "div": _div, "rem": _rem,
    "maximum": _ew("maximum"), "minimum": _ew("minimum"), "pow": _ew("power"),
    "eq": _cmp("EQ"), "ne": _cmp("NE"), "lt": _cmp("LT"), "le": _cmp("LE"), "gt": _cmp("GT"), "ge": _cmp("GE"),
    "and_": _ew("and"), "or_": _ew("or"), "bit_and": _ew("and"), "bit_or": _ew("or"), "bit_xor": _ew("xor"),
    "shl": _shift, "shr": _shift,
    "select": lambda b, n, c, x, y: b.select(c, x, y),
    "cast": _cast, "bitcast": lambda b, n, x: b.bitcast(x, n.attr["to"]),
    "reduce_sum": _reduce("add"), "reduce_max": _reduce("maximum"), "reduce_min": _reduce("minimum"),
    "reduce_argmax": _arg(True), "reduce_argmin": _arg(False),
    "cumsum": _scan("add", 0), "cumprod": _scan("multiply", 1),
    "reshape": lambda b, n, x: b.reshape(x, n.type.shape), "broadcast": _broadcast,
    "transpose": lambda b, n, x: b.transpose(x, [1, 0]), "concat": _concat, "slice_last": _slice_last,
    "gather": _gather, "gather_row": _gather_row, "take_last": _take_last,
    "scatter_set": _scatter(False), "scatter_add": _scatter(True),
    "top_k_idx": _top_k, "matmul": _matmul, "rng": _rng, "const": _const, "iota": _iota,
    "input": lambda b, n: Val(f"%arg{n.attr['index']}", n.type.dtype, n.type.shape),  # @main's arguments
}


class StableHLO(Renderer):
    """The StableHLO renderer: tensor-level, straight from the eta nodes (no plan, so no limits)."""

    target = "stablehlo"
    version = VERSION

    def emit(self, prog: Program, limits: Limits | None = None) -> str:
        """The StableHLO MLIR text of a pure eta program: `func.func public @main(inputs) -> outputs`."""
        # Only a ForwardPass provides GroupOp.RUNTIME values (runtime buffers); a module has no such inputs.
        runtime = sorted({n.op for n in prog.nodes if n.op in GroupOp.RUNTIME})
        if runtime:
            raise CompileError(f"stablehlo: program {prog.hash[:12]} uses {runtime}, which only a ForwardPass "
                               "provides. Fix: emit a program without channels and intrinsics (pass the values "
                               "as inputs), or use the wgsl/spirv targets")
        return _module(prog)


def _module(prog: Program) -> str:
    """The module text: one RULES entry per node, in program order."""
    b = Builder()
    vals: dict = {}
    args = [Val(f"%arg{i}", t.dtype, t.shape) for i, t in enumerate(prog.input_types)]
    for i, node in enumerate(prog.nodes):
        rule = RULES.get(node.op)
        if rule is None:
            raise CompileError(f"stablehlo: no rule for op {node.op!r} ({OPS[node.op].kind}). "
                               "Fix: add it to piegpu.stablehlo.emit.RULES")
        vals[i] = rule(b, node, *[vals[j] for j in node.inputs])
    outs = [vals[i] for i in prog.outputs]
    sig = ", ".join(f"{a.name}: {a.type}" for a in args)
    res = ", ".join(v.type for v in outs)
    lines = [f"// piegpu eta program {prog.hash[:16]} ({VERSION})",
             f"module @eta_{prog.hash[:16]} {{",
             f"  func.func public @main({sig}) -> ({res}) {{"]
    lines += b.lines
    lines.append(f"    return {', '.join(v.name for v in outs)} : {res}")
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"
