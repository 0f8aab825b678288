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
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time"
RESULT = "VS_LLAMACPP_RESULT "  # the child's last stdout line: this prefix + one JSON object
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


def peak_rss_mb() -> float:
    """This process's peak resident set, MiB (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def steady_ms(marks: list[tuple[float, int]], n: int) -> tuple[float | None, int]:
    """(ms per token from the first token's arrival to the last's, tokens counted) of (time, tokens so far) marks."""
    marks = [(t, k) for t, k in marks if k >= 1]
    if not marks:
        return None, 0
    (t1, k1), (t2, k2) = marks[0], marks[-1]
    return ((t2 - t1) * 1000 / (k2 - k1) if k2 > k1 else None), k2


# ---- the children -------------------------------------------------------------------------------

def median_or_none(xs: list) -> float | None:
    """The median of the values that are not None (None if none are)."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def child_llama(path: str, ctx: int, tokens: int, runs: int, threads: int) -> dict:
    """llama.cpp's load time, steady-state decode ms/token and peak RSS on one file."""
    import llama_cpp

    t0 = time.perf_counter()
    llm = llama_cpp.Llama(model_path=path, n_ctx=ctx, n_threads=threads, n_threads_batch=threads, verbose=False)
    load_s = time.perf_counter() - t0
    ids = llm.tokenize(PROMPT.encode(), add_bos=True, special=False)

    def decode(n: int) -> tuple[list[tuple[float, int]], list[int], float]:
        llm.reset()
        out, marks = [], []
        t = time.perf_counter()
        for tok in llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True):
            out.append(tok)
            marks.append((time.perf_counter(), len(out)))
            if len(out) >= n:
                break
        return marks, out, marks[0][0] - t

    decode(2)  # warm-up
    ms_runs = []
    for _ in range(runs):
        marks, out, first_s = decode(tokens)
        ms, counted = steady_ms(marks, tokens)
        ms_runs.append(ms)
    return dict(engine="llama.cpp", llama_cpp_version=llama_cpp.__version__, threads=threads, load_s=load_s,
                ms_per_token=median_or_none(ms_runs), ms_runs=ms_runs, generated=counted, prompt_tokens=len(ids),
                first_token_s=first_s, peak_rss_mb=peak_rss_mb(), tokens=out,
                intervals_ms=[(b[0] - a[0]) * 1000 for a, b in zip(marks, marks[1:])])


def child_piegpu(path: str, ctx: int, tokens: int, kv_mb: int, runs: int) -> dict:
    """piegpu's load time, steady-state decode ms/token and peak RSS on one file."""
    import piegpu

    t0 = time.perf_counter()
    try:
        m = piegpu.load_model(path, verbose=False, context=ctx)
        kv = f"context={ctx}"
    except TypeError as e:  # a load_model without the context keyword
        if "context" not in str(e):
            raise
        t0 = time.perf_counter()
        m = piegpu.load_model(path, verbose=False, kv_mb=kv_mb)
        kv = f"kv_mb={kv_mb}"
    load_s = time.perf_counter() - t0

    def decode(n: int):
        gen = m.generate(PROMPT, max_tokens=n)
        marks = []
        t = time.perf_counter()
        for _ in gen:
            marks.append((time.perf_counter(), len(gen.tokens)))
        first = next((tt for tt, k in marks if k >= 1), None)
        return gen, marks, (first - t if first is not None else None)

    t1 = time.perf_counter()
    decode(2)  # warm-up: builds the prefill and decode loops
    warmup_s = time.perf_counter() - t1
    ms_runs = []
    for _ in range(runs):
        gen, marks, first_s = decode(tokens)
        ms, counted = steady_ms(marks, tokens)
        ms_runs.append(ms)
    st = gen.stats
    return dict(engine="piegpu", kv=kv, lp_num_threads=os.environ.get("LP_NUM_THREADS"), load_s=load_s,
                warmup_s=warmup_s, ms_per_token=median_or_none(ms_runs), ms_runs=ms_runs, generated=st.generated,
                counted=counted, prompt_tokens=st.prompt_tokens,
                first_token_s=first_s, prefill_s=st.prefill_s, decode_s=st.decode_s, stop_reason=st.stop_reason,
                host_waits=st.host_waits, peak_rss_mb=peak_rss_mb(), tokens=list(gen.tokens),
                intervals_ms=[(b[0] - a[0]) * 1000 for a, b in zip(marks, marks[1:])])


