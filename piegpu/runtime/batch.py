"""Continuous batching: sequences join and leave between passes; one decode pass samples every ready row.

A Batch owns its sequences' sessions (working sets). Each step it prefills one chunk
of a joining sequence's prompt (its own pass, so the others' decode steps are not held
up by a whole long prompt), then runs one decode pass over every sequence that is
ready: the pass embeds each row's pending token into that row's working set, and the
epilogue samples all rows on the device with per-row parameters from channels (see
samplers/rows.py), so one compiled epilogue serves any mix of requests of that batch
size. Only the B drawn tokens come back to the host. A sequence leaves when it draws a
stop token, reaches max_tokens, or its consumer says stop or cancels it; its working
set and session stay usable.

The runtime does not import the samplers: the Batch is given a sampling object
(piegpu.samplers.rows.RowSampling) with key(params) -> what shapes the epilogue for
these rows, and make(rows, key) -> a row sampler with put(params, draws, row_states),
clear(), step(logits), and the optional outputs logprob(logits, drawn) and top(logits).
A sequence's `row_state` (host data the row sampler reads each pass: penalty counts, a
grammar constraint) sees every drawn token through row_state.observe(token).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..dtypes import dtype
from ..errors import ValidationError
from ..eta import intrinsics
from .channel import Channel
from .forward import ForwardPass, StateGeometry

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
    finish_reason: str = ""  # "stop", "length" or "cancelled" once finished
    cancel_requested: bool = False

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
    tokens: Channel  # each row's pending token, put by the host before the pass
    rows: object  # the row sampler
    token_out: Channel
    lp_out: Channel | None  # each drawn token's log-probability, when a row asked
    top_out: tuple | None  # (log-probabilities [B, K], token ids [B, K]) of each row's K most likely tokens


@dataclass
class BatchStats:
    """What a Batch did (benchmarks and tests read it)."""

    decode_passes: int = 0
    prefill_passes: int = 0
    rows: int = 0  # decode rows summed over passes
    compositions: int = 0  # distinct sets of working sets a decode pass was built for


class Batch:
    """Sequences decoding together, joining and leaving between passes (see the module docstring)."""

    def __init__(self, model, sampling, max_batch: int = 16, prefill_chunk: int = 128, pipe=None):
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValidationError(f"Batch: max_batch must be an int >= 1, got {max_batch!r}")
        if isinstance(prefill_chunk, bool) or not isinstance(prefill_chunk, int) or prefill_chunk < 1:
            raise ValidationError(f"Batch: prefill_chunk must be an int >= 1, got {prefill_chunk!r}")
        self.model = model
        self.sampling = sampling
        self.max_batch = max_batch
        self.prefill_chunk = prefill_chunk
        self.pipe = pipe or model.default_pipeline
        self.sequences: list = []  # in the order they joined
        self.stats = BatchStats()
        self._decode: _DecodePass | None = None  # the last composition's pass (reused while it stays)

    # ---- joining ----------------------------------------------------------------------------
    def add(self, prompt: list, params, max_tokens: int, stop_ids=(), on_token: Callable | None = None,
            session=None, row_state=None) -> Sequence:
        """Admit a sequence: `prompt` token ids are prefilled in chunks between decode passes, then it decodes.

        `session`: a Session whose working set already holds a prefix of prompt[:-1] (a fork of
        a shared prefix; the rest is prefilled here), or None for a fresh working set with room
        for prompt + max_tokens. `row_state`: the row sampler's host data for this row.
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
        limit = self.model.config.max_position_embeddings
        if session is None:
            need = len(prompt) + max_tokens
            if len(prompt) > limit:
                raise ValidationError(f"{label}: the prompt has {len(prompt)} tokens but the context holds {limit}. "
                                      "Fix: a shorter prompt")
            session = self.model.session(self.model.working_set(min(limit, need)))
            prefilled = 0
        else:
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
        """One prefill chunk (if a sequence is joining) and one decode pass; False when nothing is left."""
        for s in self.active:
            if s.cancel_requested:
                s.finish_reason = "cancelled"
        joining = next((s for s in self.active if not s.ready), None)
        if joining is not None:
            await self._prefill_chunk(joining)
        ready = [s for s in self.active if s.ready][: self.max_batch]
        if ready:
            await self._decode_pass(ready)
        return bool(self.active)

    async def _prefill_chunk(self, seq: Sequence) -> None:
        end = min(len(seq.prompt) - 1, seq.prefilled + self.prefill_chunk)
        await seq.session.extend(seq.prompt[seq.prefilled: end])
        seq.prefilled = end
        self.stats.prefill_passes += 1

    def _decode_pass_for(self, wss: list, key) -> _DecodePass:
        d = self._decode
        if d is not None and d.key == key and len(d.wss) == len(wss) and all(a is b for a, b in zip(d.wss, wss)):
            return d
        B = len(wss)
        tokens = Channel([B], dtype.i32).named(f"batch[{B}]:tokens")
        token_out = Channel([B], dtype.i32).named(f"batch[{B}]:drawn")
        rows = self.sampling.make(B, key)
        lp_out = Channel([B], dtype.f32).named(f"batch[{B}]:logprobs") if rows.logprobs else None
        top_out = None
        if getattr(rows, "top_logprobs", False):
            top_out = (Channel([B, rows.top_count], dtype.f32).named(f"batch[{B}]:top-logprobs"),
                       Channel([B, rows.top_count], dtype.i32).named(f"batch[{B}]:top-tokens"))
        fwd = ForwardPass()
        fwd.embed(tokens, Channel.from_(np.arange(B + 1), dtype.u32))
        fwd.state(wss, StateGeometry.folding())

        @fwd.epilogue
        def _():
            logits = intrinsics.outputs("logits")
            drawn = rows.step(logits)
            token_out.put(drawn)
            if lp_out is not None:
                lp_out.put(rows.logprob(logits, drawn))
            if top_out is not None:
                vals, idx = rows.top(logits)
                top_out[0].put(vals)
                top_out[1].put(idx)
        self._decode = _DecodePass(list(wss), key, fwd, tokens, rows, token_out, lp_out, top_out)
        self.stats.compositions += 1
        return self._decode

    async def _decode_pass(self, ready: list) -> None:
        params = [s.params for s in ready]
        d = self._decode_pass_for([s.session.ws for s in ready], self.sampling.key(params))
        pending = [s.prompt[-1] if not s.tokens else s.tokens[-1] for s in ready]
        outs = (d.tokens, d.token_out) + ((d.lp_out,) if d.lp_out is not None else ()) + (d.top_out or ())
        for ch in outs:
            ch.clear()
        d.rows.clear()
        d.tokens.put(np.array(pending, np.int32))
        d.rows.put(params, [len(s.tokens) for s in ready], [s.row_state for s in ready])
        await self.pipe.submit(d.fwd)
        drawn = (await d.token_out.take()).tolist()
        lps = (await d.lp_out.take()).tolist() if d.lp_out is not None else [None] * len(ready)
        tops = [None] * len(ready)
        if d.top_out is not None:
            vals, ids = (await d.top_out[0].take()).tolist(), (await d.top_out[1].take()).tolist()
            tops = [list(zip(i, v)) for i, v in zip(ids, vals)]
        self.stats.decode_passes += 1
        self.stats.rows += len(ready)
        for s, p, t, lp, top in zip(ready, pending, drawn, lps, tops):
            s.session.embedded([p])
            s.session.pending = t
            if t in s.stop_ids:
                s.finish_reason = "stop"
                continue
            s.tokens.append(t)
            if s.row_state is not None:
                s.row_state.observe(t)
            if s.params.logprobs:
                s.logprobs.append(lp)
            if getattr(s.params, "top_logprobs", 0):
                s.top_logprobs.append(top[: s.params.top_logprobs])
            keep = s.on_token(s, t) if s.on_token is not None else True
            if keep is False or s.cancel_requested:
                s.finish_reason = "stop" if keep is False else "cancelled"
            elif len(s.tokens) >= s.max_tokens:
                s.finish_reason = "length"
