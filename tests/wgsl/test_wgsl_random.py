"""Random eta programs: WGSL on lavapipe must agree with the interpreter (hundreds of cases)."""

from __future__ import annotations

import os

import pytest

from tests.progen import compare, random_program

N = int(os.environ.get("PIEGPU_RANDOM_PROGRAMS", "500"))
CHUNK = 50


def check_seed(seed: int, backend: str) -> None:
    """Run one random program on `backend` and compare every output with the interpreter."""
    prog, inputs, exact = random_program(seed)
    ref = prog.run(*inputs)
    got = prog.run(*inputs, backend=backend)
    if not isinstance(ref, tuple):
        ref, got = (ref,), (got,)
    for i, (a, b, e) in enumerate(zip(ref, got, exact)):
        compare(a, b, e, f"seed {seed} output {i} on {backend}\n{prog.pretty()}")


@pytest.mark.parametrize("start", range(0, N, CHUNK))
def test_random_programs_wgsl(gpu, start):
    for seed in range(start, min(start + CHUNK, N)):
        check_seed(seed, "wgsl")
