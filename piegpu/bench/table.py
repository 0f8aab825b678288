"""`piegpu bench`: the benchmark table of the default model, all numbers measured side by side in one run.

Decode: prompt "Once upon a time", greedy (or top-p) tokens; each run times the tokens
after the first (whose pass also builds the run's dispatch plan) and reports its mean
ms/token; the table gives the median and the best run. The decode modes and the numpy
reference take turns run by run, so a slow spell of a shared machine (on these VMs the
same replayed pass takes 37 or 52 ms depending on the moment) lands on all of them. The
llama.cpp numbers are the anchors of the performance issue (measured on these 2-core
machines, lavapipe; llama-cpp-python cannot be built here)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from ..runtime.window import WINDOW, default_group
from .host import python_threads_cpu_s

LLAMA_CPP_VULKAN_Q4_1_MS = 472.0  # llama.cpp Vulkan backend on lavapipe, Q4_1 (anchor)
PROMPT = "Once upon a time"


def _median(xs):
    return float(statistics.median(xs))


class _Bench:
    def __init__(self, model, n_tokens: int, runs: int):
        self.model, self.n, self.runs = model, n_tokens, runs
        self.pipe = model.pipeline()
        self.counts = (0.0, 0.0)  # dispatches and submits per token of the last run_ahead
        self.host_ms = 0.0  # CPU ms of the Python threads per token of the last run_ahead
        self.ids = model.tokenizer.encode(PROMPT).ids

    async def _prefilled_ws(self):
        from .. import Channel, ForwardPass, StateGeometry, dtype
        ws = self.model.working_set(len(self.ids) + self.n + 3)
        pf = ForwardPass()
        pf.embed(Channel.from_(self.ids[:-1], dtype.i32), Channel.from_([0, len(self.ids) - 1], dtype.u32))
        pf.state([ws], StateGeometry.folding())
        await self.pipe.submit(pf)
        return ws

    def _loop(self, ws, sampler):
        from .. import Channel, ForwardPass, StateGeometry, channel_capacity, dtype, eta
        from ..eta import intrinsics
        from ..samplers import rng_advance
        token_in = Channel.from_([self.ids[-1]], dtype.i32)
        token_out = Channel([1], dtype.i32).capacity(channel_capacity())
        rng = Channel.from_([7, 0], dtype.u32) if sampler.needs_rng else None
        fwd = ForwardPass()
        fwd.embed(token_in, Channel.from_([0, 1], dtype.u32))
        fwd.state([ws], StateGeometry.folding())

        @fwd.epilogue
        def _():
            state = rng.take() if rng is not None else None
            tok = eta.reshape(eta.cast(sampler.sample(intrinsics.output(0), state), dtype.i32), [1])
            if rng is not None:
                rng.put(rng_advance(state))
            token_in.put(tok)
            token_out.put(tok)
        return fwd, token_out

    async def run_ahead(self, sampler, window: int | None = None) -> float:
        """One run of run_ahead (at `window`, else the pipeline's): ms/token (dispatches and submits per token go to
        self.counts, host CPU ms per token to self.host_ms)."""
        ws = await self._prefilled_ws()
        fwd, token_out = self._loop(ws, sampler)
        self.pipe.prepare(fwd)
        before = (self.pipe.stats.dispatches, self.pipe.stats.submits)

        first: list = []  # the clocks start at the first token: its pass also built this run's dispatch plan

        async def on_token():
            await token_out.take_scalar()
            if not first:
                first.extend((time.perf_counter(), python_threads_cpu_s()))
            return True
        await self.pipe.run_ahead(fwd, self.n + 1, on_token, window=window)
        dt = time.perf_counter() - first[0]
        self.host_ms = (python_threads_cpu_s() - first[1]) / self.n * 1e3
        s = self.pipe.stats
        self.counts = ((s.dispatches - before[0]) / (self.n + 1), (s.submits - before[1]) / (self.n + 1))
        return dt / self.n * 1e3

    async def depth1(self) -> float:
        """One run of the depth-1 loop (submit, wait, take the token): ms/token."""
        from ..samplers import greedy
        ws = await self._prefilled_ws()
        fwd, token_out = self._loop(ws, greedy())
        await self.pipe.submit(fwd)  # the first pass also builds this run's dispatch plan
        await token_out.take_scalar()
        t0 = time.perf_counter()
        for _ in range(self.n):
            await self.pipe.submit(fwd)
            await token_out.take_scalar()
        return (time.perf_counter() - t0) / self.n * 1e3

    def host_sampling(self) -> float:
        """One run with full logits read back and a numpy argmax per token: ms/token."""
        gpu = self.model.gpu
        ws = self.model.working_set(len(self.ids) + self.n + 3)
        logits = gpu.forward(ws, self.ids)[0]
        logits = gpu.forward(ws, [int(np.argmax(logits))])[0]  # builds the decode dispatch plan
        t0 = time.perf_counter()
        for _ in range(self.n):
            logits = gpu.forward(ws, [int(np.argmax(logits))])[0]
        return (time.perf_counter() - t0) / self.n * 1e3

    async def prefill(self, n: int = 128) -> dict:
        from .. import Channel, ForwardPass, StateGeometry, dtype
        text = ("The old lighthouse keeper climbed the stairs every evening, counting the steps and listening to the "
                "sea. ") * 20
        ids = self.model.tokenizer.encode(text).ids[:n]
        times = []
        for r in range(self.runs + 1):
            ws = self.model.working_set(n + 1)
            pf = ForwardPass()
            pf.embed(Channel.from_(ids, dtype.i32), Channel.from_([0, n], dtype.u32))
            pf.state([ws], StateGeometry.folding())
            t0 = time.perf_counter()
            await self.pipe.submit(pf)
            if r:
                times.append(time.perf_counter() - t0)
        return {"tokens": n, "tokens_per_s": n / _median(times), "seconds": _median(times)}


class NumpyReference:
    """Decode runs of the numpy reference forward (float32, OpenBLAS) on the same prompt."""

    def __init__(self, model_dir, n_tokens: int):
        from ..model.reference import ReferenceModel
        from ..model.tokenizer import load_tokenizer
        self.ref = ReferenceModel.from_dir(model_dir)
        self.ids = load_tokenizer(model_dir).encode(PROMPT).ids
        self.n = n_tokens

    def run(self) -> float:
        """One run: ms/token."""
        cache = self.ref.new_cache()
        logits = self.ref.forward(self.ids, cache)[-1]
        t0 = time.perf_counter()
        for _ in range(self.n):
            logits = self.ref.forward([int(np.argmax(logits))], cache)[-1]
        return (time.perf_counter() - t0) / self.n * 1e3


def dispatch_cost_us(device) -> float:
    """Median cost of one dispatch of a trivial kernel inside a compute pass."""
    import wgpu
    from ..model.shaders import Kernel
    buf = device.create_buffer(size=64, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    k = Kernel(device, "@group(0) @binding(0) var<storage, read_write> o: array<u32>;\n"
                       "@compute @workgroup_size(16) fn main(@builtin(global_invocation_id) g: vec3<u32>) "
                       "{ if (g.x == 0u) { o[0] = o[0] + 1u; } }", "tick")
    bg = k.bind(device, {0: buf})
    out = []
    for r in range(8):
        enc = device.create_command_encoder()
        cp = enc.begin_compute_pass()
        cp.set_pipeline(k.pipeline)
        for _ in range(300):
            cp.set_bind_group(0, bg)
            cp.dispatch_workgroups(1, 1, 1)
        cp.end()
        t0 = time.perf_counter()
        device.queue.submit([enc.finish()])
        device.queue.read_buffer(buf, 0, 4)
        if r:
            out.append((time.perf_counter() - t0) / 300 * 1e6)
    return _median(out)


COMPILE_SCRIPT = r"""
import json, sys, time
from piegpu import dtype, eta
from piegpu.eta import cache
from piegpu.runtime.compiled import compile_program
from piegpu.bench.table import top_a_epilogue
from piegpu.runtime.device import get_device
get_device()  # adapter and device creation are not part of compiling
ctx = eta.IntrinsicContext.for_logits(49152)
t0 = time.perf_counter()
prog = eta.trace(top_a_epilogue, context=ctx)
compile_program(prog, "wgsl")
t1 = time.perf_counter()
print(json.dumps({"seconds": t1 - t0, "disk_hits": cache.cache_stats()["disk_hits"]}))
"""


def top_a_epilogue():
    """The benchmarked epilogue: top-a (a = 0.2) sampling with Gumbel noise on [vocab] logits."""
    from .. import dtype, eta
    from ..eta import intrinsics
    logits = intrinsics.output(0)
    state = eta.broadcast(7, [2])
    probs = eta.softmax(eta.sanitize(logits))
    pmax = eta.reduce_max(probs)
    keep = probs >= eta.broadcast(eta.reshape(pmax * pmax * 0.2, [1]), list(probs.shape))
    return eta.gumbel_max(eta.mask_apply(logits, keep), eta.cast(state, dtype.u32))


def epilogue_compile() -> dict:
    """Trace, emit, cold compile and warm cache-hit times of the top-a epilogue."""
    from .. import eta
    from ..runtime.compiled import build_artifact, compile_program
    from ..runtime.device import get_device
    dev = get_device()
    ctx = eta.IntrinsicContext.for_logits(49152)
    trace_ms = []
    for _ in range(21):
        t0 = time.perf_counter()
        prog = eta.trace(top_a_epilogue, context=ctx)
        trace_ms.append((time.perf_counter() - t0) * 1e3)
    emit_ms = []
    for _ in range(5):
        t0 = time.perf_counter()
        build_artifact(prog, "wgsl", dev)
        emit_ms.append((time.perf_counter() - t0) * 1e3)
    with tempfile.TemporaryDirectory() as d:
        env = {**os.environ, "PIEGPU_CACHE_DIR": d}
        cold = json.loads(subprocess.run([sys.executable, "-c", COMPILE_SCRIPT], env=env, capture_output=True,
                                         text=True, check=True).stdout.strip().splitlines()[-1])
        disk = json.loads(subprocess.run([sys.executable, "-c", COMPILE_SCRIPT], env=env, capture_output=True,
                                         text=True, check=True).stdout.strip().splitlines()[-1])
    compile_program(prog, "wgsl", dev)
    warm_ms = []
    for _ in range(21):
        t0 = time.perf_counter()
        p = eta.trace(top_a_epilogue, context=ctx)
        compile_program(p, "wgsl", dev)
        warm_ms.append((time.perf_counter() - t0) * 1e3)
    return {"trace_ms": _median(trace_ms), "emit_ms": _median(emit_ms),
            "cold_compile_ms": cold["seconds"] * 1e3, "disk_hit_ms": disk["seconds"] * 1e3,
            "disk_hit_was_hit": disk["disk_hits"] == 1, "warm_trace_and_lookup_ms": _median(warm_ms)}


GRAMMAR_SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 24}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "city": {"type": "string", "maxLength": 24}, "hobbies": {"type": "array", "items": {"type": "string",
                                                                                         "maxLength": 16},
                                                             "maxItems": 3}},
    "required": ["name", "age", "city"]}


def grammar_row(model, runs: int) -> dict:
    """JSON-schema constrained generation (greedy, chat): tokens/s, llguidance ms per sampled token, and
    llguidance's mask + consume ms per token replayed on the generated tokens (no device work)."""
    from ..inferlets.grammar import Constraint
    tps, mask_ms, replay_ms = [], [], []
    for r in range(runs + 1):
        g = model.generate("Describe a person who lives in Paris. Answer in JSON.", chat=True, max_tokens=48,
                           json_schema=GRAMMAR_SCHEMA)
        g.run()
        c = Constraint.from_request(model, json_schema=GRAMMAR_SCHEMA)
        m, buf = c.matcher(), np.zeros(c.words, np.uint32)
        t0 = time.perf_counter()
        for tok in g.tokens:
            m.mask_into(buf)
            m.consume(tok)
        if r:  # the first run compiles the masked epilogue
            tps.append(g.stats.decode_tokens_per_s)
            mask_ms.append(g.grammar_stats.mask_ms_per_token)
            replay_ms.append((time.perf_counter() - t0) / max(1, len(g.tokens)) * 1e3)
    gs = g.grammar_stats
    return {"tokens_per_s": _median(tps), "mask_ms_per_sampled_token": _median(mask_ms),
            "replay_mask_ms_per_token": _median(replay_ms), "tokens": len(g.tokens), "sampled": gs.masks,
            "forced": gs.forced, "masks_ahead": gs.ahead}


