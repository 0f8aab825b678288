"""Speculative decoding (generate(speculative="lookup")) against plain decoding, side by side in one run.

Workloads (the default model): "edit" rewrites a ~300-token passage (the answer repeats the prompt: lookup drafts
stand), "story" writes free-form text (few matches: drafting must back off); piegpu/bench/speculative.py.

    python benchmarks/speculative.py [--rounds 3] [--tokens 160] [--workloads edit,story] [--k 7]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=160)
    ap.add_argument("--workloads", default="edit,story")
    ap.add_argument("--k", type=int, default=7)
    ap.add_argument("--temperature", type=float, default=0.0)
    args = ap.parse_args()
    import piegpu
    from piegpu.bench.speculative import compare, rows
    model = piegpu.load_model(verbose=False)
    print(f"device: {model.gpu.dev.name}; {args.tokens} tokens, temperature {args.temperature}, k {args.k}")
    for w in args.workloads.split(","):
        print(rows([compare(model, w, args.tokens, args.rounds, args.k, args.temperature)])[0], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
