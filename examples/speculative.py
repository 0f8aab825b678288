"""Speculative decoding: prompt-lookup drafts verified on the device, plain run-ahead decoding between them.

model.generate(prompt, speculative="lookup") (or piegpu.Lookup(k=..., ngram=...)): each step the host looks the last
n-gram up in the prompt and the text so far, and one pass over the pending token plus the drafts decides on the
device how many stand (greedy: the argmax; sampled: speculative sampling), keeping them in the KV state. Greedy
output equals plain greedy decoding; sampled output is distributed as plain sampling's.

    python examples/speculative.py "Repeat the word 'apple' ten times: apple apple apple" --k 7 --check
"""

import argparse
import time

import piegpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prompt", nargs="?", default="Count: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--k", type=int, default=7, help="the most drafts a verify pass takes")
    ap.add_argument("--ngram", type=int, default=3, help="the longest n-gram looked up")
    ap.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    ap.add_argument("--check", action="store_true", help="also run plain decoding and compare")
    args = ap.parse_args()
    model = piegpu.load_model()
    g = model.generate(args.prompt, max_tokens=args.max_tokens, temperature=args.temperature,
                       speculative=piegpu.Lookup(k=args.k, ngram=args.ngram))
    print(args.prompt + g.run())
    s = g.stats
    print(f"{s.generated} tokens: {s.accepted_tokens}/{s.draft_tokens} drafts accepted in {s.verify_passes} verify "
          f"passes (+ {s.plain_passes} plain), {s.decode_s:.1f} s")
    if args.check:
        t0 = time.perf_counter()
        plain = model.generate(args.prompt, max_tokens=args.max_tokens, temperature=args.temperature)
        plain.run()
        if args.temperature == 0:
            print(f"{'identical to' if plain.tokens == g.tokens else 'DIFFERENT from'} plain greedy decoding "
                  f"({time.perf_counter() - t0:.1f} s)")
        else:
            print(f"plain sampling took {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
