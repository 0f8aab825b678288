"""Sampling epilogues: each sampler maps the logits of one row (and an RNG state) to a token id on the device."""

from __future__ import annotations

from dataclasses import dataclass

from . import eta
from .dtypes import dtype
from .errors import ValidationError


@dataclass(frozen=True)
class Sampler:
    """A token sampler: `sample(logits, state)` traced inside an epilogue; state is u32[2] or None."""

    name: str
    temperature: float = 1.0
    param: float = 0.0

    @property
    def needs_rng(self) -> bool:
        """Whether the sampler draws random numbers (greedy does not)."""
        return self.name != "greedy" and self.temperature > 0

    def keep_mask(self, x):
        """The bool mask of tokens this sampler may pick from scaled logits x."""
        if self.name == "top-k":
            return eta.top_k_mask(x, int(self.param))
        if self.name == "top-p":
            return eta.top_p_mask(x, self.param)
        if self.name == "min-p":
            return eta.min_p_mask(x, self.param)
        if self.name == "top-a":
            return eta.top_a_mask(x, self.param)
        return None

    def sample(self, logits, state):
        """The sampled token id (i32 scalar tensor)."""
        x = eta.sanitize(logits)
        if not self.needs_rng:
            return eta.reduce_argmax(x)
        if self.temperature != 1.0:
            x = x * (1.0 / self.temperature)
        keep = self.keep_mask(x)
        if keep is not None:
            x = eta.mask_apply(x, keep)
        return eta.gumbel_max(x, state)


def greedy() -> Sampler:
    """Always the most likely token (ties -> lowest id)."""
    return Sampler("greedy", 0.0)


def temperature(t: float = 1.0) -> Sampler:
    """Sample from softmax(logits / t)."""
    return Sampler("temperature", _temp(t))


def top_k(k: int = 40, temperature: float = 1.0) -> Sampler:
    """Sample among the k most likely tokens."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValidationError(f"top_k: k must be an int >= 1, got {k!r}")
    return Sampler("top-k", _temp(temperature), k)


def top_p(p: float = 0.9, temperature: float = 1.0) -> Sampler:
    """Nucleus sampling: the smallest prefix of the sorted distribution with mass >= p."""
    return Sampler("top-p", _temp(temperature), _unit(p, "top_p", "p"))


def min_p(p: float = 0.05, temperature: float = 1.0) -> Sampler:
    """Keep tokens with prob >= p * max_prob."""
    return Sampler("min-p", _temp(temperature), _unit(p, "min_p", "p"))


def top_a(a: float = 0.2, temperature: float = 1.0) -> Sampler:
    """Keep tokens with prob >= a * max_prob^2."""
    if not 0.0 <= float(a):
        raise ValidationError(f"top_a: a must be >= 0, got {a!r}")
    return Sampler("top-a", _temp(temperature), float(a))


def _temp(t) -> float:
    t = float(t)
    if not t >= 0.0:
        raise ValidationError(f"temperature must be >= 0, got {t!r}")
    return t


def _unit(p, fn: str, name: str) -> float:
    p = float(p)
    if not 0.0 < p <= 1.0:
        raise ValidationError(f"{fn}: {name} must be in (0, 1], got {p!r}")
    return p


BY_NAME = {"greedy": lambda t, v: greedy(), "temperature": lambda t, v: temperature(t),
           "top-k": lambda t, v: top_k(int(v) if v is not None else 40, t),
           "top-p": lambda t, v: top_p(v if v is not None else 0.9, t),
           "min-p": lambda t, v: min_p(v if v is not None else 0.05, t),
           "top-a": lambda t, v: top_a(v if v is not None else 0.2, t)}


def from_spec(spec, temperature: float = 1.0, value: float | None = None) -> Sampler:
    """A Sampler from a Sampler, or a name (greedy, temperature, top-k, top-p, min-p, top-a)."""
    if isinstance(spec, Sampler):
        return spec
    if spec is None:
        return greedy()
    name = str(spec).replace("_", "-")
    if name not in BY_NAME:
        raise ValidationError(f"unknown sampler {spec!r}. Fix: one of {sorted(BY_NAME)}")
    if temperature == 0:
        return greedy()
    return BY_NAME[name](temperature, value)


def rng_advance(state):
    """[key, counter + 1]: the next draw's state, loop-carried on the device."""
    return eta.concat([eta.slice_last(state, 0, 1), eta.slice_last(state, 1, 1) + 1])


__all__ = ["Sampler", "greedy", "temperature", "top_k", "top_p", "min_p", "top_a", "from_spec", "rng_advance",
           "dtype"]
