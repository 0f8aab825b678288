"""Pie's PTIR type rules (compiler/ir infer.rs): one rule per op, giving each result's (dtype, shape).

An ill-typed op is Pie's `Body` verdict: the stage, the op index and the kind of error
(DTypeMismatch, ShapeMismatch, ShapeMismatchBin(a, b), ValueIdOutOfRange(v), ...).
"""

from __future__ import annotations

from .rejected import PtirRejected, camel
from .wire import Container

NUMERIC, INTS = ("f32", "i32", "u32"), ("i32", "u32")


class _BodyError(Exception):
    def __init__(self, kind: str):
        self.kind = kind


def _g(types: list, v: int) -> tuple:
    if v >= len(types):
        raise _BodyError(f"ValueIdOutOfRange({v})")
    return types[v]


def _need(cond: bool, kind: str = "DTypeMismatch") -> None:
    if not cond:
        raise _BodyError(kind)


def _bcast2(a: tuple, b: tuple) -> tuple:
    if a == b or not b:
        return a
    if not a:
        return b
    raise _BodyError(f"ShapeMismatchBin({_shape_text(a)}, {_shape_text(b)})")


def _shape_text(s: tuple) -> str:
    return f"Shape({list(s)})"


def _arith(out_dtype=None):
    def rule(op, ts, ctx):
        (da, sa), (db, sb) = ts
        _need(da in NUMERIC and da == db)
        return [(out_dtype or da, _bcast2(sa, sb))]
    return rule


def _logic(op, ts, ctx):
    (da, sa), (db, sb) = ts
    _need(da == "bool" and db == "bool")
    return [("bool", _bcast2(sa, sb))]


def _unary(allowed):
    def rule(op, ts, ctx):
        _need(ts[0][0] in allowed)
        return [ts[0]]
    return rule


def _reduce(out_dtype=None):
    def rule(op, ts, ctx):
        d, s = ts[0]
        _need(d in NUMERIC)
        _need(bool(s), "ShapeMismatch")
        return [(out_dtype or d, s[:-1])]
    return rule


def _select(op, ts, ctx):
    (dc, sc), (da, sa), (db, sb) = ts
    _need(dc == "bool" and da == db)
    ab = _bcast2(sa, sb)
    try:
        return [(da, _bcast2(ab, sc))]
    except _BodyError:
        raise _BodyError("ShapeMismatch") from None


def _left_broadcast_ok(src: tuple, dst: tuple) -> bool:
    return len(src) <= len(dst) and all((src[i] if i < len(src) else 1) in (1, d) for i, d in enumerate(dst))


def _broadcast(op, ts, ctx):
    _need(_left_broadcast_ok(ts[0][1], op.fields["shape"]), "ShapeMismatch")
    return [(ts[0][0], op.fields["shape"])]


def _reshape(op, ts, ctx):
    _need(_numel(ts[0][1]) == _numel(op.fields["shape"]), "ShapeMismatch")
    return [(ts[0][0], op.fields["shape"])]


def _numel(s: tuple) -> int:
    n = 1
    for d in s:
        n *= d
    return n


def _transpose(op, ts, ctx):
    _need(len(ts[0][1]) == 2, "ShapeMismatch")
    return [(ts[0][0], ts[0][1][::-1])]


def _scan(op, ts, ctx):
    _need(ts[0][0] in NUMERIC)
    _need(bool(ts[0][1]), "ShapeMismatch")
    return [ts[0]]


def _sort_desc(op, ts, ctx):
    _need(ts[0][0] == "f32")
    _need(len(ts[0][1]) == 1, "ShapeMismatch")
    return [ts[0], ("u32", ts[0][1])]


def _top_k(op, ts, ctx):
    d, s = ts[0]
    k = op.fields["imm"][0]
    _need(d == "f32")
    _need(len(s) in (1, 2) and 1 <= k <= s[-1], "ShapeMismatch")
    return [("f32", s[:-1] + (k,)), ("u32", s[:-1] + (k,))]


def _matmul(op, ts, ctx):
    (da, sa), (db, sb) = ts
    _need(da == "f32" and db == "f32")
    _need(len(sa) == 2 and len(sb) == 2 and sa[1] == sb[0], "ShapeMismatch")
    return [("f32", (sa[0], sb[1]))]


def _pivot(op, ts, ctx):
    (d, s), (dt, st) = ts
    _need(d == "f32")
    _need(len(s) in (1, 2), "ShapeMismatch")
    _need(dt in INTS if op.fields["predicate"] == "rank_le" else dt == "f32")
    _need(not st or (len(s) == 2 and st == s[:1]), "ShapeMismatch")
    return [("bool", s)]


def _axis0(idx: tuple, src: tuple) -> tuple:
    out = idx + src[1:]
    _need(len(out) <= 4, "ShapeMismatch")
    return out


def _gather(op, ts, ctx):
    (ds, ss), (di, si) = ts
    _need(bool(ss), "ShapeMismatch")
    _need(di in INTS)
    return [(ds, _axis0(si, ss))]


