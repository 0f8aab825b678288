"""Sampling every row of a batched pass in one epilogue, with each row's parameters as device data.

One compiled epilogue serves any mix of requests: temperature, top-k, top-p, min-p,
the penalties, logit biases, a grammar mask and the RNG state [seed, draws] of every row
come from channels, never from trace-time constants, so a request with another top_p
compiles nothing. Per row the math is the Sampler chain's
(grammar mask -> logit bias -> penalties -> temperature -> top-k -> top-p -> min-p ->
Gumbel-max; temperature 0 is greedy; off values keep every token), and each row draws
its Gumbel noise from its own [seed, draws] state over its own vocab indices, exactly
as a one-sequence generation with that seed does: a row's tokens do not depend on
which other rows share the pass.

The host puts every channel's first cell once per batch composition (start()); after
that the passes run on device data alone, so a batch can run ahead without the host:
the settings are read (not consumed) each pass, and the state that changes as a row
decodes is loop-carried on the device -- each pass takes the RNG state [seed, draws] and
the seen-token counts of the penalties (i32 [rows, vocab]) and puts them back advanced
by the token it drew. The host keeps its own copy in a RowState (for the next
composition). Only a grammar needs the host between tokens: its mask (packed u32 words
[rows, vocab/32]) is taken each pass and put by the host (put_mask()) after it has seen
the row's last token. Only whether a stage is needed at all shapes the epilogue (see
structure_of).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import eta
from ..dtypes import dtype
from ..errors import ValidationError
from ..eta.composites import keep_dims
from .chain import F32_MAX, Sampler, rng_advance
from .llamacpp import NEG_INF, LogitBias
from .penalties import Penalties
from .state import check_temperature
from .truncations import MinP, TopK, TopP, Typical, typical_mask

ROW_STAGES = (TopK, TopP, MinP, Typical)  # the truncations a row may use, in the order they apply (OPTION_ORDER)


@dataclass(frozen=True)
class RowParams:
    """One row's sampler settings (llama.cpp's off values: top_k 0, top_p 1, min_p 0; temperature 0 is greedy)."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int = 0
    logprobs: bool = False  # also return each drawn token's log-probability under the model (log_softmax)
    repetition_penalty: float = 1.0  # CTRL-style over the row's seen tokens (prompt and drawn), 1 = off
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple = ()  # ((token_id, bias), ...) sorted, as LogitBias holds them
    top_logprobs: int = 0  # also return the k most likely tokens and their log-probabilities (k <= TOP_LOGPROBS)
    constrained: bool = False  # a grammar mask comes from the row's RowState each pass
    typical_p: float = 1.0  # locally typical sampling mass, 1 = off

    def __post_init__(self):
        object.__setattr__(self, "temperature", check_temperature(self.temperature))
        TopK(self.top_k), TopP(self.top_p), MinP(self.min_p), Typical(self.typical_p)  # the same checks and messages
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < (1 << 32):
            raise ValidationError(f"seed must be an int in [0, 2^32), got {self.seed!r}")
        pen = Penalties(self.repetition_penalty, self.presence_penalty, self.frequency_penalty)
        object.__setattr__(self, "repetition_penalty", pen.repetition)
        object.__setattr__(self, "presence_penalty", pen.presence)
        object.__setattr__(self, "frequency_penalty", pen.frequency)
        object.__setattr__(self, "logit_bias", LogitBias(self.logit_bias).bias)
        k = self.top_logprobs
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= TOP_LOGPROBS:
            raise ValidationError(f"top_logprobs must be an int in 0..{TOP_LOGPROBS}, got {k!r}")

    @property
    def penalized(self) -> bool:
        """Whether any penalty is on (then the row's seen-token counts go to the device each pass)."""
        return self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0

    @classmethod
    def of(cls, sampler: Sampler, seed: int = 0, logprobs: bool = False, top_logprobs: int = 0,
           constrained: bool = False) -> "RowParams":
        """The row settings equal to `sampler` (ValidationError for stages a batched row cannot carry)."""
        values = {TopK: 0, TopP: 1.0, MinP: 0.0, Typical: 1.0}
        procs = {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "logit_bias": ()}
        for p in sampler.processors:
            if isinstance(p, Penalties):
                procs.update(repetition_penalty=p.repetition, presence_penalty=p.presence,
                             frequency_penalty=p.frequency)
            elif isinstance(p, LogitBias):
                procs["logit_bias"] = p.bias
            else:
                raise ValidationError(f"batched sampling carries logit bias and repetition/presence/frequency "
                                      f"penalties, not {p!r}. Fix: drop it, or generate this request alone")
        seen = []
        for t in sampler.truncations:
            if type(t) not in values or type(t) in seen:
                raise ValidationError(f"batched sampling supports temperature, top-k, top-p, min-p and typical (once "
                                      f"each), "
                                      f"not {t!r}. Fix: use those, or generate this request alone")
            seen.append(type(t))
            values[type(t)] = t.mass if isinstance(t, Typical) else getattr(t, "k", getattr(t, "p", None))
        if seen != sorted(seen, key=ROW_STAGES.index):
            raise ValidationError(f"batched sampling applies top-k, top-p, min-p in that order; this sampler has "
                                  f"{[c.__name__ for c in seen]}. Fix: reorder the stages")
        return cls(sampler.temperature, values[TopK], values[TopP], values[MinP], seed, logprobs, **procs,
                   top_logprobs=top_logprobs, constrained=constrained, typical_p=values[Typical])


