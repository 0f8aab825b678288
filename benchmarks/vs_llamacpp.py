"""piegpu against llama.cpp (llama-cpp-python) on random-weight models of real shapes (benchmarks/real_shapes.py).

    python benchmarks/vs_llamacpp.py [--shapes llama-3.2-1b] [--types Q4_K_M,Q8_0] [--layers N] [--ctx 512]
                                     [--tokens 16] [--runs 3] [--llama-threads 2] [--lp-threads N]
                                     [--json OUT] [--timeout 1800]

For each shape and type the file is built (or taken from the cache) by real_shapes.build, then each engine
runs in a subprocess of its own (one per engine per file, llama.cpp first), so neither's memory or threads
touch the other's numbers:
- llama.cpp: llama_cpp.Llama(model_path, n_ctx=C, n_threads=2 (--llama-threads)); a warm-up decode of 2
  tokens, then a greedy decode (Llama.generate, temp 0) of N tokens after a short prompt, one token evaluated at a time.
- piegpu: piegpu.load_model(path, verbose=False, context=C) (where load_model has no `context` keyword yet:
  kv_mb sized for C + 32 positions of F16 K and V); a warm-up generation of 2 tokens (it builds the decode
  loop), then model.generate(prompt, max_tokens=N), greedy, iterated piece by piece. --lp-threads sets
  LP_NUM_THREADS (lavapipe's rasterizer/compute threads) in its environment; unset, piegpu sets it to the core count.
Steady-state ms/token is the time from the first generated token to the N-th divided by the tokens in
between (N - 1): prefill and the first token are left out. The timed decode runs --runs times in the
child; the table shows the median of those runs (all of them are in the JSON): on a small shared
machine another process's spell on a core stalls a decode (llama.cpp's two threads meet at a barrier
each op: with 2 threads on 2 cores and one of them busy, a token can take 10x its time, where
--llama-threads 1 is steady), and one run of a few tokens is easily off by 2x. The load average before
and after each child is in the JSON. Load s is the engine's load call; peak RSS is
the child's resource.getrusage(RUSAGE_SELF).ru_maxrss (on lavapipe piegpu's device buffers are host memory
and count in it; llama.cpp's mmapped weights count as they are touched). ratio = piegpu / llama.cpp.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from piegpu.bench.peer import run_child, table  # noqa: E402  (the children: piegpu bench --gguf runs them too)

HERE = Path(__file__).resolve().parent


def real_shapes():
    """benchmarks/real_shapes.py, loaded as a module by its path."""
    mod = sys.modules.get("real_shapes")
    if mod is None:
        spec = importlib.util.spec_from_file_location("real_shapes", HERE / "real_shapes.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["real_shapes"] = mod
        spec.loader.exec_module(mod)
    return mod


def kv_mb_for(layers: int, kv_heads: int, head_dim: int, context: int) -> int:
    """MiB of an F16 KV pool holding context + 32 positions: K and V, every layer."""
    return math.ceil(2 * layers * kv_heads * head_dim * 2 * (context + 32) / 2**20)


def main(argv: list[str] | None = None) -> int:
    """The command line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="llama-3.2-1b", help="comma-separated real_shapes names")
    ap.add_argument("--types", default="Q4_K_M", help="comma-separated types (real_shapes.QTYPES)")
    ap.add_argument("--layers", type=int, default=None, help="override the shapes' layer count")
    ap.add_argument("--ctx", type=int, default=512, help="context each engine is sized for (default 512)")
    ap.add_argument("--tokens", type=int, default=16, help="tokens generated in the timed decode (default 16)")
    ap.add_argument("--runs", type=int, default=3, help="timed decodes per engine and file; the median shows (3)")
    ap.add_argument("--llama-threads", type=int, default=2, help="llama.cpp's n_threads (default 2)")
    ap.add_argument("--lp-threads", type=int, default=None, help="LP_NUM_THREADS for the piegpu child (unset)")
    ap.add_argument("--json", metavar="OUT", help="also write the results to this JSON file")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per child (default 1800)")
    args = ap.parse_args(argv)
    if args.tokens < 2:
        ap.error("--tokens must be >= 2 (the steady state is tokens 2..N)")
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    rs = real_shapes()
    rows = []
    for shape in [s.strip() for s in args.shapes.split(",") if s.strip()]:
        for qtype in [t.strip() for t in args.types.split(",") if t.strip()]:
            s = rs.get_shape(shape, args.layers)
            t0 = time.perf_counter()
            path = rs.build(shape, qtype, args.layers)
            built_s = time.perf_counter() - t0
            kv_mb = kv_mb_for(s.layers, s.kv_heads, s.head_dim, args.ctx)
            name = shape if args.layers is None else f"{shape}-{s.layers}l"
            row = dict(label=f"{name} {rs.check_qtype(qtype)}", shape=name, type=rs.check_qtype(qtype),
                       path=str(path), file_gb=path.stat().st_size / 1e9, build_s=built_s, ctx=args.ctx,
                       tokens=args.tokens, runs=args.runs)
            for engine in ("llama.cpp", "piegpu"):
                print(f"vs_llamacpp: {row['shape']} {row['type']}: {engine} ...", file=sys.stderr, flush=True)
                load0 = os.getloadavg()[0]
                row[engine] = run_child(engine, path, args.ctx, args.tokens, args.runs, kv_mb, args.timeout,
                                        args.llama_threads, args.lp_threads)
                row[engine]["loadavg_before_after"] = [load0, os.getloadavg()[0]]
            rows.append(row)
    print(table(rows))
    print(f"(ctx {args.ctx}, {args.tokens} tokens, median of {args.runs} runs; llama.cpp n_threads "
          f"{args.llama_threads}; LP_NUM_THREADS {args.lp_threads or 'piegpu default'}; ratio = piegpu / llama.cpp)")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(machine=dict(cpus=os.cpu_count()), rows=rows), indent=2) + "\n")
    return 0 if all("error" not in r[e] for r in rows for e in ("llama.cpp", "piegpu")) else 1


if __name__ == "__main__":
    sys.exit(main())
