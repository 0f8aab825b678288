"""Every op of the op table on WGSL (lavapipe) against the numpy interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import eta
from piegpu.eta.ops import OPS, GroupOp
from tests.eta.op_cases import CASES, exact_case
from tests.progen import compare

PARAMS = [(op, i) for op in sorted(CASES) for i in range(len(CASES[op]))]


def test_every_op_has_a_case():
    """Every op but the runtime ones (only a ForwardPass has them; the runtime tests cover them)."""
    missing = set(OPS) - set(CASES) - set(GroupOp.RUNTIME)
    assert not missing, f"ops without a differential test case: {sorted(missing)}"


def run_case(op: str, i: int, backend: str):
    fn, specs, inputs = CASES[op][i]
    prog = eta.trace(fn, *specs)
    ref = prog.run(*inputs)
    got = prog.run(*inputs, backend=backend)
    if not isinstance(ref, tuple):
        ref, got = (ref,), (got,)
    for k, (a, b) in enumerate(zip(ref, got)):
        exact = exact_case(op) or a.dtype != np.float32
        if op == "div" and a.dtype != np.float32:
            exact = True
        compare(a, b, exact, f"{op} case {i} output {k} on {backend}")


@pytest.mark.parametrize("op,i", PARAMS, ids=[f"{o}-{i}" for o, i in PARAMS])
def test_op_wgsl(gpu, op, i):
    run_case(op, i, "wgsl")
