"""Constrained decoding on the device automaton vs llguidance's host masks vs free text, side by side in one run.

Workloads (the default model): "tool" fills a get_weather call's arguments (short, ends when the grammar does),
"records" lists people in an array of objects (long); piegpu/bench/grammar.py.

    python benchmarks/device_grammar.py [--rounds 3] [--workloads tool,records] [--windows 1,8]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workloads", default="tool,records")
    ap.add_argument("--windows", default="1,8")
    args = ap.parse_args()
    import piegpu
    from piegpu.bench.grammar import rows, run
    model = piegpu.load_model(verbose=False)
    print(f"device: {model.gpu.dev.name}; {args.rounds} rounds after a warm-up round")
    for w in args.workloads.split(","):
        for line in rows(run(model, w, args.rounds, tuple(int(x) for x in args.windows.split(",")))):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
