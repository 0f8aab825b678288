"""What the pipeline keeps about passes: prepared (traced + compiled) passes, submitted passes, the
run_ahead calls still to rewind, its counters, and what it needs of a model on the device."""

from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from . import waits
from .channel import Channel


@dataclass
class PipelineStats:
    """Counters proving what a pipeline did (tests and benchmarks read them)."""

    passes: int = 0
    submits: int = 0
    dispatches: int = 0
    staged_bytes: int = 0  # bytes copied to host-mappable buffers
    waits: int = 0  # times the host waited on the device
    recorded_ahead: int = 0  # passes whose device work was recorded while earlier passes ran
    compiles: int = 0


@dataclass
class PreparedPass:
    """A traced and compiled pass. Holds no strong reference to its ForwardPass or working set: the
    pipeline keys these weakly by ForwardPass, and a strong one would keep every pass (and its KV) alive."""

    program: object
    compiled: object
    channels: list  # slot -> Channel
    counts: dict  # slot -> (takes, puts)
    T: int
    readout: list  # [(first row, rows)] per sequence, token rows of the pass
    wss: tuple  # weakref.ref to each sequence's working set, in pass order
    seqs: list  # [(first token, tokens)] per sequence (from indptr when prepared)
    readout_spec: tuple | None  # fwd.readout(count, first), for new offsets
    indptr: Channel
    tokens: Channel
    keep: Channel | None  # the accepting geometry's kept-count channel
    binds: dict = field(default_factory=dict)
    plans: dict = field(default_factory=dict)  # offsets -> (logits, plan) of a pass over several sequences
    arena: object = None
    recorded: tuple | None = None  # (command buffer, dispatches) of the next pass, recorded ahead
    submits: int = 0

    @functools.cached_property
    def hidden(self) -> bool:
        """Whether the epilogue reads the readout rows' final hidden state (then the forward pass stores them)."""
        return any(b["kind"] == "intrinsic" and b["info"]["name"] == "hidden" for b in self.compiled.bindings)


@dataclass
class SubmittedPass:
    pass_id: int
    snapshot: dict  # Channel -> snapshot, plus "ws" -> [(working set, length), ...]
    fence: object  # a mappable buffer copied after the pass (None where it is waited for by its index)
    index: int | None = None  # its submission index (runtime/waits.py), where wgpu-native gives one
    mapping: object = None  # the fence's map request while a wait is in progress

    async def wait(self, device) -> None:
        """Until the pass has finished: by its submission index, else by mapping its fence."""
        if self.index is not None:
            await waits.wait_submission(device, self.index)
            return
        if self.mapping is None:
            self.mapping = self.fence.map_async("READ_NOSYNC")
        await self.mapping  # if cancelled, the request stays on the record
        self.fence.unmap()
        self.mapping = None

    def wait_sync(self, device) -> None:
        """wait() without an event loop."""
        if self.index is not None:
            waits.wait_submission_sync(device, self.index)
            return
        if self.mapping is None:
            self.fence.map_sync("READ_NOSYNC")
        else:
            self.mapping.sync_wait()
        self.fence.unmap()
        self.mapping = None


@dataclass(eq=False)
class UnsettledRun:
    """The passes a run_ahead still has in flight, until it rewinds them (see Pipeline._settle)."""

    pp: PreparedPass
    inflight: deque
    loop: object  # the event loop running it: once closed, nobody else will rewind these passes
    task: object

    @property
    def abandoned(self) -> bool:
        """True when the run_ahead can no longer run its own cleanup."""
        return self.loop.is_closed() or (self.task is not None and self.task.done())


class DeviceModel(Protocol):
    """What the pipeline needs of a model on the device (piegpu.model.gpu_model.GpuModel is one).

    The runtime sits below the model: it drives the forward pass through these calls
    and never imports model code.
    """

    dev: object  # runtime.device.Device
    device: object  # its wgpu device
    config: object  # .vocab_size, .hidden_size

    def encode(self, cpass, ws, T: int, tokens, readout: tuple, hidden: bool = False) -> tuple:
        """Record the forward pass of T tokens (ids in channel buffer `tokens`); (logits buffer, dispatches).
        `hidden`: also store the readout rows' final-normed hidden states (readout_buffer("hidden", logits))."""

    def readout_buffer(self, name: str, logits):
        """The buffer an epilogue binds for intrinsic `name` of the passes whose logits land in `logits`."""

    def encode_advance(self, cpass, ws, T: int, keep=None) -> int:
        """Record the KV length advance after a pass; returns the dispatch count."""

    def batch_plan(self, seqs: list, tokens, readout: list, hidden: bool = False):
        """The plan of a pass over several sequences: .logits (buffer) and .plan (dispatches) at least."""

    def reseat(self, plan, wss: list):
        """`plan` (of batch_plan) moved to the working sets `wss` (in pass order), or None: build it again."""
