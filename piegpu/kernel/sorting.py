"""Kernel templates of top_k_idx (top_k and sort_desc): k argmax rounds for small k, else a bitonic sort.

The bitonic sort runs one workgroup per row while that fits the loop budget; longer rows
(2^17 elements and up on a device limited to 256 invocations per workgroup, the WebGPU
default: Chromium's, Dawn's) are sorted by several dispatches instead: a workgroup-local
kernel for every step whose pairs stay within a chunk of 2 x workgroup elements, and a
kernel per step whose pairs are further apart."""

from __future__ import annotations

from math import ceil

from . import ir
from .inline import KernelBuilder
from .ir import BOOL, I32, U32
from .reductions import arg_key, value_limits
from .workgroups import GID, LID, LOOP_BUDGET, MAP_WG, WG_SIZES, WID, choose_wg, finish, node_of, rows_of

ROUNDS_MAX_K = 32  # top-k by k argmax rounds up to this k; a bitonic sort above it


def order(p, nid: int) -> None:
    """top_k_idx: k argmax rounds for small k, else a bitonic sort per row."""
    node = node_of(p, nid)
    k = node.attr["k"]
    if k <= ROUNDS_MAX_K and k < rows_of(p, nid)[1]:
        _top_k_rounds(p, nid, k)
    else:
        _bitonic(p, nid, k)


def _before(a, ai, b, bi):
    """(a, ai) comes before (b, bi) in (value desc, index asc) order."""
    return ir.op("or_", ir.op("gt", a, b, dt=BOOL),
                 ir.op("and_", ir.op("eq", a, b, dt=BOOL), ir.lt(ai, bi), dt=BOOL), dt=BOOL)


def _top_k_rounds(p, nid: int, k: int) -> None:
    node = node_of(p, nid)
    x, n, rows = rows_of(p, nid)
    dt = x.type.dtype
    lo, _ = value_limits(dt)
    wg = choose_wg(p, lambda w: k * (ceil(n / w) + w), f"top_k k={k} over {n} elements", prefer=256)
    kb = KernelBuilder(p, "top_k")
    out, lead, xid = p.slots[nid], x.type.shape[:-1], node.inputs[0]
    ridx = ir.delinear(WID, lead)
    none = ir.u32(n)  # "no element yet"
    lastv = kb.var(lo, "lv")
    lasti = kb.var(none, "li")  # round 0: no previous element

    def round_(r):
        bv = kb.var(lo, "bv")
        bi = kb.var(none, "bi")

        def scan_one(j):
            key = arg_key(kb, kb.value(xid, ridx + [j]), True)
            after = ir.op("or_", ir.op("eq", lasti, none, dt=BOOL), _before(lastv, lasti, key, j), dt=BOOL)
            better = ir.op("or_", ir.op("eq", bi, none, dt=BOOL), _before(key, j, bv, bi), dt=BOOL)
            take = kb.let(ir.op("and_", after, better, dt=BOOL), "t")
            kb.emit(ir.Assign(bv.name, ir.select(take, key, bv)))
            kb.emit(ir.Assign(bi.name, ir.select(take, j, bi)))

        kb.for_(LID, ir.u32(n), scan_one, ir.u32(wg))
        kb.emit(ir.SStore("pv", LID, bv))
        kb.emit(ir.SStore("pi", LID, bi))
        kb.emit(ir.Barrier())

        def combine():
            cv = kb.var(ir.SLoad("pv", ir.u32(0), dt), "cv")
            ci = kb.var(ir.SLoad("pi", ir.u32(0), U32), "ci")

            def merge(u):
                v = kb.let(ir.SLoad("pv", u, dt))
                i = kb.let(ir.SLoad("pi", u, U32))
                valid = ir.op("ne", i, none, dt=BOOL)
                take = kb.let(ir.op("and_", valid, ir.op("or_", ir.op("eq", ci, none, dt=BOOL),
                                                          _before(v, i, cv, ci), dt=BOOL), dt=BOOL), "t")
                kb.emit(ir.Assign(cv.name, ir.select(take, v, cv)))
                kb.emit(ir.Assign(ci.name, ir.select(take, i, ci)))
            kb.for_(ir.u32(1), ir.u32(wg), merge)
            kb.emit(ir.Store("arena", ir.add(ir.u32(out), ir.add(ir.mul(WID, ir.u32(k)), r)), ir.cast(ci, I32)))
            kb.emit(ir.SStore("bestv", ir.u32(0), cv))
            kb.emit(ir.SStore("besti", ir.u32(0), ci))

        kb.if_(ir.op("eq", LID, ir.u32(0), dt=BOOL), combine)
        kb.emit(ir.Barrier())
        kb.emit(ir.Assign(lastv.name, ir.SLoad("bestv", ir.u32(0), dt)))
        kb.emit(ir.Assign(lasti.name, ir.SLoad("besti", ir.u32(0), U32)))

    kb.for_(ir.u32(0), ir.u32(k), round_, hint="r")
    shared = [ir.Shared("pv", dt, wg), ir.Shared("pi", U32, wg), ir.Shared("bestv", dt, 1),
              ir.Shared("besti", U32, 1)]
    finish(p, kb, wg, rows, shared, comment=f"top_k k={k} by rounds n={n}")


