"""Sampling every row of a batched pass in one epilogue, with each row's parameters as device data.

One compiled epilogue serves any mix of requests: temperature, top-k, top-p, min-p and
the RNG state [seed, draws] of every row come from channels the host fills before each
pass, never from trace-time constants, so a request with another top_p compiles nothing.
Per row the math is the Sampler chain's (temperature -> top-k -> top-p -> min-p ->
Gumbel-max; temperature 0 is greedy; off values keep every token), and each row draws
its Gumbel noise from its own [seed, draws] state over its own vocab indices, exactly
as a one-sequence generation with that seed does: a row's tokens do not depend on
which other rows share the pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import eta
from ..dtypes import dtype
from ..errors import ValidationError
from ..eta.composites import keep_dims
from .chain import F32_MAX, Sampler
from .state import check_temperature
from .truncations import MinP, TopK, TopP

ROW_STAGES = (TopK, TopP, MinP)  # the truncations a row may use, in the order they apply


@dataclass(frozen=True)
class RowParams:
    """One row's sampler settings (llama.cpp's off values: top_k 0, top_p 1, min_p 0; temperature 0 is greedy)."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int = 0
    logprobs: bool = False  # also return each drawn token's log-probability under the model (log_softmax)

    def __post_init__(self):
        object.__setattr__(self, "temperature", check_temperature(self.temperature))
        TopK(self.top_k), TopP(self.top_p), MinP(self.min_p)  # the same range checks and messages
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < (1 << 32):
            raise ValidationError(f"seed must be an int in [0, 2^32), got {self.seed!r}")

    @classmethod
    def of(cls, sampler: Sampler, seed: int = 0, logprobs: bool = False) -> "RowParams":
        """The row settings equal to `sampler` (ValidationError for stages a batched row cannot carry)."""
        values = {TopK: 0, TopP: 1.0, MinP: 0.0}
        seen = []
        for t in sampler.truncations:
            if type(t) not in values or type(t) in seen:
                raise ValidationError(f"batched sampling supports temperature, top-k, top-p and min-p (once each), "
                                      f"not {t!r}. Fix: use those, or generate this request alone")
            seen.append(type(t))
            values[type(t)] = getattr(t, "k", getattr(t, "p", None))
        if seen != sorted(seen, key=ROW_STAGES.index):
            raise ValidationError(f"batched sampling applies top-k, top-p, min-p in that order; this sampler has "
                                  f"{[c.__name__ for c in seen]}. Fix: reorder the stages")
        if sampler.processors:
            raise ValidationError(f"batched sampling does not carry logit processors yet ({sampler.processors!r}). "
                                  "Fix: drop the penalties, or generate this request alone")
        return cls(sampler.temperature, values[TopK], values[TopP], values[MinP], seed, logprobs)


STAGES = ("sample", "top_k", "top_p", "min_p", "logprobs")  # the parts of a row sampler's epilogue


def structure_of(params: list) -> frozenset:
    """The stages a batch of rows needs: any sampling row, any row with top-k, top-p or min-p on.

    Parameter values are device data; only whether a stage is needed at all shapes the
    epilogue, so an all-greedy batch costs one argmax and a new top_p value compiles nothing.
    """
    need = set()
    for p in params:
        if p.logprobs:
            need.add("logprobs")
        if p.temperature > 0:
            need.add("sample")
            if 0 < p.top_k:
                need.add("top_k")
            if p.top_p < 1.0:
                need.add("top_p")
            if p.min_p > 0.0:
                need.add("min_p")
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
        self.floats = Channel([rows, 3], dtype.f32).named(f"{label}:inv-temperature,top-p,min-p")
        self.ints = Channel([rows, 2], dtype.i32).named(f"{label}:greedy,top-k")
        self.rng = Channel([rows, 2], dtype.u32).named(f"{label}:rng")

    def put(self, params: list, draws: list) -> None:
        """Host: the settings of every row for the next pass; draws[i] = tokens row i has drawn so far."""
        if len(params) != self.rows or len(draws) != self.rows:
            raise ValidationError(f"RowSampler.put: {len(params)} settings and {len(draws)} draw counts for "
                                  f"{self.rows} rows. Fix: one of each per row")
        f = np.array([[1.0 / p.temperature if p.temperature > 0 else 1.0, p.top_p, p.min_p] for p in params],
                     np.float32)  # 1/T rounded once, as Sampler's constant is
        i = np.array([[p.temperature == 0, p.top_k] for p in params], np.int32)
        r = np.array([[p.seed, d & 0xFFFFFFFF] for p, d in zip(params, draws)], np.uint32)
        self.floats.put(f)
        self.ints.put(i)
        self.rng.put(r)

    def clear(self) -> None:
        """Host: drop queued settings (after a stopped pass)."""
        for ch in (self.floats, self.ints, self.rng):
            ch.clear()

    @property
    def logprobs(self) -> bool:
        """Whether this sampler's epilogue also returns the drawn tokens' log-probabilities."""
        return "logprobs" in self.stages

    def logprob(self, logits, tokens):
        """Traced: f32 [rows] log_softmax(logits)[row, token] of each row's drawn token (the model's own)."""
        lp = eta.log_softmax(eta.sanitize(logits))
        return eta.reshape(eta.gather_row(lp, tokens), [self.rows])

    def step(self, logits):
        """Traced: the i32 [rows] tokens drawn from f32 [rows, vocab] logits, each row by its own settings."""
        B = self.rows
        f, i, r = self.floats.take(), self.ints.take(), self.rng.take()
        col = lambda t, j: eta.reshape(eta.slice_last(t, j, 1), [B])  # noqa: E731
        inv_t, top_p, min_p = col(f, 0), col(f, 1), col(f, 2)
        greedy, top_k = col(i, 0) > 0, col(i, 1)
        x = eta.sanitize(logits)
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
        states = eta.reshape(r, [B * 2])
        noise = eta.concat([eta.gumbel(eta.slice_last(states, 2 * b, 2), [self.vocab]) for b in range(B)])
        drawn = eta.reduce_argmax(eta.sanitize(x) + eta.reshape(noise, [B, self.vocab]))
        return eta.select(greedy, best, drawn)
