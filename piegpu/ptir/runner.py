"""Run a PTIR-derived eta program pass by pass the way Pie's reference Instance does: rings, readiness, commit.

A pass fires only when every channel it uses is ready (Pie's readiness table, in phase
order: a take or read needs a full cell, a put needs room); otherwise nothing happens and
the pass reports the first channel that missed. A firing pass reads its intrinsics and
channel cells, computes on the chosen backend, then consumes its takes and appends its
puts together. The eta program's channel and intrinsic nodes become plain inputs and its
puts plain outputs, so the same pure program runs on the interpreter, WGSL or SPIR-V.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..errors import ValidationError
from ..eta.ops import GroupOp
from ..eta.program import Node, Program
from .validate import readiness
from .wire import STAGES, Container

CONSUMING_PORTS = ("embed_tokens", "positions", "w_slot", "w_off", "rs_w_slot", "rs_w_off")


@dataclass
class Detached:
    """A pure eta program plus where its inputs come from and where its outputs go."""

    program: Program
    sources: list  # per input: ("take", slot, seq) | ("read", slot) | ("intrinsic", name, shape)
    sinks: list  # per output: the channel slot it is put into


def detach(prog: Program) -> Detached:
    """`prog` with channel and intrinsic nodes turned into inputs and its puts into outputs."""
    nodes, remap, sources, outs, sinks = [], {}, [], [], []
    for i, n in enumerate(prog.nodes):
        a = n.attr
        if n.op == "chan_put":
            outs.append(remap[n.inputs[0]])
            sinks.append(a["slot"])
            continue
        if n.op in GroupOp.RUNTIME:
            src = {"chan_take": lambda: ("take", a["slot"], a["seq"]), "chan_read": lambda: ("read", a["slot"]),
                   "intrinsic": lambda: ("intrinsic", a["name"], n.type.shape)}[n.op]()
            n = Node("input", (), (len(sources), n.type.dtype, n.type.shape), n.type)
            sources.append(src)
        remap[i] = len(nodes)
        nodes.append(Node(n.op, tuple(remap[j] for j in n.inputs), n.attrs, n.type))
    return Detached(Program(nodes, outs), sources, sinks)


@dataclass
class Step:
    """What one fire did: committed, or the (channel, phase tag) that missed; an error text if it failed."""

    committed: bool
    missed: tuple | None = None
    error: str = ""


@dataclass
class Instance:
    """One instance of a container: its channel rings (extern channels shared with a peer)."""

    container: Container
    detached: Detached
    rings: list = field(default_factory=list)

    @staticmethod
    def new(c: Container, detached: Detached, shared: dict) -> "Instance":
        """Empty rings for every channel; an extern channel's ring is the one in `shared` under its name."""
        rings = [deque() for _ in c.channels]
        for name, _, chan in c.externs:
            rings[chan] = shared.setdefault(c.names[name], rings[chan])
        return Instance(c, detached, rings)

    def host_put(self, chan: int, value: np.ndarray) -> None:
        """The host enqueues one cell (ValidationError when the channel is full)."""
        self._check(chan)
        if len(self.rings[chan]) >= self.container.channels[chan].capacity:
            raise ValidationError(f"host_put: channel {chan} is full (capacity "
                                  f"{self.container.channels[chan].capacity}). Fix: take a cell first")
        self.rings[chan].append(self._cell(chan, value))

    def host_take(self, chan: int) -> np.ndarray | None:
        """The oldest cell, consumed; None when the channel is empty (Pie's WouldBlock)."""
        self._check(chan)
        return self.rings[chan].popleft() if self.rings[chan] else None

    def _check(self, chan: int) -> None:
        if not 0 <= chan < len(self.rings):
            raise ValidationError(f"channel {chan} does not exist (the container declares {len(self.rings)}). "
                                  "Fix: use a declared channel index")

    def _cell(self, chan: int, value) -> np.ndarray:
        ch = self.container.channels[chan]
        want = {"f32": np.float32, "i32": np.int32, "u32": np.uint32, "bool": np.bool_, "act": np.float32}[ch.dtype]
        arr = np.asarray(value)
        if arr.size != int(np.prod(ch.shape, dtype=np.int64)):
            raise ValidationError(f"channel {chan} holds {ch.dtype}{list(ch.shape)} cells, got {arr.size} values. "
                                  "Fix: pass one whole cell")
        return arr.astype(want).reshape(ch.shape)

    def missed(self) -> tuple | None:
        """The first (channel, phase tag) in readiness order that is not ready, or None."""
        for chan, phase, need in readiness(self.container):
            ring, cap = self.rings[chan], self.container.channels[chan].capacity
            if (need == "NeedsFull" and not ring) or (need == "NeedsEmpty" and len(ring) >= cap):
                return chan, phase
        return None

    def step(self, inputs: dict, backend) -> Step:
        """Fire one pass with `inputs` (intrinsic name -> flat array) on `backend` (a name, or a runner)."""
        miss = self.missed()
        if miss is not None:
            return Step(False, miss)
        d, args = self.detached, []
        for src in d.sources:
            if src[0] == "intrinsic":
                if inputs.get(src[1]) is None:
                    return Step(False, None, f"MissingIntrinsic({src[1]})")
                args.append(np.asarray(inputs[src[1]]).reshape(src[2]))
            else:
                ring = self.rings[src[1]]
                seq = src[2] if src[0] == "take" else 0
                if seq >= len(ring):
                    return Step(False, (src[1], STAGES.index("epilogue")))
                args.append(ring[seq])
        if not d.program.outputs:
            outs = []
        elif callable(backend):  # a runner of its own, e.g. a browser's WebGPU: (program, args) -> outputs
            outs = backend(d.program, args)
        else:
            outs = d.program.run(*args, backend=backend)
        outs = [outs] if isinstance(outs, np.ndarray) else list(outs)
        for src in d.sources:
            if src[0] == "take" and src[2] == 0:
                takes = sum(1 for s in d.sources if s[0] == "take" and s[1] == src[1])
                for _ in range(takes):
                    self.rings[src[1]].popleft()
        for p in self.container.ports:
            if p.channel is not None and p.port in CONSUMING_PORTS and self.rings[p.channel]:
                self.rings[p.channel].popleft()
        for slot, value in zip(d.sinks, outs):
            self.rings[slot].append(self._cell(slot, value))
        return Step(True)
