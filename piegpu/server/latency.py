"""Latency histograms of the served requests: time to first token, inter-token latency, queue time, end to end.

vLLM's metric names (vllm:time_to_first_token_seconds ...) under piegpu's prefix, with bucket bounds like theirs;
GET /metrics renders them as Prometheus histograms (server/metrics.py). Observed on the engine thread, read on the
HTTP side: each histogram takes a lock.
"""

from __future__ import annotations

import bisect
import threading

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0)
ITL_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0)
REQUEST_BUCKETS = (0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                   240.0, 480.0, 960.0)


class Histogram:
    """Counts of observations at or below each bound, their sum and count (Prometheus' cumulative histogram)."""

    def __init__(self, bounds: tuple):
        self.bounds = tuple(bounds)
        self._counts = [0] * (len(self.bounds) + 1)  # the last: above every bound (+Inf only)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        """Count one observation."""
        with self._lock:
            self._counts[bisect.bisect_left(self.bounds, seconds)] += 1
            self._sum += seconds

    def snapshot(self) -> tuple:
        """([(bound, cumulative count)] ending with (inf, count), sum, count), read at one moment."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        out, running = [], 0
        for bound, n in zip(self.bounds + (float("inf"),), counts):
            running += n
            out.append((bound, running))
        return out, total, running


class Latencies:
    """The four histograms an engine fills (Engine.latency)."""

    def __init__(self):
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.queue = Histogram(REQUEST_BUCKETS)
        self.e2e = Histogram(REQUEST_BUCKETS)

    def rows(self) -> list:
        """(name, help, histogram) for /metrics."""
        return [
            ("piegpu:time_to_first_token_seconds", "Time from a request's arrival to its first generated token.",
             self.ttft),
            ("piegpu:inter_token_latency_seconds", "Time between two generated tokens of one choice, as the client "
             "receives them (with run-ahead, tokens read in one host wait arrive together).", self.itl),
            ("piegpu:request_queue_time_seconds", "Time a request waited before its prompt began to be processed.",
             self.queue),
            ("piegpu:e2e_request_latency_seconds", "Time from a request's arrival to its last token (requests that "
             "finished, not cancelled or failed).", self.e2e),
        ]
