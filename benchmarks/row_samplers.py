"""What per-row sampler stages cost a batched decode pass: B rows of the default model, one stage mix per run.

    python benchmarks/row_samplers.py [--batch 8] [--tokens 24] [--runs 3] [--mix NAME ...]

Each mix runs `--runs` times, the mixes interleaved round by round (a slow spell of a shared machine lands
on all of them); it prints the median ms per pass, the host's CPU ms per pass (Python threads) and the
ratio to the all-greedy batch. The first round of each mix compiles its epilogue and is not counted.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

MIXES = {
    "greedy": [dict(temperature=0.0)],
    "top-p": [dict(sampler="top-p", top_p=0.9)],
    "top-k + top-p + min-p + penalties": [dict(sampler="top-k", top_k=40, top_p=0.95, min_p=0.05,
                                               repetition_penalty=1.1)],
    "xtc + top-n-sigma": [dict(xtc_probability=0.5, top_n_sigma=1.5)],
    "mirostat v2": [dict(sampler="mirostat", value=5.0)],
    "dry": [dict(dry_multiplier=0.8)],
    "tail-free": [dict(tfs_z=0.95)],
    "mirostat v1": [dict(mirostat_v1=5.0)],
    "every stage, mixed rows": [dict(sampler="top-p", top_p=0.9), dict(xtc_probability=0.5, top_k=40),
                                dict(sampler="mirostat", value=5.0), dict(p_less=True, min_p=0.05),
                                dict(tfs_z=0.95, dynatemp_range=0.5), dict(sampler="eta-cutoff", value=3e-4),
                                dict(dry_multiplier=0.8, top_k=20), dict(temperature=0.0)],
}


def run_mix(model, rows: list, B: int, n: int) -> tuple:
    """(wall s, host CPU s, decode passes) of one batch whose row i uses rows[i % len(rows)]'s options."""
    from piegpu.bench.host import python_threads_cpu_s
    from piegpu.runtime.batch import Batch
    from piegpu.runtime.session import run_sync
    from piegpu.samplers.options import SamplingOptions
    from piegpu.samplers.rows import RowSampling, RowState
    gc.collect()
    vocab = model.config.vocab_size
    batch = Batch(model, RowSampling(vocab), max_batch=B)
    ids = model.tokenizer.encode("Once upon a time").ids
    for i in range(B):
        o = dict(rows[i % len(rows)])
        opts = SamplingOptions.of(o.pop("sampler", "temperature"), o.pop("temperature", 0.8), **o)
        p = opts.row_params(seed=i, tokenizer=model.tokenizer)
        batch.add(ids, p, n, row_state=RowState(p, vocab, ids))
    h0, t0 = python_threads_cpu_s(), time.perf_counter()
    run_sync(batch.run())
    return time.perf_counter() - t0, python_threads_cpu_s() - h0, batch.stats.decode_passes


def main() -> None:
    """Run every mix interleaved and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mix", action="append", default=None, choices=list(MIXES),
                    help="only these mixes (repeatable; greedy always runs, as the baseline)")
    args = ap.parse_args()
    mixes = {k: v for k, v in MIXES.items() if args.mix is None or k in args.mix or k == "greedy"}
    import piegpu
    model = piegpu.load_model()
    times: dict = {k: [] for k in mixes}
    for r in range(args.runs + 1):
        for name, rows in mixes.items():
            wall, host, passes = run_mix(model, rows, args.batch, args.tokens)
            if r:
                times[name].append((wall / passes * 1e3, host / passes * 1e3))
    base = statistics.median(t for t, _ in times["greedy"])
    print(f"B={args.batch}, {args.tokens} tokens per row, median of {args.runs} interleaved runs:")
    for name, ts in times.items():
        ms, host = statistics.median(t for t, _ in ts), statistics.median(h for _, h in ts)
        print(f"  {name:36s} {ms:7.1f} ms/pass  host {host:5.2f} ms CPU/pass  {ms / base:5.2f}x greedy")


if __name__ == "__main__":
    main()