def _gather_row(op, ts, ctx):
    (ds, ss), (di, si) = ts
    _need(len(ss) == 2, "ShapeMismatch")
    _need(di in INTS)
    _need(si == ss[:1], "ShapeMismatch")
    return [(ds, ss[:1])]


def _scatter(op, ts, ctx):
    (db, sb), (di, si), (dv, sv) = ts
    _need(bool(sb), "ShapeMismatch")
    _need(op.name != "scatter_add" or db in NUMERIC)
    _need(di in INTS and dv == db)
    _need(sv == _axis0(si, sb) or not sv, "ShapeMismatch")
    return [(db, sb)]


def _mask_apply(op, ts, ctx):
    (dl, sl), (dm, sm) = ts
    _need(bool(sl), "ShapeMismatch")
    _need(dl == "f32" and dm == "u32")
    _need(sm == ((sl[-1] + 31) // 32,), "ShapeMismatch")
    return [(dl, sl)]


def _window(op, ts, ctx):
    d, s = ts[0]
    _need(d == "u32")
    _need(len(s) < 4, "ShapeMismatch")
    return [("bool", s + (op.fields["imm"][0],))]


def _rng_keyed(op, ts, ctx):
    d, s = ts[0]
    _need(d == "u32")
    _need(s == (2,) and bool(op.fields["shape"]), "ShapeMismatch")
    return [("f32", op.fields["shape"])]


def _chan(op, ctx):
    c = op.fields["chan"]
    if c >= len(ctx["channels"]):
        raise _BodyError(f"ChannelOutOfRange({c})")
    return ctx["channels"][c]


def _chan_put(op, ts, ctx):
    cd, cs = _chan(op, ctx)
    _need(ts[0][0] == cd)
    _need(ts[0][1] == cs, "ShapeMismatch")
    return []


def _named(results):
    def rule(op, ts, ctx):
        if op.fields["name"] >= ctx["names"]:
            raise _BodyError(f"NameOutOfRange({op.fields['name']})")
        return results(op)
    return rule


# PTIR op -> its type rule (Pie's infer.rs): one row per op, driven by `body_types`.
TYPE_RULES = {
    "const": lambda op, ts, ctx: [(op.fields["literal"][0], ())],
    **{n: _unary(("f32",)) for n in ("exp", "log", "recip")},
    **{n: _unary(NUMERIC) for n in ("neg", "abs", "sign")},
    "cast": lambda op, ts, ctx: [(op.fields["dtype"], ts[0][1])],
    **{n: _arith() for n in ("add", "sub", "mul", "div", "max_elem", "min_elem", "rem")},
    **{n: _arith("bool") for n in ("gt", "ge", "eq", "ne", "lt", "le")},
    "and": _logic, "or": _logic, "not": _unary(("bool",)), "select": _select,
    **{n: _reduce() for n in ("reduce_sum", "reduce_max", "reduce_min")},
    "reduce_argmax": _reduce("i32"),
    "broadcast": _broadcast, "reshape": _reshape, "transpose": _transpose,
    "cumsum": _scan, "cumprod": _scan, "sort_desc": _sort_desc, "top_k": _top_k, "matmul": _matmul,
    "pivot_threshold": _pivot, "gather": _gather, "gather_row": _gather_row,
    "scatter_add": _scatter, "scatter_set": _scatter,
    "iota": lambda op, ts, ctx: [("u32", (op.fields["imm"][0],))],
    "mask_apply_packed": _mask_apply,
    "causal_mask": _window, "sliding_window_mask": _window, "sink_window_mask": _window,
    "rng": lambda op, ts, ctx: (_need(bool(op.fields["shape"]), "ShapeMismatch"), [("f32", op.fields["shape"])])[1],
    "rng_keyed": _rng_keyed,
    "chan_take": lambda op, ts, ctx: [_chan(op, ctx)], "chan_read": lambda op, ts, ctx: [_chan(op, ctx)],
    "chan_put": _chan_put,
    "intrinsic_val": lambda op, ts, ctx: [(op.fields["dtype"], op.fields["shape"])],
    "kernel_call": _named(lambda op: [(op.fields["dtype"], op.fields["shape"])]),
    "sink_call": _named(lambda op: []),
}


def channel_types(c: Container) -> list:
    """(dtype, shape) of each channel's cell as a program sees it (`act` materializes f32)."""
    return [("f32" if ch.dtype == "act" else ch.dtype, ch.shape) for ch in c.channels]


def body_types(stage: str, ops: list, ctx: dict) -> list:
    """The (dtype, shape) of every value a stage body defines (PtirRejected with Pie's Body verdict if ill-typed)."""
    types: list = []
    for i, op in enumerate(ops):
        try:
            ins = [_g(types, v) for v in op.args]
            types.extend(TYPE_RULES[op.name](op, ins, ctx))
        except _BodyError as e:
            raise PtirRejected(f"Body {{ stage: {camel(stage)}, err: BodyError {{ op_index: {i}, kind: {e.kind} }} }}",
                               f"{stage} op {i} ({op.name}) is ill-typed ({e.kind})",
                               "fix the program that traced this container (the op's operand types)") from None
    return types


