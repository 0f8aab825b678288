"""Kernel templates: which template computes each stored op, and the small ones.

TEMPLATES maps every op of GroupOp.TEMPLATED to the function that plans its kernels:
reductions and scans are in reductions.py, top-k and sorts in sorting.py; the map
kernel that stores inlined values (materialize), matmul, the scatters and the channel
commit are here. Workgroup sizing is in workgroups.py.
"""

from __future__ import annotations

from math import ceil

from ..errors import CompileError
from ..eta.ops import GroupOp
from . import ir
from .inline import KernelBuilder, channel_cell_base
from .ir import BOOL, F32, U32, Const
from .reductions import reduce, scan
from .sorting import order
from .workgroups import GID, LOOP_BUDGET, MAP_WG, finish, node_of


def _store(kb: KernelBuilder, dest, flat: ir.Expr, v: ir.Expr) -> None:
    if dest[0] == "arena":
        kb.emit(ir.Store("arena", ir.add(ir.u32(dest[1]), flat), v))
    else:
        _, slot, seq = dest
        base = channel_cell_base(kb, slot, 1, seq)
        kb.emit(ir.Store(kb.plan.channel_binding(slot).name, ir.add(base, flat), v))


def materialize(p, roots: list) -> None:
    """One map kernel storing every root (same element count) to its destinations."""
    n = node_of(p, roots[0][0]).type.size
    kb = KernelBuilder(p, "map")

    def body():
        for nid, dests in roots:
            node = node_of(p, nid)
            idx = ir.delinear(GID, node.type.shape)
            # The kernel that fills a node's own slot computes it; a copy elsewhere (a
            # channel put, an output) of an already stored node just loads it.
            own = any(d[0] == "arena" and d[1] == p.slots.get(nid) for d in dests)
            v = kb.value(nid, idx, compute=own)
            for d in dests:
                _store(kb, d, GID, v)

    kb.if_(ir.lt(GID, ir.u32(n)), body)
    finish(p, kb, MAP_WG, ceil(n / MAP_WG), comment=f"store {[r[0] for r in roots]}")


# ---- linear algebra ---------------------------------------------------------------------

def linear(p, nid: int) -> None:
    """matmul: one thread per output element."""
    node = node_of(p, nid)
    a, b = node.inputs
    m, kk = node_of(p, a).type.shape
    n = node.type.shape[1]
    if kk > LOOP_BUDGET:
        raise CompileError(f"matmul with inner dimension {kk} exceeds {LOOP_BUDGET} loop iterations per thread. "
                           "Fix: split the inner dimension and add the partial products")
    kb = KernelBuilder(p, "matmul")

    def body():
        i = kb.let(ir.div(GID, ir.u32(n)), "i")
        j = kb.let(ir.rem(GID, ir.u32(n)), "j")
        acc = kb.var(Const(0.0, F32))
        kb.for_(ir.u32(0), ir.u32(kk), lambda t: kb.emit(ir.Assign(
            acc.name, ir.op("add", acc, ir.op("mul", kb.value(a, [i, t]), kb.value(b, [t, j]))))))
        kb.emit(ir.Store("arena", ir.add(ir.u32(p.slots[nid]), GID), acc))

    kb.if_(ir.lt(GID, ir.u32(m * n)), body)
    finish(p, kb, MAP_WG, ceil(m * n / MAP_WG), comment=f"matmul {m}x{kk}x{n}")


# ---- scatters ----------------------------------------------------------------------------

def scatter(p, nid: int) -> None:
    """scatter_set (last write wins, via an atomicMax winner table) and scatter_add (atomics)."""
    node = node_of(p, nid)
    dst, idx, vals = node.inputs
    dshape = node.type.shape
    rows, inner = dshape[0], node.type.size // dshape[0]
    updates = node_of(p, idx).type.size
    out = p.slots[nid]
    total = node.type.size

    kb = KernelBuilder(p, "scatter_copy")
    winner = p.alloc(rows) if node.op == "scatter_set" else None

    def copy():
        kb.emit(ir.Store("arena", ir.add(ir.u32(out), GID), kb.value(dst, ir.delinear(GID, dshape))))
        if winner is not None:
            kb.if_(ir.lt(GID, ir.u32(rows)), lambda: kb.emit(ir.Store("arena", ir.add(ir.u32(winner), GID),
                                                                      ir.u32(0))))
    kb.if_(ir.lt(GID, ir.u32(total)), copy)
    finish(p, kb, MAP_WG, ceil(total / MAP_WG), comment="scatter: copy destination")

    ishape = node_of(p, idx).type.shape
    vshape = node_of(p, vals).type.shape

    def target(kb2, j):
        from .inline import index_in_range
        i = kb2.value(idx, ir.delinear(j, ishape))
        return index_in_range(kb2, i, rows)

    if winner is not None:
        kb = KernelBuilder(p, "scatter_claim")

        def claim():
            ok, row = target(kb, GID)
            kb.if_(ok, lambda: kb.emit(ir.AtomicMaxU32("arena", ir.add(ir.u32(winner), row),
                                                       ir.add(GID, ir.u32(1)))))
        kb.if_(ir.lt(GID, ir.u32(updates)), claim)
        finish(p, kb, MAP_WG, ceil(updates / MAP_WG), atomic=("arena",), comment="scatter_set: last writer")

    kb = KernelBuilder(p, "scatter_write")
    n_el = updates * inner

    def write():
        j = kb.let(ir.div(GID, ir.u32(inner)), "u")
        e = kb.let(ir.rem(GID, ir.u32(inner)), "e")
        ok, row = target(kb, j)
        v = kb.value(vals, ir.delinear(GID, vshape))
        dest = ir.add(ir.u32(out), ir.add(ir.mul(row, ir.u32(inner)), e))
        if winner is not None:
            won = ir.op("eq", ir.Load("arena", ir.add(ir.u32(winner), row), U32), ir.add(j, ir.u32(1)), dt=BOOL)
            kb.if_(ir.op("and_", ok, won, dt=BOOL), lambda: kb.emit(ir.Store("arena", dest, v)))
        else:
            kb.if_(ok, lambda: kb.emit(ir.AtomicAdd("arena", dest, v)))
    kb.if_(ir.lt(GID, ir.u32(n_el)), write)
    finish(p, kb, MAP_WG, ceil(n_el / MAP_WG), atomic=() if winner is not None else ("arena",),
            comment=f"{node.op}: write updates")


# ---- channels ------------------------------------------------------------------------------

def commit(p) -> None:
    """Advance channel ring headers once every kernel of the pass has read them."""
    kb = KernelBuilder(p, "commit")

    def body():
        for slot, (takes, puts) in sorted(p.channel_counts.items()):
            b = p.channel_binding(slot).name
            for word, count in ((0, takes), (1, puts)):
                if count:
                    kb.emit(ir.Store(b, ir.u32(word), ir.add(ir.Load(b, ir.u32(word), U32), ir.u32(count))))
    kb.if_(ir.op("eq", GID, ir.u32(0), dt=BOOL), body)
    finish(p, kb, 1, 1, comment="commit channel takes and puts")


TEMPLATES = {**dict.fromkeys(GroupOp.REDUCE, reduce), **dict.fromkeys(GroupOp.SCAN, scan),
             **dict.fromkeys(GroupOp.ORDER, order), **dict.fromkeys(GroupOp.LINEAR, linear),
             **dict.fromkeys(GroupOp.SCATTER, scatter)}
