"""Soak test: thousands of tokens through one pipeline, checking that memory and GPU buffers stay flat.

    python benchmarks/soak.py                       # tiny random model, 2,000 tokens, 200 epilogues
    python benchmarks/soak.py --model default       # SmolLM2-135M (slower)
    python benchmarks/soak.py --tokens 5000 --json soak.json --check

Phases (every number is printed, --json writes them, --check exits 1 on a failed limit):
  decode     one run_ahead of --tokens greedy tokens (API.md's device loop); RSS and live
             wgpu buffers sampled at token 100, 500, 1000, ... -- growth between token 500
             and the end must stay under --max-rss-growth (5%) with zero new buffers
  restarts   --restarts short run_ahead calls that stop early (rewind path) on the same loop
  epilogues  --epilogues distinct epilogues, each traced, compiled and submitted once, then
             dropped: no buffer may outlive its ForwardPass
  generate   --generations model.generate() calls without a working set (each makes its own
             KV state): every working set must be freed when its generation is dropped

Live buffers are counted by wrapping GPUDevice.create_buffer(_with_data) and tracking the
returned objects weakly (a buffer is live until garbage collected or destroyed).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import time
import weakref
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


class BufferCensus:
    """Counts live wgpu buffers: every buffer piegpu creates is tracked weakly until freed or destroyed."""

    def __init__(self) -> None:
        import wgpu
        from wgpu.backends.wgpu_native import _api
        self.live: weakref.WeakSet = weakref.WeakSet()
        self.created = 0
        dev_cls, buf_cls = _api.GPUDevice, _api.GPUBuffer
        census = self
        for name in ("create_buffer", "create_buffer_with_data"):
            orig = getattr(dev_cls, name)

            def wrapped(self, *a, __orig=orig, **k):
                buf = __orig(self, *a, **k)
                census.live.add(buf)
                census.created += 1
                return buf
            setattr(dev_cls, name, wrapped)
        orig_destroy = buf_cls.destroy

        def destroy(self):
            census.live.discard(self)
            return orig_destroy(self)
        buf_cls.destroy = destroy
        del wgpu

    def count(self) -> int:
        """Live buffers after a full garbage collection."""
        gc.collect()
        return len(self.live)

    def nbytes(self) -> int:
        """Bytes held by live buffers."""
        gc.collect()
        return sum(b.size for b in list(self.live))


def rss_bytes() -> int:
    """Resident set size of this process."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def sample(census: BufferCensus) -> dict:
    """One measurement: RSS, live buffers and their bytes, Python objects."""
    gc.collect()
    return {"rss": rss_bytes(), "buffers": census.count(), "buffer_bytes": census.nbytes(),
            "objects": len(gc.get_objects())}


def load(which: str, tokens: int):
    """(model, prompt ids) for 'tiny' (random weights), 'default' or a model path."""
    if which == "tiny":
        from tests.helpers import tiny_config, tiny_model
        model, _ = tiny_model(tiny_config(layers=2, vocab=300, max_pos=tokens + 64), seed=5)
        return model, [5, 17, 42, 7]
    from piegpu.textgen.model import load_model
    model = load_model(None if which == "default" else which, verbose=False)
    ids = model.tokenizer.encode("Once upon a time").ids
    if tokens + len(ids) > model.config.max_position_embeddings:
        raise SystemExit(f"--tokens {tokens} exceeds the model's context {model.config.max_position_embeddings}")
    return model, ids


def greedy_loop(ws, first: int):
    """API.md's device loop: argmax fed back on the device, tokens to the host."""
    from piegpu.eta import reduce_argmax
    from piegpu.runtime.loops import decode_loop
    loop = decode_loop(ws, reduce_argmax, first)
    return loop.fwd, loop.token_out


def prefill(pipe, ws, ids) -> None:
    """Embed ids in one pass (no readout used)."""
    from piegpu import Channel, ForwardPass, StateGeometry, dtype
    fwd = ForwardPass()
    fwd.embed(Channel.from_(ids, dtype.i32), Channel.from_([0, len(ids)], dtype.u32))
    fwd.state([ws], StateGeometry.folding())
    asyncio.run(pipe.submit(fwd))


