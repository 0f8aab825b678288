"""The speculative-decoding row of `piegpu bench` (and benchmarks/speculative.py): lookup drafts vs plain decoding.

Workloads (greedy unless a temperature is given): "edit" rewrites a ~300-token passage (the answer repeats the
prompt: lookup drafts stand), "story" writes free-form text (few matches: drafting must back off). Rounds alternate
plain and speculative generation; decode tokens/s, their ratio, the acceptance rate and tokens per verify pass.
"""

from __future__ import annotations

import statistics

PASSAGE = ("The old lighthouse stood at the edge of the cliff for more than a hundred years. Every night its keeper "
           "climbed the narrow stairs, lit the great lamp, and watched the ships pass safely through the dark water. "
           "The villagers said the keeper never slept, and the children believed he could talk to the gulls. When "
           "the storms of winter came, the waves rose higher than the houses, and the light burned through the rain "
           "until morning. One spring a young woman arrived from the city with a suitcase full of books. She asked "
           "the keeper to teach her how to tend the lamp, and he agreed, although he said little and smiled even "
           "less. Together they painted the railings, mended the windows and counted the ships that passed. Years "
           "later, when the keeper grew too old for the stairs, she carried his tea to the top every evening, and "
           "the village said that the light had never shone so brightly.")
WORKLOADS = {
    "edit": ("chat", "Rewrite the following text, replacing the word 'lighthouse' with 'tower'. Change nothing else "
                     "and write out the whole text.\n\n" + PASSAGE),
    "story": ("raw", "Once upon a time, in a small village by the sea, there lived a girl named Mira who"),
}


def run(model, workload: str, tokens: int, spec, temperature: float) -> dict:
    """One generation: decode tokens/s and the speculative counters."""
    kind, text = WORKLOADS[workload]
    g = model.generate(text, max_tokens=tokens, chat=kind == "chat", speculative=spec, seed=1, stop=[],
                       sampler="temperature" if temperature else "greedy", temperature=temperature or 1.0)
    g.run()
    s = g.stats
    return {"tps": s.generated / s.decode_s, "generated": s.generated, "drafted": s.draft_tokens,
            "accepted": s.accepted_tokens, "verify": s.verify_passes, "plain": s.plain_passes, "text": g.text}


def compare(model, workload: str, tokens: int = 160, rounds: int = 3, k: int = 7, temperature: float = 0.0) -> dict:
    """Plain vs speculative on one workload, rounds alternated (a warm-up of each first)."""
    from ..textgen.speculation import Lookup
    spec = Lookup(k=k)
    run(model, workload, 16, None, temperature)  # compile and warm both paths
    run(model, workload, 16, spec, temperature)
    plain, fast = [], []
    for _ in range(rounds):
        plain.append(run(model, workload, tokens, None, temperature))
        fast.append(run(model, workload, tokens, spec, temperature))
    last = fast[-1]
    p = statistics.median(r["tps"] for r in plain)
    f = statistics.median(r["tps"] for r in fast)
    return {"workload": workload, "plain_tps": p, "lookup_tps": f, "speedup": f / p, "k": k, "tokens": tokens,
            "acceptance": last["accepted"] / last["drafted"] if last["drafted"] else 0.0,
            "accepted": last["accepted"], "drafted": last["drafted"], "verify_passes": last["verify"],
            "plain_passes": last["plain"],
            "tokens_per_verify": (last["generated"] - last["plain"]) / last["verify"] if last["verify"] else 0.0,
            "temperature": temperature,
            "same_text": all(a["text"] == b["text"] for a, b in zip(plain, fast)) if temperature == 0 else None}


def rows(results: list) -> list:
    """Lines of the table for compare() results."""
    return [f"speculative lookup ({r['workload']}, "
            f"{'temperature %g' % r['temperature'] if r.get('temperature') else 'greedy'}, k {r['k']}): "
            f"{r['lookup_tps']:.1f} vs plain "
            f"{r['plain_tps']:.1f} tokens/s = {r['speedup']:.2f}x; acceptance {r['acceptance']:.2f} "
            f"({r['accepted']}/{r['drafted']}), {r['tokens_per_verify']:.2f} tokens a verify pass, "
            f"{r['verify_passes']} verify + {r['plain_passes']} plain passes"
            + ("" if r["same_text"] is None else f", same text as plain: {r['same_text']}") for r in results]