TOP_LOGPROBS = 20  # the most alternatives a row may ask for (OpenAI's limit); the epilogue always computes this many
STAGES = ("sample", "top_k", "top_p", "min_p", "typical", "logprobs", "penalties", "bias", "mask", "top_logprobs")


class RowState:
    """Host-side data of one row that changes as it decodes: seen-token counts and a grammar constraint.

    `constraint` (or None) is any object with mask_into(words) -- write the allowed tokens as
    packed u32 words (bit i of word i >> 5 = token i) -- and consume(token): a Matcher of
    piegpu.inferlets.grammar.
    """

    def __init__(self, params: RowParams, vocab: int, tokens=(), constraint=None):
        if params.constrained and constraint is None:
            raise ValidationError("RowState: the row is constrained but has no constraint. Fix: pass one")
        self.counts = None
        if params.penalized:
            ids = np.asarray(list(tokens), np.int64)
            self.counts = np.bincount(ids[(ids >= 0) & (ids < vocab)], minlength=vocab).astype(np.int32)
        self.constraint = constraint

    def observe(self, token: int) -> None:
        """Host: the row drew `token` (counted; the constraint advances)."""
        if self.counts is not None and 0 <= token < len(self.counts):
            self.counts[token] += 1
        if self.constraint is not None:
            self.constraint.consume(token)


def structure_of(params: list) -> frozenset:
    """The stages a batch of rows needs: any sampling row, any row with top-k, top-p or min-p on.

    Parameter values are device data; only whether a stage is needed at all shapes the
    epilogue, so an all-greedy batch costs one argmax and a new top_p value compiles nothing.
    """
    need = set()
    for p in params:
        if p.logprobs:
            need.add("logprobs")
        if p.top_logprobs:
            need.add("top_logprobs")
        if p.penalized:
            need.add("penalties")
        if p.logit_bias:
            need.add("bias")
        if p.constrained:
            need.add("mask")
        if p.temperature > 0:
            need.add("sample")
            if 0 < p.top_k:
                need.add("top_k")
            if p.top_p < 1.0:
                need.add("top_p")
            if p.min_p > 0.0:
                need.add("min_p")
            if p.typical_p < 1.0:
                need.add("typical")
    return frozenset(need)


class RowSampling:
    """Makes row samplers for a runtime Batch: one per (batch size, structure)."""

    def __init__(self, vocab: int):
        self.vocab = vocab

    def key(self, params: list) -> frozenset:
        """What distinguishes the epilogues these rows need (see structure_of)."""
        return structure_of(params)

    def make(self, rows: int, key: frozenset) -> "RowSampler":
        """A row sampler for `rows` rows with the stages of `key`."""
        return RowSampler(rows, self.vocab, stages=key)


