"""Inlining: the value of any eta node at a multi-index, as KIR, inside one kernel.

Elementwise, shape and index ops are never stored: a consumer evaluates them at
the indices it needs (a gather is an index remap with a data-dependent index).
Realized nodes (reductions, sorts, inputs, ...) are loads from their arena slot.
"""

from __future__ import annotations

from contextlib import contextmanager

from .channel_layout import HEADER_WORDS, RING
from ..eta.counter_rng import KEY_SALT, M1, M2, STREAM_SALT
from ..eta.ops import GroupOp
from ..eta.program import const_value
from . import ir
from .ir import BOOL, F32, I32, U32, Const, Expr, Let, Var

# Channel buffers follow piegpu/kernel/channel_layout.py; the ring size is read at run time so
# device code does not depend on it.


class _Scope:
    """One nested block of a kernel: its statements, memoized values, and what it is."""

    def __init__(self, kind: str):
        self.kind = kind  # "top", "if" or "loop"
        self.stmts: list = []
        self.memo: dict = {}


def free_vars(e) -> set:
    """Names of the Vars an expression reads."""
    if isinstance(e, Var):
        return {e.name}
    if isinstance(e, ir.Op):
        out: set = set()
        for a in e.args:
            out |= free_vars(a)
        return out
    if isinstance(e, (ir.Load, ir.SLoad)):
        return free_vars(e.index)
    return set()


class KernelBuilder:
    """Collects the statements of one kernel and memoizes node values per index.

    A node value is emitted in the outermost block where everything it depends on is
    defined (loop-invariant code motion): a per-row value used inside a loop over the
    row is computed once before the loop, not in every iteration. Values never move
    out of an `if` (a guard may keep them in bounds).
    """

    def __init__(self, plan, name: str):
        self.plan = plan
        self.name = name
        self.scopes = [_Scope("top")]
        self.level: dict = {}  # name -> index of the scope that defines it
        self.mutable: set = set()
        self.counter = 0
        self._at = None  # scope index that emit() targets while a hoisted value is built

    @property
    def stmts(self) -> list:
        """The kernel body (top-level statements)."""
        return self.scopes[0].stmts

    # ---- statement plumbing ----------------------------------------------------------
    def fresh(self, hint: str = "v") -> str:
        """A new local name: hint, underscore, counter (so "f" + 32 never spells the type f32)."""
        self.counter += 1
        return f"{hint}_{self.counter}"

    def _target(self) -> int:
        return len(self.scopes) - 1 if self._at is None else self._at

    def emit(self, stmt) -> None:
        """Append a statement to the current block."""
        at = self._target()
        self.scopes[at].stmts.append(stmt)
        if isinstance(stmt, (Let, ir.Decl)):
            self.level[stmt.name] = at

    def let(self, e: Expr, hint: str = "v") -> Expr:
        """Bind `e` to a name (literals and names are returned as they are)."""
        if isinstance(e, (Const, Var, ir.Builtin)):
            return e
        name = self.fresh(hint)
        self.emit(Let(name, e))
        return Var(name, e.dtype)

    def var(self, init: Expr, hint: str = "acc") -> Var:
        """Declare a mutable variable."""
        name = self.fresh(hint)
        self.emit(ir.Decl(name, init))
        self.mutable.add(name)
        return Var(name, init.dtype)

    @contextmanager
    def block(self, kind: str = "if"):
        """Collect a nested block; names bound inside stay inside."""
        scope = _Scope(kind)
        self.scopes.append(scope)
        saved, self._at = self._at, None
        try:
            yield scope.stmts
        finally:
            self.scopes.pop()
            self._at = saved

    def if_(self, cond: Expr, then_fn, else_fn=None) -> None:
        """Emit if/else with bodies produced by callables."""
        with self.block("if") as then:
            then_fn()
        orelse: list = []
        if else_fn is not None:
            with self.block("if") as orelse:
                else_fn()
        self.emit(ir.If(cond, tuple(then), tuple(orelse)))

    def for_(self, start: Expr, end: Expr, body_fn, step: Expr | None = None, hint: str = "j") -> None:
        """Emit a counted u32 loop; body_fn receives the loop variable."""
        name = self.fresh(hint)
        with self.block("loop") as body:
            self.level[name] = len(self.scopes) - 1
            self.mutable.add(name)
            body_fn(Var(name, U32))
        self.emit(ir.For(name, start, end, step or ir.u32(1), tuple(body)))

    def lookup(self, key):
        """A memoized value visible from the current block, or None."""
        for scope in reversed(self.scopes[: self._target() + 1]):
            hit = scope.memo.get(key)
            if hit is not None:
                return hit
        return None

    def remember(self, key, value) -> None:
        """Memoize a value in the block it was emitted in."""
        self.scopes[self._target()].memo[key] = value

    def _home(self, idx: list) -> int:
        """The outermost block where a value at index `idx` can be computed."""
        depth = self._target()
        home = 0
        for k in range(1, depth + 1):  # never above an enclosing if
            if self.scopes[k].kind == "if":
                home = k
        names: set = set()
        for e in idx:
            names |= free_vars(e)
        for n in names:
            home = max(home, self.level.get(n, depth))
        return min(home, depth)

    # ---- node values --------------------------------------------------------------
    def value(self, nid: int, idx: list, compute: bool = False) -> Expr:
        """The value of node `nid` at multi-index `idx` (u32 expressions).

        compute=True evaluates the node's own rule even when it has a slot: that is
        how the kernel that stores a node computes it.
        """
        key = (nid, tuple(idx), compute)
        hit = self.lookup(key)
        if hit is not None:
            return hit
        saved = self._at
        self._at = self._home(idx)
        try:
            node = self.plan.prog.nodes[nid]
            loc = None if compute else self.plan.location(nid)
            if loc is not None:
                buf, base = loc
                e = self.let(ir.Load(buf, ir.add(base, ir.linear(idx, node.type.shape)), node.type.dtype))
            else:
                rule = INLINE.get(node.op) or (_elementwise if node.op in GroupOp.ELEMENTWISE else None)
                if rule is None:
                    raise AssertionError(f"op {node.op} is neither realized nor inlinable")
                e = self.let(rule(self, node, idx))
            self.remember(key, e)
        finally:
            self._at = saved
        return e


