"""Serve soak: N mixed requests through one in-process server Engine -- RSS levels off, the KV pool stays
bounded, nothing is lost.

    LP_NUM_THREADS=2 python benchmarks/serve_soak.py [--requests 200] [--wave 20] [--kv-mb 400]
                                                     [--cache-mb 32] [--json FILE] [--check]

Loads the default model once, starts one Engine (max_batch 16) and submits the requests in waves of
--wave (the next wave when the previous one is done). Requests mix chat prompts with and without a
shared system prompt (some unique, so the prefix cache fills and evicts), max_tokens 4..24, greedy
or temperature 0.8 with seeds, and n=2 choices for some. After each wave it samples RSS (VmRSS),
the KV pool's pages_used / peak_pages_used / pages_total and the prefix cache's pages_held / hits /
evicted (idle between waves, pages_used must equal pages_held: no request leaks pages), and checks
every request got one "done" event, a finish per choice, and tokens or an error.
Verdict: RSS growth from the first sample at or after --warmup requests to the end, peak pages <=
pages_total, no leaked pages, no errors and no lost requests; --check exits 1 if growth >
--max-rss-growth (10%), any request was lost or failed, or a pool bound failed.
About 3-4 minutes on 2 lavapipe cores.
"""

from __future__ import annotations

import argparse
import json
import queue
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SYSTEM = ("You are a concise, friendly assistant for a small bookshop. Answer in one or two short sentences, "
          "never invent prices, and suggest a related book when it helps the customer.")
QUESTIONS = ["Do you have any poetry about the sea?", "What should I read after a long week?",
             "Recommend a mystery novel for a train ride.", "Is there a good book about mountains?",
             "What is a nice gift for someone who loves gardens?", "Can you suggest a short story about robots?",
             "Which book would you pick for a rainy afternoon?", "I liked a novel about a lighthouse. What next?"]