def phase_decode(model, ids, tokens: int, census: BufferCensus) -> dict:
    """One run_ahead of `tokens` tokens; samples at fixed token counts."""
    pipe = model.pipeline()
    ws = model.working_set(len(ids) + tokens + 8)
    prefill(pipe, ws, ids[:-1])
    fwd, token_out = greedy_loop(ws, ids[-1])
    marks = sorted({m for m in (100, 500, 1000, 1500, 2000, tokens) if m <= tokens} |
                   set(range(2500, tokens + 1, 500)))
    samples: dict = {}
    got: list = []
    t0 = time.perf_counter()

    async def on_token():
        got.append(await token_out.take_scalar())
        if len(got) in marks:
            samples[len(got)] = sample(census) | {"t": time.perf_counter() - t0}
        return True
    n = asyncio.run(pipe.run_ahead(fwd, tokens, on_token))
    assert n == tokens == len(got), (n, tokens, len(got))
    assert all(0 <= t < model.config.vocab_size for t in got), "token id out of range"
    base = samples[500] if 500 in samples else samples[marks[0]]
    end = samples[tokens]
    return {"tokens": tokens, "seconds": end["t"], "tokens_per_s": tokens / end["t"], "samples": samples,
            "rss_growth": (end["rss"] - base["rss"]) / base["rss"], "buffer_growth": end["buffers"] - base["buffers"],
            "object_growth": end["objects"] - base["objects"], "passes": pipe.stats.passes,
            "submits": pipe.stats.submits}


def phase_restarts(model, ids, restarts: int, census: BufferCensus) -> dict:
    """Many short run_ahead calls that stop mid-window (the rewind path)."""
    pipe = model.pipeline()
    ws = model.working_set(len(ids) + 3 * restarts + 16)
    prefill(pipe, ws, ids[:-1])
    fwd, token_out = greedy_loop(ws, ids[-1])
    before = None
    for i in range(restarts):
        left = [2]

        async def on_token():
            await token_out.take_scalar()
            left[0] -= 1
            return left[0] > 0  # stop after 2 tokens with more passes in flight
        asyncio.run(pipe.run_ahead(fwd, 8, on_token))
        if i == 9:
            before = sample(census)
    after = sample(census)
    return {"restarts": restarts, "buffer_growth": after["buffers"] - before["buffers"],
            "rss_growth": (after["rss"] - before["rss"]) / before["rss"], "ws_length": ws.length}


def phase_epilogues(model, ids, count: int, census: BufferCensus) -> dict:
    """`count` distinct epilogues, each compiled and submitted once on a fresh ForwardPass, then dropped."""
    from piegpu import Channel, ForwardPass, StateGeometry, dtype
    from piegpu.eta import cache, intrinsics, reduce_argmax, reshape
    pipe = model.pipeline()
    ws = model.working_set(len(ids) + count + 8)
    out = Channel([1], dtype.i32).capacity(2)
    token = Channel([1], dtype.i32).capacity(2)

    def one(i: int) -> None:
        fwd = ForwardPass()
        fwd.embed(token, Channel.from_([0, 1], dtype.u32))
        fwd.state([ws], StateGeometry.folding())

        @fwd.epilogue
        def _():  # a distinct program per i (the constant is part of the content hash)
            out.put(reshape(reduce_argmax(intrinsics.output(0, "logits") * (1.0 + i * 1e-6)), [1]))
        token.put([ids[0]])
        asyncio.run(pipe.submit(fwd))
        asyncio.run(out.take())

    one(-1)
    before = sample(census)
    misses0 = cache.cache_stats()["misses"]
    for i in range(count):
        one(i)
    after = sample(census)
    return {"epilogues": count, "compiled": cache.cache_stats()["misses"] - misses0,
            "buffer_growth": after["buffers"] - before["buffers"], "rss_growth_bytes": after["rss"] - before["rss"],
            "rss_per_epilogue_kb": (after["rss"] - before["rss"]) / count / 1024,
            "memory_cache_entries": cache.cache_stats()["memory_entries"]}


