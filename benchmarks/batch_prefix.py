"""generate_batch of prompts that share a system prompt: the common prefix prefilled once and shared, or per prompt.

    python benchmarks/batch_prefix.py [--runs 2] [--tokens 16]

8 chat prompts with the same ~146-token system prompt and different questions; both ways run interleaved (the
second way patches the sharing off), and the tokens of both are compared.
"""

from __future__ import annotations

import argparse
import statistics
import time

SYSTEM = ("You are a careful assistant for a public library. You answer questions about opening hours, "
          "borrowing rules, late fees, the reading room, children's events and the digital catalogue. ") * 4
QUESTIONS = ["When do you open?", "How many books can I borrow?", "What is the late fee?", "Is there a reading room?",
             "Do you have events for kids?", "How do I search the catalogue?", "Can I renew online?",
             "Where do I park?"]


def main() -> None:
    """Time both ways and print the medians and whether the tokens agree."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=16)
    args = ap.parse_args()
    import piegpu
    from piegpu.textgen import batching
    model = piegpu.load_model()
    prompts = [model.chat_prompt([{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}])
               for q in QUESTIONS]
    shared = batching._shared_prefix  # noqa: SLF001 -- the switch being measured

    async def per_prompt(model, gens):
        return [None] * len(gens)
    times: dict = {"shared prefix": [], "each prompt prefilled": []}
    tokens: dict = {}
    common = 0
    for r in range(args.runs + 1):
        for name, fn in (("shared prefix", shared), ("each prompt prefilled", per_prompt)):
            batching._shared_prefix = fn  # noqa: SLF001
            t0 = time.perf_counter()
            gens = model.generate_batch(prompts, max_tokens=args.tokens)
            if r:
                times[name].append(time.perf_counter() - t0)
            tokens[name] = [g.tokens for g in gens]
            if fn is shared:
                common = gens[1].stats.reused_tokens
    batching._shared_prefix = shared  # noqa: SLF001
    a, b = (statistics.median(times[k]) for k in times)
    print(f"8 prompts, {args.tokens} tokens each: shared prefix {a:.2f} s, each prompt prefilled {b:.2f} s "
          f"({b / a:.2f}x); common prefix {common} tokens; same tokens: "
          f"{tokens['shared prefix'] == tokens['each prompt prefilled']}")


if __name__ == "__main__":
    main()
