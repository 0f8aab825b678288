"""Classifier-free guidance: a conditional and an unconditional sequence in one pass, mixed on the device.

    python examples/cfg.py "Write a sentence about cats." --negative "Write a sentence." --scale 2
"""

import argparse

import piegpu
from piegpu.inferlets.cfg import generate_cfg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prompt", nargs="?", default="Write a sentence about cats.")
    ap.add_argument("--negative", default="", help="the unconditional prompt (default: none)")
    ap.add_argument("--scale", type=float, default=2.0, help="guidance scale (1 = no guidance)")
    ap.add_argument("--max-tokens", type=int, default=32)
    args = ap.parse_args()
    model = piegpu.load_model()
    r = generate_cfg(model, args.prompt, negative=args.negative, scale=args.scale, max_tokens=args.max_tokens,
                     chat=True)
    print(r.text)


if __name__ == "__main__":
    main()
