"""PTIR -> eta: one rule per PTIR op (an eta op or a composite of eta ops), driven by one loop.

Every rule takes the op and its operands as traced eta tensors and returns the op's
results. Where Pie's semantics differ from the nearest eta op (left-aligned broadcast,
integer x / 0 = 0, NaN-skipping max, u32 sort indices) the rule is a small composite
that gives Pie's values. Channels keep their PTIR index as the eta slot and are named
"chan{index}", the names Pie's goldens use.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..dtypes import dtype
from ..errors import ValidationError
from ..eta import api as F
from ..eta.intrinsics import IntrinsicContext
from ..eta.ops import TType
from ..eta.program import Program
from ..eta.tracer import Builder, Tensor, constant
from . import rng
from .validate import Profile, PtirRejected, bind, piegpu_profile
from .wire import Container, Op, decode

DT = {"f32": dtype.f32, "i32": dtype.i32, "u32": dtype.u32, "bool": dtype.bool, "act": dtype.f32}
NEG_INF, POS_INF = float("-inf"), float("inf")
RUNNABLE_STAGES = ("prologue", "epilogue")  # piegpu runs device code at the end of the pass only


@dataclass(frozen=True)
class Slot:
    """A PTIR channel as the eta tracer sees one: a name, a cell dtype and shape."""

    name: str
    dtype: object
    shape: tuple


def _to(t: Tensor, shape: tuple) -> Tensor:
    """Pie's operand broadcast: a rank-0 operand takes the other operand's shape."""
    return t if t.shape == tuple(shape) else F.broadcast(t, shape)


def _pair(a: Tensor, b: Tensor) -> tuple:
    shape = a.shape if a.shape else b.shape
    return _to(a, shape), _to(b, shape)


def _binary(eta_op: str):
    def rule(b, op, x, y):
        return [getattr(F, eta_op)(*_pair(x, y))]
    return rule


def _div(b, op, x, y):
    x, y = _pair(x, y)
    if x.dtype == dtype.f32:
        return [F.div(x, y)]
    return [F.select(F.eq(y, 0), F.broadcast(constant(0, x.dtype), x.shape), F.div(x, y))]  # Pie: x / 0 = 0


def _extremum(eta_op: str):
    def rule(b, op, x, y):
        x, y = _pair(x, y)
        if x.dtype != dtype.f32:
            return [getattr(F, eta_op)(x, y)]
        # Pie: a NaN operand yields the other one; two NaNs yield the left
        return [F.select(F.isnan(x), y, F.select(F.isnan(y), x, getattr(F, eta_op)(x, y)))]
    return rule


def _sign(b, op, x):
    return [F.select(F.isnan(x), 0.0, F.sign(x)) if x.dtype == dtype.f32 else F.sign(x)]


def _select(b, op, c, x, y):
    x, y = _pair(x, y)
    shape = x.shape if x.shape else c.shape
    return [F.select(_to(c, shape), _to(x, shape), _to(y, shape))]


def _nan_to(x: Tensor, fill: float) -> Tensor:
    return F.select(F.isnan(x), fill, x) if x.dtype == dtype.f32 else x


def _reduce(eta_op: str, fill: float | None):
    def rule(b, op, x):
        return [getattr(F, eta_op)(x if fill is None else _nan_to(x, fill))]  # Pie's max/min skip NaN
    return rule


def _broadcast(b, op, x):
    shape = op.fields["shape"]
    left = F.reshape(x, tuple(x.shape) + (1,) * (len(shape) - len(x.shape)))  # Pie aligns dims on the left
    return [F.broadcast(left, shape)]


def _order(b, op, x):
    k = op.fields["imm"][0] if op.name == "top_k" else x.shape[-1]
    values, idx = F.top_k(x, k)
    return [values, F.cast(idx, dtype.u32)]


def _per_row(t: Tensor, x: Tensor) -> Tensor:
    """A scalar or per-row [m] threshold broadcast over x[..., n]."""
    return F.broadcast(F.reshape(t, tuple(t.shape) + (1,)) if t.shape else t, x.shape)


def _rank_le(x: Tensor, k: Tensor) -> Tensor:
    n = x.shape[-1]
    kk = F.minimum(F.maximum(F.cast(k, dtype.i32), 0), n)
    ordered, _ = F.sort_desc(_nan_to(x, NEG_INF))
    lead = tuple(x.shape[:-1])
    pos = F.maximum(kk - 1, 0)
    pos = F.broadcast(pos, lead) if lead and not pos.shape else pos  # a scalar k serves every row
    kth = F.broadcast(F.take_last(ordered, F.reshape(pos, lead + (1,))), x.shape)
    # fewer than k non-NaN values are greater <=> x >= the k-th largest (NaN never kept, k = 0 keeps none)
    return F.and_(F.and_(F.not_(F.isnan(x)), F.ge(x, kth)), _per_row(F.gt(kk, 0), x))


def _cummass_le(x: Tensor, p: Tensor) -> Tensor:
    n, lead = x.shape[-1], x.shape[:-1]
    values, idx = F.sort_desc(x)
    run = F.cumsum(values)
    zero = F.broadcast(constant(0.0, dtype.f32), lead + (1,))
    excl = F.concat([zero, F.slice_last(run, 0, n - 1)]) if n > 1 else zero  # mass strictly before each rank
    keep_sorted = F.lt(excl, _per_row(p, x))
    rows = 1
    for d in lead:
        rows *= d
    flat = F.cast(idx, dtype.u32)
    if lead:
        flat = flat + F.broadcast(F.reshape(F.iota(rows) * n, lead + (1,)), x.shape)
    base = F.broadcast(constant(False, dtype.bool), (rows * n,))
    kept = F.scatter_set(base, F.reshape(flat, (rows * n,)), F.reshape(keep_sorted, (rows * n,)))
    return F.reshape(kept, x.shape)


PIVOTS = {"rank_le": _rank_le, "cummass_le": _cummass_le,
          "prob_ge": lambda x, t: F.ge(x, _per_row(t, x))}


def _pivot(b, op, x, t):
    return [PIVOTS[op.fields["predicate"]](x, t)]


def _mask_apply(b, op, logits, words):
    n = logits.shape[-1]
    col = F.iota(n)
    bit = F.bit_and(F.shr(F.gather(words, F.shr(col, 5)), F.bit_and(col, 31)), 1)
    return [F.select(F.broadcast(F.eq(bit, 1), logits.shape), logits, NEG_INF)]


def _window(rule):
    def build(b, op, positions):
        length = op.fields["imm"][0]
        shape = tuple(positions.shape) + (length,)
        key = F.broadcast(F.iota(length), shape)
        pos = F.broadcast(F.reshape(positions, tuple(positions.shape) + (1,)), shape)
        return [F.and_(F.le(key, pos), rule(key, pos, op.fields["imm"][1:]))]
    return build


def _rng_keyed(b, op, state):
    u = rng.keyed_uniform(state, op.fields["shape"])
    return [rng.gumbel(u) if op.fields["rng_kind"] == "gumbel" else u]


def _rng(b, op):
    u = rng.ambient_uniform(rng.ambient_seed(b.fire_seed, op.fields["imm"][0]), op.fields["shape"])
    return [rng.gumbel(u) if op.fields["rng_kind"] == "gumbel" else u]


def _const(b, op):
    dt, bits = op.fields["literal"]
    return [b.builder.add("const", [], dtype=DT[dt], bits=bits)]


def _chan(consume: bool):
    def rule(b, op):
        return [b.channel(op.fields["chan"], consume)]
    return rule


def _put(b, op, value):
    b.put(op.fields["chan"], value)
    return []


def _intrinsic(b, op):
    name, shape = op.fields["intrinsic"], op.fields["shape"]
    return [b.builder.add("intrinsic", [], name=name, index=0, dtype=DT[op.fields["dtype"]], shape=shape)]


def _second_party(b, op, *args):
    raise PtirRejected(f"KernelUnavailable {{ name_index: {op.fields['name']}, name: \"{b.name(op)}\" }}",
                       f"{op.name} {b.name(op)!r} is a second-party kernel that piegpu does not provide",
                       "run the container on a Pie engine that has it")


# PTIR op -> eta rule. Every op of Pie's table has exactly one row (a test checks it).
RULES = {
    "const": _const,
    "exp": lambda b, op, x: [F.exp(x)], "log": lambda b, op, x: [F.log(x)], "neg": lambda b, op, x: [F.neg(x)],
    "recip": lambda b, op, x: [F.recip(x)], "abs": lambda b, op, x: [F.abs_(x)], "sign": _sign,
    "cast": lambda b, op, x: [F.cast(x, DT[op.fields["dtype"]])],
    "add": _binary("add"), "sub": _binary("sub"), "mul": _binary("mul"), "div": _div,
    "max_elem": _extremum("maximum"), "min_elem": _extremum("minimum"), "rem": _binary("rem"),
    "gt": _binary("gt"), "ge": _binary("ge"), "eq": _binary("eq"), "ne": _binary("ne"), "lt": _binary("lt"),
    "le": _binary("le"), "and": _binary("and_"), "or": _binary("or_"), "not": lambda b, op, x: [F.not_(x)],
    "select": _select,
    "reduce_sum": _reduce("reduce_sum", None), "reduce_max": _reduce("reduce_max", NEG_INF),
    "reduce_min": _reduce("reduce_min", POS_INF), "reduce_argmax": _reduce("reduce_argmax", None),
    "broadcast": _broadcast, "reshape": lambda b, op, x: [F.reshape(x, op.fields["shape"])],
    "transpose": lambda b, op, x: [F.transpose(x)],
    "cumsum": lambda b, op, x: [F.cumsum(x)], "cumprod": lambda b, op, x: [F.cumprod(x)],
    "sort_desc": _order, "top_k": _order, "matmul": lambda b, op, x, y: [F.matmul(x, y)],
    "pivot_threshold": _pivot,
    "gather": lambda b, op, s, i: [F.gather(s, i)], "gather_row": lambda b, op, s, i: [F.gather_row(s, i)],
    "scatter_add": lambda b, op, d, i, v: [F.scatter_add(d, i, _to(v, tuple(i.shape) + tuple(d.shape[1:])))],
    "scatter_set": lambda b, op, d, i, v: [F.scatter_set(d, i, _to(v, tuple(i.shape) + tuple(d.shape[1:])))],
    "iota": lambda b, op: [F.iota(op.fields["imm"][0])],
    "mask_apply_packed": _mask_apply,
    "causal_mask": _window(lambda key, pos, imm: F.le(key, pos)),
    "sliding_window_mask": _window(lambda key, pos, imm: F.lt(pos - key, imm[0])),
    "sink_window_mask": _window(lambda key, pos, imm: F.or_(F.lt(key, imm[0]), F.lt(pos - key, imm[1]))),
    "rng": _rng, "rng_keyed": _rng_keyed,
    "chan_take": _chan(True), "chan_read": _chan(False), "chan_put": _put,
    "intrinsic_val": _intrinsic, "kernel_call": _second_party, "sink_call": _second_party,
}


class _Translation:
    """The state of one translation: the eta builder, channel slots, take/put sequence numbers."""

    def __init__(self, c: Container, fire_seed: int):
        self.container, self.fire_seed = c, fire_seed
        self.builder = Builder(IntrinsicContext.for_logits(vocab_of(c)))
        self.slots = [Slot(f"chan{i}", DT[ch.dtype], tuple(ch.shape)) for i, ch in enumerate(c.channels)]
        for s in self.slots:  # every PTIR channel keeps its index as the eta slot
            self.builder.slot(s, TType(s.dtype, s.shape))

    def name(self, op: Op) -> str:
        """The name-table entry a kernel or sink call names."""
        i = op.fields["name"]
        return self.container.names[i] if i < len(self.container.names) else ""

    def channel(self, index: int, consume: bool) -> Tensor:
        """A take (numbered per channel, as eta's tracer does) or a read of PTIR channel `index`."""
        s, b = self.slots[index], self.builder
        if consume:
            seq = b.takes.get(index, 0)
            b.takes[index] = seq + 1
            return b.add("chan_take", [], slot=index, seq=seq, dtype=s.dtype, shape=s.shape)
        return b.add("chan_read", [], slot=index, dtype=s.dtype, shape=s.shape)

    def put(self, index: int, value: Tensor) -> None:
        """A put into PTIR channel `index`."""
        seq = self.builder.puts.get(index, 0)
        self.builder.puts[index] = seq + 1
        self.builder.add("chan_put", [value], slot=index, seq=seq)

    def stage(self, stage: str, ops: list) -> None:
        """Translate one stage body: each op through its RULES row, in SSA order."""
        values: list = []
        for i, op in enumerate(ops):
            try:
                values.extend(RULES[op.name](self, op, *[values[v] for v in op.args]))
            except PtirRejected:
                raise
            except ValidationError as e:
                raise ValidationError(f"PTIR {stage} op {i} ({op.name}): {e}") from None


def to_eta(c: Container, fire_seed: int = 0) -> Program:
    """The eta program of a validated container: its prologue and epilogue bodies, in stage order.

    Both bodies run at the end of the pass, as one epilogue (the prologue reads no pass
    input). Ambient `rng` ops draw under `fire_seed`, fixed at translation: Pie's reference
    interpreter uses 0; keyed draws (`rng_keyed`) take their state from a channel and so
    differ per pass as in Pie. A per-layer stage is piegpu's own StageUnavailable verdict.
    """
    unsupported = [s for s, _ in c.stages if s not in RUNNABLE_STAGES]
    if unsupported:
        raise PtirRejected(f"StageUnavailable {{ stage: {unsupported[0]} }}",
                           f"stage {unsupported[0]} runs inside attention, per layer, which piegpu's forward "
                           "pass does not expose (piegpu runs device code as the pass's epilogue)",
                           "move the work to the epilogue, or run the container on Pie's engine")
    t = _Translation(c, fire_seed)
    with t.builder.active():
        for stage, ops in c.stages:
            t.stage(stage, ops)
    return t.builder.finish([])


def vocab_of(c: Container) -> int:
    """The vocab a container's logits reads declare (1 when it reads none)."""
    return next((op.fields["shape"][-1] for _, ops in c.stages for op in ops
                 if op.name == "intrinsic_val" and op.fields["intrinsic"] in ("logits", "mtp_logits")), 1)


def profile_for(c: Container) -> Profile:
    """piegpu's profile for this container's vocab."""
    return piegpu_profile(vocab_of(c))


def load(data: bytes, profile: Profile | None = None) -> Program:
    """Decode a PTIR container strictly, validate it as Pie does, and translate it into an eta program.

    Channels keep their PTIR index as the eta slot and are named "chan{index}"; the
    logits and hidden intrinsics become piegpu's `intrinsics.outputs("logits")` and
    `intrinsics.outputs("hidden")` (f32 [rows, hidden_size], after the final norm). A container Pie
    rejects, or one that needs a pass input piegpu's forward pass does not provide,
    raises PtirRejected (a ValidationError) carrying Pie's verdict.
    """
    c = decode(data)
    bind(c, profile or profile_for(c))
    prog = to_eta(c)
    prog.ptir_container = c  # runtime only, like channel_objects: not part of the eta bytes or hash
    return prog