def run_child(engine: str, path: Path, ctx: int, tokens: int, runs: int, kv_mb: int, timeout: float,
              llama_threads: int = 2, lp_threads: int | None = None) -> dict:
    """One engine's numbers on one file, from a subprocess of its own (an error dict if it fails)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", engine, str(path), "--ctx", str(ctx),
           "--tokens", str(tokens), "--runs", str(runs), "--kv-mb", str(kv_mb), "--llama-threads", str(llama_threads)]
    env = dict(os.environ)
    if lp_threads is not None and engine == "piegpu":
        env["LP_NUM_THREADS"] = str(lp_threads)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return dict(engine=engine, error=f"timed out after {timeout:.0f} s")
    wall = time.perf_counter() - t0
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(RESULT):
            r = json.loads(line[len(RESULT):])
            r["wall_s"] = wall
            return r
    tail = (p.stderr or p.stdout).strip().splitlines()[-8:]
    return dict(engine=engine, error=f"exit {p.returncode}: " + " | ".join(tail), wall_s=wall)


# ---- the table ----------------------------------------------------------------------------------

def fmt(v, spec: str) -> str:
    """v formatted by spec, or '-' for None."""
    return "-" if v is None else format(v, spec)


def table(rows: list[dict]) -> str:
    """The results as a text table."""
    head = ("shape", "type", "file GB", "llama.cpp ms/tok", "piegpu ms/tok", "ratio", "load s llama", "load s piegpu",
            "RSS MB llama", "RSS MB piegpu")
    lines = [head]
    for r in rows:
        a, b = r["llama.cpp"], r["piegpu"]
        ma, mb = a.get("ms_per_token"), b.get("ms_per_token")
        lines.append((r["shape"], r["type"], f"{r['file_gb']:.2f}", fmt(ma, ".1f"), fmt(mb, ".1f"),
                      fmt(mb / ma if ma and mb else None, ".2f"), fmt(a.get("load_s"), ".1f"),
                      fmt(b.get("load_s"), ".1f"), fmt(a.get("peak_rss_mb"), ".0f"), fmt(b.get("peak_rss_mb"), ".0f")))
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    out = ["  ".join(str(c).rjust(w) if i > 1 else str(c).ljust(w) for i, (c, w) in enumerate(zip(line, widths)))
           for line in lines]
    out.insert(1, "-" * len(out[0]))
    for r in rows:
        for e in ("llama.cpp", "piegpu"):
            if "error" in r[e]:
                out.append(f"{r['shape']} {r['type']} {e}: {r[e]['error']}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """The command line (and the children's entry, --child ENGINE PATH)."""
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
    ap.add_argument("--child", nargs=2, metavar=("ENGINE", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--kv-mb", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.tokens < 2:
        ap.error("--tokens must be >= 2 (the steady state is tokens 2..N)")
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    if args.child:
        engine, path = args.child
        r = (child_llama(path, args.ctx, args.tokens, args.runs, args.llama_threads) if engine == "llama.cpp"
             else child_piegpu(path, args.ctx, args.tokens, args.kv_mb, args.runs))
        print(RESULT + json.dumps(r), flush=True)
        return 0

    rs = real_shapes()
    rows = []
    for shape in [s.strip() for s in args.shapes.split(",") if s.strip()]:
        for qtype in [t.strip() for t in args.types.split(",") if t.strip()]:
            s = rs.get_shape(shape, args.layers)
            t0 = time.perf_counter()
            path = rs.build(shape, qtype, args.layers)
            built_s = time.perf_counter() - t0
            kv_mb = kv_mb_for(s.layers, s.kv_heads, s.head_dim, args.ctx)
            row = dict(shape=shape if args.layers is None else f"{shape}-{s.layers}l", type=rs.check_qtype(qtype),
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
