"""Host CPU of the process's Python threads: what a GPU cannot hide (lavapipe's native threads are device work)."""

from __future__ import annotations

import os
import threading
import time

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def python_threads_cpu_s() -> float:
    """CPU seconds of this process's live Python threads: the calling thread to the ns, others from /proc.

    Native threads that are not Python threads (lavapipe's workers and queue, wgpu's) are
    left out: on a CPU adapter they run the device's work. Where /proc is missing (not
    Linux) only the calling thread counts.
    """
    me = threading.get_native_id()
    total = time.thread_time()
    for t in threading.enumerate():
        tid = t.native_id
        if tid is None or tid == me:
            continue
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile, or no /proc
            continue
        total += (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime
    return total
