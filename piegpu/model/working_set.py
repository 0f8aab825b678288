"""WorkingSet: the KV state of one sequence on the device."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import ValidationError


@dataclass(eq=False)
class WorkingSet:
    """The KV state of one sequence on the device: per-layer K and V caches and its length.

    `state` is a u32 buffer [length, max_tokens, 0, 0]; kernels read both from it, so no
    size is compiled into them. `length` is the host's view, advanced as passes are
    submitted; `last_pass` is the id of the last submitted pass that extended it (a
    later rewind must not undo what that pass built on).
    """

    model: object  # the GpuModel whose caches these are
    max_tokens: int
    keys: list
    values: list
    state: object
    length: int = 0
    last_pass: int = 0
    binds: dict = field(default_factory=dict)  # bind groups of passes over this working set (die with it)
    plans: dict = field(default_factory=dict)  # dispatch plans of passes over this working set
    session: object = None  # the runtime Session decoding on it (made by Model.session)

    def reset(self) -> None:
        """Forget every position (the caches are overwritten as the sequence regrows)."""
        self.model.device.queue.write_buffer(self.state, 0, np.zeros(1, np.uint32).tobytes())
        self.length = 0

    def note_length(self, n: int) -> None:
        """Tell the host the device's length (after an accepting pass); nothing is written."""
        if not 0 <= n <= self.max_tokens:
            raise ValidationError(f"note_length({n}): outside 0..{self.max_tokens}")
        self.length = n

    def fork(self) -> "WorkingSet":
        """A new working set of the same size holding a copy of this one's KV positions (copied on the device).

        The copy is queued after every pass submitted so far, so it sees their tokens.
        """
        return self.model.fork(self)

    def set_length(self, n: int) -> None:
        """Truncate the sequence to its first n positions (device and host views)."""
        if not 0 <= n <= self.length:
            raise ValidationError(f"set_length({n}): the working set holds {self.length} positions")
        self.model.device.queue.write_buffer(self.state, 0, np.array([n], np.uint32).tobytes())
        self.length = n