def _sort_shape(p, nid: int) -> tuple:
    """(node, its input, row length n, rows, n padded to a power of two, log2 of it) of a sort node."""
    node = node_of(p, nid)
    x, n, rows = rows_of(p, nid)
    size = 1
    while size < n:
        size *= 2
    return node, x, n, rows, size, size.bit_length() - 1


def _bitonic(p, nid: int, k: int) -> None:
    node, x, n, rows, size, log = _sort_shape(p, nid)
    dt = x.type.dtype
    keys = p.alloc(rows * size)
    idxs = p.alloc(rows * size)
    steps = log * (log + 1) // 2

    def cost(w):
        return ceil(size / w) + steps * ceil(size // 2 / w) + ceil(k / w)
    if min(cost(w) for w in WG_SIZES if w <= p.limits.max_workgroup) > LOOP_BUDGET:
        _bitonic_dispatches(p, nid, k)
        return
    wg = choose_wg(p, cost, f"sorting {n} elements", prefer=256)
    wg = min(wg, max(1, size // 2))
    kb = KernelBuilder(p, "sort")
    out, lead, xid = p.slots[nid], x.type.shape[:-1], node.inputs[0]
    ridx = ir.delinear(WID, lead)
    base = kb.let(ir.mul(WID, ir.u32(size)), "base")
    sentinel = ir.u32(SENTINEL)

    def load(i):
        def real():
            kb.emit(ir.Store("arena", ir.add(ir.u32(keys), ir.add(base, i)),
                             arg_key(kb, kb.value(xid, ridx + [i]), True)))
            kb.emit(ir.Store("arena", ir.add(ir.u32(idxs), ir.add(base, i)), i))

        def pad():
            kb.emit(ir.Store("arena", ir.add(ir.u32(idxs), ir.add(base, i)), sentinel))
        kb.if_(ir.lt(i, ir.u32(n)), real, pad)

    kb.for_(LID, ir.u32(size), load, ir.u32(wg))
    kb.emit(ir.Barrier())

    def stage(s):  # blocks of 2^s elements
        def step(e):  # compare distance 2^(s-1-e)
            dist = kb.let(ir.op("shl", ir.u32(1), ir.sub(ir.sub(s, ir.u32(1)), e)), "d")
            blk = kb.let(ir.op("shl", ir.u32(1), s), "blk")

            def pair(q):
                i = kb.let(ir.add(ir.mul(ir.div(q, dist), ir.mul(dist, ir.u32(2))), ir.rem(q, dist)), "i")
                j = kb.let(ir.add(i, dist), "jj")
                ia, ja = ir.add(base, i), ir.add(base, j)
                _compare_swap(kb, keys, idxs, dt, ia, ja, ir.op("bit_and", i, blk))

            kb.for_(LID, ir.u32(size // 2), pair, ir.u32(wg))
            kb.emit(ir.Barrier())
        kb.for_(ir.u32(0), s, step, hint="e")

    kb.for_(ir.u32(1), ir.u32(log + 1), stage, hint="s")

    def write(j):
        v = ir.Load("arena", ir.add(ir.u32(idxs), ir.add(base, j)), U32)
        kb.emit(ir.Store("arena", ir.add(ir.u32(out), ir.add(ir.mul(WID, ir.u32(k)), j)), ir.cast(v, I32)))
    kb.for_(LID, ir.u32(k), write, ir.u32(wg))
    finish(p, kb, wg, rows, comment=f"bitonic sort n={n} (padded {size}), k={k}")


SENTINEL = 0xFFFFFFFF  # the index of a padding element: after every real one


def _compare_swap(kb, keys: int, idxs: int, dt, ia, ja, in_ascending_block) -> None:
    """Order the (key, index) pairs at arena words ia < ja: descending where in_ascending_block is 0."""
    sentinel = ir.u32(SENTINEL)

    def before(av, ai, bv, bi):
        real_a = ir.op("ne", ai, sentinel, dt=BOOL)
        return ir.op("and_", real_a, ir.op("or_", ir.op("eq", bi, sentinel, dt=BOOL), _before(av, ai, bv, bi),
                                           dt=BOOL), dt=BOOL)
    av = kb.let(ir.Load("arena", ir.add(ir.u32(keys), ia), dt), "av")
    ai = kb.let(ir.Load("arena", ir.add(ir.u32(idxs), ia), U32), "ai")
    bv = kb.let(ir.Load("arena", ir.add(ir.u32(keys), ja), dt), "bv")
    bi = kb.let(ir.Load("arena", ir.add(ir.u32(idxs), ja), U32), "bi")
    desc = ir.op("eq", in_ascending_block, ir.u32(0), dt=BOOL)
    swap = kb.let(ir.select(desc, before(bv, bi, av, ai), before(av, ai, bv, bi)), "sw")

    def do_swap():
        kb.emit(ir.Store("arena", ir.add(ir.u32(keys), ia), bv))
        kb.emit(ir.Store("arena", ir.add(ir.u32(idxs), ia), bi))
        kb.emit(ir.Store("arena", ir.add(ir.u32(keys), ja), av))
        kb.emit(ir.Store("arena", ir.add(ir.u32(idxs), ja), ai))
    kb.if_(swap, do_swap)


def _bitonic_dispatches(p, nid: int, k: int) -> None:
    """The bitonic sort of rows too long for one workgroup: a kernel per far step, local kernels between.

    The rows' padded keys and indices lie back to back (row r at r * size, size a power of
    two), so a flat index's bits below `size` are its position in the row: the pairs and the
    chunks of the local kernels never cross a row, and a block's direction is its flat index
    masked to those bits (the last stage, blocks of `size`, sorts every row descending).
    """
    node, x, n, rows, size, log = _sort_shape(p, nid)
    dt = x.type.dtype
    in_row = ir.u32(size - 1)
    keys = p.alloc(rows * size)
    idxs = p.alloc(rows * size)
    xid, lead, out = node.inputs[0], x.type.shape[:-1], p.slots[nid]
    wg = min(256, p.limits.max_workgroup, size // 2)  # a chunk of 2 * wg elements per local workgroup
    local_log = (2 * wg).bit_length() - 1

    kb = KernelBuilder(p, "sort_load")

    def load():
        row = kb.let(ir.div(GID, ir.u32(size)), "row")
        i = kb.let(ir.rem(GID, ir.u32(size)), "i")

        def real():
            kb.emit(ir.Store("arena", ir.add(ir.u32(keys), GID),
                             arg_key(kb, kb.value(xid, ir.delinear(row, lead) + [i]), True)))
            kb.emit(ir.Store("arena", ir.add(ir.u32(idxs), GID), i))

        def pad():
            kb.emit(ir.Store("arena", ir.add(ir.u32(idxs), GID), ir.u32(SENTINEL)))
        kb.if_(ir.lt(i, ir.u32(n)), real, pad)
    kb.if_(ir.lt(GID, ir.u32(rows * size)), load)
    finish(p, kb, MAP_WG, ceil(rows * size / MAP_WG), comment=f"bitonic sort n={n}: load")

    def local(first_stage: int, last_stage: int) -> None:
        """Stages first..last, each from the step whose distance is wg down to 1 (stage s < local_log: all)."""
        kb = KernelBuilder(p, "sort_local")
        chunk = kb.let(ir.mul(WID, ir.u32(2 * wg)), "chunk")

        def stage(s):
            blk = kb.let(ir.op("shl", ir.u32(1), s), "blk")

            def step(e):
                dist = kb.let(ir.op("shl", ir.u32(1), ir.sub(ir.sub(s, ir.u32(1)), e)), "d")
                i = kb.let(ir.add(chunk, ir.add(ir.mul(ir.div(LID, dist), ir.mul(dist, ir.u32(2))),
                                                ir.rem(LID, dist))), "i")
                direction = ir.op("bit_and", ir.op("bit_and", i, blk), in_row)
                _compare_swap(kb, keys, idxs, dt, i, ir.add(i, dist), direction)
                kb.emit(ir.Barrier())
            first_step = ir.u32(0) if last_stage <= local_log else ir.sub(s, ir.u32(local_log))
            kb.for_(first_step, s, step, hint="e")
        kb.for_(ir.u32(first_stage), ir.u32(last_stage + 1), stage, hint="s")
        finish(p, kb, wg, rows * size // (2 * wg), comment=f"bitonic sort n={n}: stages {first_stage}-{last_stage}, "
               f"distances <= {wg}")

    def far_step(s: int, dist: int) -> None:
        kb = KernelBuilder(p, "sort_step")

        def pair():
            i = kb.let(ir.add(ir.mul(ir.div(GID, ir.u32(dist)), ir.u32(2 * dist)), ir.rem(GID, ir.u32(dist))), "i")
            direction = ir.op("bit_and", i, ir.u32((1 << s) & (size - 1)))
            _compare_swap(kb, keys, idxs, dt, i, ir.add(i, ir.u32(dist)), direction)
        kb.if_(ir.lt(GID, ir.u32(rows * size // 2)), pair)
        finish(p, kb, MAP_WG, ceil(rows * size // 2 / MAP_WG),
               comment=f"bitonic sort n={n}: stage {s}, distance {dist}")

    local(1, min(local_log, log))
    for s in range(local_log + 1, log + 1):
        for e in range(s - local_log):
            far_step(s, 1 << (s - 1 - e))
        local(s, s)

    kb = KernelBuilder(p, "sort_write")

    def write():
        row = kb.let(ir.div(GID, ir.u32(k)), "row")
        j = ir.rem(GID, ir.u32(k))
        v = ir.Load("arena", ir.add(ir.u32(idxs), ir.add(ir.mul(row, ir.u32(size)), j)), U32)
        kb.emit(ir.Store("arena", ir.add(ir.u32(out), GID), ir.cast(v, I32)))
    kb.if_(ir.lt(GID, ir.u32(rows * k)), write)
    finish(p, kb, MAP_WG, ceil(rows * k / MAP_WG), comment=f"bitonic sort n={n} (padded {size}), k={k}: write")
