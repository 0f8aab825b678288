"""Penalties: repetition, presence and frequency, from seen-token counts kept on the device."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import eta
from ..dtypes import dtype
from ..errors import ValidationError
from .state import Processor, StateSpec


@dataclass(frozen=True)
class Penalties(Processor):
    """Repetition (CTRL: divide positive, multiply negative logits), presence and frequency penalties.

    Seen-token counts i32[vocab] live in a device channel: the sequence's tokens are
    counted when decoding starts and each drawn token is added with scatter_add.
    """

    repetition: float = 1.0
    presence: float = 0.0
    frequency: float = 0.0
    name = "penalties"

    def __post_init__(self):
        r, pr, fr = float(self.repetition), float(self.presence), float(self.frequency)
        if not (r > 0 and math.isfinite(r)):
            raise ValidationError(f"repetition_penalty must be a finite number > 0 (1 = off), got {self.repetition!r}")
        for nm, v in (("presence_penalty", pr), ("frequency_penalty", fr)):
            if not math.isfinite(v):
                raise ValidationError(f"{nm} must be finite (0 = off), got {v!r}")
        object.__setattr__(self, "repetition", r)
        object.__setattr__(self, "presence", pr)
        object.__setattr__(self, "frequency", fr)

    @property
    def active(self) -> bool:
        """Whether any penalty changes the logits."""
        return self.repetition != 1.0 or self.presence != 0.0 or self.frequency != 0.0

    @property
    def off(self) -> bool:
        """repetition 1, presence 0 and frequency 0: the logits are unchanged (no seen-counts channel)."""
        return not self.active

    def states(self, vocab):
        return (StateSpec("seen_counts", (vocab,), dtype.i32),)

    def initial(self, ctx):
        ids = np.asarray(ctx.tokens, np.int64)
        ids = ids[(ids >= 0) & (ids < ctx.vocab)]
        return {"seen_counts": np.bincount(ids, minlength=ctx.vocab).astype(np.int32)}

    def apply(self, x, states):
        counts = states["seen_counts"]
        seen = counts > 0
        if self.repetition != 1.0:
            x = eta.select(seen, eta.select(x > 0.0, x * (1.0 / self.repetition), x * self.repetition), x)
        if self.presence != 0.0:
            x = x - eta.cast(seen, dtype.f32) * self.presence
        if self.frequency != 0.0:
            x = x - eta.cast(counts, dtype.f32) * self.frequency
        return x

    def update(self, states, token, final):
        counts = eta.scatter_add(states["seen_counts"], eta.reshape(eta.cast(token, dtype.i32), [1]), 1)
        # "+ 0": the kernel planner cannot yet put a scatter result into a channel directly
        # (kernel/templates.materialize recomputes put roots, and scatters are not inlinable).
        return {"seen_counts": counts + 0}
