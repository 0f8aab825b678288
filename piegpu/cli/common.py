"""Helpers the subcommands share: argparse types."""

from __future__ import annotations

import argparse


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


