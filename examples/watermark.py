"""A greenlist watermark applied in the epilogue, and its detector on the host.

The greenlist after each token is keyed by (previous token, secret key) and computed on the
device with eta.rng; green logits get +delta before sampling. The detector recomputes the
same bits with piegpu.eta.counter_rng and reports a z-score.

    python examples/watermark.py "Write a short story about a lighthouse keeper." --key 2024
"""

import argparse

import piegpu
from piegpu.inferlets.watermark import generate_watermarked, score


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prompt", nargs="?", default="Write a short story about a lighthouse keeper.")
    ap.add_argument("--key", type=int, default=2024)
    ap.add_argument("--gamma", type=float, default=0.25)
    ap.add_argument("--delta", type=float, default=2.0)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    model = piegpu.load_model()
    text, marked = generate_watermarked(model, args.prompt, args.key, args.max_tokens, args.gamma, args.delta,
                                        seed=args.seed, chat=True)
    print(f"--- watermarked:\n{text}")
    g = model.generate(args.prompt, max_tokens=args.max_tokens, sampler="temperature", seed=args.seed, chat=True)
    print(f"--- plain:\n{g.run()}")
    plain = [g.prompt_ids[-1]] + g.tokens
    for label, toks in (("watermarked", marked), ("plain", plain)):
        s = score(toks, args.key, args.gamma)
        verdict = "WATERMARKED" if s.z > 4 else "no watermark"
        print(f"{label:12s} z = {s.z:6.2f}  ({s.green}/{s.scored} green)  -> {verdict}")


if __name__ == "__main__":
    main()
