"""The pipeline: encodes passes (forward + epilogue + commits) and keeps a window of them in flight.

A pass is one compute pass -- the forward dispatches, the epilogue's dispatches, the KV
advance -- followed by copies of the cells the host may take into pooled mappable buffers.
run_ahead keeps up to a window of passes in flight and submits them in groups (one command
encoder and one submit per group: runtime/submission.py); the host only ever waits on a
mapped cell it asked for.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import weakref
from contextlib import contextmanager
from collections import deque

from ..errors import ChannelError, CompileError, ValidationError
from ..eta import intrinsics as _intrinsics
from ..eta.tracer import trace
from .cells import reusable
from .compiled import compile_program
from .device import MODEL_CLOSED, device_lock, lost_device_error
from . import submission, waits
from .forward import ForwardPass, readout_rows_of, sequences_of
from .interrupts import deferred_interrupts
from .rebind import park, rebind
from .records import PipelineStats, PreparedPass, SubmittedPass, UnsettledRun
from .window import check_group, check_window, default_group, default_window

_PASS_IDS = itertools.count(1)  # process-wide, so passes of different pipelines compare by age


class Pipeline:
    """Runs ForwardPasses of one model: submit (depth 1) and run_ahead (a window in flight).

    `model` is anything with a `gpu` attribute that is a records.DeviceModel (a loaded Model).
    """

    def __init__(self, model, target: str | None = None, window: int | None = None,
                 record_ahead: bool | None = None, group: int | None = None):
        self.model = model
        self.gpu = model.gpu
        self.device = self.gpu.device
        self.target = target or os.environ.get("PIEGPU_EPILOGUE_TARGET", "wgsl")
        from ..targets import WGPU_TARGETS
        if self.target not in WGPU_TARGETS:
            raise ValidationError(f"epilogue target {self.target!r} cannot run through wgpu. "
                                  f"Fix: use one of {list(WGPU_TARGETS)}")
        self.window = default_window(model.gpu.dev) if window is None else check_window(window, "Pipeline")
        self.group = None if group is None else check_group(group, "Pipeline")  # None: default_group(window)
        # Recording the next pass while the current one runs hides ~1 ms of host encoding per pass on
        # a GPU; on lavapipe the host shares the cores with the "device" and it measured 4 ms/token
        # slower (44.2 vs 40.2 ms, 8 interleaved runs): off on CPU adapters.
        self.record_ahead = (not model.gpu.dev.is_cpu) if record_ahead is None else bool(record_ahead)
        self.stats = PipelineStats()
        self._prepared = weakref.WeakKeyDictionary()  # ForwardPass -> PreparedPass, dropped with the pass
        self._fences: list = []
        self._running: list = []  # UnsettledRun of each run_ahead that has not rewound yet
        self._lock = device_lock(self.device)

    @contextmanager
    def _device_work(self):
        """Hold the device lock (see device_lock); refuse work for a model that was closed."""
        with self._lock:
            if getattr(self.gpu, "closed", False):
                raise ValidationError(MODEL_CLOSED)
            yield

    # ---- preparation ------------------------------------------------------------------------
    def prepare(self, fwd: ForwardPass) -> PreparedPass:
        """Trace and compile the pass's epilogue (once per ForwardPass object)."""
        with self._device_work():
            return self._prepare(fwd)

    def _prepare(self, fwd: ForwardPass) -> PreparedPass:
        pp = self._prepared.get(fwd)
        if pp is not None:
            return pp
        fwd.validate()
        T = fwd.token_count()
        seqs = fwd.sequences()
        readout = fwd.readout_of(seqs)
        rows = sum(r for _, r in readout)
        ctx = _intrinsics.IntrinsicContext.for_pass(self.gpu.config.vocab_size, self.gpu.config.hidden_size, rows)
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
        pp = PreparedPass(prog, compiled, channels, counts, T, readout,
                          tuple(weakref.ref(ws) for ws in fwd.working_sets), seqs, fwd.readout_rows, fwd.indptr,
                          fwd.tokens, keep)
        self._prepared[fwd] = pp
        return pp

    def _arena(self, pp: PreparedPass):
        import wgpu
        if pp.arena is None:  # owned by the prepared pass, so it is freed with it
            pp.arena = self.device.create_buffer(size=max(16, pp.compiled.arena_words * 4),
                                                 usage=wgpu.BufferUsage.STORAGE, label="epilogue-arena")
        return pp.arena

    def _bind_group(self, pp: PreparedPass, logits):
        bg = pp.binds.get(id(logits))
        if bg is None:
            entries = []
            for i, b in enumerate(pp.compiled.bindings):
                if b["kind"] == "arena":
                    buf = self._arena(pp)
                elif b["kind"] == "intrinsic":  # the logits, or the pass's other readout input ("hidden")
                    buf = self.gpu.readout_buffer(b["info"]["name"], logits)
                else:
                    buf = pp.channels[b["info"]["slot"]].ensure(self.device)
                entries.append({"binding": i, "resource": {"buffer": buf, "offset": 0, "size": buf.size}})
            bg = pp.binds[id(logits)] = self.device.create_bind_group(layout=pp.compiled.layout, entries=entries)
        return bg

    def rebind(self, fwd: ForwardPass, working_sets, live: bool = False) -> None:
        """Point a pass over several sequences at as many other working sets, keeping its plans (runtime/rebind.py;
        `live`: with passes of it in flight, which keep the old ones)."""
        with self._device_work():
            rebind(self, fwd, working_sets, live)

    def park(self, fwd: ForwardPass) -> None:
        """Let a pass drop its working sets (their KV pages) until rebind gives it others."""
        with self._device_work():
            park(self, fwd)

    # ---- one pass ----------------------------------------------------------------------------
    def _blocked(self, pp: PreparedPass) -> str | None:
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
        while self._fences:  # (called under the device lock: no other thread pops meanwhile)
            fence = self._fences.pop()
            if reusable(fence):
                return fence
        return self.device.create_buffer(size=16, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST,
                                         label="fence")

    def _reuse_fence(self, rec: SubmittedPass) -> None:
        """Pool the fence buffer of a finished pass (passes waited for by submission index have none)."""
        if rec.fence is not None:
            self._fences.append(rec.fence)

    def _record_ahead(self, pp: PreparedPass) -> None:
        """Record the next pass now, while the device is busy, so its submit costs no encoding."""
        if self.record_ahead and pp.recorded is None and all(ref() is not None for ref in pp.wss):
            with self._device_work():
                pp.recorded = submission.record(self, pp)

    def _encode(self, pp: PreparedPass, k: int = 1, more=None) -> list:
        """Encode and submit up to k passes in one submit (runtime/submission.py; callers hold
        deferred_interrupts()); their SubmittedPass records.

        Under the device lock: the passes' records, their submit and the host mirror of their
        channels and working sets change together with respect to other threads too.
        """
        with self._device_work():
            return submission.encode_group(self, pp, k, more or (lambda: True), _PASS_IDS)

    def _refresh_sequences(self, pp: PreparedPass) -> None:
        """Take up new indptr offsets the host put since the last pass (same sequences and token count)."""
        if len(pp.wss) == 1:
            return
        value = pp.indptr.host_value()
        if value is None:
            raise ValidationError(f"this pass over {len(pp.wss)} sequences needs its indptr offsets on the host. "
                                  "Fix: keep a host-put cell in the indptr channel")
        seqs = sequences_of(value, pp.T, len(pp.wss))
        if seqs != pp.seqs:
            pp.seqs, pp.readout = seqs, readout_rows_of(seqs, pp.readout_spec)
            pp.recorded = None  # recorded ahead for the old offsets

    async def _wait(self, rec: SubmittedPass) -> None:
        """Until the pass of `rec` has finished on the device."""
        self.stats.waits += 1
        try:
            await rec.wait(self.device)  # if cancelled, a fence's map request stays on the record for _settle
        except Exception as e:
            raise lost_device_error(e, "waiting for a pass") or e
        self._reuse_fence(rec)

    def _wait_sync(self, rec: SubmittedPass) -> None:
        """_wait without an event loop (settling after an interrupted run_ahead)."""
        self.stats.waits += 1
        try:
            rec.wait_sync(self.device)
        except Exception as e:
            raise lost_device_error(e, "waiting for a pass") or e
        self._reuse_fence(rec)

    # ---- public API ----------------------------------------------------------------------------
    async def submit(self, fwd: ForwardPass) -> None:
        """Run one pass and wait for it (the depth-1 loop, e.g. for host-updated masks)."""
        self._settle()
        pp = self.prepare(fwd)
        why = self._blocked(pp)
        if why is not None:
            raise ChannelError(f"cannot submit the pass: {why}. Fix: put or take cells first")
        with deferred_interrupts():  # the host mirror and the submitted pass change together
            rec = self._encode(pp)[0]
        if pp.submits > 1:  # a depth-1 loop: record the next pass while this one runs
            self._record_ahead(pp)
        await self._wait(rec)

    async def run_ahead(self, fwd: ForwardPass, max_tokens: int, on_token, window: int | None = None,
                        drain=None, group: int | None = None) -> int:
        """Keep up to `window` passes in flight; call on_token once per pass; stop when it returns False.

        `window` and `group` (passes a submit, at most the window: runtime/submission.py) override
        the pipeline's for this run. `drain`, if given, is asked before each
        submit: once it returns True no further pass is submitted, and on_token still runs
        for every pass in flight (their outputs are accepted, not discarded). A pass that does not fit
        (its working set is full, the KV pool has no page for it) ends the run the same way: the passes
        in flight are accepted, then its ValidationError is raised.

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
        window = self.window if window is None else check_window(window, "run_ahead")
        group = check_group(group, "run_ahead") if group is not None else self.group or default_group(window)
        group = min(group, window)
        more = None if drain is None else (lambda: not drain())  # (asked within a group: runtime/submission.py)
        pp = self.prepare(fwd)
        inflight: deque = deque()  # records of passes whose output on_token has not accepted yet
        token = UnsettledRun(pp, inflight, asyncio.get_running_loop(), asyncio.current_task())
        self._running.append(token)
        calls = submitted = 0
        closing = False
        full = None  # why the next pass does not fit (a full working set, no KV pages), once passes are in flight
        try:
            while True:
                draining = (drain is not None and drain()) or full is not None
                while (not draining and submitted < max_tokens and len(inflight) < window
                       and self._blocked(pp) is None):
                    k = min(group, max_tokens - submitted)
                    if inflight and window - len(inflight) < k:
                        break  # wait for room for a whole group
                    try:
                        with deferred_interrupts():  # a Ctrl-C waits until the passes are submitted and tracked
                            recs = self._encode(pp, k, more)
                    except ValidationError as e:
                        if not inflight:
                            raise
                        full = e  # raised once the passes in flight are accepted: nothing they computed is lost
                        break
                    inflight.extend(recs)
                    submitted += len(recs)
                    draining = drain is not None and drain()
                if not inflight:
                    if full is not None:
                        raise full
                    if submitted < max_tokens and not draining:
                        raise ChannelError(f"run_ahead cannot submit pass {submitted + 1}: {self._blocked(pp)}, "
                                           "and no pass in flight can change that. Fix: on_token must take the cells "
                                           "the passes put (or put the cells they take)")
                    break
                if submitted < max_tokens and not draining:  # more passes will follow: record the next one now
                    self._record_ahead(pp)
                try:
                    keep = await on_token()
                except BaseException:
                    calls += 1
                    if not self._unseen(pp, inflight[0]):
                        self._reuse_fence(inflight.popleft())
                    raise
                # on_token ran for the oldest pass in flight: that pass is accepted, and
                # whatever of its output the host did not take stays queued.
                calls += 1
                self._reuse_fence(inflight.popleft())
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
    def _unseen(pp: PreparedPass, rec: SubmittedPass) -> bool:
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

    def _settle_one(self, token: UnsettledRun) -> None:
        with self._lock:
            if token in self._running:  # not settled by another thread meanwhile
                self._settle_locked(token)

    def _settle_locked(self, token: UnsettledRun) -> None:
        self._running.remove(token)
        if not token.inflight:
            return
        last = token.inflight[-1].pass_id
        pp = token.pp
        wss = [ws for ws, _ in token.inflight[0].snapshot["ws"]]
        if any(o.last_pass > last for o in [*pp.channels, *wss]):
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

    async def _rewind(self, pp: PreparedPass, discarded: deque) -> None:
        """Let the discarded passes finish, then undo their effects on channels and the KV length."""
        if not discarded:
            return
        await self._wait(discarded[-1])  # passes complete in submission order
        self._undo(pp, discarded)

    def _undo(self, pp: PreparedPass, discarded: deque) -> None:
        if getattr(self.gpu, "closed", False):  # model.close() released the working sets: nothing to rewind
            discarded.clear()
            return
        with self._lock, deferred_interrupts():  # a half-done rewind would leave channels and the KV length disagreeing
            self._undo_passes(pp, discarded)

    def _undo_passes(self, pp: PreparedPass, discarded: deque) -> None:
        for rec in list(discarded)[:-1]:
            if rec.mapping is None:
                self._reuse_fence(rec)
        snap = discarded[0].snapshot
        ids = {rec.pass_id for rec in discarded}
        for key, value in snap.items():
            if key == "ws":
                for ws, length in value:
                    ws.set_length(length)
            else:
                key.rewind(value, ids)
        discarded.clear()


