"""Cross-backend fuzzing: hypothesis-generated eta programs on wgsl, spirv and stablehlo against the interpreter.

The default run is CI-sized and deterministic (derandomized). The CI's bulk of random
programs is the seeded differential suites (tests/wgsl/test_wgsl_random.py, tests/spirv,
tests/stablehlo/test_stablehlo.py: 500 programs per backend, seeds 0..499); this file adds
hypothesis-driven programs -- other shapes of generator output, with shrinking -- and pins
the per-backend count. Long runs:

    pytest -m fuzz tests/reliability/test_fuzz.py        # PIEGPU_FUZZ_EXAMPLES (default 2000) per backend set
    python scripts/fuzz.py --minutes 10 --backends wgsl,spirv,stablehlo
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from piegpu import dtype, eta
from piegpu.eta import interp
from tests.reliability.crossbackend import ALL_BACKENDS, available_backends, check_all, failure, minimize
from tests.reliability.strategies import programs

CI_EXAMPLES = 60
COMMON = dict(deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)


@pytest.fixture(scope="module")
def backends(gpu):
    avail = available_backends()
    missing = {b: why for b, why in avail.items() if why is not None}
    if missing:
        pytest.skip(f"backends unavailable: {missing}")
    return list(ALL_BACKENDS)


@settings(max_examples=CI_EXAMPLES, derandomize=True, database=None, **COMMON)
@given(case=programs(max_ops=16))
def _ci_property(case, backends):
    prog, inputs, exact = case
    bad = check_all(prog, inputs, exact, backends)
    assert not bad, f"{bad}\n{prog.pretty()}"


def test_hypothesis_programs_agree_on_every_backend(backends):
    _ci_property(backends=backends)


@pytest.mark.fuzz
def test_fuzz_long(backends):
    n = int(os.environ.get("PIEGPU_FUZZ_EXAMPLES", "2000"))

    @settings(max_examples=n, **COMMON)
    @given(case=programs(max_ops=24))
    def prop(case):
        prog, inputs, exact = case
        bad = check_all(prog, inputs, exact, backends)
        assert not bad, f"{bad}\n{prog.pretty()}"
    prop()


def test_ci_runs_at_least_500_random_programs_per_backend():
    from tests.wgsl import test_wgsl_random
    from tests.spirv import test_spirv_random
    from tests.stablehlo import test_stablehlo
    assert test_wgsl_random.N >= 500
    for mod in (test_spirv_random, test_stablehlo):  # they run the WGSL suite's seeds through check_seed
        assert mod.N == test_wgsl_random.N and mod.check_seed is test_wgsl_random.check_seed


def test_the_minimizer_isolates_a_planted_bug(monkeypatch):
    """A fake backend that gets `maximum` wrong: the minimizer keeps only the maximum and its inputs."""
    import types
    from piegpu.eta import backends as registry
    impl = dict(interp.IMPL)
    buggy = dict(impl, maximum=lambda node, a, b: np.minimum(a, b))

    def run(prog, inputs, backend="buggy", **options):
        monkeypatch.setattr(interp, "IMPL", buggy)
        try:
            return interp.evaluate(prog, inputs)
        finally:
            monkeypatch.setattr(interp, "IMPL", impl)
    monkeypatch.setitem(registry.RUNNERS, "buggy", "tests.reliability.fake_buggy")
    monkeypatch.setitem(__import__("sys").modules, "tests.reliability.fake_buggy", types.SimpleNamespace(run=run))

    def fn(x, y):
        a = eta.exp(x) * 2.0 + y
        m = eta.maximum(a, eta.tanh(y))
        return eta.reduce_sum(m * 3.0 - 1.0), eta.cos(x)
    prog = eta.trace(fn, eta.spec([6], dtype.f32), eta.spec([6], dtype.f32))
    x = np.linspace(-1, 1, 6).astype(np.float32)
    inputs = [x, x[::-1].copy()]
    assert failure(prog, inputs, [False, False], "buggy") is not None
    small, small_inputs, _ = minimize(prog, inputs, [False, False], "buggy")
    ops = [n.op for n in small.nodes]
    assert ops.count("maximum") == 1 and "exp" not in ops and "tanh" not in ops and "cos" not in ops, small.pretty()
    assert len(small.outputs) == 1 and failure(small, small_inputs, [False], "buggy") is not None


# ---- minimized findings of scripts/fuzz.py, kept as regression tests --------------------------------

def test_stablehlo_compares_with_nan_follow_ieee(backends):
    """XLA folded abs(x) >= 0 to true for NaN x; the StableHLO emitter now guards float compares."""
    def fn(x, y):
        ax = eta.abs_(x)
        return eta.select(ax >= 0.0, ax, y), eta.eq(x, x), eta.ne(x, x), eta.lt(ax, float("inf"))
    prog = eta.trace(fn, eta.spec([4], dtype.f32), eta.spec([4], dtype.f32))
    x = np.array([np.nan, 1.0, -np.nan, -np.inf], np.float32)
    y = np.full(4, 7.0, np.float32)
    for backend in backends:
        assert failure(prog, [x, y], [True] * 4, backend) is None, backend


def test_wgsl_locals_never_take_type_names(gpu):
    """Locals were named hint+counter, so the 33rd 'f' local was `f32`, a WGSL type name (found by the fuzzer)."""
    def fn(s, a, b):
        r = eta.rng(s, [33, 8])
        x = r - eta.broadcast(eta.reshape(a, [33, 1]), [33, 8])
        return x - eta.broadcast(eta.reshape(b, [33, 1]), [33, 8])
    prog = eta.trace(fn, eta.spec([2], dtype.u32), eta.spec([33], dtype.f32), eta.spec([33], dtype.f32))
    args = [np.array([14, 16], np.uint32), np.ones(33, np.float32), np.full(33, 3.0, np.float32)]
    assert failure(prog, args, [False], "wgsl") is None
