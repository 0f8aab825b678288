"""Best-of-n and self-consistency: n samples decoded together, each token's log-probability from the device.

    python examples/best_of_n.py ["What is 12 + 30? Answer with a number."]
"""

import re
import sys

import piegpu
from piegpu.inferlets.best_of_n import best_of_n, self_consistency

prompt = sys.argv[1] if len(sys.argv) > 1 else "What is 12 + 30? Answer with a number."
model = piegpu.load_model()
best = best_of_n(model, prompt, n=5, max_tokens=24, chat=True, seed=1)
print(f"best of 5 (mean logprob {best.mean_logprob:.3f}): {best.text!r}")


def number(text):
    """The first integer in a sample: its answer (None when it has none)."""
    m = re.search(r"-?\d+", text)
    return m.group(0) if m else None


voted = self_consistency(model, prompt, number, n=5, max_tokens=24, chat=True, seed=1)
print(f"self-consistency: {voted.answer} (votes {voted.votes})")
