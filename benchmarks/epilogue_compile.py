"""Trace, emit, cold compile and warm cache-hit times of the top-a epilogue (the eta compile path).

    python benchmarks/epilogue_compile.py [--json]

Targets (issue 9): warm trace + hash + lookup under 1 ms; cold emit under 50 ms
(the driver's pipeline creation is reported separately, inside cold compile).
"""

import json
import sys

from piegpu.bench.table import epilogue_compile

if __name__ == "__main__":
    r = epilogue_compile()
    if "--json" in sys.argv:
        print(json.dumps(r, indent=2))
    else:
        for k, v in r.items():
            print(f"{k:28s} {v:.3f}" if isinstance(v, float) else f"{k:28s} {v}")
