"""Random eta programs: SPIR-V on lavapipe must agree with the interpreter (the WGSL suite's programs)."""

from __future__ import annotations

import pytest

from tests.wgsl.test_wgsl_random import CHUNK, N, check_seed


@pytest.mark.parametrize("start", range(0, N, CHUNK))
def test_random_programs_spirv(gpu, start):
    for seed in range(start, min(start + CHUNK, N)):
        check_seed(seed, "spirv")
