"""Continuous batching that runs ahead: sequences join and leave; one decode pass samples every row.

A Batch owns its sequences' sessions (working sets). Joining prompts are prefilled
together in multi-sequence passes (chunks of at most prefill_chunk tokens each), then a
decode run starts over every ready sequence (a *composition*): each pass embeds every
row's pending token, the epilogue samples all rows on the device with per-row settings
(samplers/rows.py), and the drawn tokens go to the NEXT pass's input on the device as
well as to the host. So passes do not wait for the host: the host reads the tokens of
`window` passes at once (one host wait per window) while the following passes are
already submitted -- up to 2 * window - 1 passes are on the device. At window 1 the
host reads every pass before it submits the next (the depth-1 loop).

A sequence leaves when it draws a stop token, reaches max_tokens, or its consumer says
stop (a stop string) or cancels it. The host notices at its next read: the row's later
tokens (at most 2 * window - 2 passes of them) are discarded, never delivered, and its
working set is cut back to the tokens it accepted. A waiting sequence that is ready takes
the row there and then, passes still in flight (runtime/batch_run.py: a handover). Else
the run drains -- no further pass is submitted, the passes in flight finish and their
tokens for the other rows are kept -- before the next composition starts, which takes
over a kept decode pass of as many rows where there is one (Pipeline.rebind). A sequence
that joins is prefilled in chunks between reads, in the stream. A row with
a grammar needs the host between its tokens (its mask follows from the token before),
so while one is in the composition the batch runs at window 1.

The runtime does not import the samplers: the Batch is given a sampling object
(piegpu.samplers.rows.RowSampling) with key(params) -> what shapes the epilogue for
these rows, and make(rows, key) -> a row sampler with start(params, draws, row_states),
restart_row(row, params, draws, row_state) (a handover), put_mask(params, row_states), needs_host,
clear(), step(logits), and the optional
outputs logprob(logits, drawn) and top(logits), and carry_width/carried(): per-row state
the device changed (Mirostat's mu), read back with the tokens. A sequence's `row_state`
(host data the row sampler starts from: penalty counts, a grammar constraint, DRY's
history, mu) sees every accepted token through row_state.observe(token, carried).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..dtypes import dtype
from ..errors import ValidationError
from ..eta import intrinsics
from .batch_run import NO_LIMIT, DecodeRun
from .channel import Channel
from .window import check_window, default_window
from .forward import ForwardPass, StateGeometry
from .session import prefill_together

KEPT_PASSES = 8  # decode passes a Batch keeps, by (rows, sampling key), for later compositions of that shape

@dataclass(eq=False)
class Sequence:
    """One sequence of a Batch: its session, settings, the tokens it drew, and where they go."""

    session: object  # runtime Session: its working set holds the prompt as it is prefilled
    prompt: list  # token ids; the last one is embedded by the first decode pass
    params: object  # the row sampler's settings for this sequence (RowParams)
    max_tokens: int
    stop_ids: frozenset
    on_token: Callable | None = None  # (sequence, token) -> False to stop; called as each token arrives
    row_state: object = None  # host data of the row sampler for this row (RowState), or None
    tokens: list = field(default_factory=list)  # drawn, stop token excluded
    logprobs: list = field(default_factory=list)  # log-probability of each drawn token, when the row asked
    top_logprobs: list = field(default_factory=list)  # per drawn token: [(token, logprob), ...], when asked
    prefilled: int = 0  # prompt tokens already in the working set (up to len(prompt) - 1)
    finish_reason: str = ""  # "stop", "length", "cancelled" or "error" (error says why) once finished
    error: str = ""
    cancel_requested: bool = False
    host_waits: int = 0  # host reads that delivered tokens of this sequence
    discarded: int = 0  # tokens computed after it finished (running ahead) and thrown away

    @property
    def done(self) -> bool:
        """True once the sequence has left the batch."""
        return bool(self.finish_reason)

    @property
    def ready(self) -> bool:
        """True when its prompt is prefilled and it decodes in the next pass."""
        return not self.done and self.prefilled >= len(self.prompt) - 1

    def cancel(self) -> None:
        """Leave the batch before the next pass (from any thread); the tokens drawn so far stay."""
        self.cancel_requested = True


@dataclass
class _DecodePass:
    """The decode pass of one composition (its working sets, in row order) and the epilogue's stages."""

    wss: list
    key: object  # the sampling key (which stages the rows need)
    fwd: ForwardPass
    tokens: Channel  # each row's pending token: put by the host when the composition starts, then by each pass
    rows: object  # the row sampler
    token_out: Channel
    lp_out: Channel | None  # each drawn token's log-probability, when a row asked
    top_out: tuple | None  # (log-probabilities [B, K], token ids [B, K]) of each row's K most likely tokens
    carry_out: Channel | None = None  # each row's carried sampler state after the pass (Mirostat's mu)
    fresh: bool = True  # no run has started from it yet (its channels need the host's first cells)
    size: int = 0  # its rows (wss is empty while it is parked)

    @property
    def outputs(self) -> tuple:
        """The channels the host reads."""
        return (self.token_out,) + ((self.lp_out,) if self.lp_out is not None else ()) + (self.top_out or ()) + (
            (self.carry_out,) if self.carry_out is not None else ())


