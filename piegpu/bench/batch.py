"""`piegpu bench`'s batching rows: prefill against numpy, batched decode, end to end, time to first token.

All measured in the same process as the rest of the table, runs interleaved where two
things are compared (piegpu and numpy prefill; B = 1 and B = 8 decode), so a slow spell
of a shared machine lands on both.
"""

from __future__ import annotations

import gc
import statistics
import time


PREFILL_TEXT = ("The old lighthouse keeper climbed the stairs every evening, counting the steps and listening to "
                "the sea. ") * 60
CHAT_PROMPT = "What is the capital of France?"
DECODE_PROMPT = "Once upon a time"


def prefill_vs_numpy(model, ref, lengths=(128, 512), runs: int = 3) -> dict:
    """Prefill tokens/s of piegpu (session prefill, chunks of up to 256) and of the numpy reference, interleaved."""
    from ..runtime.session import run_sync
    ids_all = model.tokenizer.encode(PREFILL_TEXT).ids
    out = {}
    for n in lengths:
        ids = ids_all[:n]
        gpu, cpu = [], []
        for r in range(runs + 1):
            sess = model.session(model.working_set(n + 1))
            t0 = time.perf_counter()
            run_sync(sess.extend(ids))  # each prefill pass is submitted and waited for
            g = time.perf_counter() - t0
            t0 = time.perf_counter()
            ref.forward(ids, ref.new_cache())
            c = time.perf_counter() - t0
            if r:
                gpu.append(g)
                cpu.append(c)
        gt, ct = statistics.median(gpu), statistics.median(cpu)
        out[n] = {"piegpu_tokens_per_s": n / gt, "numpy_tokens_per_s": n / ct, "ratio": ct / gt}
    return out


def _decode_run(model, ids: list, B: int, n: int, window) -> tuple:
    """(wall s, host CPU s of the Python threads, BatchStats) of a greedy Batch of B rows, n tokens each, prefill in."""
    from ..runtime.batch import Batch
    from ..runtime.session import run_sync
    from ..samplers.rows import RowParams, RowSampling
    from .host import python_threads_cpu_s
    # earlier runs' working sets (in reference cycles with their sessions) give their KV pages back now, not in
    # a collection the pool forces when it runs short inside a timed run
    gc.collect()
    batch = Batch(model, RowSampling(model.config.vocab_size), max_batch=B, window=window)
    for _ in range(B):
        batch.add(ids, RowParams(temperature=0.0), n)  # no stop token: every row decodes n tokens
    h0, t0 = python_threads_cpu_s(), time.perf_counter()
    run_sync(batch.run())
    return time.perf_counter() - t0, python_threads_cpu_s() - h0, batch.stats


def batched_decode(model, batches=(1, 8, 16), windows=(1, 2, 4, 8), tokens: int = 16, runs: int = 3) -> dict:
    """Greedy decode through the runtime Batch in steady state: a run of 2N tokens minus a run of N, per pass.

    Per batch size at the adapter's default window (pass_table: ms per pass, tokens/s, ratios
    to B=1, plus host CPU ms per pass), at B=8 per window in `windows` (ms and host ms
    per pass, host waits per generated token), and B=16 at a GPU's window (runtime.window.WINDOW,
    passes submitted in groups). Configurations take turns run by run.
    """
    from ..runtime.window import WINDOW, default_window
    ids = model.tokenizer.encode(DECODE_PROMPT).ids
    default = default_window(model.gpu.dev)
    configs = list(dict.fromkeys([(B, default) for B in batches] + [(8, W) for W in windows] + [(16, WINDOW)]))
    wall = {c: [] for c in configs}
    host = {c: [] for c in configs}
    waits = {}
    for r in range(runs + 1):
        for B, W in configs:
            t1, h1, _ = _decode_run(model, ids, B, tokens, W)
            t2, h2, st = _decode_run(model, ids, B, 2 * tokens, W)
            if r:
                wall[B, W].append((t2 - t1) / tokens * 1e3)
                host[B, W].append((h2 - h1) / tokens * 1e3)
                waits[B, W] = st.host_waits / st.decode_passes
    out = pass_table({B: wall[B, default] for B in batches})
    for B in batches:
        out[B].update(host_ms_per_pass=statistics.median(host[B, default]), host_ms_runs=host[B, default],
                      window=default)
    out["windows"] = {W: {"ms_per_pass": statistics.median(wall[8, W]), "host_ms_per_pass": statistics.median(host[8, W]),
                          "host_waits_per_token": waits[8, W]} for W in windows}
    out["gpu_window"] = {"window": WINDOW, **{B: {"ms_per_pass": statistics.median(wall[B, WINDOW]),
                                                  "host_ms_per_pass": statistics.median(host[B, WINDOW])}
                                              for B in (8, 16) if (B, WINDOW) in wall}}
    return out


E2E_PROMPTS = ["Once upon a time", "The old lighthouse keeper", "In a small village by the sea",
               "The first thing I noticed", "Long ago, in a kingdom far away", "The robot opened its eyes",
               "It was a cold winter morning", "My grandmother always said"]


