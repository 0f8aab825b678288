"""GET /metrics: the engine's counters in the Prometheus text exposition format (version 0.0.4).

llama.cpp's metric names (llamacpp:*, as its tools/server/README.md lists them) from the
engine's EngineStats, plus piegpu's own (piegpu:*): requests by state, the KV page pool and
the prefix cache. Written by hand (no prometheus_client dependency): one `# HELP` and one
`# TYPE` line per metric, then `name value` (histograms: `name_bucket{le=...}`, `name_sum`, `name_count`).
"""

from __future__ import annotations

import math

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _value(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    v = float(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def metric_rows(engine) -> list:
    """(name, type, help, value) of every metric, read from the engine now."""
    s = engine.stats
    counts = engine.counts()
    kv = engine.model.kv_stats()
    cache = engine.cache
    total, used = kv.get("pages_total", 0), kv.get("pages_used", 0)
    return [
        ("llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed.", s.prompt_tokens),
        ("llamacpp:prompt_seconds_total", "counter", "Prompt process time in seconds.", s.prefill_s),
        ("llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed.", s.tokens_predicted),
        ("llamacpp:tokens_predicted_seconds_total", "counter", "Predict process time in seconds.", s.decode_s),
        ("llamacpp:n_decode_total", "counter", "Total number of decode passes (prefill and decode).",
         s.prefill_passes + s.decode_passes),
        ("llamacpp:n_tokens_max", "counter", "High watermark of the context size observed.", s.n_tokens_max),
        ("llamacpp:prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.",
         s.prefill_tokens / s.prefill_s if s.prefill_s else 0.0),
        ("llamacpp:predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.",
         s.tokens_predicted / s.decode_s if s.decode_s else 0.0),
        ("llamacpp:n_busy_slots_per_decode", "gauge", "Average number of busy slots (rows) per decode pass.",
         s.decode_rows / s.decode_passes if s.decode_passes else 0.0),
        ("llamacpp:requests_processing", "gauge", "Number of requests processing.",
         counts["prefilling"] + counts["running"]),
        ("llamacpp:requests_deferred", "gauge", "Number of requests deferred.", counts["waiting"]),
        ("piegpu:requests_waiting", "gauge", "Requests queued, not yet given KV pages or a prefill.",
         counts["waiting"]),
        ("piegpu:requests_prefilling", "gauge", "Requests whose prompt is being prefilled.", counts["prefilling"]),
        ("piegpu:requests_running", "gauge", "Requests whose rows are in the decode passes.", counts["running"]),
        ("piegpu:requests_finished_total", "counter", "Requests that left the engine (done, failed, cancelled).",
         s.requests_finished),
        ("piegpu:queue_capacity", "gauge", "Requests the server holds at most (--max-queue).", engine.max_queue),
        ("piegpu:batch_capacity", "gauge", "Rows of one decode pass at most (--max-batch).", engine.max_batch),
        ("piegpu:prefill_tokens_total", "counter", "Prompt tokens run through prefill passes.", s.prefill_tokens),
        ("piegpu:shared_tokens_total", "counter",
         "Prompt tokens whose KV another sequence or the prefix cache already held.", s.shared_tokens),
        ("piegpu:decode_passes_total", "counter", "Decode passes run.", s.decode_passes),
        ("piegpu:host_waits_total", "counter", "Host readbacks of decoded tokens.", s.host_waits),
        ("piegpu:kv_pages_total", "gauge", "Pages of the KV pool.", total),
        ("piegpu:kv_pages_used", "gauge", "Pages of the KV pool in use (sequences and the prefix cache).", used),
        ("piegpu:kv_usage_ratio", "gauge", "Fraction of the KV pool's pages in use.", used / total if total else 0.0),
        ("piegpu:kv_page_tokens", "gauge", "Positions one KV page holds.", kv.get("page_tokens", 0)),
        ("piegpu:prefix_cache_pages", "gauge", "KV pages the prefix cache holds.", cache.pages_held),
        ("piegpu:prefix_cache_hits_total", "counter", "Prompts that found a cached prefix.", cache.hits),
        ("piegpu:prefix_cache_misses_total", "counter", "Prompts that found no cached prefix.", cache.misses),
        ("piegpu:prefix_cache_evicted_total", "counter", "Cached prefixes evicted.", cache.evicted),
    ]


def prometheus_text(engine) -> str:
    """The Prometheus text exposition of the engine's metrics, the latency histograms last."""
    lines = []
    for name, kind, text, value in metric_rows(engine):
        lines += [f"# HELP {name} {_escape_help(text)}", f"# TYPE {name} {kind}", f"{name} {_value(value)}"]
    for name, text, hist in engine.latency.rows():
        buckets, total, count = hist.snapshot()
        lines += [f"# HELP {name} {_escape_help(text)}", f"# TYPE {name} histogram"]
        lines += [f'{name}_bucket{{le="{_value(bound)}"}} {n}' for bound, n in buckets]
        lines += [f"{name}_sum {_value(total)}", f"{name}_count {count}"]
    return "\n".join(lines) + "\n"
