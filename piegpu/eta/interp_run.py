"""The `interp` backend entry point for Program.run."""

from __future__ import annotations

from .interp import evaluate


def run(prog, inputs, backend: str = "interp", env=None, **options) -> list:
    """Evaluate with the numpy reference interpreter."""
    return evaluate(prog, inputs, env)