def rss_mb() -> float:
    """This process's resident set size in MiB (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def make_job(model, k: int, rng: random.Random, emit):
    """Request k: a mixed prompt, max_tokens, sampling and choice count."""
    from piegpu.samplers.rows import RowParams
    from piegpu.server.engine import Job
    q = QUESTIONS[k % len(QUESTIONS)] + (f" (ticket {k})" if k % 3 == 0 else "")  # every third prompt is unique
    msgs = ([{"role": "system", "content": SYSTEM}] if k % 2 == 0 else []) + [{"role": "user", "content": q}]
    ids = model.tokenizer.encode(model.chat_prompt(msgs)).ids
    temp = 0.0 if k % 4 < 2 else 0.8
    n = 2 if k % 5 == 0 else 1
    params = [RowParams(temp, seed=(k * 7 + i) % 1000) for i in range(n)]
    return Job(ids, params, rng.randint(4, 24), [], emit, None, frozenset(model.config.eos_token_ids))


def run_wave(engine, model, start: int, count: int, rng: random.Random, timeout: float) -> dict:
    """Submit requests start..start+count, wait for every "done"; per-request events summarized."""
    q: queue.Queue = queue.Queue()
    jobs = [make_job(model, k, rng, (lambda k: lambda ev: q.put((k, ev)))(k)) for k in range(start, start + count)]
    for job in jobs:
        engine.submit(job)
    ev: dict = {k: [] for k in range(start, start + count)}
    left, deadline = count, time.perf_counter() + timeout
    while left:
        try:
            k, e = q.get(timeout=max(0.1, deadline - time.perf_counter()))
        except queue.Empty:
            break
        ev[k].append(e)
        left -= e["type"] == "done"
    lost = errors = tokens = 0
    for k, es in ev.items():
        job = jobs[k - start]
        done = [e for e in es if e["type"] == "done"]
        errs = [e for e in es if e["type"] == "error"]
        finished = {e["index"] for e in es if e["type"] == "finish"}
        errors += bool(errs)
        got = done[0]["usage"]["completion_tokens"] if len(done) == 1 else 0
        tokens += got
        if len(done) != 1 or (not errs and (got == 0 or finished != set(range(len(job.params))))):
            lost += 1
            print(f"  request {k}: lost/incomplete: {es[-3:]}", file=sys.stderr)
        for e in errs:
            print(f"  request {k}: error: {e['message']}", file=sys.stderr)
    return {"lost": lost, "errors": errors, "tokens": tokens}


def main() -> int:
    """Run the soak, print the samples and the verdict."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--wave", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=40, help="requests before the RSS baseline sample")
    ap.add_argument("--kv-mb", type=float, default=400.0)
    ap.add_argument("--cache-mb", type=float, default=32.0)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds a wave may take")
    ap.add_argument("--max-rss-growth", type=float, default=10.0, help="percent, for --check")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    from piegpu.server.engine import Engine
    from piegpu.textgen.model import load_model
    t0 = time.perf_counter()
    model = load_model(verbose=False, kv_mb=a.kv_mb)
    engine = Engine(model, max_batch=16, max_queue=a.wave + 4, cache_mb=a.cache_mb)
    engine.start()
    rng, samples, done = random.Random(0), [], 0
    lost = errors = 0
    print(f"{'done':>5} {'s':>6} {'tokens':>6} {'RSS MiB':>8} {'pages':>6} {'peak':>5} {'total':>5} "
          f"{'cached':>6} {'hits':>5} {'evict':>5} {'err':>3} {'lost':>4}")
    try:
        while done < a.requests:
            count = min(a.wave, a.requests - done)
            r = run_wave(engine, model, done, count, rng, a.timeout)
            done += count
            lost, errors = lost + r["lost"], errors + r["errors"]
            kv, c = model.kv_stats(), engine.cache
            s = {"done": done, "s": round(time.perf_counter() - t0, 1), "tokens": r["tokens"],
                 "rss_mb": round(rss_mb(), 1),
                 "pages_used": kv["pages_used"], "peak_pages_used": kv["peak_pages_used"],
                 "pages_total": kv["pages_total"], "cache_pages": c.pages_held, "hits": c.hits,
                 "evicted": c.evicted, "errors": errors, "lost": lost}
            samples.append(s)
            print(" ".join(f"{v:>{w}}" for v, w in zip(s.values(), (5, 6, 6, 8, 6, 5, 5, 6, 5, 5, 3, 4))), flush=True)
            if r["lost"] or engine.error is not None:
                break
    finally:
        engine.stop()
    base = next((s for s in samples if s["done"] >= a.warmup), samples[0])
    growth = 100.0 * (samples[-1]["rss_mb"] - base["rss_mb"]) / base["rss_mb"]
    peak_ok = all(s["peak_pages_used"] <= s["pages_total"] for s in samples)
    leaked = samples[-1]["pages_used"] - samples[-1]["cache_pages"]  # idle: only the prefix cache holds pages
    ok = growth <= a.max_rss_growth and peak_ok and not leaked and not errors and not lost and \
        done == a.requests and engine.error is None
    verdict = {"requests": done, "wall_s": round(time.perf_counter() - t0, 1), "rss_base_mb": base["rss_mb"],
               "rss_end_mb": samples[-1]["rss_mb"], "rss_growth_pct": round(growth, 2), "peak_ok": peak_ok,
               "leaked_pages": leaked, "errors": errors, "lost": lost,
               "engine_error": repr(engine.error) if engine.error else None,
               "engine_stats": engine.stats.as_dict(), "ok": ok}
    print(f"RSS {base['rss_mb']} -> {samples[-1]['rss_mb']} MiB after {base['done']} requests: {growth:+.1f}%; "
          f"peak pages {max(s['peak_pages_used'] for s in samples)} <= {samples[-1]['pages_total']}: {peak_ok}; "
          f"pages held by no request or cache {leaked}; errors {errors}, lost {lost}, "
          f"engine error {engine.error!r}; {verdict['wall_s']} s -> "
          f"{'OK' if ok else 'FAIL'}")
    if a.json:
        Path(a.json).write_text(json.dumps({"samples": samples, "verdict": verdict}, indent=1))
    return 1 if a.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
