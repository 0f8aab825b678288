"""Speculative greedy decoding: prompt-lookup drafts, verified on the device in one pass each.

The pass embeds the pending token plus k drafts and reads out k+1 logits rows; the epilogue
accepts the matching prefix (cumprod of eq(drafts, argmax)), keeps accepted+1 tokens in the
KV state on the device (StateGeometry.accepting), and returns the accepted tokens plus the
correction. The output equals plain greedy decoding.

    python examples/speculative.py "Repeat the word 'apple' ten times: apple apple apple" --k 4
"""

import argparse
import time

import piegpu
from piegpu.inferlets.speculative import generate_speculative


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prompt", nargs="?", default="Count: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--k", type=int, default=4, help="drafts per pass")
    ap.add_argument("--ngram", type=int, default=3, help="n-gram length for the prompt lookup")
    ap.add_argument("--check", action="store_true", help="also run plain greedy decoding and compare")
    args = ap.parse_args()
    model = piegpu.load_model()
    tokens, st = generate_speculative(model, args.prompt, args.max_tokens, k=args.k, ngram=args.ngram)
    print(args.prompt + model.tokenizer.decode(tokens))
    print(f"{st.generated} tokens in {st.passes} passes: {st.tokens_per_pass:.2f} tokens/pass, "
          f"{st.accepted}/{st.drafted} drafts accepted ({st.acceptance_rate:.0%}), {st.decode_s:.1f} s")
    if args.check:
        t0 = time.perf_counter()
        g = model.generate(args.prompt, max_tokens=args.max_tokens)
        g.run()
        same = "identical to" if g.tokens == tokens else "DIFFERENT from"
        print(f"{same} plain greedy decoding ({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
