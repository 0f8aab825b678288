"""Kernel templates of the last-axis reductions (reduce_sum/max/min/argmax/argmin) and scans (cumsum, cumprod).

A short row gets a thread; a wide one a workgroup with a strided per-thread loop and
one barrier before a single thread combines the partials (workgroups.py).
"""

from __future__ import annotations

from math import ceil

from . import ir
from .inline import KernelBuilder
from .ir import BOOL, F32, I32, U32, Const, Var
from .workgroups import GID, LID, MAP_WG, WID, choose_wg, finish, is_wide, node_of, rows_of


def value_limits(dt):
    """(lowest, highest) value of dtype dt: the identities of max and min."""
    if dt == F32:
        return Const(float("-inf"), F32), Const(float("inf"), F32)
    if dt == I32:
        return Const(-(1 << 31), I32), Const((1 << 31) - 1, I32)
    return Const(0, U32), Const(0xFFFFFFFF, U32)


def arg_key(kb, v, largest: bool):
    """The comparison key of an arg-reduction or sort: NaN as -inf (largest first) or +inf."""
    if v.dtype != F32:
        return v
    fill = Const(float("-inf") if largest else float("inf"), F32)
    return kb.let(ir.select(ir.op("isnan", v, dt=BOOL), fill, v), "key")


class _Reducer:
    """The accumulator rules of one reduce op: init, fold one element, merge two partials."""

    def __init__(self, opname: str, dt):
        self.op, self.dt = opname, dt
        self.arg = opname in ("reduce_argmax", "reduce_argmin")
        self.largest = opname in ("reduce_argmax", "reduce_max")

    def init(self):
        lo, hi = value_limits(self.dt)
        if self.op == "reduce_sum":
            return ir.const(0, self.dt), None
        if self.op == "reduce_max":
            return lo, None
        if self.op == "reduce_min":
            return hi, None
        return (lo if self.largest else hi), Const(0, U32)

    def better(self, a, ai, b, bi):
        """b beats a (strictly better, or equal with a lower index)."""
        cmp = "gt" if self.largest else "lt"
        return ir.op("or_", ir.op(cmp, b, a, dt=BOOL),
                     ir.op("and_", ir.op("eq", b, a, dt=BOOL), ir.lt(bi, ai), dt=BOOL), dt=BOOL)

    def fold(self, kb, acc: Var, acci, v, j) -> None:
        if not self.arg:
            name = {"reduce_sum": "add", "reduce_max": "maximum", "reduce_min": "minimum"}[self.op]
            kb.emit(ir.Assign(acc.name, ir.op(name, acc, v)))
            return
        key = arg_key(kb, v, self.largest)
        cmp = "gt" if self.largest else "lt"
        take = kb.let(ir.op(cmp, key, acc, dt=BOOL), "t")
        kb.emit(ir.Assign(acc.name, ir.select(take, key, acc)))
        kb.emit(ir.Assign(acci.name, ir.select(take, j, acci)))

    def merge(self, kb, acc: Var, acci, b, bi) -> None:
        if not self.arg:
            self.fold(kb, acc, acci, b, None)
            return
        take = kb.let(self.better(acc, acci, b, bi), "t")
        kb.emit(ir.Assign(acc.name, ir.select(take, b, acc)))
        kb.emit(ir.Assign(acci.name, ir.select(take, bi, acci)))

    def result(self, acc, acci):
        return ir.cast(acci, I32) if self.arg else acc


