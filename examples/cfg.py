"""Classifier-free guidance: a conditional and an unconditional sequence in one pass, mixed on the device.

    python examples/cfg.py ["Write a sentence about cats."] [scale]
"""

import sys

import piegpu
from piegpu.inferlets.cfg import generate_cfg

prompt = sys.argv[1] if len(sys.argv) > 1 else "Write a sentence about cats."
scale = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0  # 1 = no guidance
model = piegpu.load_model()
print(generate_cfg(model, prompt, negative="", scale=scale, max_tokens=32, chat=True).text)