def end_to_end(model, tokens: int = 128, runs: int = 3) -> dict:
    """What a user sees: generate_batch of 8 prompts (admission prefill included) against one generate, same run."""
    pairs, batch_tps, one_tps = [], [], []
    for r in range(runs + 1):
        t0 = time.perf_counter()
        gens = model.generate_batch(E2E_PROMPTS, max_tokens=tokens)
        tb = sum(len(g.tokens) for g in gens) / (time.perf_counter() - t0)
        g = model.generate(E2E_PROMPTS[0], max_tokens=tokens)
        t0 = time.perf_counter()
        g.run()
        t1 = len(g.tokens) / (time.perf_counter() - t0)
        if r:
            batch_tps.append(tb)
            one_tps.append(t1)
            pairs.append(tb / t1)
    return {"prompts": len(E2E_PROMPTS), "tokens": tokens, "batch_tokens_per_s": statistics.median(batch_tps),
            "one_tokens_per_s": statistics.median(one_tps), "ratio": statistics.median(pairs), "ratio_runs": pairs}


def pass_table(per_pass: dict) -> dict:
    """{B: ms per pass, tokens/s, and the ratios to the first B} from each batch size's per-run ms per pass.

    Run r of every batch size was timed back to back, so a slow spell of the machine lands on
    both sides of a pair: the ratios are medians of run-by-run ratios, not ratios of medians.
    """
    first = next(iter(per_pass))  # keys are batch sizes
    out = {}
    for B, xs in per_pass.items():
        ms = statistics.median(xs)
        pairs = [b / a for a, b in zip(per_pass[first], xs)]
        out[B] = {"ms_per_pass": ms, "tokens_per_s": B * 1e3 / ms, "runs_ms": xs,
                  "per_sequence_ms_vs_b1_runs": pairs, "per_sequence_ms_vs_b1": statistics.median(pairs),
                  "aggregate_vs_b1": statistics.median(B * first / r for r in pairs)}
    return out


def time_to_first_token(model, runs: int = 3) -> dict:
    """The chat prompt's time to the first token with warm caches: prefill, and prompt -> first token."""
    prefill, first = [], []
    for r in range(runs + 1):
        g = model.generate(CHAT_PROMPT, chat=True, max_tokens=1)
        t0 = time.perf_counter()
        g.run()
        if r:
            first.append(time.perf_counter() - t0)
            prefill.append(g.stats.prefill_s)
    return {"prompt_tokens": g.stats.prompt_tokens, "prefill_s": statistics.median(prefill),
            "first_token_s": statistics.median(first)}


def rows(r: dict) -> list:
    """The table lines of these measurements."""
    lines = []
    for n, p in r["prefill_vs_numpy"].items():
        lines.append(f"prefill {n} tokens: piegpu {p['piegpu_tokens_per_s']:.0f} tokens/s, numpy reference "
                     f"{p['numpy_tokens_per_s']:.0f} tokens/s -> {p['ratio']:.2f}x numpy (same run, interleaved)")
    for B, d in r["batched_decode"].items():
        if B in ("windows", "gpu_window"):
            continue
        pairs = d["per_sequence_ms_vs_b1_runs"]
        host = f", host {d['host_ms_per_pass']:.2f} ms CPU/pass" if "host_ms_per_pass" in d else ""
        lines.append(f"batched greedy decode B={B}: {d['ms_per_pass']:.1f} ms/pass{host}, {d['tokens_per_s']:.1f} "
                     f"tokens/s aggregate ({d['aggregate_vs_b1']:.2f}x B=1; per-sequence ms/token "
                     f"{d['per_sequence_ms_vs_b1']:.2f}x B=1, runs {min(pairs):.2f}-{max(pairs):.2f}x)")
    windows = r["batched_decode"].get("windows", {})
    if windows:
        lines.append("batched run-ahead B=8, steady state: " + "; ".join(
            f"window {W}: {w['ms_per_pass']:.1f} ms/pass, host {w['host_ms_per_pass']:.2f} ms CPU/pass, "
            f"{w['host_waits_per_token']:.2f} host waits/token" for W, w in windows.items()))
    gw = r["batched_decode"].get("gpu_window")
    if gw:
        from ..runtime.window import default_group
        lines.append(f"at a GPU's window {gw['window']} (groups of {default_group(gw['window'])} passes a submit): "
                     + "; ".join(f"B={B} {d['ms_per_pass']:.1f} ms/pass, host {d['host_ms_per_pass']:.2f} ms CPU/pass"
                                 for B, d in gw.items() if B != "window"))
    e = r.get("end_to_end")
    if e:
        lines.append(f"end to end: generate_batch of {e['prompts']} prompts x {e['tokens']} tokens (prefill in) "
                     f"{e['batch_tokens_per_s']:.1f} tokens/s = {e['ratio']:.2f}x one generate "
                     f"({e['one_tokens_per_s']:.1f} tokens/s), same run (pairs {min(e['ratio_runs']):.2f}-"
                     f"{max(e['ratio_runs']):.2f}x)")
    t = r["ttft"]
    lines.append(f"chat prompt {CHAT_PROMPT!r} ({t['prompt_tokens']} tokens), warm caches: prefill "
                 f"{t['prefill_s'] * 1e3:.0f} ms, first token after {t['first_token_s'] * 1e3:.0f} ms")
    return lines


def run(model, ref_model, runs: int = 3) -> dict:
    """Every measurement of this module."""
    return {"prefill_vs_numpy": prefill_vs_numpy(model, ref_model, runs=runs),
            "batched_decode": batched_decode(model, runs=runs),
            "end_to_end": end_to_end(model, runs=runs),
            "ttft": time_to_first_token(model, runs=runs)}