class RowSampler:
    """Parameter channels for `rows` rows and the traced step that samples all of them."""

    def __init__(self, rows: int, vocab: int, label: str = "rows", stages=STAGES):
        from ..runtime.channel import Channel
        self.rows, self.vocab = rows, vocab
        self.stages = frozenset(stages)
        self.words = -(-vocab // 32)
        self.floats = Channel([rows, 4], dtype.f32).named(f"{label}:inv-temperature,top-p,min-p,typical")
        self.ints = Channel([rows, 2], dtype.i32).named(f"{label}:greedy,top-k")
        self.rng = Channel([rows, 2], dtype.u32).named(f"{label}:rng")
        self.extra = {}  # stage -> its channel, only for the stages this sampler has
        if "penalties" in self.stages:
            self.extra["penalties"] = Channel([rows, 4], dtype.f32).named(f"{label}:1/rep,rep,presence,frequency")
            self.extra["counts"] = Channel([rows, vocab], dtype.i32).named(f"{label}:seen-counts")
        if "bias" in self.stages:
            self.extra["bias"] = Channel([rows, vocab], dtype.f32).named(f"{label}:logit-bias")
        if "mask" in self.stages:
            self.extra["mask"] = Channel([rows, self.words], dtype.u32).named(f"{label}:grammar-mask")

    @property
    def needs_host(self) -> bool:
        """Whether a pass needs a host put first (a grammar mask), so passes cannot run ahead."""
        return "mask" in self.extra

    def start(self, params: list, draws: list, states: list | None = None) -> None:
        """Host: every channel's first cell (after clear()); draws[i] = tokens row i has drawn so far.

        `states[i]` is row i's RowState (needed when a row is penalized or constrained).
        """
        states = [None] * self.rows if states is None else list(states)
        if len(params) != self.rows or len(draws) != self.rows or len(states) != self.rows:
            raise ValidationError(f"RowSampler.put: {len(params)} settings, {len(draws)} draw counts and "
                                  f"{len(states)} row states for {self.rows} rows. Fix: one of each per row")
        f = np.array([[1.0 / p.temperature if p.temperature > 0 else 1.0, p.top_p, p.min_p, p.typical_p]
                      for p in params], np.float32)  # 1/T rounded once, as Sampler's constant is
        i = np.array([[p.temperature == 0, p.top_k] for p in params], np.int32)
        r = np.array([[p.seed, d & 0xFFFFFFFF] for p, d in zip(params, draws)], np.uint32)
        self.floats.put(f)
        self.ints.put(i)
        self.rng.put(r)
        if "penalties" in self.extra:
            self.extra["penalties"].put(np.array([[1.0 / p.repetition_penalty, p.repetition_penalty,
                                                   p.presence_penalty, p.frequency_penalty] for p in params],
                                                 np.float32))
            counts = np.zeros((self.rows, self.vocab), np.int32)
            for row, (p, st) in enumerate(zip(params, states)):
                if p.penalized:
                    counts[row] = self._state(st, row, "counts")
            self.extra["counts"].put(counts)
        if "bias" in self.extra:
            bias = np.zeros((self.rows, self.vocab), np.float32)
            for row, p in enumerate(params):
                for tok, b in p.logit_bias:
                    if tok >= self.vocab:
                        raise ValidationError(f"logit_bias: token {tok} is outside the vocab [0, {self.vocab}). "
                                              "Fix: use ids from this model's tokenizer")
                    bias[row, tok] = b
            self.extra["bias"].put(bias)
        if "mask" in self.extra:
            self.put_mask(params, states)

    def clear_mask(self) -> None:
        """Host: drop a queued grammar mask (no pass in flight)."""
        self.extra["mask"].clear()

    def put_mask(self, params: list, states: list) -> None:
        """Host: the grammar mask of every row for the next pass (rows without a grammar allow everything)."""
        words = np.full((self.rows, self.words), 0xFFFFFFFF, np.uint32)
        for row, (p, st) in enumerate(zip(params, states)):
            if p.constrained:
                self._state(st, row, "constraint").mask_into(words[row])
        self.extra["mask"].put(words)

    @staticmethod
    def _state(st, row: int, what: str):
        value = getattr(st, what, None)
        if value is None:
            raise ValidationError(f"RowSampler.put: row {row} needs its RowState's {what}. Fix: give the sequence "
                                  "a RowState made from its params")
        return value

    def clear(self) -> None:
        """Host: drop queued settings (after a stopped pass)."""
        for ch in (self.floats, self.ints, self.rng, *self.extra.values()):
            ch.clear()

    @property
    def top_logprobs(self) -> bool:
        """Whether this sampler's epilogue also returns every row's TOP_LOGPROBS most likely tokens."""
        return "top_logprobs" in self.stages

    top_count = TOP_LOGPROBS  # K of top()

    def top(self, logits):
        """Traced: (f32 [rows, K] log-probabilities, i32 [rows, K] token ids) of each row's K most likely tokens."""
        vals, idx = eta.top_k(eta.log_softmax(eta.sanitize(logits)), TOP_LOGPROBS)
        return vals, eta.cast(idx, dtype.i32)

    @property
    def logprobs(self) -> bool:
        """Whether this sampler's epilogue also returns the drawn tokens' log-probabilities."""
        return "logprobs" in self.stages

    def logprob(self, logits, tokens):
        """Traced: f32 [rows] log_softmax(logits)[row, token] of each row's drawn token (the model's own)."""
        lp = eta.log_softmax(eta.sanitize(logits))
        return eta.reshape(eta.gather_row(lp, tokens), [self.rows])

    def step(self, logits):
        """Traced: the i32 [rows] tokens drawn from f32 [rows, vocab] logits, each row by its own settings.

        It also puts the next pass's RNG state and seen-token counts (loop-carried on the device).
        """
        counts = self.extra["counts"].take() if "penalties" in self.stages else None
        token = self._draw(logits, self.rng.take(), counts)
        if counts is not None:
            idx = eta.cast(eta.broadcast(eta.iota(self.vocab), [self.rows, self.vocab]), dtype.i32)
            self.extra["counts"].put(counts + eta.cast(eta.eq(idx, keep_dims(token, counts)), dtype.i32))
        return token

    def _draw(self, logits, r, counts):
        B = self.rows
        f, i = self.floats.read(), self.ints.read()
        self.rng.put(rng_advance(r))
        col = lambda t, j: eta.reshape(eta.slice_last(t, j, 1), [B])  # noqa: E731
        inv_t, top_p, min_p = col(f, 0), col(f, 1), col(f, 2)
        greedy, top_k = col(i, 0) > 0, col(i, 1)
        x = eta.sanitize(logits)
        if "mask" in self.stages:
            idx = eta.broadcast(eta.iota(self.vocab), [B, self.vocab])
            bits = eta.take_last(self.extra["mask"].take(), idx >> 5) >> (idx & 31)
            x = eta.mask_apply(x, eta.ne(bits & 1, 0))
        if "bias" in self.stages:
            b = self.extra["bias"].read()
            x = eta.select(eta.eq(b, NEG_INF), NEG_INF, x + b)  # as LogitBias: a ban stays -inf
        if "penalties" in self.stages:
            pen = self.extra["penalties"].read()
            inv_rep, rep, presence, frequency = col(pen, 0), col(pen, 1), col(pen, 2), col(pen, 3)
            seen = counts > 0
            x = eta.select(seen, eta.select(x > 0.0, x * keep_dims(inv_rep, x), x * keep_dims(rep, x)), x)
            x = x - eta.cast(seen, dtype.f32) * keep_dims(presence, x)
            x = x - eta.cast(counts, dtype.f32) * keep_dims(frequency, x)
        best = eta.reduce_argmax(x)
        if "sample" not in self.stages:  # every row is greedy
            return best
        x = eta.minimum(x * keep_dims(inv_t, x), F32_MAX)
        if "top_k" in self.stages:
            x = eta.mask_apply(x, eta.top_k_mask(x, top_k))
        if "top_p" in self.stages:
            x = eta.mask_apply(x, eta.top_p_mask(x, top_p))
        if "min_p" in self.stages:
            x = eta.mask_apply(x, eta.min_p_mask(x, min_p))
        if "typical" in self.stages:
            x = eta.mask_apply(x, typical_mask(x, col(f, 3)))
        states = eta.reshape(r, [B * 2])
        noise = eta.concat([eta.gumbel(eta.slice_last(states, 2 * b, 2), [self.vocab]) for b in range(B)])
        drawn = eta.reduce_argmax(eta.sanitize(x) + eta.reshape(noise, [B, self.vocab]))
        return eta.select(greedy, best, drawn)
