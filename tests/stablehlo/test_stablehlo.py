"""StableHLO through XLA on the CPU agrees with the interpreter: every op case and the random programs."""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import dtype, eta
from piegpu.errors import CompileError
from piegpu.eta.ops import OPS, GroupOp
from piegpu.stablehlo.emit import RULES
from tests.targets import corpus
from tests.wgsl.test_wgsl_ops import PARAMS, run_case
from tests.wgsl.test_wgsl_random import CHUNK, N, check_seed


@pytest.fixture(scope="module")
def xla():
    """jax/jaxlib's CPU client; skips (with the reason) when jax is not installed."""
    try:
        from piegpu.stablehlo.run import _client
        return _client()
    except CompileError as e:
        pytest.skip(f"stablehlo backend unavailable: {e}")


def test_every_op_has_a_rule():
    missing = set(OPS) - set(RULES) - set(GroupOp.RUNTIME)
    assert not missing, f"ops without a StableHLO rule: {sorted(missing)}"


@pytest.mark.parametrize("op,i", PARAMS, ids=[f"{o}-{i}" for o, i in PARAMS])
def test_op_stablehlo(xla, op, i):
    run_case(op, i, "stablehlo")


@pytest.mark.parametrize("start", range(0, N, CHUNK))
def test_random_programs_stablehlo(xla, start):
    for seed in range(start, min(start + CHUNK, N)):
        check_seed(seed, "stablehlo")


@pytest.mark.parametrize("name,prog", corpus.runtime_programs(), ids=[n for n, _ in corpus.runtime_programs()])
def test_runtime_ops_are_a_compile_error(name, prog):
    with pytest.raises(CompileError, match="ForwardPass"):
        prog.emit("stablehlo")
    with pytest.raises(CompileError):
        prog.run(backend="stablehlo")


def test_module_shape(xla):
    """One public @main taking the inputs in index order and returning the outputs in order."""
    prog = eta.trace(lambda x, n: (eta.reduce_sum(x), eta.cast(n, dtype.f32)), eta.spec([3, 4], dtype.f32),
                     eta.spec([2], dtype.u32))
    text = prog.emit("stablehlo")
    assert "func.func public @main(%arg0: tensor<3x4xf32>, %arg1: tensor<2xui32>) -> " \
           "(tensor<3xf32>, tensor<2xf32>)" in text
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    total, n = prog.run(x, np.array([1, 4000000001], np.uint32), backend="stablehlo")
    np.testing.assert_array_equal(total, x.sum(-1))
    np.testing.assert_array_equal(n, np.array([1, 4000000001], np.float32))
