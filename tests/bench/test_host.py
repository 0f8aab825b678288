"""The host-CPU figure of `piegpu bench`: Python threads only, the calling thread to the ns."""

import threading
import time

from piegpu.bench.host import python_threads_cpu_s


def test_it_counts_a_busy_python_thread_and_not_a_sleeping_one():
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            pass
    t = threading.Thread(target=spin)
    before = python_threads_cpu_s()
    t.start()
    time.sleep(0.6)  # the main thread sleeps: what is counted is the spinning thread's CPU
    during = python_threads_cpu_s()
    stop.set()
    t.join()
    assert during - before > 0.2  # the spinner ran for ~0.6 s (a share of a core on a loaded machine)
    t0 = python_threads_cpu_s()
    time.sleep(0.3)
    assert python_threads_cpu_s() - t0 < 0.05  # nobody busy: next to nothing
