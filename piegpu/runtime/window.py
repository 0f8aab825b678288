"""How far passes run ahead of the host: the windows, and the channel history that lets them be rewound."""

from __future__ import annotations

from ..errors import ValidationError

HISTORY = 16  # channel ring cells beyond the capacity: room for passes in flight to be rewound
# Passes in flight ahead of the host on a GPU, submitted in groups of half that (default_group): 8 passes,
# groups of 4, put a B=1 token's host CPU at 0.69-0.80 ms and a B=8 pass's at 0.74-0.91 (window 4, pairs:
# 1.15-1.21 and 1.11-1.17; window 1: 1.5-1.7 and 1.7-2.0; measured on lavapipe, where the host's share is the
# same as on a GPU). A stop string or a leaving row costs at most a window of passes computed for nothing.
WINDOW = 8
# lavapipe (CPU adapters) runs one submission at a time and a second queued submission
# slowed decoding by 15-30% in every measurement here (window 1: 44-49 ms/token, 2 or 4:
# 53-63 ms/token; a B=8 batch: 107 ms per pass at window 1, 149 at 2, 163 at 4), so one
# pass is in flight there by default.
CPU_WINDOW = 1

MAX_WINDOW = HISTORY // 2  # a batch keeps up to 2W - 1 passes in flight; each must fit in the rewind history


def check_window(window, where: str) -> int:
    """`window` if it is an int in 1..MAX_WINDOW, else ValidationError naming it."""
    if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= MAX_WINDOW:
        raise ValidationError(f"{where}: window must be an int in 1..{MAX_WINDOW} (passes kept in flight), got "
                              f"{window!r}. Fix: window=1 waits for every pass; window={WINDOW} runs {WINDOW} ahead")
    return window


def check_group(group, where: str) -> int:
    """`group` if it is an int in 1..MAX_WINDOW, else ValidationError naming it."""
    if isinstance(group, bool) or not isinstance(group, int) or not 1 <= group <= MAX_WINDOW:
        raise ValidationError(f"{where}: group must be an int in 1..{MAX_WINDOW} (passes a submit, at most the "
                              f"window), got {group!r}. Fix: group=1 submits every pass on its own")
    return group


def default_group(window: int) -> int:
    """Passes a submit at this window: half the window (one group runs while the host reads and fills the
    other), one pass at windows 1 and 2."""
    return max(1, window // 2)


def default_window(dev) -> int:
    """The window the adapter measures best: CPU_WINDOW on CPU adapters (lavapipe), else WINDOW."""
    return CPU_WINDOW if dev.is_cpu else WINDOW


def channel_capacity() -> int:
    """The capacity that lets run_ahead keep its full window of passes in flight (any window up to MAX_WINDOW)."""
    return MAX_WINDOW + 1
