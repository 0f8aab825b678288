"""Planning: which eta nodes are stored, where they live, and the kernels that compute them."""

from __future__ import annotations

from dataclasses import dataclass, field

from .channel_layout import HEADER_WORDS
from ..errors import CompileError
from ..eta.ops import GroupOp
from ..eta.program import Program
from . import ir
from .ir import Binding, Kernel

# Ops of GroupOp.TEMPLATED are computed by a kernel template of their own (templates.TEMPLATES);
# everything else is inlined. Inputs of these are stored first (unless they are sources, cheap
# to load): their kernels read each input element many times.
REREAD_INPUTS = GroupOp.ORDER + GroupOp.LINEAR


@dataclass
class Limits:
    """Device limits the kernels must respect."""

    max_workgroup: int = 256
    max_groups_per_dim: int = 65535
    max_binding_words: int = (128 << 20) // 4


@dataclass
class Plan:
    """Everything a backend needs: bindings, arena layout, kernels in dispatch order."""

    prog: Program
    limits: Limits = field(default_factory=Limits)
    bindings: list = field(default_factory=list)
    arena_words: int = 0
    slots: dict = field(default_factory=dict)  # node id -> arena word offset
    inputs: list = field(default_factory=list)  # (word offset, TType) per program input
    outputs: list = field(default_factory=list)  # (word offset, TType) per program output
    kernels: list = field(default_factory=list)
    channel_counts: dict = field(default_factory=dict)  # slot -> (takes, puts)

    # ---- locations --------------------------------------------------------------------
    def location(self, nid: int):
        """(binding, base word expr) of a stored node, or None when it is inlined."""
        off = self.slots.get(nid)
        return None if off is None else ("arena", ir.u32(off))

    def alloc(self, words: int) -> int:
        """Reserve `words` words of arena; returns the offset (16-byte aligned)."""
        off = (self.arena_words + 3) & ~3
        self.arena_words = off + max(words, 1)
        if self.arena_words > self.limits.max_binding_words:
            raise CompileError(f"program needs {self.arena_words * 4} bytes of device memory, over the "
                               f"{self.limits.max_binding_words * 4}-byte binding limit. Fix: use smaller shapes")
        return off

    def channel_binding(self, slot: int) -> Binding:
        """The binding of channel slot `slot`."""
        for b in self.bindings:
            if b.kind == "channel" and b.info["slot"] == slot:
                return b
        raise AssertionError(slot)

    def intrinsic_binding(self, name: str) -> Binding:
        """The binding of runtime intrinsic `name`."""
        for b in self.bindings:
            if b.kind == "intrinsic" and b.info["name"] == name:
                return b
        raise AssertionError(name)

    def add_kernel(self, k: Kernel) -> None:
        """Append a kernel in dispatch order (named after its position)."""
        k.name = f"k{len(self.kernels)}_{k.name}"
        self.kernels.append(k)


def _consumers(prog: Program) -> list:
    uses = [[] for _ in prog.nodes]
    for i, n in enumerate(prog.nodes):
        for j in n.inputs:
            uses[j].append(i)
    return uses


SHARED_MIN = 3  # kernels that inline the same expensive value before it is stored once instead


def _shared_expensive(prog: Program, stored: set) -> set:
    """Inlined values with transcendentals that several kernels would each recompute: store them.

    A kernel inlines everything up to stored nodes, so a softmax feeding 33
    reductions (top-p's bisection) would compute 33 exps per element; storing the
    probabilities costs one map kernel. Picks the value closest to the consumers
    first, then recounts. A free op (bitcast) is never picked: its consumers read its
    input and reinterpret it, where storing both would cost each of them two loads
    per element (top-p's bisection read the probabilities and their bit patterns).
    """
    stored = set(stored)
    roots = set(stored) | {n.inputs[0] for n in prog.nodes if n.op == "chan_put"} | set(prog.outputs)
    added: set = set()
    while True:
        count: dict = {}
        costly: dict = {}
        for r in roots | added:
            seen, stack = set(), list(prog.nodes[r].inputs)
            if r not in stored and r not in added:
                stack.append(r)
            while stack:
                i = stack.pop()
                if i in seen or i in stored or i in added:
                    continue
                seen.add(i)
                stack.extend(prog.nodes[i].inputs)
            for i in seen:
                count[i] = count.get(i, 0) + 1
        for i in sorted(count):
            node = prog.nodes[i]
            if node.op not in GroupOp.ELEMENTWISE or node.op in GroupOp.FREE:
                continue
            seen, stack, hit = set(), [i], False
            while stack and not hit:
                j = stack.pop()
                if j in seen or (j != i and (j in stored or j in added)):
                    continue
                seen.add(j)
                hit = prog.nodes[j].op in GroupOp.EXPENSIVE
                stack.extend(prog.nodes[j].inputs)
            costly[i] = hit
        pick = [i for i in count if count[i] >= SHARED_MIN and costly.get(i)]
        if not pick:
            return added
        added.add(max(pick))


