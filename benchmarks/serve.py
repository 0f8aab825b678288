"""Serving benchmark: aggregate tokens/s, time to first token and inter-token latency at 1, 4 and 16 concurrent
streaming clients.

Starts `piegpu serve` on a free loopback port (or uses --url), then for each concurrency C runs C
client threads with the official openai client, each streaming --requests chat completions
one after another (temperature 0.8, different prompts, max_tokens --tokens), after an unmeasured
warm-up round at each concurrency with other prompts (so first-use kernel compiles are not timed,
and the measured prompts are still prefilled). All figures come
from one run, so their ratios are side by side:

    python benchmarks/serve.py [--tokens 32] [--requests 2] [--clients 1,4,16] [--json]
    python benchmarks/serve.py --ray [--clients 4] [--chats 8] [--turns 3]   # Ray Serve replicas (serve_ray.py)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TOPICS = ["the sea", "a city at night", "autumn leaves", "a robot", "coffee", "mountains", "a library", "trains",
          "the moon", "a garden", "winter", "a market", "rain", "a lighthouse", "bicycles", "the desert"]


def run_clients(client, model: str, clients: int, requests: int, tokens: int,
                task: str = "Write a long poem about {}.") -> dict:
    """C threads, each streaming `requests` chats in turn; returns tokens, wall time, TTFTs and inter-token latencies
    (the gaps between a stream's content chunks, as the client receives them)."""
    ttfts: list = []
    gaps: list = []
    counts: list = []
    errors: list = []

    def one(i: int) -> None:
        for r in range(requests):
            topic = TOPICS[(i * requests + r) % len(TOPICS)]
            t0 = time.perf_counter()
            first = last = None
            n = 0
            try:
                for ch in client.chat.completions.create(
                        model=model, messages=[{"role": "user", "content": task.format(topic)}],
                        max_tokens=tokens, temperature=0.8, seed=i * 100 + r, stream=True,
                        stream_options={"include_usage": True}):
                    if ch.choices and ch.choices[0].delta.content:
                        now = time.perf_counter()
                        if first is None:
                            first = now - t0
                        else:
                            gaps.append(now - last)
                        last = now
                    if ch.usage is not None:
                        n = ch.usage.completion_tokens
            except Exception as e:  # noqa: BLE001 -- counted and reported
                errors.append(repr(e))
                continue
            ttfts.append(first if first is not None else time.perf_counter() - t0)
            counts.append(n)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"clients": clients, "requests": len(counts), "tokens": sum(counts), "wall_s": wall,
            "tokens_per_s": sum(counts) / wall if wall > 0 else 0.0,
            "ttft_p50_s": _quantile(ttfts, 0.5), "ttft_p95_s": _quantile(ttfts, 0.95),
            "itl_p50_s": _quantile(gaps, 0.5), "itl_p95_s": _quantile(gaps, 0.95), "errors": errors}


def _quantile(values: list, q: float) -> float | None:
    """The q-quantile of values (the nearest rank; the median for 0.5), None for none."""
    if not values:
        return None
    v = sorted(values)
    return statistics.median(v) if q == 0.5 else v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def _engine_stats(url: str) -> dict:
    """The server engine's counters from /health (piegpu serve only; {} elsewhere)."""
    import urllib.request
    try:
        with urllib.request.urlopen(url.rsplit("/v1", 1)[0] + "/health", timeout=10) as r:
            return json.loads(r.read()).get("engine", {})
    except (OSError, ValueError):
        return {}


def main(argv=None) -> int:
    """Run the benchmark and print its table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=None, help="an already running server's base URL (default: start one)")
    ap.add_argument("--clients", default=None, help="concurrencies (1,4,16; with --ray one number, 4)")
    ap.add_argument("--requests", type=int, default=2, help="requests per client, one after another")
    ap.add_argument("--tokens", type=int, default=32, help="max_tokens per request")
    ap.add_argument("--max-pass-tokens", type=int, default=None, help="piegpu serve --max-pass-tokens (its default)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--ray", action="store_true", help="piegpu serve --ray: 1 and 2 replicas, affinity on/off "
                    "(benchmarks/serve_ray.py)")
    ap.add_argument("--chats", type=int, default=8, help="with --ray: multi-turn chats for the prefix hit rate")
    ap.add_argument("--turns", type=int, default=3, help="with --ray: turns per chat")
    args = ap.parse_args(argv)
    if args.ray:
        import serve_ray
        args.clients = args.clients or "4"
        return serve_ray.main(args)
    args.clients = args.clients or "1,4,16"
    import openai
    server = None
    if args.url is None:
        from tests.server.conftest import ServerProcess
        flags = ("--max-pass-tokens", str(args.max_pass_tokens)) if args.max_pass_tokens else ()
        server = ServerProcess("--max-batch", "16", *flags)
        url = server.url
    else:
        url = args.url.rstrip("/") + ("" if args.url.rstrip("/").endswith("/v1") else "/v1")
    try:
        client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=600)
        model = client.models.list().data[0].id
        for c in args.clients.split(","):  # warm-up at every concurrency: each batch size's kernels compiled
            # (lavapipe JIT-compiles a pipeline on first use, 0.1-0.4 s); other prompts than the measured ones,
            # so those are still prefilled (all but the chat template's shared prefix)
            run_clients(client, model, int(c), 1, 4, "Describe {} in one line.")
        rows = []
        for c in args.clients.split(","):
            before = _engine_stats(url)
            rows.append(run_clients(client, model, int(c), args.requests, args.tokens))
            after = _engine_stats(url)
            rows[-1]["engine"] = {k: after[k] - before.get(k, 0) for k in after} if after else {}
    finally:
        if server is not None:
            server.stop()
    base = rows[0]["tokens_per_s"] or 1.0
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"piegpu serve on {url}: {args.requests} streamed chat requests per client, max_tokens {args.tokens}, "
          "temperature 0.8")
    print(f"{'clients':>7} {'requests':>8} {'tokens':>6} {'wall s':>7} {'tokens/s':>9} {'x 1 client':>10} "
          f"{'TTFT p50':>9} {'TTFT p95':>9} {'ITL p50':>8} {'ITL p95':>8}")
    for r in rows:
        print(f"{r['clients']:>7} {r['requests']:>8} {r['tokens']:>6} {r['wall_s']:>7.1f} {r['tokens_per_s']:>9.1f} "
              f"{r['tokens_per_s'] / base:>10.2f} {r['ttft_p50_s']:>8.2f}s {r['ttft_p95_s']:>8.2f}s "
              f"{1000 * (r['itl_p50_s'] or 0):>6.0f}ms {1000 * (r['itl_p95_s'] or 0):>6.0f}ms"
              + (f"  {len(r['errors'])} errors" if r["errors"] else ""))
    for r in rows:
        e = r.get("engine") or {}
        if e:
            print(f"  {r['clients']:>2} clients: {e['decode_passes']} decode passes of {e['decode_rows'] / max(1, e['decode_passes']):.1f} "
                  f"rows avg in {e['decode_s']:.1f} s ({1000 * e['decode_s'] / max(1, e['decode_passes']):.0f} ms each); "
                  f"{e['prefill_passes']} prefill passes, {e['prefill_tokens']} tokens in {e['prefill_s']:.1f} s; "
                  f"{e.get('shared_tokens', 0)} prompt tokens' KV pages shared from other sequences or the cache")
    return 0


if __name__ == "__main__":
    sys.exit(main())
