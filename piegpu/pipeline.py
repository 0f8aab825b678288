"""The pipeline: encodes passes (forward + epilogue + commits) and keeps a window of them in flight.

Every pass is ONE command encoder and ONE submit: the forward dispatches, the
epilogue's dispatches, the channel/KV commits, and copies of the cells the host may
take into pooled mappable buffers. run_ahead submits up to WINDOW passes before it
waits for anything; the host only ever waits on a mapped cell it asked for.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .channel import Channel
from .errors import ChannelError, PieGpuError, ValidationError
from .eta import intrinsics as _intrinsics
from .eta.tracer import trace
from .forward import ForwardPass

WINDOW = 4  # passes in flight during run_ahead


@dataclass
class PipelineStats:
    """Counters proving what a pipeline did (tests and benchmarks read them)."""

    passes: int = 0
    submits: int = 0
    dispatches: int = 0
    staged_bytes: int = 0  # bytes copied to host-mappable buffers
    waits: int = 0  # times the host waited on the device
    compiles: int = 0


@dataclass
class _Prepared:
    fwd: ForwardPass
    program: object
    compiled: object
    channels: list  # slot -> Channel
    counts: dict  # slot -> (takes, puts)
    T: int
    readout: tuple
    ws: object
    binds: dict = field(default_factory=dict)


@dataclass
class _Record:
    pass_id: int
    snapshot: dict  # Channel -> snapshot, plus "ws" -> length
    fence: object


class Pipeline:
    """Runs ForwardPasses of one model: submit (depth 1) and run_ahead (a window in flight)."""

    def __init__(self, model, target: str | None = None, window: int = WINDOW):
        self.model = model
        self.gpu = model.gpu
        self.device = self.gpu.device
        self.target = target or os.environ.get("PIEGPU_EPILOGUE_TARGET", "wgsl")
        if self.target not in ("wgsl", "spirv"):
            raise ValidationError(f"epilogue target {self.target!r} cannot run through wgpu. Fix: 'wgsl' or 'spirv'")
        if window < 1:
            raise ValidationError("window must be >= 1")
        self.window = window
        self.stats = PipelineStats()
        self._prepared: dict = {}
        self._arenas: dict = {}
        self._fences: list = []
        self._pass_id = 0

    # ---- preparation ------------------------------------------------------------------------
    def prepare(self, fwd: ForwardPass) -> _Prepared:
        """Trace and compile the pass's epilogue (once per ForwardPass object)."""
        pp = self._prepared.get(id(fwd))
        if pp is not None and pp.fwd is fwd:
            return pp
        from .gpu.compiled import compile_program
        fwd.validate()
        T = fwd.token_count()
        first, rows = fwd.resolved_readout()
        ctx = _intrinsics.IntrinsicContext.for_logits(self.gpu.config.vocab_size, rows)
        fn = fwd.epilogue_fn or (lambda: None)
        prog = trace(fn, context=ctx, prelude=lambda: fwd.tokens.take())
        from .eta.tracer import Builder  # noqa: F401  (channels are bound to slots in trace order)
        channels = self._slots_of(prog, fwd, fn, ctx)
        compiled = compile_program(prog, self.target, self.gpu.dev)
        self.stats.compiles += 1
        counts = {s: tuple(c) for s, c in compiled.channel_counts.items()}
        keep = fwd.geometry.channel if fwd.geometry.kind == "accepting" else None
        if keep is not None:
            if keep not in channels:
                raise ValidationError("an accepting pass's epilogue must call geometry.keep(n) once per pass")
            slot = channels.index(keep)
            takes, puts = counts[slot]
            if puts != 1:
                raise ValidationError("geometry.keep(n) must be called exactly once per pass")
            counts[slot] = (takes + 1, puts)  # the advance kernel takes the count after the epilogue
            keep._device_consumer = True
        for slot, (takes, _) in counts.items():
            if takes:
                channels[slot]._device_consumer = True
            channels[slot]._used = True
            channels[slot].ensure(self.device)
        pp = _Prepared(fwd, prog, compiled, channels, counts, T, (first, rows), fwd.working_sets[0])
        self._prepared[id(fwd)] = pp
        return pp

    @staticmethod
    def _slots_of(prog, fwd, fn, ctx) -> list:
        # Re-trace to recover the channel objects behind each slot (programs hold only types).
        from .eta.tracer import Builder
        b = Builder(ctx)
        with b.active():
            fwd.tokens.take()
            fn()
        return list(b.channels)

    def _arena(self, pp: _Prepared):
        import wgpu
        key = id(pp.compiled)
        buf = self._arenas.get(key)
        if buf is None:
            buf = self._arenas[key] = self.device.create_buffer(size=max(16, pp.compiled.arena_words * 4),
                                                                usage=wgpu.BufferUsage.STORAGE, label="epilogue-arena")
        return buf

    def _bind_group(self, pp: _Prepared, logits):
        bg = pp.binds.get(id(logits))
        if bg is None:
            entries = []
            for i, b in enumerate(pp.compiled.bindings):
                if b["kind"] == "arena":
                    buf = self._arena(pp)
                elif b["kind"] == "intrinsic":
                    buf = logits
                else:
                    buf = pp.channels[b["info"]["slot"]].ensure(self.device)
                entries.append({"binding": i, "resource": {"buffer": buf, "offset": 0, "size": buf.size}})
            bg = pp.binds[id(logits)] = self.device.create_bind_group(layout=pp.compiled.layout, entries=entries)
        return bg

    # ---- one pass ----------------------------------------------------------------------------
    def _blocked(self, pp: _Prepared) -> str | None:
        """Why the pass cannot be submitted now (None if it can)."""
        for slot, (takes, puts) in pp.counts.items():
            ch = pp.channels[slot]
            if ch._poison is not None:
                raise ChannelError(f"Channel{ch._label()} is poisoned by a failed pass: {ch._poison}") from ch._poison
            own = 1 if ch is pp.fwd.geometry.channel else 0  # the keep count is put and taken in the same pass
            if ch.count + own < takes:
                return f"Channel{ch._label()} holds {ch.count} cells but the pass takes {takes}"
            if ch.count - takes + puts > ch._capacity:
                return f"Channel{ch._label()} would overflow its capacity {ch._capacity}"
        return None

    def _fence(self):
        import wgpu
        if self._fences:
            return self._fences.pop()
        return self.device.create_buffer(size=16, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST,
                                         label="fence")

    def _encode(self, pp: _Prepared) -> _Record:
        ws = pp.ws
        if ws.length + pp.T > ws.max_tokens:
            raise ValidationError(f"the working set is full: {ws.length} + {pp.T} tokens exceed its {ws.max_tokens} "
                                  "positions. Fix: model.working_set(max_tokens=...) with more room")
        snap = {ch: ch.snapshot() for ch in pp.channels}
        snap["ws"] = ws.length
        self._pass_id += 1
        pid = self._pass_id
        enc = self.device.create_command_encoder()
        cpass = enc.begin_compute_pass()
        tokens = pp.fwd.tokens.ensure(self.device)
        logits, n = self.gpu.encode(cpass, ws, pp.T, tokens, pp.readout)
        n += pp.compiled.encode(cpass, self._bind_group(pp, logits))
        keep = pp.fwd.geometry.channel
        n += self.gpu.encode_advance(cpass, ws, pp.T, keep._buffer if keep is not None else None)
        cpass.end()
        # Host mirror: consume taken cells, then register the cells this pass puts.
        for slot, (takes, puts) in pp.counts.items():
            ch = pp.channels[slot]
            for seq in range(puts):
                idx = ch._tail + seq
                if ch._device_consumer:
                    ch._cells[idx] = _cell("device", pid)
                else:
                    st = ch.staging_buffer()
                    enc.copy_buffer_to_buffer(ch._buffer, ch.cell_offset(idx), st, 0, ch.cell_words * 4)
                    self.stats.staged_bytes += ch.cell_words * 4
                    ch._cells[idx] = _cell("staged", pid, st)
            ch._tail += puts
            for _ in range(takes):
                ch._cells.pop(ch._head, None)
                ch._head += 1
        fence = self._fence()
        enc.copy_buffer_to_buffer(ws.state, 0, fence, 0, 16)
        try:
            self.device.queue.submit([enc.finish()])
        except Exception as e:
            for ch in pp.channels:
                ch.poison(e)
            raise
        ws.length += pp.T
        self.stats.passes += 1
        self.stats.submits += 1
        self.stats.dispatches += n
        return _Record(pid, snap, fence)

    async def _wait(self, rec: _Record) -> None:
        """Until the pass of `rec` has finished on the device."""
        self.stats.waits += 1
        await rec.fence.map_async("READ_NOSYNC")
        rec.fence.unmap()
        self._fences.append(rec.fence)

    # ---- public API ----------------------------------------------------------------------------
    async def submit(self, fwd: ForwardPass) -> None:
        """Run one pass and wait for it (the depth-1 loop, e.g. for host-updated masks)."""
        pp = self.prepare(fwd)
        why = self._blocked(pp)
        if why is not None:
            raise ChannelError(f"cannot submit the pass: {why}. Fix: put or take cells first")
        await self._wait(self._encode(pp))

    async def run_ahead(self, fwd: ForwardPass, max_tokens: int, on_token) -> int:
        """Keep up to `window` passes in flight; call on_token once per pass; stop when it returns False.

        Returns how many times on_token ran. A pass is accepted once on_token has run for
        it (even if on_token raised). Passes still in flight after a stop or an exception
        finish, then every channel and the working set are rewound to the state after
        the last accepted pass, so a later run continues from exactly there.
        """
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
            raise ValidationError(f"run_ahead: max_tokens must be an int, got {max_tokens!r}")
        if max_tokens <= 0:
            return 0
        pp = self.prepare(fwd)
        inflight: deque = deque()  # records of passes whose output on_token has not accepted yet
        calls = submitted = 0
        try:
            while True:
                while submitted < max_tokens and len(inflight) < self.window and self._blocked(pp) is None:
                    inflight.append(self._encode(pp))
                    submitted += 1
                if not inflight:
                    if submitted < max_tokens:
                        raise ChannelError(f"run_ahead cannot submit pass {submitted + 1}: {self._blocked(pp)}, "
                                           "and no pass in flight can change that. Fix: on_token must take the cells "
                                           "the passes put (or put the cells they take)")
                    break
                try:
                    keep = await on_token()
                finally:
                    # on_token ran (or raised) for the oldest pass in flight: that pass is accepted,
                    # and whatever of its output the host did not take stays queued.
                    calls += 1
                    self._fences.append(inflight.popleft().fence)
                if keep is False:
                    break
        finally:
            await self._rewind(pp, inflight)
        return calls

    async def _rewind(self, pp: _Prepared, discarded: deque) -> None:
        """Let the discarded passes finish, then undo their effects on channels and the KV length."""
        if not discarded:
            return
        await self._wait(discarded[-1])  # passes complete in submission order
        for rec in list(discarded)[:-1]:
            self._fences.append(rec.fence)
        snap = discarded[0].snapshot
        ids = {rec.pass_id for rec in discarded}
        for key, value in snap.items():
            if key == "ws":
                pp.ws.set_length(value)
            else:
                key.rewind(value, ids)


def _cell(kind: str, pid: int, staging=None):
    from .channel import _Cell
    return _Cell(kind, staging=staging, pass_id=pid)
