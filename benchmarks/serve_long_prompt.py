"""A long prompt arriving while rows decode: the running rows' inter-token latency while it is prefilled, and its
time to first token, at several `piegpu serve --max-pass-tokens` budgets (a server each), side by side in one run.

    python benchmarks/serve_long_prompt.py [--budgets 64,128,256] [--prompt-words 1500] [--rows 4] [--json]

Per budget: a fresh server, a warm-up (a short chat and another long prompt, so prefill shapes are compiled), then
`--rows` clients stream chats (max_tokens 96, greedy); once each has streamed a few tokens a long prompt arrives
(streamed, max_tokens 8). Gaps between the running streams' chunks are split into before the long prompt arrived and
while it waited for its first token.
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

WORDS = ("river stone lantern orchard copper meadow signal harbor velvet thunder quiet ember glacier willow "
         "compass marble falcon prairie canyon beacon").split()


def long_text(words: int, seed: int) -> str:
    """A prompt of about `words` words that shares no prefix with another seed's."""
    body = " ".join(f"{WORDS[(seed * 7 + i * 13) % len(WORDS)]}{(seed + i) % 97}" for i in range(words))
    return f"Text {seed}: {body}\nSummarize the text above in one sentence."


def _quantile(v: list, q: float):
    if not v:
        return None
    v = sorted(v)
    return statistics.median(v) if q == 0.5 else v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def stream(client, model: str, prompt: str, max_tokens: int, times: list) -> None:
    """Stream one chat, appending the arrival time of each content chunk to `times`."""
    for ch in client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}],
                                             max_tokens=max_tokens, temperature=0, stream=True):
        if ch.choices and ch.choices[0].delta.content:
            times.append(time.perf_counter())


def measure(budget: int, rows: int, words: int) -> dict:
    """One server at --max-pass-tokens `budget`: the running rows' gaps before and during the long prompt's wait."""
    import openai
    from tests.server.conftest import ServerProcess
    server = ServerProcess("--max-batch", "16", "--max-pass-tokens", str(budget))
    try:
        client = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=600)
        model = client.models.list().data[0].id
        stream(client, model, "Say hello.", 4, [])
        stream(client, model, long_text(words, 1000 + budget), 2, [])  # the prefill shapes compiled
        times = [[] for _ in range(rows)]
        threads = [threading.Thread(target=stream, args=(client, model, f"Write a long story about {w}.", 96, t))
                   for w, t in zip(WORDS, times)]
        for t in threads:
            t.start()
        while min(len(t) for t in times) < 6:
            time.sleep(0.05)
        mine: list = []
        arrive = time.perf_counter()
        stream(client, model, long_text(words, budget), 8, mine)
        first = mine[0] if mine else time.perf_counter()
        for t in threads:
            t.join()
        before = [b - a for t in times for a, b in zip(t, t[1:]) if b <= arrive]
        during = [b - a for t in times for a, b in zip(t, t[1:]) if arrive < b <= first]
        return {"budget": budget, "ttft_s": first - arrive, "itl_before_p50_s": _quantile(before, 0.5),
                "itl_during_p50_s": _quantile(during, 0.5), "itl_during_p95_s": _quantile(during, 0.95),
                "itl_during_max_s": max(during) if during else None, "gaps_during": len(during)}
    finally:
        server.stop()


def main(argv=None) -> int:
    """Run every budget and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budgets", default="64,128,256", help="--max-pass-tokens values, one server each")
    ap.add_argument("--prompt-words", type=int, default=1500, help="words of the long prompt (~2 tokens each)")
    ap.add_argument("--rows", type=int, default=4, help="clients streaming while it arrives")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = [measure(int(b), args.rows, args.prompt_words) for b in args.budgets.split(",")]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    ms = lambda v: f"{1000 * v:.0f} ms" if v is not None else "-"  # noqa: E731
    print(f"a ~{args.prompt_words}-word prompt arriving while {args.rows} rows stream (greedy, max_tokens 96)")
    print(f"{'budget':>6} {'its TTFT':>9} {'rows ITL p50 before':>20} {'during p50':>11} {'during p95':>11} "
          f"{'during max':>11} {'gaps':>5}")
    for r in rows:
        print(f"{r['budget']:>6} {r['ttft_s']:>8.2f}s {ms(r['itl_before_p50_s']):>20} {ms(r['itl_during_p50_s']):>11} "
              f"{ms(r['itl_during_p95_s']):>11} {ms(r['itl_during_max_s']):>11} {r['gaps_during']:>5}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
