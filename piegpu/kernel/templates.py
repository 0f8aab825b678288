"""Kernel templates: how each kind of stored op becomes KIR kernels.

Measured on lavapipe (DESIGN.md): barriers are slow, so reductions, scans and
top-k use one workgroup per row with a strided per-thread loop and a single
barrier before one thread combines the partials; short rows get a thread each.
"""

from __future__ import annotations

from math import ceil

from ..errors import CompileError
from . import ir
from .inline import KernelBuilder, channel_cell_base
from .ir import BOOL, F32, I32, U32, Builtin, Const, Kernel, Var

MAP_WG = 64
ROUNDS_MAX_K = 32  # top-k by k argmax rounds up to this k; a bitonic sort above it
WIDE_ROW = 512  # rows at least this long get a workgroup each (if there are few rows)
MANY_ROWS = 2048
# Loop iterations one invocation may run, summed over all its loops. lavapipe (Mesa
# 22.3) silently stops every loop of an invocation after 65535 iterations in total
# (measured; gallivm's loop limiter), so every template sizes its workgroup to stay
# well under it, and refuses with a CompileError when no workgroup size can.
LOOP_BUDGET = 50000
WG_SIZES = (64, 128, 256, 512, 1024)

GID, LID, WID = Builtin("gid"), Builtin("lid"), Builtin("wid")


def _kernel(p, kb: KernelBuilder, wg: int, groups: int, shared=(), atomic=(), comment="") -> None:
    p.add_kernel(Kernel(kb.name, wg, max(1, groups), tuple(kb.stmts), tuple(shared), frozenset(atomic), comment))


def _store(kb: KernelBuilder, dest, flat: ir.Expr, v: ir.Expr) -> None:
    if dest[0] == "arena":
        kb.emit(ir.Store("arena", ir.add(ir.u32(dest[1]), flat), v))
    else:
        _, slot, seq = dest
        base = channel_cell_base(kb, slot, 1, seq)
        kb.emit(ir.Store(kb.plan.channel_binding(slot).name, ir.add(base, flat), v))


def _node(p, nid):
    return p.prog.nodes[nid]


def choose_wg(p, cost, what: str, prefer: int = 128) -> int:
    """The workgroup size (a power of two) whose per-invocation loop count is lowest.

    `cost(wg)` is the most loop iterations one invocation runs; sizes within 25% of
    the best are equivalent and the one closest to `prefer` wins.
    """
    sizes = [w for w in WG_SIZES if w <= p.limits.max_workgroup]
    costs = {w: cost(w) for w in sizes}
    best = min(costs.values())
    if best > LOOP_BUDGET:
        raise CompileError(f"{what} needs {best} loop iterations per GPU thread even with {max(sizes)}-thread "
                           f"workgroups (limit {LOOP_BUDGET}). Fix: split the last axis into shorter rows")
    ok = [w for w in sizes if costs[w] <= best * 1.25 + 64]
    return min(ok, key=lambda w: abs(w - prefer))


def materialize(p, roots: list) -> None:
    """One map kernel storing every root (same element count) to its destinations."""
    n = _node(p, roots[0][0]).type.size
    kb = KernelBuilder(p, "map")

    def body():
        for nid, dests in roots:
            node = _node(p, nid)
            idx = ir.delinear(GID, node.type.shape)
            # The kernel that fills a node's own slot computes it; a copy elsewhere (a
            # channel put, an output) of an already stored node just loads it.
            own = any(d[0] == "arena" and d[1] == p.slots.get(nid) for d in dests)
            v = kb.value(nid, idx, compute=own)
            for d in dests:
                _store(kb, d, GID, v)

    kb.if_(ir.lt(GID, ir.u32(n)), body)
    _kernel(p, kb, MAP_WG, ceil(n / MAP_WG), comment=f"store {[r[0] for r in roots]}")


# ---- reductions --------------------------------------------------------------------------

def _limits(dt):
    if dt == F32:
        return Const(float("-inf"), F32), Const(float("inf"), F32)
    if dt == I32:
        return Const(-(1 << 31), I32), Const((1 << 31) - 1, I32)
    return Const(0, U32), Const(0xFFFFFFFF, U32)


def _arg_key(kb, v, largest: bool):
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
        lo, hi = _limits(self.dt)
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
        key = _arg_key(kb, v, self.largest)
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


