"""eta -> PTIR: a traced epilogue becomes a container Pie's validator accepts and that computes the same thing."""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import Channel, ValidationError, dtype, eta
from piegpu.eta import IntrinsicContext, intrinsics
from piegpu.ptir import decode, load
from piegpu.ptir.runner import detach
from piegpu.ptir.validate import bind, piegpu_profile

V = 16


def _trace(fn) -> eta.Program:
    return eta.trace(fn, context=IntrinsicContext.for_logits(V))


def test_a_traced_greedy_loop_exports_validates_and_computes_the_same_token():
    token_in, token_out = Channel([1], dtype.i32).named("token_in"), Channel([1], dtype.i32).named("token_out")

    def greedy():
        logits = intrinsics.output(0, "logits")
        token = eta.reshape(eta.reduce_argmax(logits * 2.0 - 1.0), [1])
        token_in.put(token)
        token_out.put(token)

    data = _trace(greedy).to_ptir()
    c = decode(data)
    assert data[:4] == b"PTIR" and [op.name for op in c.stages[0][1]][:3] == ["intrinsic_val", "reshape", "const"]
    bind(c, piegpu_profile(V))  # Pie's validator accepts it
    back = detach(load(data)).program
    x = np.random.default_rng(0).standard_normal(V).astype(np.float32)
    assert [int(t[0]) for t in back.run(x.reshape(1, V))] == [int(np.argmax(x))] * 2


def test_the_first_op_pie_lacks_is_named_with_why():
    out = Channel([V], dtype.f32).named("out")
    with pytest.raises(ValidationError, match=r"node %1 \(sqrt\) has no PTIR equivalent in Pie op table. Fix:"):
        _trace(lambda: out.put(eta.sqrt(intrinsics.output(0, "logits")))).to_ptir()
    state = Channel([2], dtype.u32).named("state")
    with pytest.raises(ValidationError, match=r"\(rng\) has no PTIR equivalent: eta's counter RNG is not Pie's"):
        _trace(lambda: out.put(eta.rng(state.take(), [V]))).to_ptir()
    with pytest.raises(ValidationError, match=r"returns 1 output\(s\); a PTIR program only puts into channels"):
        eta.trace(lambda x: eta.exp(x), eta.spec([V], dtype.f32)).to_ptir()
