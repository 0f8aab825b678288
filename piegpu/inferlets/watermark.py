"""A Kirchenbauer-style greenlist watermark, applied on the device, and its host detector.

At each step the greenlist is a pseudo-random gamma-fraction of the vocabulary keyed by
(previous token, secret key): token v is green when

    u = eta.rng([greenlist_seed(key, prev), 0], [vocab])[v] < gamma      (f32 compare)

so each token is green with probability gamma, independently (a Bernoulli greenlist, which
keeps the detector's null hypothesis exact). The epilogue adds delta to the green logits
before temperature and truncation, then samples; [key, previous token] is loop-carried in
a device channel. `detect` recomputes the same bits on the host with piegpu.eta.counter_rng
(bit-identical: integer hashing and an exact int->f32 conversion) and returns a z-score.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import eta
from ..dtypes import dtype
from ..errors import ValidationError
from ..eta.counter_rng import M1, M2, mix32, rng_bits
from ..samplers import Processor, StateSpec

WATERMARK_SALT = 0x27D4EB2F  # separates greenlist seeds from other uses of the key
STATE = "watermark"


def greenlist_seed(key: int, prev) -> np.ndarray:
    """Host: the u32 RNG key of the greenlist after token(s) `prev`: mix32(mix32(key ^ SALT) ^ prev)."""
    k = mix32(np.uint32(int(key) & 0xFFFFFFFF) ^ np.uint32(WATERMARK_SALT))
    return mix32(k ^ np.asarray(prev, np.int64).astype(np.uint32))


def _mix32_traced(x):
    """lowbias32 on a traced u32 tensor (the same formula as counter_rng.mix32)."""
    x = x ^ (x >> 16)
    x = x * M1
    x = x ^ (x >> 15)
    x = x * M2
    return x ^ (x >> 16)


def green_mask(state, vocab: int, gamma: float):
    """Traced: bool [vocab], the greenlist for state = u32[2] [key, previous token]."""
    key = eta.slice_last(state, 0, 1)
    prev = eta.slice_last(state, 1, 1)
    seed = _mix32_traced(_mix32_traced(key ^ WATERMARK_SALT) ^ prev)
    rng_state = eta.concat([seed, eta.broadcast(eta.cast(0, dtype.u32), [1])])
    return eta.rng(rng_state, [vocab]) < float(np.float32(gamma))


def is_green(key: int, prev, token, gamma: float) -> np.ndarray:
    """Host: whether each `token` is on the greenlist that follows the matching `prev` token."""
    prev = np.asarray(prev, np.int64).reshape(-1)
    token = np.asarray(token, np.int64).reshape(-1)
    if prev.shape != token.shape:
        raise ValidationError(f"is_green: {prev.size} previous tokens for {token.size} tokens")
    bits = rng_bits(greenlist_seed(key, prev), 0, token.astype(np.uint32))  # elementwise over the seeds
    u = ((bits >> np.uint32(9)).astype(np.float32) + np.float32(0.5)) * np.float32(2.0 ** -23)
    return u < np.float32(gamma)


@dataclass(frozen=True)
class WatermarkScore:
    """What the detector found: scored tokens, green ones, the z-score."""

    scored: int
    green: int
    gamma: float
    z: float

    @property
    def green_fraction(self) -> float:
        """Green tokens over scored tokens."""
        return self.green / self.scored if self.scored else 0.0


def score(tokens, key: int, gamma: float = 0.25, ignore_repeated: bool = False) -> WatermarkScore:
    """Host detector: score tokens[1:], each against the greenlist of its predecessor."""
    _check_gamma(gamma)
    toks = [int(t) for t in tokens]
    if len(toks) < 2:
        raise ValidationError(f"watermark detect: need at least 2 tokens (the first only keys the greenlist of the "
                              f"second), got {len(toks)}. Fix: pass [last prompt token] + generated tokens")
    pairs = list(zip(toks[:-1], toks[1:]))
    if ignore_repeated:  # repeated (prev, token) pairs carry no new evidence
        pairs = list(dict.fromkeys(pairs))
    prev, tok = zip(*pairs)
    green = int(is_green(key, prev, tok, gamma).sum())
    n = len(pairs)
    z = (green - gamma * n) / math.sqrt(n * gamma * (1.0 - gamma))
    return WatermarkScore(n, green, gamma, z)


def detect(tokens, key: int, gamma: float = 0.25) -> float:
    """Host detector: the z-score of green tokens among tokens[1:] (about N(0,1) without the watermark)."""
    return score(tokens, key, gamma).z


def _check_gamma(gamma) -> float:
    g = float(gamma)
    if not 0.0 < g < 1.0:
        raise ValidationError(f"watermark: gamma (green fraction) must be in (0, 1), got {gamma!r}")
    return g


@dataclass(frozen=True)
class Watermark(Processor):
    """Sampler stage: add delta to the logits of the greenlist keyed by (previous token, key)."""

    key: int
    gamma: float = 0.25
    delta: float = 2.0
    name = "watermark"

    def __post_init__(self):
        if isinstance(self.key, bool) or not isinstance(self.key, (int, np.integer)) or not 0 <= self.key < 2 ** 32:
            raise ValidationError(f"watermark: key must be an int in [0, 2^32), got {self.key!r}")
        object.__setattr__(self, "key", int(self.key))
        object.__setattr__(self, "gamma", _check_gamma(self.gamma))
        d = float(self.delta)
        if not (d >= 0 and math.isfinite(d)):
            raise ValidationError(f"watermark: delta (logit bias) must be a finite number >= 0, got {self.delta!r}")
        object.__setattr__(self, "delta", d)

    @classmethod
    def of(cls, value) -> "Watermark":
        """A Watermark from a Watermark, an int key, or a dict {key, gamma, delta}."""
        if isinstance(value, Watermark):
            return value
        if isinstance(value, dict):
            return cls(**value)
        return cls(value)

    def states(self, vocab):
        return (StateSpec(STATE, (2,), dtype.u32),)

    def initial(self, ctx):
        if not ctx.tokens:
            raise ValidationError("watermark: the sequence is empty; the first greenlist needs a previous token")
        return {STATE: np.array([self.key, int(ctx.tokens[-1]) & 0xFFFFFFFF], np.uint32)}

    def apply(self, x, states):
        green = green_mask(states[STATE], x.shape[-1], self.gamma)
        return eta.select(green, x + self.delta, x)

    def update(self, states, token, final):
        key = eta.slice_last(states[STATE], 0, 1)
        return {STATE: eta.concat([key, eta.reshape(eta.cast(token, dtype.u32), [1])])}


def generate_watermarked(model, prompt: str, key: int, max_tokens: int = 64, gamma: float = 0.25,
                         delta: float = 2.0, sampler="temperature", temperature: float = 1.0, seed: int = 0,
                         chat: bool = False, **options) -> tuple:
    """(text, tokens scored by `detect`: [last prompt token] + generated) of a watermarked generation."""
    g = model.generate(prompt, max_tokens=max_tokens, sampler=sampler, temperature=temperature, seed=seed,
                       chat=chat, watermark=Watermark(key, gamma, delta), **options)
    text = g.run()
    return text, [g.prompt_ids[-1]] + list(g.tokens)


__all__ = ["Watermark", "WatermarkScore", "green_mask", "greenlist_seed", "is_green", "score", "detect",
           "generate_watermarked"]
