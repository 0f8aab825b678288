"""Decode cost per token against context length, for the default model.

    python benchmarks/context.py [--contexts 20,500,1000,2000,4000] [--new 32] [--runs 3] [--json FILE]

For each context C the working set holds exactly C token ids (a tokenized paragraph repeated
and cut to C-1 ids, then a one-token prompt " the" passed to model.generate(..., working_set=ws)),
and a greedy generation of --new tokens runs on it. The number is the decode phase only:
gen.stats.decode_s / gen.stats.generated (prefill_s is timed apart by generate() and left
out), i.e. ms per generated token, host readback of each token included. Each context is
prefilled once (plus a warm-up generation that builds its decode loop); before every timed
generation the working set is cut back to C-1 tokens, so each run decodes at positions C..C+new.
Rounds alternate contexts (--runs rounds); the table shows the median per context, the
spread, and the ratio to the first context.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

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
    ap.add_argument("--kv-dtype", choices=["f32", "f16"], default="f32", help="how K and V are stored")
    args = ap.parse_args()
    contexts = [int(c) for c in args.contexts.split(",") if c.strip()]
    model = load_model(verbose=False, kv_dtype=args.kv_dtype)
    assert len(model.tokenizer.encode(TAIL).ids) == 1, "TAIL must be one token"
    limit = model.config.max_position_embeddings
    assert all(2 <= c and c + args.new + 16 <= limit for c in contexts), f"contexts must fit in {limit}"
    sessions, prefill_s = {}, {}
    for c in contexts:
        t0 = time.perf_counter()
        sessions[c] = prepare(model, c, args.new)
        prefill_s[c] = time.perf_counter() - t0
        print(f"context {c}: prefilled + warmed up in {prefill_s[c]:.1f} s", flush=True)
    samples: dict[int, list[float]] = {c: [] for c in contexts}
    generated: dict[int, list[int]] = {c: [] for c in contexts}
    for r in range(args.runs):
        order = contexts if r % 2 == 0 else contexts[::-1]  # alternate the order between rounds
        for c in order:
            ms, n = run_one(model, sessions[c], c, args.new)
            samples[c].append(ms)
            generated[c].append(n)
    base = statistics.median(samples[contexts[0]])
    print(f"\ndecode ms per generated token (greedy, {args.new} new, {args.runs} runs, median [min-max])")
    print(f"{'context':>8} {'ms/token':>9} {'range':>15} {'ratio':>6} {'generated':>9}")
    rows = []
    for c in contexts:
        med = statistics.median(samples[c])
        rng = f"[{min(samples[c]):.1f}-{max(samples[c]):.1f}]"
        print(f"{c:>8} {med:>9.2f} {rng:>15} {med / base:>6.2f} {min(generated[c]):>9}")
        rows.append({"context": c, "ms_per_token": med, "runs_ms": samples[c], "ratio": med / base,
                     "generated": generated[c], "prefill_and_warmup_s": prefill_s[c]})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"new": args.new, "runs": args.runs, "measure": "stats.decode_s / stats.generated",
                       "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