def _rows(p, nid):
    x = _node(p, _node(p, nid).inputs[0])
    n = x.type.shape[-1]
    return x, n, x.type.size // n


def _wide(n: int, rows: int) -> bool:
    return n >= WIDE_ROW and rows <= MANY_ROWS or n > LOOP_BUDGET // 2


def reduce(p, nid: int) -> None:
    """reduce_sum/max/min/argmax/argmin over the last axis."""
    node = _node(p, nid)
    x, n, rows = _rows(p, nid)
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

    if not _wide(n, rows):
        def body():
            acc, acci = accumulate(GID, ir.u32(0), None)
            kb.emit(ir.Store("arena", ir.add(ir.u32(out), GID), red.result(acc, acci)))
        kb.if_(ir.lt(GID, ir.u32(rows)), body)
        _kernel(p, kb, MAP_WG, ceil(rows / MAP_WG), comment=f"{node.op} thread-per-row n={n}")
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
    _kernel(p, kb, wg, rows, shared, comment=f"{node.op} workgroup-per-row n={n}")


# ---- scans --------------------------------------------------------------------------------

def scan(p, nid: int) -> None:
    """Inclusive cumsum/cumprod over the last axis."""
    node = _node(p, nid)
    x, n, rows = _rows(p, nid)
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

    if not _wide(n, rows):
        def body():
            run(GID, ir.u32(0), ir.u32(n), kb.var(init), True)
        kb.if_(ir.lt(GID, ir.u32(rows)), body)
        _kernel(p, kb, MAP_WG, ceil(rows / MAP_WG), comment=f"{node.op} thread-per-row n={n}")
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
    _kernel(p, kb, wg, rows, [ir.Shared("part", dt, wg)], comment=f"{node.op} chunked n={n}")


# ---- ordering ---------------------------------------------------------------------------

def order(p, nid: int) -> None:
    """top_k_idx: k argmax rounds for small k, else a bitonic sort per row."""
    node = _node(p, nid)
    k = node.attr["k"]
    if k <= ROUNDS_MAX_K and k < _rows(p, nid)[1]:
        _top_k_rounds(p, nid, k)
    else:
        _bitonic(p, nid, k)


def _before(a, ai, b, bi):
    """(a, ai) comes before (b, bi) in (value desc, index asc) order."""
    return ir.op("or_", ir.op("gt", a, b, dt=BOOL),
                 ir.op("and_", ir.op("eq", a, b, dt=BOOL), ir.lt(ai, bi), dt=BOOL), dt=BOOL)


def _top_k_rounds(p, nid: int, k: int) -> None:
    node = _node(p, nid)
    x, n, rows = _rows(p, nid)
    dt = x.type.dtype
    lo, _ = _limits(dt)
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
            key = _arg_key(kb, kb.value(xid, ridx + [j]), True)
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
    _kernel(p, kb, wg, rows, shared, comment=f"top_k k={k} by rounds n={n}")


