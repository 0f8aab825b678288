"""The pipeline: encodes passes (forward + epilogue + commits) and keeps a window of them in flight.

Every pass is ONE command encoder and ONE submit: the forward dispatches, the
epilogue's dispatches, the channel/KV commits, and copies of the cells the host may
take into pooled mappable buffers. run_ahead submits up to WINDOW passes before it
waits for anything; the host only ever waits on a mapped cell it asked for.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from ..errors import ChannelError, CompileError, ValidationError
from ..eta import intrinsics as _intrinsics
from ..eta.tracer import trace
from .cells import reusable
from .channel import CPU_WINDOW, WINDOW, Channel
from .compiled import compile_program
from .device import lost_device_error
from .forward import ForwardPass
from .interrupts import deferred_interrupts
# Recording the next pass's command buffer while the current one runs hides ~1 ms of host
# encoding per pass on a GPU. On lavapipe the host shares the cores with the "device", and
# it measured 4 ms/token slower (44.2 vs 40.2 ms, 8 interleaved runs): off on CPU adapters.
_PASS_IDS = itertools.count(1)  # process-wide, so passes of different pipelines compare by age


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
class _Prepared:
    """A traced and compiled pass. Holds no strong reference to its ForwardPass or working set: the
    pipeline keys these weakly by ForwardPass, and a strong one would keep every pass (and its KV) alive."""

    program: object
    compiled: object
    channels: list  # slot -> Channel
    counts: dict  # slot -> (takes, puts)
    T: int
    readout: tuple
    ws: object  # weakref.ref to the working set
    tokens: Channel
    keep: Channel | None  # the accepting geometry's kept-count channel
    binds: dict = field(default_factory=dict)
    arena: object = None
    recorded: tuple | None = None  # (command buffer, dispatches) of the next pass, recorded ahead
    submits: int = 0


@dataclass
class _Record:
    pass_id: int
    snapshot: dict  # Channel -> snapshot, plus "ws" -> (working set, length)
    fence: object
    mapping: object = None  # the fence's map request while a wait is in progress


@dataclass(eq=False)
class _Unsettled:
    """The passes a run_ahead still has in flight, until it rewinds them (see Pipeline._settle)."""

    pp: _Prepared
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
    config: object  # .vocab_size

    def encode(self, cpass, ws, T: int, tokens, readout: tuple) -> tuple:
        """Record the forward pass of T tokens (ids in channel buffer `tokens`); (logits buffer, dispatches)."""

    def encode_advance(self, cpass, ws, T: int, keep=None) -> int:
        """Record the KV length advance after a pass; returns the dispatch count."""


class Pipeline:
    """Runs ForwardPasses of one model: submit (depth 1) and run_ahead (a window in flight).

    `model` is anything with a `gpu` attribute that is a DeviceModel (a loaded Model).
    """

    def __init__(self, model, target: str | None = None, window: int | None = None,
                 record_ahead: bool | None = None):
        self.model = model
        self.gpu = model.gpu
        self.device = self.gpu.device
        self.target = target or os.environ.get("PIEGPU_EPILOGUE_TARGET", "wgsl")
        from ..targets import WGPU_TARGETS
        if self.target not in WGPU_TARGETS:
            raise ValidationError(f"epilogue target {self.target!r} cannot run through wgpu. "
                                  f"Fix: use one of {list(WGPU_TARGETS)}")
        if window is None:
            window = CPU_WINDOW if model.gpu.dev.is_cpu else WINDOW
        if window < 1:
            raise ValidationError(f"window={window!r} must be >= 1. Fix: pass window=WINDOW (4) or more")
        self.window = window
        self.record_ahead = (not model.gpu.dev.is_cpu) if record_ahead is None else bool(record_ahead)
        self.stats = PipelineStats()
        self._prepared = weakref.WeakKeyDictionary()  # ForwardPass -> _Prepared, dropped with the pass
        self._fences: list = []
        self._running: list = []  # _Unsettled of each run_ahead that has not rewound yet

    # ---- preparation ------------------------------------------------------------------------
    def prepare(self, fwd: ForwardPass) -> _Prepared:
        """Trace and compile the pass's epilogue (once per ForwardPass object)."""
        pp = self._prepared.get(fwd)
        if pp is not None:
            return pp
        fwd.validate()
        T = fwd.token_count()
        first, rows = fwd.resolved_readout()
        ctx = _intrinsics.IntrinsicContext.for_logits(self.gpu.config.vocab_size, rows)
        fn = fwd.epilogue_fn or (lambda: None)
        prog = trace(fn, context=ctx, prelude=lambda: fwd.tokens.take())
        channels = list(prog.channel_objects)  # slot -> Channel, in trace order
        try:
            compiled = compile_program(prog, self.target, self.gpu.dev)
        except CompileError as e:
            name = getattr(fn, "__qualname__", repr(fn))
            raise CompileError(f"the epilogue {name} of this ForwardPass does not compile: {e}") from e
        self.stats.compiles += 1
        counts = {s: tuple(c) for s, c in compiled.channel_counts.items()}
        keep = fwd.geometry.channel if fwd.geometry.kind == "accepting" else None
        if keep is not None:
            if keep not in channels:
                raise ValidationError("an accepting pass's epilogue never calls geometry.keep(n). Fix: call "
                                      "geometry.keep(n) once in the epilogue")
            slot = channels.index(keep)
            takes, puts = counts[slot]
            if puts != 1:
                raise ValidationError(f"geometry.keep(n) is called {puts} times in one epilogue. Fix: call it once")
            counts[slot] = (takes + 1, puts)  # the advance kernel takes the count after the epilogue
        for slot, (takes, _) in counts.items():
            channels[slot].attach(self.device, device_takes=takes > 0)
        pp = _Prepared(prog, compiled, channels, counts, T, (first, rows), weakref.ref(fwd.working_sets[0]),
                       fwd.tokens, keep)
        self._prepared[fwd] = pp
        return pp

    def _arena(self, pp: _Prepared):
        import wgpu
        if pp.arena is None:  # owned by the prepared pass, so it is freed with it
            pp.arena = self.device.create_buffer(size=max(16, pp.compiled.arena_words * 4),
                                                 usage=wgpu.BufferUsage.STORAGE, label="epilogue-arena")
        return pp.arena

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
            own = 1 if ch is pp.keep else 0  # the keep count is put and taken in the same pass
            why = ch.why_blocked(takes, puts, own)
            if why is not None:
                return why
        return None

    def _fence(self):
        import wgpu
        while self._fences:
            fence = self._fences.pop()
            if reusable(fence):
                return fence
        return self.device.create_buffer(size=16, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST,
                                         label="fence")

    def _record(self, pp: _Prepared) -> tuple:
        """The pass's device work (forward, epilogue, KV advance) as (command buffer, dispatches).

        It reads every length and cell position from the device, so it depends on no host
        state and can be recorded while the previous pass runs (see _record_ahead).
        """
        try:
            enc = self.device.create_command_encoder()
            cpass = enc.begin_compute_pass()
            tokens = pp.tokens.ensure(self.device)
            logits, n = self.gpu.encode(cpass, pp.ws(), pp.T, tokens, pp.readout)
            n += pp.compiled.encode(cpass, self._bind_group(pp, logits))
            keep = pp.keep
            n += self.gpu.encode_advance(cpass, pp.ws(), pp.T, keep.buffer if keep is not None else None)
            cpass.end()
            return enc.finish(), n
        except Exception as e:
            raise lost_device_error(e, "encoding a pass") or e

    def _record_ahead(self, pp: _Prepared) -> None:
        """Record the next pass now, while the device is busy, so its submit costs no encoding."""
        if self.record_ahead and pp.recorded is None and pp.ws() is not None:
            pp.recorded = self._record(pp)

    def _encode(self, pp: _Prepared) -> _Record:
        """Encode and submit one pass, updating the host mirror (callers hold deferred_interrupts())."""
        ws = pp.ws()
        if ws.length + pp.T > ws.max_tokens:
            raise ValidationError(f"the working set is full: {ws.length} + {pp.T} tokens exceed its {ws.max_tokens} "
                                  "positions. Fix: model.working_set(max_tokens=...) with more room")
        snap = {ch: ch.snapshot() for ch in pp.channels}
        snap["ws"] = (ws, ws.length)
        pid = next(_PASS_IDS)
        recorded, pp.recorded = pp.recorded, None
        self.stats.recorded_ahead += recorded is not None
        work, n = recorded or self._record(pp)  # on failure nothing was submitted, the host mirror is untouched
        try:
            enc = self.device.create_command_encoder()  # the copies for the host and the fence
        except Exception as e:
            raise lost_device_error(e, "encoding a pass") or e
        # Host mirror: consume taken cells, then register the cells this pass puts.
        for slot, (takes, puts) in pp.counts.items():
            self.stats.staged_bytes += pp.channels[slot].commit(pid, takes, puts, enc)
        fence = self._fence()
        enc.copy_buffer_to_buffer(ws.state, 0, fence, 0, 16)
        try:
            self.device.queue.submit([work, enc.finish()])
        except Exception as e:
            err = lost_device_error(e, "submitting a pass")
            for ch in pp.channels:
                ch.poison(err or e)
            if err is not None:
                raise err from e
            raise
        ws.length += pp.T
        ws.last_pass = pid  # a later rewind must not undo what this pass built on
        for ch in pp.channels:
            ch.submitted(pid)
        pp.submits += 1
        self.stats.passes += 1
        self.stats.submits += 1
        self.stats.dispatches += n
        return _Record(pid, snap, fence)

    async def _wait(self, rec: _Record) -> None:
        """Until the pass of `rec` has finished on the device."""
        self.stats.waits += 1
        if rec.mapping is None:
            rec.mapping = rec.fence.map_async("READ_NOSYNC")
        try:
            await rec.mapping  # if cancelled, the request stays on the record for _settle
        except Exception as e:
            raise lost_device_error(e, "waiting for a pass") or e
        rec.fence.unmap()
        rec.mapping = None
        self._fences.append(rec.fence)

    def _wait_sync(self, rec: _Record) -> None:
        """_wait without an event loop (settling after an interrupted run_ahead)."""
        self.stats.waits += 1
        try:
            if rec.mapping is None:
                rec.fence.map_sync("READ_NOSYNC")
            else:
                rec.mapping.sync_wait()
        except Exception as e:
            raise lost_device_error(e, "waiting for a pass") or e
        rec.fence.unmap()
        rec.mapping = None
        self._fences.append(rec.fence)

    # ---- public API ----------------------------------------------------------------------------
    async def submit(self, fwd: ForwardPass) -> None:
        """Run one pass and wait for it (the depth-1 loop, e.g. for host-updated masks)."""
        self._settle()
        pp = self.prepare(fwd)
        why = self._blocked(pp)
        if why is not None:
            raise ChannelError(f"cannot submit the pass: {why}. Fix: put or take cells first")
        with deferred_interrupts():  # the host mirror and the submitted pass change together
            rec = self._encode(pp)
        if pp.submits > 1:  # a depth-1 loop: record the next pass while this one runs
            self._record_ahead(pp)
        await self._wait(rec)

    async def run_ahead(self, fwd: ForwardPass, max_tokens: int, on_token) -> int:
        """Keep up to `window` passes in flight; call on_token once per pass; stop when it returns False.

        Returns how many times on_token ran. A pass is accepted once on_token has run for
        it, also when on_token raised -- unless it raised (e.g. KeyboardInterrupt or task
        cancellation) before taking any cell that pass put for the host: then the host
        never saw its output and the pass is discarded with the later ones. Passes still
        in flight after a stop or an exception finish, then every channel and the working
        set are rewound to the state after the last accepted pass, so a later run
        continues from exactly there. If this coroutine is abandoned (its event loop
        closed under it), the next submit or run_ahead on this pipeline does that rewind.
        """
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
            raise ValidationError(f"run_ahead: max_tokens must be an int, got {max_tokens!r}. Fix: pass a Python int")
        self._settle()
        if max_tokens <= 0:
            return 0
        pp = self.prepare(fwd)
        inflight: deque = deque()  # records of passes whose output on_token has not accepted yet
        token = _Unsettled(pp, inflight, asyncio.get_running_loop(), asyncio.current_task())
        self._running.append(token)
        calls = submitted = 0
        closing = False
        try:
            while True:
                while submitted < max_tokens and len(inflight) < self.window and self._blocked(pp) is None:
                    with deferred_interrupts():  # a Ctrl-C waits until the pass is submitted and tracked
                        inflight.append(self._encode(pp))
                    submitted += 1
                if not inflight:
                    if submitted < max_tokens:
                        raise ChannelError(f"run_ahead cannot submit pass {submitted + 1}: {self._blocked(pp)}, "
                                           "and no pass in flight can change that. Fix: on_token must take the cells "
                                           "the passes put (or put the cells they take)")
                    break
                if submitted < max_tokens:  # more passes will follow: record the next one while these run
                    self._record_ahead(pp)
                try:
                    keep = await on_token()
                except BaseException:
                    calls += 1
                    if not self._unseen(pp, inflight[0]):
                        self._fences.append(inflight.popleft().fence)
                    raise
                # on_token ran for the oldest pass in flight: that pass is accepted, and
                # whatever of its output the host did not take stays queued.
                calls += 1
                self._fences.append(inflight.popleft().fence)
                if keep is False:
                    break
        except GeneratorExit:  # the coroutine is being closed without its loop: no await is possible
            closing = True
            raise
        finally:
            if token in self._running:
                if closing:
                    self._settle_one(token)
                else:
                    await self._rewind(pp, inflight)
                    self._running.remove(token)
        return calls

    @staticmethod
    def _unseen(pp: _Prepared, rec: _Record) -> bool:
        """True when the pass of `rec` put cells for the host and the host has taken none of them."""
        staged = [ch for slot, (_, puts) in pp.counts.items()
                  if puts and not (ch := pp.channels[slot]).consumed_on_device]
        if not staged:
            return False
        return all(ch.holds_output_of(rec.pass_id) for ch in staged)

    def _settle(self) -> None:
        """Rewind the passes of any run_ahead abandoned before it could rewind them itself (Ctrl-C)."""
        for token in [t for t in self._running if t.abandoned]:
            self._settle_one(token)

    def _settle_one(self, token: _Unsettled) -> None:
        self._running.remove(token)
        if not token.inflight:
            return
        last = token.inflight[-1].pass_id
        pp = token.pp
        ws = token.inflight[0].snapshot["ws"][0]
        if any(o.last_pass > last for o in [*pp.channels, ws]):
            # Later passes already built on these passes' effects; undoing them now would
            # corrupt those. Fail loudly instead of silently.
            err = ChannelError("a run_ahead was abandoned (its event loop stopped) with passes in flight, and later "
                               "passes used its channels before they could be rewound, so their contents are not "
                               "reliable. Fix: cancel or finish run_ahead/generate tasks (close generators) before "
                               "reusing their channels and working set; ch.clear() resets a channel")
            for ch in pp.channels:
                ch.poison(err)
            return
        self._wait_sync(token.inflight[-1])
        self._undo(pp, token.inflight)

    async def _rewind(self, pp: _Prepared, discarded: deque) -> None:
        """Let the discarded passes finish, then undo their effects on channels and the KV length."""
        if not discarded:
            return
        await self._wait(discarded[-1])  # passes complete in submission order
        self._undo(pp, discarded)

    def _undo(self, pp: _Prepared, discarded: deque) -> None:
        with deferred_interrupts():  # a half-done rewind would leave channels and the KV length disagreeing
            self._undo_passes(pp, discarded)

    def _undo_passes(self, pp: _Prepared, discarded: deque) -> None:
        for rec in list(discarded)[:-1]:
            if rec.mapping is None:
                self._fences.append(rec.fence)
        snap = discarded[0].snapshot
        ids = {rec.pass_id for rec in discarded}
        for key, value in snap.items():
            if key == "ws":
                value[0].set_length(value[1])
            else:
                key.rewind(value, ids)
        discarded.clear()


