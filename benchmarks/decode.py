"""The full benchmark table of the default model (the same as `piegpu bench`).

    python benchmarks/decode.py [--json] [--tokens 63] [--runs 3] [--quick]
"""

import sys

from piegpu.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench"] + sys.argv[1:]))
