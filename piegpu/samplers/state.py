"""The pieces every sampler stage is built from: state declarations and the stage base classes."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..dtypes import DType
from ..errors import ValidationError

RNG_STATE = "rng"  # the name of the sampler's RNG state [key, counter] (see chain.Sampler.states)


@dataclass(frozen=True)
class StateSpec:
    """One piece of device state a sampler carries between passes (one channel cell)."""

    name: str
    shape: tuple
    dtype: DType


@dataclass(frozen=True)
class SeqContext:
    """What initial states may depend on: the sequence's tokens so far (last = pending), vocab, seed,
    and how many draws the RNG already made (a run re-seeded mid-way goes on with fresh noise)."""

    tokens: tuple
    vocab: int
    seed: int = 0
    draws: int = 0


class Stage:
    """One link of a sampler chain. Subclasses are frozen dataclasses: samplers are hashable cache keys."""

    name = "stage"

    @property
    def off(self) -> bool:
        """Whether the stage changes nothing (an "off" value such as TopK(0) or TopP(1)).

        A Sampler drops off stages, so they cost no kernel; the ecosystem (llama.cpp, vLLM,
        transformers) passes these values to mean "no truncation"/"no penalty".
        """
        return False

    def states(self, vocab: int) -> tuple:
        """The StateSpecs this stage carries on the device (none by default)."""
        return ()

    def initial(self, ctx: SeqContext) -> dict:
        """Initial values (numpy) of this stage's states for a new decode run."""
        return {}

    def update(self, states: dict, token, final) -> dict:
        """Traced: the stage's next states once `token` was drawn from the `final` logits."""
        return {}

    def trace_key(self):
        """What of this stage shapes the traced program (hashable). Stages whose parameters are device
        data (LogitBias) return less than themselves, so a new value traces the same program."""
        return self


class Processor(Stage):
    """A stage that rewrites the logits before temperature (penalties, watermark bias)."""

    def apply(self, x, states: dict):
        """Traced: the processed logits."""
        raise NotImplementedError


class Truncation(Stage):
    """A stage that keeps a subset of tokens after temperature."""

    def keep(self, x, states: dict):
        """Traced: the bool keep mask of the (scaled, possibly already truncated) logits x."""
        raise NotImplementedError

    def transform(self, x, states: dict):
        """Traced: the logits after this stage: x where keep, -inf elsewhere (a stage that rescales,
        such as DynamicTemperature, overrides this)."""
        from .. import eta
        return eta.mask_apply(x, self.keep(x, states))


def check_temperature(t) -> float:
    """t as a float, or a ValidationError unless it is finite and >= 0."""
    try:
        t = float(t)
    except (TypeError, ValueError):
        raise ValidationError(f"temperature must be a number >= 0, got {t!r}") from None
    if not (t >= 0.0 and math.isfinite(t)):
        raise ValidationError(f"temperature must be a finite number >= 0, got {t!r}")
    return t


def check_unit(p, fn: str, name: str, zero: bool = False, one: bool = True, off: str = "") -> float:
    """p as a float in the unit interval, or a ValidationError naming fn, the parameter and the range.

    `zero`/`one` say whether 0/1 are allowed; `off` names the value that turns the stage
    off (e.g. "1"), so the message tells what to pass for "no truncation".
    """
    interval = f"{'[' if zero else '('}0, 1{']' if one else ')'}"
    note = f" ({off} = off)" if off else ""
    try:
        v = float(p)
    except (TypeError, ValueError):
        raise ValidationError(f"{fn}: {name} must be a number in {interval}{note}, got {p!r}") from None
    ok = (0.0 <= v if zero else 0.0 < v) and (v <= 1.0 if one else v < 1.0)
    if not ok:
        raise ValidationError(f"{fn}: {name} must be in {interval}{note}, got {p!r}. Fix: pass a value in {interval}")
    return v
