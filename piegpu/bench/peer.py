"""piegpu beside llama.cpp (llama-cpp-python) on one GGUF file: decode ms/token, load time and peak RSS, each engine in a
subprocess of its own (`piegpu bench --gguf`, benchmarks/vs_llamacpp.py).

Steady-state ms/token is the time from the first generated token to the N-th divided by the tokens in between (N - 1):
prefill and the first token are left out; each child runs a warm-up decode first and the timed decode `runs` times
(the median counts). Peak RSS is the child's ru_maxrss (on lavapipe piegpu's device buffers are host memory and count
in it; llama.cpp's mmapped weights count as they are touched).

    python -m piegpu.bench.peer ENGINE PATH --ctx C --tokens N --runs R [--threads T] [--kv-mb MB]   (a child)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time"
RESULT = "PEER_RESULT "  # the child's last stdout line: this prefix + one JSON object
ENGINES = ("llama.cpp", "piegpu")


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


def run_child(engine: str, path: Path, ctx: int, tokens: int, runs: int, kv_mb: int = 0, timeout: float = 1800,
              llama_threads: int = 2, lp_threads: int | None = None) -> dict:
    """One engine's numbers on one file, from a subprocess of its own (an error dict if it fails)."""
    cmd = [sys.executable, "-m", "piegpu.bench.peer", engine, str(path), "--ctx", str(ctx), "--tokens", str(tokens),
           "--runs", str(runs), "--kv-mb", str(kv_mb), "--threads", str(llama_threads)]
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


def compare(path: Path, ctx: int = 512, tokens: int = 16, runs: int = 3, llama_threads: int = 2,
            lp_threads: int | None = None, timeout: float = 1800) -> dict:
    """Both engines on one file, llama.cpp first (an error entry where llama-cpp-python is not installed)."""
    import importlib.util
    row = dict(path=str(path), file_gb=Path(path).stat().st_size / 1e9, ctx=ctx, tokens=tokens, runs=runs)
    for engine in ENGINES:
        if engine == "llama.cpp" and importlib.util.find_spec("llama_cpp") is None:
            row[engine] = dict(engine=engine, error="llama-cpp-python is not installed (CMAKE_ARGS=... pip install "
                                                    "llama-cpp-python: docs/real_models.md)")
            continue
        load0 = os.getloadavg()[0]
        row[engine] = run_child(engine, Path(path), ctx, tokens, runs, 0, timeout, llama_threads, lp_threads)
        row[engine]["loadavg_before_after"] = [load0, os.getloadavg()[0]]
    return row


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(rows: list[dict]) -> str:
    """compare() rows as a text table (a row's `label`, else its file's name)."""
    head = ("model", "file GB", "llama.cpp ms/tok", "piegpu ms/tok", "ratio", "load s llama", "load s piegpu",
            "RSS MB llama", "RSS MB piegpu")
    lines = [head]
    for r in rows:
        a, b = r["llama.cpp"], r["piegpu"]
        ma, mb = a.get("ms_per_token"), b.get("ms_per_token")
        lines.append((r.get("label") or Path(r["path"]).name, f"{r['file_gb']:.2f}", _fmt(ma, ".1f"), _fmt(mb, ".1f"),
                      _fmt(mb / ma if ma and mb else None, ".2f"), _fmt(a.get("load_s"), ".1f"),
                      _fmt(b.get("load_s"), ".1f"), _fmt(a.get("peak_rss_mb"), ".0f"), _fmt(b.get("peak_rss_mb"), ".0f")))
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    out = ["  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(line, widths)))
           for line in lines]
    out.insert(1, "-" * len(out[0]))
    for r in rows:
        for e in ENGINES:
            if "error" in r[e]:
                out.append(f"{r.get('label') or Path(r['path']).name} {e}: {r[e]['error']}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """A child's entry: one engine on one file, its result as the last stdout line."""
    ap = argparse.ArgumentParser(description="one engine's decode numbers on one GGUF (a child of compare())")
    ap.add_argument("engine", choices=ENGINES)
    ap.add_argument("path")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp's n_threads")
    ap.add_argument("--kv-mb", type=int, default=0, help="a KV pool in MiB instead of context= (older piegpu)")
    a = ap.parse_args(argv)
    r = (child_llama(a.path, a.ctx, a.tokens, a.runs, a.threads) if a.engine == "llama.cpp"
         else child_piegpu(a.path, a.ctx, a.tokens, a.kv_mb, a.runs))
    print(RESULT + json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