def _elementwise(kb: KernelBuilder, node, idx) -> Expr:
    args = tuple(kb.value(j, idx) for j in node.inputs)
    return ir.Op(node.op, args, node.type.dtype)


def _const(kb, node, idx) -> Expr:
    return ir.const(const_value(node), node.type.dtype)


def _iota(kb, node, idx) -> Expr:
    return idx[0]


def _broadcast(kb, node, idx) -> Expr:
    src = kb.plan.prog.nodes[node.inputs[0]].type.shape
    off = len(idx) - len(src)
    sidx = [ir.u32(0) if d == 1 else idx[off + a] for a, d in enumerate(src)]
    return kb.value(node.inputs[0], sidx)


def _reshape(kb, node, idx) -> Expr:
    src = kb.plan.prog.nodes[node.inputs[0]].type.shape
    flat = kb.let(ir.linear(idx, node.type.shape), "f") if len(idx) > 1 else ir.linear(idx, node.type.shape)
    return kb.value(node.inputs[0], ir.delinear(flat, src))


def _transpose(kb, node, idx) -> Expr:
    return kb.value(node.inputs[0], [idx[1], idx[0]])


def _slice_last(kb, node, idx) -> Expr:
    return kb.value(node.inputs[0], idx[:-1] + [ir.add(idx[-1], ir.u32(node.attr["start"]))])


def _concat(kb, node, idx) -> Expr:
    pieces, off, result = [], 0, None
    for j in node.inputs:
        n = kb.plan.prog.nodes[j].type.shape[-1]
        pieces.append((j, off, n))
        off += n
    last = idx[-1]
    for j, o, n in reversed(pieces):
        local = ir.op("minimum", ir.sub(last, ir.u32(o)), ir.u32(n - 1)) if o else ir.op("minimum", last, ir.u32(n - 1))
        v = kb.value(j, idx[:-1] + [kb.let(local, "c")])
        result = v if result is None else kb.let(ir.select(ir.lt(last, ir.u32(o + n)), v, result), "cat")
    return result


def index_in_range(kb: KernelBuilder, i: Expr, n: int) -> tuple:
    """(in-range bool, clamped u32 index) for an i32/u32 index against size n."""
    if i.dtype == I32:
        ok = ir.op("and_", ir.op("ge", i, Const(0, I32), dt=BOOL), ir.op("lt", i, Const(n, I32), dt=BOOL), dt=BOOL)
    else:
        ok = ir.lt(i, ir.u32(n))
    u = ir.op("minimum", ir.cast(i, U32) if i.dtype == U32 else ir.cast(ir.op("maximum", i, Const(0, I32)), U32),
              ir.u32(n - 1))
    return kb.let(ok, "ok"), kb.let(u, "ix")


def _zero(dt) -> Expr:
    return ir.const(0, dt)


def _gather(kb, node, idx) -> Expr:
    src, ind = (kb.plan.prog.nodes[j] for j in node.inputs)
    r = len(ind.type.shape)
    i = kb.value(node.inputs[1], idx[:r])
    ok, u = index_in_range(kb, i, src.type.shape[0])
    v = kb.value(node.inputs[0], [u] + idx[r:])
    return ir.select(ok, v, _zero(node.type.dtype))