def run_all(n_tokens: int = 63, runs: int = 3) -> dict:
    """Every benchmark, side by side in this process (the numpy reference too)."""
    from ..runtime.device import get_device
    from ..model.default import default_model_dir
    from ..textgen.model import load_model
    from ..samplers import greedy, top_p
    dev = get_device()
    model = load_model(verbose=False)
    b = _Bench(model, n_tokens, runs)
    ref = NumpyReference(default_model_dir(verbose=False), n_tokens)
    from ..runtime.session import PrivateLoop
    loop = PrivateLoop()  # as the blocking entry points (generate()) run: their waits block the thread
    out = {"adapter": f"{dev.name} via {dev.backend}", "lp_num_threads": os.environ.get("LP_NUM_THREADS"),
           "tokens": n_tokens, "runs": runs, "prompt": PROMPT, "window": b.pipe.window}
    out["prefill"] = loop.run(b.prefill(128))
    # The decode modes take turns run by run (not one block each), so a slow spell of this
    # shared machine lands on all of them alike; the first round warms up and is dropped.
    def greedy_at(counts: dict, window: int | None = None):
        """A mode: greedy run_ahead at `window` (the pipeline's: None), its counts per token into `counts`."""
        def run() -> float:
            ms = loop.run(b.run_ahead(greedy(), window=window))
            counts.update(dispatches_per_token=b.counts[0], submits_per_token=b.counts[1])
            counts.setdefault("host_ms_runs", []).append(b.host_ms)
            return ms
        return run
    # the default window, and the one (and groups) a GPU adapter runs at, for its host cost
    counts = {"run_ahead_greedy": {}, "run_ahead_greedy_gpu_window": {"window": WINDOW, "group": default_group(WINDOW)}}
    modes = {
        "run_ahead_greedy": greedy_at(counts["run_ahead_greedy"]),
        "run_ahead_greedy_gpu_window": greedy_at(counts["run_ahead_greedy_gpu_window"], WINDOW),
        "run_ahead_top_p": lambda: loop.run(b.run_ahead(top_p(0.9, 0.8))),
        "depth1_greedy": lambda: loop.run(b.depth1()),
        "host_sampling": b.host_sampling,
        "numpy_reference": ref.run,
        "dispatch_us": lambda: dispatch_cost_us(dev.device),
    }
    runs_ms: dict = {k: [] for k in modes}
    for r in range(runs + 1):
        for name, fn in modes.items():
            ms = fn()
            if r:
                runs_ms[name].append(ms)
    dispatch = runs_ms.pop("dispatch_us")
    for name, xs in runs_ms.items():
        out[name] = {"ms_per_token": _median(xs), "runs_ms": xs}
    out["dispatch_us"], out["dispatch_us_runs"] = _median(dispatch), dispatch
    for name, c in counts.items():
        c["host_ms_runs"] = c["host_ms_runs"][1:]  # the warm-up round is dropped, as for the times
        c["host_ms_per_token"] = _median(c["host_ms_runs"])
        out[name].update(c)
    out["depth1_greedy"]["submits_per_token"] = 1.0
    loop.close()
    out["host_sampling"]["readback_bytes_per_token"] = model.gpu.config.vocab_size * 4
    out["epilogue"] = epilogue_compile()
    from .batch import run as batch_rows
    out["batching"] = batch_rows(model, ref.ref, runs=runs)
    out["grammar"] = grammar_row(model, runs)
    from .speculative import compare as speculative_row
    out["speculative"] = [speculative_row(model, w, 96, runs) for w in ("edit", "story")]
    a = out["run_ahead_greedy"]
    out["ratios"] = {
        "numpy_over_run_ahead_speed": out["numpy_reference"]["ms_per_token"] / a["ms_per_token"],
        "llama_cpp_vulkan_q4_1_anchor_speedup": LLAMA_CPP_VULKAN_Q4_1_MS / a["ms_per_token"],
        "run_ahead_vs_depth1": out["depth1_greedy"]["ms_per_token"] / a["ms_per_token"],
        "run_ahead_vs_host_sampling": out["host_sampling"]["ms_per_token"] / a["ms_per_token"],
        "dispatch_overhead_share": a["dispatches_per_token"] * out["dispatch_us"] / 1e3 / a["ms_per_token"],
    }
    return out