def phase_generate(model, ids, count: int, census: BufferCensus) -> dict:
    """model.generate() without a working set, `count` times: each generation's KV state must be freed."""
    prompt = " ".join(str(i) for i in ids) if not hasattr(model.tokenizer, "get_vocab") else "Once upon a time"
    model.generate(prompt, max_tokens=4).run()
    before = sample(census)
    for _ in range(count):
        model.generate(prompt, max_tokens=4).run()
    after = sample(census)
    return {"generations": count, "buffer_growth": after["buffers"] - before["buffers"],
            "buffer_bytes_growth": after["buffer_bytes"] - before["buffer_bytes"],
            "rss_growth": (after["rss"] - before["rss"]) / before["rss"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="tiny", help="tiny (random weights), default, or a model path")
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--restarts", type=int, default=100)
    ap.add_argument("--epilogues", type=int, default=200)
    ap.add_argument("--generations", type=int, default=30)
    ap.add_argument("--max-rss-growth", type=float, default=0.05)
    ap.add_argument("--cache-dir", help="kernel cache dir (default: a fresh temporary one, so every epilogue compiles)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--check", action="store_true", help="exit 1 if a limit is exceeded")
    args = ap.parse_args(argv)
    if args.cache_dir or args.model != "default":
        import tempfile
        os.environ["PIEGPU_CACHE_DIR"] = args.cache_dir or tempfile.mkdtemp(prefix="piegpu-soak-")
    census = BufferCensus()
    model, ids = load(args.model, max(args.tokens, args.epilogues, 3 * args.restarts))
    res = {"model": args.model, "start": sample(census)}
    res["decode"] = phase_decode(model, ids, args.tokens, census)
    d = res["decode"]
    print(f"decode: {d['tokens']} tokens in {d['seconds']:.1f} s ({d['tokens_per_s']:.0f}/s); token 500 -> "
          f"{d['tokens']}: RSS {d['rss_growth'] * 100:+.2f}%, buffers {d['buffer_growth']:+d}, "
          f"Python objects {d['object_growth']:+d}", flush=True)
    for t, s in d["samples"].items():
        print(f"  token {t:>5}: RSS {s['rss'] / 2**20:7.1f} MiB, {s['buffers']} buffers "
              f"({s['buffer_bytes'] / 2**20:.1f} MiB), {s['objects']} objects", flush=True)
    if args.restarts:
        r = res["restarts"] = phase_restarts(model, ids, args.restarts, census)
        print(f"restarts: {r['restarts']} stopped run_aheads: buffers {r['buffer_growth']:+d}, "
              f"RSS {r['rss_growth'] * 100:+.2f}%", flush=True)
    if args.epilogues:
        e = res["epilogues"] = phase_epilogues(model, ids, args.epilogues, census)
        print(f"epilogues: {e['compiled']} compiled and dropped: buffers {e['buffer_growth']:+d}, RSS "
              f"{e['rss_growth_bytes'] / 2**20:+.1f} MiB ({e['rss_per_epilogue_kb']:.0f} KiB each; "
              f"{e['memory_cache_entries']} kernels in the memory cache)", flush=True)
    if args.generations:
        g = res["generate"] = phase_generate(model, ids, args.generations, census)
        print(f"generate: {g['generations']} calls without a working set: buffers {g['buffer_growth']:+d} "
              f"({g['buffer_bytes_growth'] / 2**20:+.1f} MiB), RSS {g['rss_growth'] * 100:+.2f}%", flush=True)
    failures = []
    if d["rss_growth"] >= args.max_rss_growth:
        failures.append(f"RSS grew {d['rss_growth'] * 100:.2f}% between token 500 and {d['tokens']}")
    for phase in ("decode", "restarts", "epilogues", "generate"):
        if phase in res and res[phase]["buffer_growth"] > 0:
            failures.append(f"{phase}: {res[phase]['buffer_growth']} buffers leaked")
    res["failures"] = failures
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2, default=str) + "\n")
    for f in failures:
        print("LEAK:", f, file=sys.stderr)
    return 1 if (failures and args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
