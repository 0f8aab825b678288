"""Constrained decoding: the device automaton against llguidance's host masks and free text, side by side in one run.

Each round runs every (mode, window) once, in turn, so a slow spell of the shared machine lands on all alike; the
first round warms up (compiles) and is dropped. Per mode: decode ms per generated token, host waits per token, and
for the device path the automaton's build time (uncached) and table bytes.
"""

from __future__ import annotations

import statistics
import time

TOOL = {"type": "object", "properties": {"location": {"type": "string", "maxLength": 32},
                                         "unit": {"enum": ["celsius", "fahrenheit"]},
                                         "days": {"type": "integer", "minimum": 1, "maximum": 14}},
        "required": ["location", "unit", "days"]}
RECORDS = {"type": "object", "properties": {"people": {"type": "array", "maxItems": 12, "items": {
    "type": "object", "properties": {"name": {"type": "string", "maxLength": 24},
                                     "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                     "city": {"type": "string", "maxLength": 24}},
    "required": ["name", "age", "city"]}}}, "required": ["people"]}
WORKLOADS = {
    "tool": ("Call get_weather for Paris for the next 3 days, as JSON arguments.", TOOL, 48),
    "records": ("List twelve people with their name, age and city as JSON.", RECORDS, 128),
}
MODES = ("free", "device", "host")


def _one(model, workload: str, mode: str, window: int) -> dict:
    prompt, schema, n = WORKLOADS[workload]
    kw = {} if mode == "free" else {"json_schema": schema, "grammar_mode": mode}
    g = model.generate(prompt, chat=True, max_tokens=n, window=window, **kw)
    g.run()
    k = max(1, g.stats.generated)
    return {"ms_per_token": g.stats.decode_s / k * 1e3, "waits_per_token": g.stats.host_waits / k,
            "tokens": g.stats.generated, "stop": g.stats.stop_reason}


def run(model, workload: str, rounds: int = 3, windows=(1, 8)) -> list:
    """Rows {workload, mode, window, ms_per_token, waits_per_token, tokens, ...} (medians over rounds)."""
    from ..inferlets.automaton import build
    from ..inferlets.schema_regex import schema_regex
    from ..textgen.grammar_run import _pieces
    pieces, key = _pieces(model)
    t0 = time.perf_counter()
    a = build(schema_regex(WORKLOADS[workload][1]), pieces, model.config.eos_token_ids, key, disk=False)
    build_s = time.perf_counter() - t0
    cases = [(m, w) for w in windows for m in MODES]
    got: dict = {c: [] for c in cases}
    for r in range(rounds + 1):
        for c in cases:
            res = _one(model, workload, *c)
            if r:
                got[c].append(res)
    out = []
    for (mode, w), rs in got.items():
        row = {"workload": workload, "mode": mode, "window": w, "tokens": rs[-1]["tokens"], "stop": rs[-1]["stop"]}
        for f in ("ms_per_token", "waits_per_token"):
            row[f] = statistics.median(x[f] for x in rs)
        if mode == "device":
            row.update(build_s=build_s, table_bytes=a.nbytes, states=a.states, classes=a.classes)
        out.append(row)
    free = {r["window"]: r["ms_per_token"] for r in out if r["mode"] == "free"}
    for row in out:
        row["vs_free"] = row["ms_per_token"] / free[row["window"]]
    return out


def rows(results: list) -> list:
    """Printable lines of run()'s rows."""
    lines = []
    for r in results:
        extra = (f"; automaton {r['states']} states x {r['classes']} classes, {r['table_bytes'] / 2**20:.2f} MiB, "
                 f"built in {r['build_s']:.2f} s") if r["mode"] == "device" else ""
        lines.append(f"{r['workload']:8s} {r['mode']:6s} W={r['window']}: {r['ms_per_token']:6.1f} ms/token "
                     f"({r['vs_free']:.2f}x free), {r['waits_per_token']:.2f} host waits/token, {r['tokens']} tokens "
                     f"({r['stop']}){extra}")
    return lines


__all__ = ["run", "rows", "WORKLOADS", "MODES"]
