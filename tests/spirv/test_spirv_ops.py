"""Every op of the op table on SPIR-V (through wgpu/naga on lavapipe) against the numpy interpreter."""

from __future__ import annotations

import pytest

from piegpu.errors import ValidationError
from piegpu.eta.ops import OPS, GroupOp, TType
from piegpu.kernel.ir import BOOL, F32, I32, U32
from piegpu.spirv.emit import rule
from piegpu.spirv.rules import CASTS
from tests.wgsl.test_wgsl_ops import PARAMS, run_case

DTYPES = (F32, I32, U32, BOOL)


@pytest.mark.parametrize("op,i", PARAMS, ids=[f"{o}-{i}" for o, i in PARAMS])
def test_op_spirv(gpu, op, i):
    run_case(op, i, "spirv")


def _accepted(name: str) -> list:
    """The input dtypes the op table accepts for an elementwise op."""
    d = OPS[name]
    out = []
    for dt in DTYPES:
        ins = [TType(dt, (2,))] * d.arity
        if name == "select":
            ins = [TType(BOOL, (2,)), TType(dt, (2,)), TType(dt, (2,))]
        try:
            d.infer(name, ins, {})
        except ValidationError:
            continue
        out.append(dt)
    return out


def test_every_elementwise_op_has_a_rule():
    """The rule table covers every (op, input dtype) the op table allows; casts every dtype pair."""
    missing = []
    for name in GroupOp.ELEMENTWISE:
        if name in ("cast", "bitcast"):
            continue
        for dt in _accepted(name):
            try:
                rule(name, dt)
            except Exception:
                missing.append(f"{name}.{dt.name}")
    for src in DTYPES:
        for dst in DTYPES:
            if src != dst and (src.kind, dst.kind) not in CASTS:
                missing.append(f"cast {src.name}->{dst.name}")
    assert not missing, f"SPIR-V rules missing: {missing}"