def _gather_row(kb, node, idx) -> Expr:
    src = kb.plan.prog.nodes[node.inputs[0]]
    i = kb.value(node.inputs[1], idx)
    ok, u = index_in_range(kb, i, src.type.shape[1])
    return ir.select(ok, kb.value(node.inputs[0], [idx[0], u]), _zero(node.type.dtype))


def _take_last(kb, node, idx) -> Expr:
    src = kb.plan.prog.nodes[node.inputs[0]]
    i = kb.value(node.inputs[1], idx)
    ok, u = index_in_range(kb, i, src.type.shape[-1])
    return ir.select(ok, kb.value(node.inputs[0], idx[:-1] + [u]), _zero(node.type.dtype))


def mix32(kb: KernelBuilder, x: Expr) -> Expr:
    """lowbias32 (see eta.rng) in KIR."""
    x = kb.let(ir.op("bit_xor", x, ir.op("shr", x, ir.u32(16))), "h")
    x = kb.let(ir.op("mul", x, ir.u32(M1)), "h")
    x = kb.let(ir.op("bit_xor", x, ir.op("shr", x, ir.u32(15))), "h")
    x = kb.let(ir.op("mul", x, ir.u32(M2)), "h")
    return kb.let(ir.op("bit_xor", x, ir.op("shr", x, ir.u32(16))), "h")


def rng_stream(kb: KernelBuilder, key: Expr, counter: Expr) -> tuple:
    """(s, t): the two stream words of eta.rng for (key, counter)."""
    s = mix32(kb, ir.op("add", mix32(kb, ir.op("bit_xor", key, ir.u32(KEY_SALT))), counter))
    t = mix32(kb, ir.op("bit_xor", s, ir.u32(STREAM_SALT)))
    return s, t


def _rng(kb, node, idx) -> Expr:
    st = node.inputs[0]
    memo_key = ("rng-stream", st)
    stream = kb.lookup(memo_key)
    if stream is None:  # the stream words depend on the state only: computed at kernel top
        saved, kb._at = kb._at, kb._home([])
        try:
            stream = rng_stream(kb, kb.value(st, [ir.u32(0)]), kb.value(st, [ir.u32(1)]))
            kb.remember(memo_key, stream)
        finally:
            kb._at = saved
    s, t = stream
    flat = ir.linear(idx, node.type.shape)
    bits = mix32(kb, ir.op("bit_xor", mix32(kb, ir.op("add", flat, s)), t))
    hi = ir.cast(ir.op("shr", bits, ir.u32(9)), F32)
    return ir.op("mul", ir.op("add", hi, Const(0.5, F32)), Const(2.0 ** -23, F32))


def channel_cell_base(kb: KernelBuilder, slot: int, which: int, seq: int) -> Expr:
    """Word offset of a channel cell: header word `which` (0 head, 1 tail) plus seq, modulo capacity."""
    b = kb.plan.channel_binding(slot)
    key = ("chan-base", slot, which, seq)
    hit = kb.lookup(key)
    if hit is not None:
        return hit
    saved, kb._at = kb._at, kb._home([])
    try:
        hdr = kb.let(ir.Load(b.name, ir.u32(which), U32), "hdr")
        cap = kb.lookup(("chan-cap", slot))
        if cap is None:
            cap = kb.let(ir.Load(b.name, ir.u32(RING), U32), "cap")
            kb.remember(("chan-cap", slot), cap)
        cell = ir.Op("rem", (ir.add(hdr, ir.u32(seq)), cap), U32)
        base = kb.let(ir.add(ir.mul(cell, ir.u32(b.info["cell_words"])), ir.u32(HEADER_WORDS)), "cell")
        kb.remember(key, base)
    finally:
        kb._at = saved
    return base


def _chan_take(kb, node, idx) -> Expr:
    base = channel_cell_base(kb, node.attr["slot"], 0, node.attr.get("seq", 0))
    return ir.Load(kb.plan.channel_binding(node.attr["slot"]).name, ir.add(base, ir.linear(idx, node.type.shape)),
                   node.type.dtype)


def _intrinsic(kb, node, idx) -> Expr:
    b = kb.plan.intrinsic_binding(node.attr["name"])
    row = node.attr["index"] * node.type.size
    return ir.Load(b.name, ir.add(ir.u32(row), ir.linear(idx, node.type.shape)), node.type.dtype)


INLINE = {
    "const": _const,
    "iota": _iota,
    "broadcast": _broadcast,
    "reshape": _reshape,
    "transpose": _transpose,
    "slice_last": _slice_last,
    "concat": _concat,
    "gather": _gather,
    "gather_row": _gather_row,
    "take_last": _take_last,
    "rng": _rng,
    "chan_take": _chan_take,
    "chan_read": _chan_take,
    "intrinsic": _intrinsic,
}