def _bitonic(p, nid: int, k: int) -> None:
    node = _node(p, nid)
    x, n, rows = _rows(p, nid)
    dt = x.type.dtype
    size = 1
    while size < n:
        size *= 2
    log = size.bit_length() - 1
    keys = p.alloc(rows * size)
    idxs = p.alloc(rows * size)
    steps = log * (log + 1) // 2
    wg = choose_wg(p, lambda w: ceil(size / w) + steps * ceil(size // 2 / w) + ceil(k / w),
                   f"sorting {n} elements", prefer=256)
    wg = min(wg, max(1, size // 2))
    kb = KernelBuilder(p, "sort")
    out, lead, xid = p.slots[nid], x.type.shape[:-1], node.inputs[0]
    ridx = ir.delinear(WID, lead)
    base = kb.let(ir.mul(WID, ir.u32(size)), "base")
    sentinel = ir.u32(0xFFFFFFFF)

    def load(i):
        def real():
            kb.emit(ir.Store("arena", ir.add(ir.u32(keys), ir.add(base, i)),
                             _arg_key(kb, kb.value(xid, ridx + [i]), True)))
            kb.emit(ir.Store("arena", ir.add(ir.u32(idxs), ir.add(base, i)), i))

        def pad():
            kb.emit(ir.Store("arena", ir.add(ir.u32(idxs), ir.add(base, i)), sentinel))
        kb.if_(ir.lt(i, ir.u32(n)), real, pad)

    kb.for_(LID, ir.u32(size), load, ir.u32(wg))
    kb.emit(ir.Barrier())

    def before(av, ai, bv, bi):
        real_a = ir.op("ne", ai, sentinel, dt=BOOL)
        return ir.op("and_", real_a, ir.op("or_", ir.op("eq", bi, sentinel, dt=BOOL), _before(av, ai, bv, bi),
                                           dt=BOOL), dt=BOOL)

    def stage(s):  # blocks of 2^s elements
        def step(e):  # compare distance 2^(s-1-e)
            dist = kb.let(ir.op("shl", ir.u32(1), ir.sub(ir.sub(s, ir.u32(1)), e)), "d")
            blk = kb.let(ir.op("shl", ir.u32(1), s), "blk")

            def pair(q):
                i = kb.let(ir.add(ir.mul(ir.div(q, dist), ir.mul(dist, ir.u32(2))), ir.rem(q, dist)), "i")
                j = kb.let(ir.add(i, dist), "jj")
                ia, ja = ir.add(base, i), ir.add(base, j)
                av = kb.let(ir.Load("arena", ir.add(ir.u32(keys), ia), dt), "av")
                ai = kb.let(ir.Load("arena", ir.add(ir.u32(idxs), ia), U32), "ai")
                bv = kb.let(ir.Load("arena", ir.add(ir.u32(keys), ja), dt), "bv")
                bi = kb.let(ir.Load("arena", ir.add(ir.u32(idxs), ja), U32), "bi")
                desc = ir.op("eq", ir.op("bit_and", i, blk), ir.u32(0), dt=BOOL)
                swap = kb.let(ir.select(desc, before(bv, bi, av, ai), before(av, ai, bv, bi)), "sw")

                def do_swap():
                    kb.emit(ir.Store("arena", ir.add(ir.u32(keys), ia), bv))
                    kb.emit(ir.Store("arena", ir.add(ir.u32(idxs), ia), bi))
                    kb.emit(ir.Store("arena", ir.add(ir.u32(keys), ja), av))
                    kb.emit(ir.Store("arena", ir.add(ir.u32(idxs), ja), ai))
                kb.if_(swap, do_swap)

            kb.for_(LID, ir.u32(size // 2), pair, ir.u32(wg))
            kb.emit(ir.Barrier())
        kb.for_(ir.u32(0), s, step, hint="e")

    kb.for_(ir.u32(1), ir.u32(log + 1), stage, hint="s")

    def write(j):
        v = ir.Load("arena", ir.add(ir.u32(idxs), ir.add(base, j)), U32)
        kb.emit(ir.Store("arena", ir.add(ir.u32(out), ir.add(ir.mul(WID, ir.u32(k)), j)), ir.cast(v, I32)))
    kb.for_(LID, ir.u32(k), write, ir.u32(wg))
    _kernel(p, kb, wg, rows, comment=f"bitonic sort n={n} (padded {size}), k={k}")


# ---- linear algebra ---------------------------------------------------------------------

def linear(p, nid: int) -> None:
    """matmul: one thread per output element."""
    node = _node(p, nid)
    a, b = node.inputs
    m, kk = _node(p, a).type.shape
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
    _kernel(p, kb, MAP_WG, ceil(m * n / MAP_WG), comment=f"matmul {m}x{kk}x{n}")


# ---- scatters ----------------------------------------------------------------------------

def scatter(p, nid: int) -> None:
    """scatter_set (last write wins, via an atomicMax winner table) and scatter_add (atomics)."""
    node = _node(p, nid)
    dst, idx, vals = node.inputs
    dshape = node.type.shape
    rows, inner = dshape[0], node.type.size // dshape[0]
    updates = _node(p, idx).type.size
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
    _kernel(p, kb, MAP_WG, ceil(total / MAP_WG), comment="scatter: copy destination")

    ishape = _node(p, idx).type.shape
    vshape = _node(p, vals).type.shape

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
        _kernel(p, kb, MAP_WG, ceil(updates / MAP_WG), atomic=("arena",), comment="scatter_set: last writer")

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
    _kernel(p, kb, MAP_WG, ceil(n_el / MAP_WG), atomic=() if winner is not None else ("arena",),
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
    _kernel(p, kb, 1, 1, comment="commit channel takes and puts")


TEMPLATES = {"reduce": reduce, "scan": scan, "order": order, "linear": linear, "scatter": scatter}
