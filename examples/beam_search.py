"""Beam search with the beams as rows of one pass: top-k over width x vocab candidates on the device.

    python examples/beam_search.py ["The capital of France is"]
"""

import sys

import piegpu
from piegpu.inferlets.beam import beam_search

prompt = sys.argv[1] if len(sys.argv) > 1 else "The capital of France is"
model = piegpu.load_model()
result = beam_search(model, prompt, width=4, max_tokens=16)
print(prompt + result.text)
for score, tokens in result.hypotheses:  # every finished hypothesis, best first
    print(f"  {score:8.3f}  {model.tokenizer.decode(tokens)!r}")