def table(r: dict) -> str:
    """The benchmark table as Markdown."""
    rows = [("mode", "decode ms/token", "tokens/s", "best run ms/token", "notes")]

    def add(name, d, note):
        rows.append((name, f"{d['ms_per_token']:.1f}", f"{1e3 / d['ms_per_token']:.1f}", f"{min(d['runs_ms']):.1f}",
                     note))
    a = r["run_ahead_greedy"]
    add("(a) run_ahead, fused greedy epilogue", a,
        f"{a['dispatches_per_token']:.0f} dispatches, {a['submits_per_token']:.0f} submit per token, "
        f"window {r.get('window', '?')}, host {a.get('host_ms_per_token', float('nan')):.2f} ms CPU/token "
        "(Python threads)")
    if "run_ahead_greedy_gpu_window" in r:
        g = r["run_ahead_greedy_gpu_window"]
        add(f"(a') (a) at a GPU's window {g['window']}", g,
            f"groups of {g['group']} passes a submit ({g['submits_per_token']:.2f} submits per token), host "
            f"{g['host_ms_per_token']:.2f} ms CPU/token (Python threads)")
    add("(b) run_ahead, fused top-p epilogue", r["run_ahead_top_p"], "p=0.9, T=0.8, bisection on the device")
    add("(c) depth-1 submit per token", r["depth1_greedy"], "host waits for each token")
    add("(d) host-side sampling", r["host_sampling"], "full logits read back, numpy argmax")
    add("numpy reference forward (f32, CPU)", r["numpy_reference"], "measured in the same run")
    rows.append(("llama.cpp Vulkan Q4_1 on lavapipe (anchor)", f"{LLAMA_CPP_VULKAN_Q4_1_MS:.0f}",
                 f"{1e3 / LLAMA_CPP_VULKAN_Q4_1_MS:.1f}", "", "from the issue; not built here"))
    w = [max(len(x[i]) for x in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(c.ljust(w[i]) for i, c in enumerate(row)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (x + 2) for x in w) + "|")
    ra, e, p = r["ratios"], r["epilogue"], r["prefill"]
    lines += ["",
              f"adapter: {r['adapter']}; LP_NUM_THREADS={r['lp_num_threads']}; {r['tokens']} tokens, "
              f"median of {r['runs']} runs",
              f"prefill: {p['tokens']}-token prompt at {p['tokens_per_s']:.0f} tokens/s",
              f"(a) vs numpy reference: {ra['numpy_over_run_ahead_speed']:.2f}x its speed; "
              f"vs the llama.cpp Vulkan Q4_1 anchor: {ra['llama_cpp_vulkan_q4_1_anchor_speedup']:.1f}x faster",
              f"(a) vs (c): {ra['run_ahead_vs_depth1']:.2f}x; (a) vs (d): {ra['run_ahead_vs_host_sampling']:.2f}x",
              f"dispatch cost {r['dispatch_us']:.0f} us (runs {min(r['dispatch_us_runs']):.0f}-{max(r['dispatch_us_runs']):.0f}) -> dispatch overhead {100 * ra['dispatch_overhead_share']:.1f}% "
              "of decode time",
              f"top-a epilogue: trace {e['trace_ms']:.2f} ms, emit {e['emit_ms']:.1f} ms, cold compile "
              f"{e['cold_compile_ms']:.0f} ms (incl. pipeline creation), disk hit in a new process "
              f"{e['disk_hit_ms']:.0f} ms, warm trace + lookup {e['warm_trace_and_lookup_ms']:.2f} ms"]
    if "grammar" in r:
        gr = r["grammar"]
        lines.append(f"grammar (JSON schema, llguidance): {gr['tokens_per_s']:.1f} tokens/s decode, "
                     f"{gr['mask_ms_per_sampled_token']:.3f} ms host mask work per sampled token "
                     f"({gr['sampled']} sampled, {gr['masks_ahead']} of their next masks computed during the "
                     f"device pass, + {gr['forced']} forced of {gr['tokens']}); mask + consume replayed "
                     f"{gr['replay_mask_ms_per_token']:.3f} ms/token")
    if "speculative" in r:
        from .speculative import rows as speculative_lines
        lines += speculative_lines(r["speculative"])
    if "batching" in r:
        from .batch import rows as batch_lines
        lines += batch_lines(r["batching"])
    return "\n".join(lines)


def main(args) -> int:
    """Entry point of `piegpu bench`."""
    n = 16 if args.quick else args.tokens
    runs = 1 if args.quick else args.runs
    r: dict = {}
    if not args.only_gguf:
        print(f"piegpu bench: {n} tokens x {runs} runs per mode (a minute or two)...", file=sys.stderr)
        r = run_all(n, runs)
    if args.gguf:
        from .peer import compare, table as peer_table
        rows = []
        for path in args.gguf:
            print(f"piegpu bench: {path}: llama.cpp and piegpu, a process each ...", file=sys.stderr)
            rows.append(compare(path, ctx=args.ctx, tokens=min(n, 16), runs=runs))
        r["gguf"] = rows
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    if not args.only_gguf:
        print(table(r))
    if args.gguf:
        print(f"\nGGUF files at context {args.ctx}, greedy, {min(n, 16)} tokens, median of {runs} runs; "
              "ratio = piegpu / llama.cpp (CPU, 2 threads)")
        print(peer_table(r["gguf"]))
    return 0
