"""`piegpu bench`'s batching rows: prefill against numpy, batched decode, time to first token.

All measured in the same process as the rest of the table, runs interleaved where two
things are compared (piegpu and numpy prefill; B = 1 and B = 8 decode), so a slow spell
of a shared machine lands on both.
"""

from __future__ import annotations

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


def batched_decode(model, batches=(1, 8), tokens: int = 16, runs: int = 3) -> dict:
    """Greedy decode through the runtime Batch: per batch size, ms per pass and aggregate tokens/s (pass_table)."""
    from ..runtime.batch import Batch
    from ..runtime.session import run_sync
    from ..samplers.rows import RowParams, RowSampling
    ids = model.tokenizer.encode(DECODE_PROMPT).ids
    per_pass = {B: [] for B in batches}
    for r in range(runs + 1):
        for B in batches:  # interleaved run by run
            batch = Batch(model, RowSampling(model.config.vocab_size), max_batch=B)
            seqs = [batch.add(ids, RowParams(temperature=0.0), tokens + 4) for _ in range(B)]
            while any(not s.ready for s in seqs):
                run_sync(batch.step())
            run_sync(batch.step())  # builds and compiles the decode pass
            n0, t0 = batch.stats.decode_passes, time.perf_counter()
            for _ in range(tokens):
                run_sync(batch.step())
            if r:
                per_pass[B].append((time.perf_counter() - t0) / (batch.stats.decode_passes - n0) * 1e3)
    return pass_table(per_pass)


def pass_table(per_pass: dict) -> dict:
    """{B: ms per pass, tokens/s, and the ratios to the first B} from each batch size's per-run ms per pass.

    Run r of every batch size was timed back to back, so a slow spell of the machine lands on
    both sides of a pair: the ratios are medians of run-by-run ratios, not ratios of medians.
    """
    first = next(iter(per_pass))
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
        pairs = d["per_sequence_ms_vs_b1_runs"]
        lines.append(f"batched greedy decode B={B}: {d['ms_per_pass']:.1f} ms/pass, {d['tokens_per_s']:.1f} tokens/s "
                     f"aggregate ({d['aggregate_vs_b1']:.2f}x B=1; per-sequence ms/token "
                     f"{d['per_sequence_ms_vs_b1']:.2f}x B=1, runs {min(pairs):.2f}-{max(pairs):.2f}x)")
    t = r["ttft"]
    lines.append(f"chat prompt {CHAT_PROMPT!r} ({t['prompt_tokens']} tokens), warm caches: prefill "
                 f"{t['prefill_s'] * 1e3:.0f} ms, first token after {t['first_token_s'] * 1e3:.0f} ms")
    return lines


def run(model, ref_model, runs: int = 3) -> dict:
    """Every measurement of this module."""
    return {"prefill_vs_numpy": prefill_vs_numpy(model, ref_model, runs=runs),
            "batched_decode": batched_decode(model, runs=runs),
            "ttft": time_to_first_token(model, runs=runs)}
