"""Pie's RNG contract in eta's 32-bit ops: bit-identical to the 64-bit reference on every backend."""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import dtype, eta
from piegpu.ptir import rng as R

STATES = [(1234, 0), (0, 0), (0xFFFFFFFF, 0xFFFFFFFF), (7, 3), (0x9E3779B9, 12345)]


def test_the_reference_formula_is_pinned():
    assert R.splitmix64(1) == 0x3C02AA47758292BD
    assert R.keyed_seed(1234, 0) == 0x2DB56CA5BFD5B704
    assert R.ambient_seed(0, 0) == 0xA5A5A5A5
    bits = R.uniform_reference(R.keyed_seed(1234, 0), 4).view(np.uint32)
    assert bits.tolist() == [1052559729, 1047011334, 1056896129, 1058197906]
    u = R.uniform_reference(R.keyed_seed(7, 3), 4096)
    assert u.min() > 0 and u.max() <= R.UNIFORM_MAX and abs(float(u.mean()) - 0.5) < 0.02


@pytest.fixture(scope="module")
def keyed():
    return eta.trace(lambda s: R.keyed_uniform(s, (4, 1024)), eta.spec([2], dtype.u32))


@pytest.mark.parametrize("backend", ["interp", "wgsl", "spirv"])
def test_the_eta_composite_draws_pies_bits(backend, keyed, request):
    if backend != "interp":
        request.getfixturevalue("gpu")
    for key, ctr in STATES:
        (got,) = [keyed.run(np.array([key, ctr], np.uint32), backend=backend)]
        want = R.uniform_reference(R.keyed_seed(key, ctr), 4096).reshape(4, 1024)
        assert np.array_equal(np.asarray(got).view(np.uint32), want.view(np.uint32)), (backend, key, ctr)


def test_ambient_draws_use_the_fire_seed_and_stream():
    prog = eta.trace(lambda: R.ambient_uniform(R.ambient_seed(0, 3), (16,)), context=None)
    want = R.uniform_reference(R.ambient_seed(0, 3), 16)
    assert np.array_equal(np.asarray(prog.run()), want)
    assert not np.array_equal(want, R.uniform_reference(R.ambient_seed(0, 4), 16))
