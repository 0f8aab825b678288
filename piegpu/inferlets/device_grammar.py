"""The device side of automaton-constrained decoding: the tables as constant channels, the state as loop-carried data.

Each pass's epilogue reads the row's [state, classes], masks the logits by `table[state * classes + class_of] >= 0`,
lets the sampler draw under that mask, and puts `[table[state * classes + class_of[token]], classes]` back -- the
grammar advances on the device like the RNG, so the loop runs ahead with no host mask per token
(inferlets/automaton.py builds the tables). The tables are padded to a power of two so grammars of similar size
share one traced program.
"""

from __future__ import annotations

from .. import eta
from ..dtypes import dtype
from .automaton import TokenAutomaton

MIN_TABLE = 1 << 12


def padded_size(entries: int) -> int:
    """The table length a program is traced for: the next power of two >= entries (at least MIN_TABLE)."""
    n = MIN_TABLE
    while n < entries:
        n <<= 1
    return n


def on_rows(params, automaton: TokenAutomaton):
    """A batch row's RowParams running `automaton` on the device (no host mask; its padded table size)."""
    from dataclasses import replace
    return replace(params, constrained=False, automaton=padded_size(automaton.table.size))


class DeviceGrammar:
    """The channels of one decode loop's automaton: class_of, table (constant) and the [state, classes] cell."""

    def __init__(self, vocab: int, table_size: int, label: str = "grammar"):
        from ..runtime.channel import Channel
        self.vocab = vocab
        self.table_size = table_size
        self.class_of = Channel([vocab], dtype.i32, constant=True).named(f"{label}:class_of")
        self.table = Channel([table_size], dtype.i32, constant=True).named(f"{label}:table")
        self.state = Channel([2], dtype.i32).named(f"{label}:state")
        self.loaded: str | None = None  # the key of the automaton the tables hold

    def load(self, automaton: TokenAutomaton) -> None:
        """Host: put the automaton's tables (a no-op when they are already there)."""
        if self.loaded == automaton.key:
            return
        if automaton.table.size > self.table_size or automaton.class_of.size != self.vocab:
            raise ValueError(f"DeviceGrammar.load: tables of {automaton.table.size} entries / {automaton.class_of.size} "
                             f"tokens do not fit channels of {self.table_size} / {self.vocab}")
        class_of, flat = automaton.device_arrays(self.table_size)
        for ch, values in ((self.class_of, class_of), (self.table, flat)):
            ch.clear()
            ch.put(values)
        self.loaded = automaton.key

    def seed(self, automaton: TokenAutomaton, state: int) -> None:
        """Host: start the loop in `state` (no pass in flight)."""
        self.state.clear()
        self.state.put([state, automaton.classes])

    def allowed(self, cell):
        """Traced: the bool [vocab] mask of the [state, classes] cell."""
        base = eta.slice_last(cell, 0, 1) * eta.slice_last(cell, 1, 1)
        return eta.ge(eta.gather(self.table.read(), base + self.class_of.read()), 0)

    def advance(self, cell, token):
        """Traced: the next [state, classes] cell once `token` (i32 [1]) was drawn."""
        classes = eta.slice_last(cell, 1, 1)
        idx = eta.slice_last(cell, 0, 1) * classes + eta.gather(self.class_of.read(), token)
        return eta.concat([eta.gather(self.table.read(), idx), classes])

    def step(self, states, logits):
        """Traced: mask, draw with the SamplerStates `states`, advance; returns the token (i32 [1])."""
        cell = self.state.take()
        token = eta.reshape(eta.cast(states.step(logits, self.allowed(cell)), dtype.i32), [1])
        self.state.put(self.advance(cell, token))
        return token


__all__ = ["DeviceGrammar", "padded_size", "on_rows"]
