"""Best-of-n and self-consistency: n samples decoded together, each token's log-probability from the device.

    python examples/best_of_n.py "What is 12 + 30? Answer with a number." --n 5
"""

import argparse
import re

import piegpu
from piegpu.inferlets.best_of_n import best_of_n, self_consistency


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prompt", nargs="?", default="What is 12 + 30? Answer with a number.")
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=24)
    args = ap.parse_args()
    model = piegpu.load_model()
    best = best_of_n(model, args.prompt, n=args.n, max_tokens=args.max_tokens, chat=True, seed=1)
    print(f"best of {args.n} (mean logprob {best.mean_logprob:.3f}): {best.text!r}")
    number = lambda text: (m.group(0) if (m := re.search(r"-?\d+", text)) else None)  # noqa: E731
    sc = self_consistency(model, args.prompt, number, n=args.n, max_tokens=args.max_tokens, chat=True, seed=1)
    print(f"self-consistency: {sc.answer} (votes {sc.votes})")


if __name__ == "__main__":
    main()