@dataclass
class BatchStats:
    """What a Batch did (benchmarks and tests read it)."""

    decode_passes: int = 0
    prefill_passes: int = 0
    rows: int = 0  # decode rows summed over passes
    compositions: int = 0  # distinct sets of working sets a decode pass ran over
    reseated: int = 0  # of those, the ones that took over a kept pass of as many rows (no new plan)
    handovers: int = 0  # rows a waiting sequence took over inside a run, passes in flight (no drain)
    runs: int = 0  # decode runs (a composition decoding until it changes)
    host_waits: int = 0  # host reads of decoded tokens (one per window of passes)
    discarded: int = 0  # row tokens computed after their row finished, thrown away


class Batch:
    """Sequences decoding together, joining and leaving as they go (see the module docstring)."""

    def __init__(self, model, sampling, max_batch: int = 16, prefill_chunk: int = 128, pipe=None,
                 window: int | None = None):
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValidationError(f"Batch: max_batch must be an int >= 1, got {max_batch!r}")
        if isinstance(prefill_chunk, bool) or not isinstance(prefill_chunk, int) or prefill_chunk < 1:
            raise ValidationError(f"Batch: prefill_chunk must be an int >= 1, got {prefill_chunk!r}")
        self.model = model
        self.sampling = sampling
        self.max_batch = max_batch
        self.prefill_chunk = prefill_chunk
        self.window = default_window(model.gpu.dev) if window is None else check_window(window, "Batch")
        self.pipe = pipe or model.default_pipeline
        self.sequences: list = []  # in the order they joined
        self.stats = BatchStats()
        self.interrupt: Callable[[], bool] | None = None  # asked at each read: True ends the run (to admit others)
        self.on_leave: Callable[[], None] | None = None  # called when sequences left inside a run (rows handed over)
        self._decodes: list = []  # decode passes by (rows, sampling key), most recent last (see _decode_pass_for)

    # ---- joining ----------------------------------------------------------------------------
    def add(self, prompt: list, params, max_tokens: int, stop_ids=(), on_token: Callable | None = None,
            session=None, row_state=None, adapter=None) -> Sequence:
        """Admit a sequence: `prompt` token ids are prefilled in chunks between decode passes, then it decodes.

        `session`: a Session whose working set already holds a prefix of prompt[:-1] (a fork of
        a shared prefix; the rest is prefilled here), or None for a fresh working set with room
        for prompt + max_tokens. `row_state`: the row sampler's host data for this row. `adapter`: the LoRA
        the row runs under ((key, LoraWeights, scale), textgen/adapters.py LoraUse; None: the base model).
        """
        prompt = [int(t) for t in prompt]
        label = f"sequence {len(self.sequences)}"
        if not prompt:
            raise ValidationError(f"{label}: the prompt is empty (no tokens). Fix: pass some text")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValidationError(f"{label}: max_tokens must be an int >= 1, got {max_tokens!r}")
        vocab = self.model.config.vocab_size
        bad = [t for t in prompt if not 0 <= t < vocab]
        if bad:
            raise ValidationError(f"{label}: token ids {bad[:5]} are outside the vocab [0, {vocab}). Fix: encode "
                                  "the prompt with this model's tokenizer")
        limit = self.model.context
        if session is None:
            need = len(prompt) + max_tokens
            if len(prompt) > limit:
                raise ValidationError(f"{label}: the prompt has {len(prompt)} tokens but the context holds {limit}. "
                                      "Fix: a shorter prompt")
            session = self.model.session(self.model.working_set(min(limit, need)))
            prefilled = 0
            session.ws.run_under(adapter)
        else:
            if not session.ws.runs_under(adapter):
                raise ValidationError(f"{label}: the given session runs under adapter {session.ws.adapter[0]!r}, not "
                                      f"{None if adapter is None else adapter[0]!r}. Fix: set the adapter on its "
                                      "working set before its prefill")
            if session.ws.length > len(prompt) - 1:
                raise ValidationError(f"{label}: the given session holds {session.ws.length} tokens, more than the "
                                      f"{len(prompt) - 1} prompt tokens before the last. Fix: set_length() it to "
                                      "the shared prefix")
            prefilled = session.ws.length
        room = session.ws.max_tokens - (len(prompt) - 1)
        if room < 1:
            raise ValidationError(f"{label}: the prompt has {len(prompt)} tokens but its working set holds "
                                  f"{session.ws.max_tokens}. Fix: a shorter prompt or a larger working set")
        seq = Sequence(session, prompt, params, min(max_tokens, room), frozenset(stop_ids), on_token,
                       row_state, prefilled=prefilled)
        self.sequences.append(seq)
        return seq

    # ---- running ----------------------------------------------------------------------------
    @property
    def active(self) -> list:
        """The sequences that have not finished."""
        return [s for s in self.sequences if not s.done]

    def drop_finished(self) -> list:
        """Forget the sequences that have left (their sessions stay usable); returns them."""
        done = [s for s in self.sequences if s.done]
        self.sequences = [s for s in self.sequences if not s.done]
        return done

    async def run(self) -> None:
        """Step until every sequence has finished."""
        while await self.step():
            pass

    async def step(self) -> bool:
        """Prefill joining prompts (one round), then one decode run of the ready rows; False when none are left."""
        for s in self.active:
            if s.cancel_requested:
                s.finish_reason = "cancelled"
        if any(not s.ready for s in self.active):
            await self._prefill_round()
        ready = [s for s in self.active if s.ready][: self.max_batch]
        budget = min((s.max_tokens - len(s.tokens) for s in ready), default=0)
        ready = [s for s in ready if self._reserve_ahead(s, budget)]
        if ready:
            await self._decode_run(ready)
        return bool(self.active)

    async def _prefill_round(self) -> None:
        """One pass over the next chunk of every joining prompt that fits (prefill_chunk tokens each, 4x in all)."""
        parts, budget = [], 4 * self.prefill_chunk
        for s in self.active:
            if s.ready or len(parts) >= self.max_batch:
                continue
            end = min(len(s.prompt) - 1, s.prefilled + self.prefill_chunk, s.prefilled + budget)
            if end <= s.prefilled:
                break
            parts.append((s, end))
            budget -= end - s.prefilled
        parts = [(s, end) for s, end in parts if self._reserve(s, end)]
        await prefill_together(self.pipe, [(s.session, s.prompt[s.prefilled: end]) for s, end in parts])
        for s, end in parts:
            s.prefilled = end
        self.stats.prefill_passes += 1

    @staticmethod
    def _reserve(s: Sequence, length: int, quiet: bool = False) -> bool:
        """KV pages for s up to `length` positions; if the pool cannot give them, s leaves with the error
        (finish_reason "error") and the others go on -- unless `quiet` (the caller tries less). Returns
        whether it has them."""
        try:
            s.session.ws.reserve(length)
            return True
        except ValidationError as e:
            if not quiet:
                s.finish_reason, s.error = "error", str(e)
            return False

    @classmethod
    def _reserve_ahead(cls, s: Sequence, passes: int) -> bool:
        """KV pages for s's next `passes` tokens, or for the next one at least (its run is then cut to what its
        pages hold: batch_run.tenure); False when not even that (s left with the pool's error)."""
        length = s.session.ws.length
        return cls._reserve(s, length + passes, quiet=True) or cls._reserve(s, length + 1)

    def _decode_pass_for(self, wss: list, key) -> _DecodePass:
        """The decode pass of these working sets: the last one of as many rows and the same sampling key,
        its rows handed to these working sets if they changed (Pipeline.rebind: no new trace, compile or
        plan; the rows restart from the host's view), else a new one (the oldest of KEPT_PASSES dropped)."""
        d = next((d for d in self._decodes if d.size == len(wss) and d.key == key), None)
        for other in self._decodes:  # the passes not taken let go of their working sets (and KV pages)
            if other is not d and other.wss:
                self.pipe.park(other.fwd)
                other.wss = []
        if d is not None:
            self._decodes.remove(d)
            self._decodes.append(d)
            if len(d.wss) != len(wss) or not all(a is b for a, b in zip(d.wss, wss)):
                self.pipe.rebind(d.fwd, wss)
                d.wss, d.fresh = list(wss), True
                self.stats.compositions += 1
                self.stats.reseated += 1
            return d
        B = len(wss)
        cap = 2 * self.window  # the cells of one read plus the passes submitted meanwhile
        tokens = Channel([B], dtype.i32).named(f"batch[{B}]:tokens")
        token_out = Channel([B], dtype.i32).named(f"batch[{B}]:drawn").capacity(cap)
        rows = self.sampling.make(B, key)
        lp_out = Channel([B], dtype.f32).named(f"batch[{B}]:logprobs").capacity(cap) if rows.logprobs else None
        top_out = None
        if getattr(rows, "top_logprobs", False):
            top_out = (Channel([B, rows.top_count], dtype.f32).named(f"batch[{B}]:top-logprobs").capacity(cap),
                       Channel([B, rows.top_count], dtype.i32).named(f"batch[{B}]:top-tokens").capacity(cap))
        width = getattr(rows, "carry_width", 0)
        carry_out = Channel([B, width], dtype.f32).named(f"batch[{B}]:carried").capacity(cap) if width else None
        fwd = ForwardPass()
        fwd.embed(tokens, Channel.from_(np.arange(B + 1), dtype.u32))
        fwd.state(wss, StateGeometry.folding())

        @fwd.epilogue
        def _():
            logits = intrinsics.outputs("logits")
            drawn = rows.step(logits)
            tokens.put(drawn)  # device to device: the next pass embeds it
            token_out.put(drawn)
            if lp_out is not None:
                lp_out.put(rows.logprob(logits, drawn))
            if top_out is not None:
                vals, idx = rows.top(logits)
                top_out[0].put(vals)
                top_out[1].put(idx)
            if carry_out is not None:
                carry_out.put(rows.carried())
        d = _DecodePass(list(wss), key, fwd, tokens, rows, token_out, lp_out, top_out, carry_out, size=B)
        self._decodes = self._decodes[-(KEPT_PASSES - 1):] + [d]
        self.stats.compositions += 1
        return d

    async def _decode_run(self, ready: list) -> None:
        """Decode `ready` (one composition) until a row leaves or joins, the budget ends, or interrupt() says so."""
        params = [s.params for s in ready]
        d = self._decode_pass_for([s.session.ws for s in ready], self.sampling.key(params))
        run = DecodeRun(self, d, ready)
        if d.fresh:  # a new composition starts from the host's view of every row
            for ch in d.outputs:
                ch.clear()
            d.tokens.clear()
            d.tokens.put(np.array(run.pending, np.int32))
            d.rows.clear()
            d.rows.start(params, [len(s.tokens) for s in ready], [s.row_state for s in ready])
            d.fresh = False
        elif d.rows.needs_host:
            d.rows.clear_mask()
            d.rows.put_mask(params, [s.row_state for s in ready])
        self.stats.runs += 1
        try:
            await self.pipe.run_ahead(d.fwd, NO_LIMIT, run.on_pass, window=run.window, drain=run.draining)
        except BaseException:
            self._decodes.remove(d)  # the device state may be ahead of what the host accepted: start afresh
            raise
        finally:
            run.settle()
