"""Helpers the subcommands share: argparse types."""

from __future__ import annotations

import argparse

MODEL_HELP = ("a .gguf file, a model folder, a Hugging Face repo id org/repo[:QUANT][@REV], ollama:NAME[:TAG] or "
              "lmstudio:PUBLISHER/REPO[:QUANT] (`piegpu models` lists what is here; default: SmolLM2-135M-Instruct)")


def int_at_least(lo: int, below: int | None = None):
    """An argparse type: an int >= lo (and < below), so a bad count fails at parse time like a non-number."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
        if v < lo or (below is not None and v >= below):
            want = f"an int >= {lo}" if below is None else f"an int in [{lo}, {below})"
            raise argparse.ArgumentTypeError(f"must be {want}, got {v}")
        return v
    return parse


def add_context_arg(p) -> None:
    """-c / --ctx-size N (llama.cpp's names; --ctx too): the model's context, 0 = the model's own, dest `ctx`."""
    p.add_argument("-c", "--ctx-size", "--ctx", dest="ctx", type=int_at_least(0), default=None, metavar="N",
                   help="context in positions, prompt + generated tokens (0: the model's own; default: the model's "
                        "where its KV fits the default budget, else the largest power of two that does, at least 4096)")