def reduce(p, nid: int) -> None:
    """reduce_sum/max/min/argmax/argmin over the last axis."""
    node = node_of(p, nid)
    x, n, rows = rows_of(p, nid)
    red = _Reducer(node.op, x.type.dtype)
    kb = KernelBuilder(p, node.op)
    out = p.slots[nid]
    lead = x.type.shape[:-1]
    xid = node.inputs[0]

    def accumulate(row, start, step):
        init, initi = red.init()
        acc = kb.var(init)
        acci = kb.var(initi, "ai") if red.arg else None
        ridx = ir.delinear(row, lead)
        kb.for_(start, ir.u32(n), lambda j: red.fold(kb, acc, acci, kb.value(xid, ridx + [j]), j), step)
        return acc, acci

    if not is_wide(n, rows):
        def body():
            acc, acci = accumulate(GID, ir.u32(0), None)
            kb.emit(ir.Store("arena", ir.add(ir.u32(out), GID), red.result(acc, acci)))
        kb.if_(ir.lt(GID, ir.u32(rows)), body)
        finish(p, kb, MAP_WG, ceil(rows / MAP_WG), comment=f"{node.op} thread-per-row n={n}")
        return

    wg = choose_wg(p, lambda w: ceil(n / w) + w, f"{node.op} over {n} elements")
    acc, acci = accumulate(WID, LID, ir.u32(wg))
    shared = [ir.Shared("pv", x.type.dtype, wg)]
    kb.emit(ir.SStore("pv", LID, acc))
    if red.arg:
        shared.append(ir.Shared("pi", U32, wg))
        kb.emit(ir.SStore("pi", LID, acci))
    kb.emit(ir.Barrier())

    def combine():
        a = kb.var(ir.SLoad("pv", ir.u32(0), acc.dtype))
        ai = kb.var(ir.SLoad("pi", ir.u32(0), U32), "ai") if red.arg else None

        def merge_one(u):
            b = kb.let(ir.SLoad("pv", u, acc.dtype))
            bi = kb.let(ir.SLoad("pi", u, U32)) if red.arg else None
            red.merge(kb, a, ai, b, bi)
        kb.for_(ir.u32(1), ir.u32(wg), merge_one)
        kb.emit(ir.Store("arena", ir.add(ir.u32(out), WID), red.result(a, ai)))

    kb.if_(ir.op("eq", LID, ir.u32(0), dt=BOOL), combine)
    finish(p, kb, wg, rows, shared, comment=f"{node.op} workgroup-per-row n={n}")


# ---- scans --------------------------------------------------------------------------------

def scan(p, nid: int) -> None:
    """Inclusive cumsum/cumprod over the last axis."""
    node = node_of(p, nid)
    x, n, rows = rows_of(p, nid)
    dt = x.type.dtype
    name = "add" if node.op == "cumsum" else "mul"
    init = ir.const(0 if node.op == "cumsum" else 1, dt)
    kb = KernelBuilder(p, node.op)
    out, lead, xid = p.slots[nid], x.type.shape[:-1], node.inputs[0]

    def run(row, start, end, acc, write: bool):
        ridx = ir.delinear(row, lead)

        def step(j):
            kb.emit(ir.Assign(acc.name, ir.op(name, acc, kb.value(xid, ridx + [j]))))
            if write:
                kb.emit(ir.Store("arena", ir.add(ir.u32(out), ir.add(ir.mul(row, ir.u32(n)), j)), acc))
        kb.for_(start, end, step)

    if not is_wide(n, rows):
        def body():
            run(GID, ir.u32(0), ir.u32(n), kb.var(init), True)
        kb.if_(ir.lt(GID, ir.u32(rows)), body)
        finish(p, kb, MAP_WG, ceil(rows / MAP_WG), comment=f"{node.op} thread-per-row n={n}")
        return

    wg = choose_wg(p, lambda w: 2 * ceil(n / w) + w, f"{node.op} over {n} elements")
    chunk = ceil(n / wg)
    start = kb.let(ir.mul(LID, ir.u32(chunk)), "s")
    end = kb.let(ir.op("minimum", ir.add(start, ir.u32(chunk)), ir.u32(n)), "e")
    total = kb.var(init)
    run(WID, start, end, total, False)
    kb.emit(ir.SStore("part", LID, total))
    kb.emit(ir.Barrier())

    def prefix():
        running = kb.var(init, "run")

        def one(u):
            v = kb.let(ir.SLoad("part", u, dt))
            kb.emit(ir.SStore("part", u, running))
            kb.emit(ir.Assign(running.name, ir.op(name, running, v)))
        kb.for_(ir.u32(0), ir.u32(wg), one)

    kb.if_(ir.op("eq", LID, ir.u32(0), dt=BOOL), prefix)
    kb.emit(ir.Barrier())
    acc = kb.var(ir.SLoad("part", LID, dt))
    run(WID, start, end, acc, True)
    finish(p, kb, wg, rows, [ir.Shared("part", dt, wg)], comment=f"{node.op} chunked n={n}")
