"""The piegpu command line: one module per subcommand, each with add_parser(sub) and its command function."""

from __future__ import annotations

import argparse
import sys

from ..errors import PieGpuError
from . import compile as _compile
from . import generate as _generate
from . import info as _info
from . import models as _models
from . import perplexity as _perplexity
from . import ptir as _ptir
from . import serve as _serve
from .generate import _check_modes, _checked_options, _cmd_generate, _sampler_options  # noqa: F401 (tests)

SUBCOMMANDS = (_generate, _compile, _info, _models, _perplexity, _serve, _ptir)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `piegpu`."""
    ap = argparse.ArgumentParser(prog="piegpu", description="GPU runtime for local LLM inference with device epilogues")
    ap.add_argument("--verbose", action="store_true", help="more detail on stderr")
    sub = ap.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    return ap


def main(argv=None) -> int:
    """Entry point of the `piegpu` console script."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except PieGpuError as e:
        print(f"piegpu: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\npiegpu: interrupted", file=sys.stderr)
        return 130