def plan(prog: Program, limits: Limits | None = None) -> Plan:
    """Plan `prog` into kernels (device code does not depend on channel capacities)."""
    from . import templates

    p = Plan(prog, limits or Limits())
    p.bindings.append(Binding("arena", "arena", 0))
    for name in sorted({n.attr["name"] for n in prog.nodes if n.op == "intrinsic"}):
        words = max((n.attr["index"] + 1) * n.type.size for n in prog.nodes
                    if n.op == "intrinsic" and n.attr["name"] == name)  # rows read, up to the last one
        p.bindings.append(Binding(f"in_{name}", "intrinsic", words, {"name": name}))
    for slot, cell in enumerate(prog.channels):
        p.bindings.append(Binding(f"chan{slot}", "channel", HEADER_WORDS,
                                  {"slot": slot, "cell_words": cell.size}))

    stored = set()
    for i, n in enumerate(prog.nodes):
        if n.op == "input" or n.op in GroupOp.TEMPLATED:
            stored.add(i)
        if n.op in REREAD_INPUTS:
            for j in n.inputs:
                if prog.nodes[j].op not in GroupOp.SOURCE:
                    stored.add(j)
    stored |= _shared_expensive(prog, stored)
    for nid in sorted(stored):
        p.slots[nid] = p.alloc(prog.nodes[nid].type.size)
    for nid in sorted(stored):
        n = prog.nodes[nid]
        if n.op == "input":
            p.inputs.append((n.attr["index"], p.slots[nid], n.type))
    p.inputs = [(off, ty) for _, off, ty in sorted(p.inputs)]

    # Kernels in topological order: stored nodes are computed by their template.
    for nid in sorted(stored):
        n = prog.nodes[nid]
        if n.op == "input":
            continue
        if n.op in GroupOp.TEMPLATED:
            templates.TEMPLATES[n.op](p, nid)
        else:
            templates.materialize(p, [(nid, [("arena", p.slots[nid])])])

    # Outputs and channel puts: stored by map kernels grouped by element count.
    roots: dict = {}
    pending: dict = {}
    for nid in prog.outputs:
        if nid in p.slots:
            p.outputs.append((p.slots[nid], prog.nodes[nid].type))
            continue
        if nid not in pending:
            pending[nid] = p.alloc(prog.nodes[nid].type.size)
            roots.setdefault(prog.nodes[nid].type.size, []).append((nid, [("arena", pending[nid])]))
        p.outputs.append((pending[nid], prog.nodes[nid].type))
    for i, n in enumerate(prog.nodes):
        if n.op == "chan_put":
            slot, seq = n.attr["slot"], n.attr["seq"]
            roots.setdefault(prog.nodes[n.inputs[0]].type.size, []).append((n.inputs[0], [("put", slot, seq)]))
    for size in sorted(roots):
        templates.materialize(p, roots[size])
    p.slots.update(pending)

    takes, puts = {}, {}
    for n in prog.nodes:
        if n.op == "chan_take":
            takes[n.attr["slot"]] = takes.get(n.attr["slot"], 0) + 1
        elif n.op == "chan_put":
            puts[n.attr["slot"]] = puts.get(n.attr["slot"], 0) + 1
    p.channel_counts = {s: (takes.get(s, 0), puts.get(s, 0)) for s in range(len(prog.channels))}
    if any(t or q for t, q in p.channel_counts.values()):
        templates.commit(p)
    p.bindings[0].words = max(p.arena_words, 4)
    return p
