"""Host cost of a continuous batch whose rows change hands: sequences leave and waiting ones take their rows.

    python benchmarks/compositions.py [--rows 8] [--sequences 32] [--runs 3] [--json FILE]

A Batch of --rows rows (max_batch) decodes --sequences greedy sequences of the default model
whose budgets differ (4..19 tokens), so a row leaves every few passes and a waiting sequence takes
it: a new composition of the same size each time. The workload is the same in every run; the table
shows the host CPU of the Python threads (piegpu.bench.host, /proc) and the wall time per run, the
compositions and how many took over a kept decode pass (Batch.stats.reseated), and the rows handed over
inside a run (Batch.stats.handovers) -- run it on two checkouts (PYTHONPATH) to compare, alternating.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from piegpu.bench.host import python_threads_cpu_s
from piegpu.runtime.batch import Batch
from piegpu.runtime.session import run_sync
from piegpu.samplers.rows import RowParams, RowSampling, RowState
from piegpu.textgen.model import load_model


def workload(model, rows: int, sequences: int, window: int | None = None) -> dict:
    """One batch over the sequences: host CPU s, wall s, passes, compositions, reseated."""
    vocab = model.config.vocab_size
    batch = Batch(model, RowSampling(vocab), max_batch=rows, window=window)
    greedy = RowParams(0.0)
    for i in range(sequences):
        ids = model.tokenizer.encode(f"Story {i}: once upon a time").ids
        batch.add(ids, greedy, 4 + (7 * i) % 16, row_state=RowState(greedy, vocab, ids))
    c0, t0 = python_threads_cpu_s(), time.perf_counter()
    run_sync(batch.run())
    st = batch.stats
    return {"host_s": python_threads_cpu_s() - c0, "wall_s": time.perf_counter() - t0, "passes": st.decode_passes,
            "compositions": st.compositions, "reseated": getattr(st, "reseated", 0),
            "handovers": getattr(st, "handovers", 0), "runs": st.runs}


def main() -> None:
    """Measure and print; optionally write JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--sequences", type=int, default=32)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--window", type=int, default=None, help="passes run ahead per read (default: the adapter's)")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    model = load_model(verbose=False)
    workload(model, args.rows, args.rows, args.window)  # warm-up: kernels compiled, scratch made
    runs = [workload(model, args.rows, args.sequences, args.window) for _ in range(args.runs)]
    host = statistics.median(r["host_s"] for r in runs)
    wall = statistics.median(r["wall_s"] for r in runs)
    r = runs[0]
    print(f"{args.sequences} sequences over {args.rows} rows: {r['passes']} decode passes, {r['runs']} runs, "
          f"{r['compositions']} compositions ({r['reseated']} took over a kept pass), {r['handovers']} rows handed over "
          "inside a run")
    hosts = ", ".join(f"{x['host_s'] * 1e3:.0f}" for x in runs)
    walls = ", ".join(f"{x['wall_s']:.2f}" for x in runs)
    print(f"host CPU {host * 1e3:.0f} ms per run [{hosts}], wall {wall:.2f} s [{walls}]")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": args.rows, "sequences": args.sequences, "runs": runs}, f, indent=2)


if __name__ == "__main__":
    main()
