"""Beam search with the beams as rows of one pass: top-k over width x vocab candidates on the device.

    python examples/beam_search.py "The capital of France is" --width 4
"""

import argparse

import piegpu
from piegpu.inferlets.beam import beam_search


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prompt", nargs="?", default="The capital of France is")
    ap.add_argument("--width", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--length-penalty", type=float, default=1.0)
    args = ap.parse_args()
    model = piegpu.load_model()
    r = beam_search(model, args.prompt, width=args.width, max_tokens=args.max_tokens,
                    length_penalty=args.length_penalty)
    print(args.prompt + r.text)
    for score, tokens in r.hypotheses:
        print(f"  {score:8.3f}  {model.tokenizer.decode(tokens)!r}")


if __name__ == "__main__":
    main()
