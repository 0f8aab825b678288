"""Ctrl-C held back while the host mirror and the device must change together."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager


@contextmanager
def deferred_interrupts():
    """Hold Ctrl-C (SIGINT) until the block ends, then deliver it as the previous handler would.

    A KeyboardInterrupt can otherwise land between any two bytecodes, e.g. after a pass's
    cells are entered in the host mirror but before the pass is submitted. Only the main
    thread receives signals, so elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(frame))
    except (ValueError, OSError, TypeError):  # no signal handling here (an embedding host)
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            if callable(previous):
                previous(signal.SIGINT, caught[0])
            elif previous != signal.SIG_IGN:
                raise KeyboardInterrupt
