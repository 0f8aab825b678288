"""Hypothesis strategies over tests/progen.py: random eta programs whose every choice is a hypothesis draw.

progen's generator asks a numpy Generator for its choices; `DrawRandom` answers the same
calls from hypothesis, so a failing program shrinks (fewer ops, simpler choices) instead
of being an opaque seed. Bulk array values (inputs, index tables) come from a numpy
Generator seeded by one draw: they are reproducible but shrink only as a whole.
"""

from __future__ import annotations

import numpy as np
from hypothesis import assume, strategies as st

from tests.progen import MAX_ELEMENTS, random_program_from


class DrawRandom:
    """The subset of numpy.random.Generator that progen uses, backed by hypothesis draws."""

    def __init__(self, draw):
        self.draw = draw  # a composite strategy's draw function
        self._bulk = None

    def bulk(self) -> np.random.Generator:
        """The numpy Generator for array-valued draws (seeded by one hypothesis draw, on first use)."""
        if self._bulk is None:
            self._bulk = np.random.default_rng(self.draw(st.integers(0, 2**32 - 1)))
        return self._bulk

    def integers(self, low, high=None, size=None, endpoint=False, dtype=None):
        """Like Generator.integers; scalar draws shrink towards `low`."""
        if size is not None:
            return self.bulk().integers(low, high, size=size, endpoint=endpoint, **({"dtype": dtype} if dtype else {}))
        if high is None:
            low, high = 0, low
        top = int(high) if endpoint else int(high) - 1
        return self.draw(st.integers(int(low), top))

    def random(self, size=None):
        """Like Generator.random; scalar draws shrink towards 0."""
        if size is not None:
            return self.bulk().random(size)
        return self.draw(st.integers(0, 2**16 - 1)) / 2**16

    def standard_normal(self, size=None):
        """Like Generator.standard_normal; scalar draws shrink towards 0."""
        if size is not None:
            return self.bulk().standard_normal(size)
        return self.draw(st.floats(-4.0, 4.0, allow_nan=False, allow_subnormal=False))

    def choice(self, a, size=None, p=None):
        """Like Generator.choice (a sequence or an int); scalar draws shrink towards the first element."""
        items = range(a) if isinstance(a, (int, np.integer)) else list(a)
        if size is not None:
            return self.bulk().choice(np.asarray(items), size=size, p=p)
        if p is None:
            return items[self.draw(st.integers(0, len(items) - 1))]
        cdf = np.cumsum(np.asarray(p, np.float64))
        u = self.draw(st.integers(0, 2**16 - 1)) / 2**16 * cdf[-1]
        return items[min(int(np.searchsorted(cdf, u, side="right")), len(items) - 1)]


@st.composite
def programs(draw, max_ops: int = 16):
    """(program, inputs, exact flags): a random pure eta program and inputs for it."""
    n_ops = draw(st.integers(1, max_ops))
    prog, inputs, exact = random_program_from(DrawRandom(draw), n_ops)
    assume(max(n.type.size for n in prog.nodes if n.type is not None) <= MAX_ELEMENTS)
    return prog, inputs, exact


@st.composite
def special_floats(draw, shape):
    """f32 arrays rich in IEEE specials: NaN, +-inf, +-0, subnormals, extremes, ties."""
    size = int(np.prod(shape)) if shape else 1
    elems = st.one_of(st.sampled_from([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 3.4e38, -3.4e38, 1e-45]),
                      st.floats(width=32, allow_nan=True, allow_infinity=True))
    vals = draw(st.lists(elems, min_size=size, max_size=size))
    return np.asarray(vals, np.float32).reshape(shape)
