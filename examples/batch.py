"""Several prompts decoded together, and n samples of one prompt sharing its prefilled KV.

Every sequence is a row of the same forward pass; one sampling epilogue reads each row's
temperature/top-k/top-p/min-p/seed from channels, so the rows may differ.

    python examples/batch.py
"""

import time

import piegpu


def main() -> None:
    model = piegpu.load_model()
    prompts = ["Once upon a time", "The capital of France is", "def fibonacci(n):", "In 1969, the first"]
    t0 = time.perf_counter()
    gens = model.generate_batch(prompts, max_tokens=24)
    dt = time.perf_counter() - t0
    for p, g in zip(prompts, gens):
        print(f"{p!r} -> {g.text!r}")
    print(f"{sum(len(g.tokens) for g in gens)} tokens of {len(prompts)} prompts in {dt:.1f} s (greedy, batched)")
    samples = model.generate("Write a haiku about the sea:", n=3, max_tokens=24, sampler="top-p", top_p=0.9,
                             temperature=0.8, seed=1, chat=True)
    for i, text in enumerate(samples.run()):
        print(f"sample {i}: {text!r}")


if __name__ == "__main__":
    main()
