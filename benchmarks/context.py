"""Decode cost per token against context length, for the default model.

    python benchmarks/context.py [--contexts 20,500,1000,2000,4000] [--new 32] [--runs 3] [--kv-dtype f16,f32]
                                 [--json FILE]

For each context C the working set holds exactly C token ids (a tokenized paragraph repeated
and cut to C-1 ids, then a one-token prompt " the" passed to model.generate(..., working_set=ws)),
and a greedy generation of --new tokens runs on it. The number is the decode phase only:
gen.stats.decode_s / gen.stats.generated (prefill_s is timed apart by generate() and left
out), i.e. ms per generated token, host readback of each token included. Each context is
prefilled once (plus a warm-up generation that builds its decode loop); before every timed
generation the working set is cut back to C-1 tokens, so each run decodes at positions C..C+new.
Rounds alternate contexts (--runs rounds); the table shows the median per context, the
spread, the ratio of the medians to the first context's, and the paired ratio: the median over rounds of
each round's ratio to the first context's run next to it in time. On a noisy machine (slow spells of
seconds) the paired ratio of many short rounds (--new 4 --runs 40) is the steadier figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from piegpu.model.kv_pool import DEFAULT_KV_DTYPE
from piegpu.runtime.session import run_sync
from piegpu.textgen.model import load_model

PARAGRAPH = (
    "The river wound through the valley for many miles before it reached the sea. Along its banks, "
    "farmers grew wheat and barley, and in the spring the water rose high enough to flood the lower "
    "fields. Children from the nearby villages came down in the evenings to watch the boats drift past, "
    "carrying timber, wool and salt to the markets of the coastal towns. "
)
TAIL = " the"  # the one-token prompt that generate() embeds as the context's last token


def context_ids(model, n: int) -> list[int]:
    """The first n token ids of the paragraph repeated."""
    base = model.tokenizer.encode(PARAGRAPH).ids
    return (base * (n // len(base) + 1))[:n]


def prepare(model, c: int, new: int):
    """A working set holding c-1 context tokens (its session), warmed up with one short generation."""
    ws = model.working_set(c + new + 16)
    sess = model.session(ws)
    run_sync(sess.extend(context_ids(model, c - 1)))
    run_one(model, sess, c, 2)
    return sess


def run_one(model, sess, c: int, new: int) -> tuple[float, int]:
    """Cut the working set back to c-1 tokens, generate `new` greedy tokens: (decode ms/token, generated)."""
    sess.truncate(c - 1)
    gen = model.generate(TAIL, max_tokens=new, sampler="greedy", working_set=sess.ws)
    gen.run()
    assert sess.ws.length >= c, "the prompt was not appended after the context"
    return gen.stats.decode_s / gen.stats.generated * 1e3, gen.stats.generated


def main() -> None:
    """Measure, print the table, optionally write JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--contexts", default="20,500,1000,2000,4000", help="comma-separated context lengths")
    ap.add_argument("--new", type=int, default=32, help="tokens generated per run")
    ap.add_argument("--runs", type=int, default=3, help="rounds (each round runs every context once)")
    ap.add_argument("--json", metavar="FILE", help="write the numbers to FILE")
    ap.add_argument("--kv-dtype", default=DEFAULT_KV_DTYPE,
                    help="how K and V are stored: f16 or f32, or both (f16,f32: a model each, every round runs both)")
    args = ap.parse_args()
    contexts = [int(c) for c in args.contexts.split(",") if c.strip()]
    dtypes = [d.strip() for d in args.kv_dtype.split(",") if d.strip()]
    models = {d: load_model(verbose=False, kv_dtype=d) for d in dtypes}
    model = models[dtypes[0]]
    assert len(model.tokenizer.encode(TAIL).ids) == 1, "TAIL must be one token"
    limit = model.config.max_position_embeddings
    assert all(2 <= c and c + args.new + 16 <= limit for c in contexts), f"contexts must fit in {limit}"
    cases = [(d, c) for c in contexts for d in dtypes]
    sessions, prefill_s = {}, {}
    for d, c in cases:
        t0 = time.perf_counter()
        sessions[d, c] = prepare(models[d], c, args.new)
        prefill_s[d, c] = time.perf_counter() - t0
        print(f"{d} K/V, context {c}: prefilled + warmed up in {prefill_s[d, c]:.1f} s", flush=True)
    samples: dict = {k: [] for k in cases}
    generated: dict = {k: [] for k in cases}
    for r in range(args.runs):
        for d, c in cases if r % 2 == 0 else cases[::-1]:  # alternate the order between rounds
            ms, n = run_one(models[d], sessions[d, c], c, args.new)
            samples[d, c].append(ms)
            generated[d, c].append(n)
    rows = []
    for d in dtypes:
        first = samples[d, contexts[0]]
        base = statistics.median(first)
        print(f"\n{d} K and V: decode ms per generated token (greedy, {args.new} new, {args.runs} runs, median "
              "[min-max])")
        print(f"{'context':>8} {'ms/token':>9} {'range':>15} {'ratio':>6} {'paired':>6} {'generated':>9}")
        for c in contexts:
            runs = samples[d, c]
            med = statistics.median(runs)
            paired = statistics.median(b / a for a, b in zip(first, runs))
            print(f"{c:>8} {med:>9.2f} {f'[{min(runs):.1f}-{max(runs):.1f}]':>15} {med / base:>6.2f} {paired:>6.2f} "
                  f"{min(generated[d, c]):>9}")
            rows.append({"kv_dtype": d, "context": c, "ms_per_token": med, "runs_ms": runs, "ratio": med / base,
                         "paired_ratio": paired, "generated": generated[d, c],
                         "prefill_and_warmup_s": prefill_s[d, c]})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"new": args.new, "runs": args.runs, "measure": "stats.decode_s / stats.generated",
                       "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
