"""Tracing: determinism, content hashes, validation messages, misuse errors."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from piegpu import TraceError, ValidationError, dtype, eta
from piegpu.eta import intrinsics

V = 1000


def top_a(logits, state):
    """The seed's top-a sampler (API.md)."""
    probs = eta.softmax(logits)
    pmax = eta.reduce_max(probs)
    keep = probs >= eta.broadcast(eta.reshape(pmax * pmax * 0.2, [1]), [V])
    return eta.gumbel_max(eta.mask_apply(logits, keep), state)


SPECS = (eta.spec([V], dtype.f32), eta.spec([2], dtype.u32))


def test_same_function_same_bytes_and_hash():
    a, b = eta.trace(top_a, *SPECS), eta.trace(top_a, *SPECS)
    assert a.to_bytes() == b.to_bytes() and a.hash == b.hash and len(a.hash) == 64


def test_hash_is_stable_across_processes():
    code = textwrap.dedent("""
        from piegpu import eta, dtype
        from tests.eta.test_trace import top_a, SPECS
        print(eta.trace(top_a, *SPECS).hash)
    """)
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**__import__("os").environ, "PYTHONHASHSEED": str(seed)}).stdout.strip()
            for seed in (1, 2)}
    assert outs == {eta.trace(top_a, *SPECS).hash}


def test_hash_changes_with_constant_shape_or_op():
    base = eta.trace(lambda x: x * 2.0, eta.spec([4], dtype.f32)).hash
    assert eta.trace(lambda x: x * 3.0, eta.spec([4], dtype.f32)).hash != base
    assert eta.trace(lambda x: x * 2.0, eta.spec([5], dtype.f32)).hash != base
    assert eta.trace(lambda x: x + 2.0, eta.spec([4], dtype.f32)).hash != base
    assert eta.trace(lambda x: x * -0.0, eta.spec([4], dtype.f32)).hash != \
        eta.trace(lambda x: x * 0.0, eta.spec([4], dtype.f32)).hash


def test_python_scalars_take_tensor_dtype():
    p = eta.trace(lambda x: (x + 1, 2 * x, x / 2), eta.spec([3], dtype.i32))
    assert [t.dtype for t in p.output_types] == [dtype.i32] * 3
    assert [a.tolist() for a in p.run(np.array([5, -5, 7], np.int32))] == [[6, -4, 8], [10, -10, 14], [2, -2, 3]]


@pytest.mark.parametrize("misuse,needle", [
    (lambda x: bool(x), "bool()"),
    (lambda x: int(x), "int()"),
    (lambda x: float(x), "float()"),
    (lambda x: len(x), "len()"),
    (lambda x: [v for v in x], "iteration"),
    (lambda x: x == 1, "eta.eq"),
    (lambda x: x != 1, "eta.ne"),
    (lambda x: x[0], "gather"),
    (lambda x: 1 if x > 0 else 0, "select"),
])
def test_misuse_raises_trace_error_naming_the_fix(misuse, needle):
    with pytest.raises(TraceError) as e:
        eta.trace(misuse, eta.spec([3], dtype.f32))
    assert needle in str(e.value)


@pytest.mark.parametrize("fn,specs,needles", [
    (lambda x, y: x + y, [eta.spec([3], dtype.f32), eta.spec([3], dtype.i32)], ["dtype mismatch", "cast"]),
    (lambda x, y: x + y, [eta.spec([3], dtype.f32), eta.spec([4], dtype.f32)], ["cannot broadcast", "[3]", "[4]"]),
    (lambda x: eta.reshape(x, [2, 2, 2, 2, 2]), [eta.spec([32], dtype.f32)], ["rank 5 > 4"]),
    (lambda x: eta.top_k(x, 9), [eta.spec([8], dtype.f32)], ["k=9", "1..8"]),
    (lambda x, i: eta.gather(x, i), [eta.spec([8], dtype.f32), eta.spec([2], dtype.f32)], ["indices", "float"]),
    (lambda x: eta.exp(x), [eta.spec([2], dtype.i32)], ["exp", "f32", "cast"]),
    (lambda x: eta.reduce_sum(x), [eta.spec([], dtype.f32)], ["rank-0"]),
    (lambda x: x + 0.5, [eta.spec([2], dtype.i32)], ["Python float 0.5", "i32"]),
    (lambda x: eta.broadcast(x, [3, 2]), [eta.spec([3], dtype.f32)], ["cannot broadcast"]),
    (lambda x: eta.matmul(x, x), [eta.spec([2, 3], dtype.f32)], ["a[m, k] and b[k, n]"]),
    (lambda x: eta.reshape(x, [0]), [eta.spec([2], dtype.f32)], ["dimension 0"]),
    (lambda x: eta.rng(x, [4]), [eta.spec([3], dtype.u32)], ["u32[2]"]),
])
def test_validation_errors_name_op_types_and_fix(fn, specs, needles):
    with pytest.raises(ValidationError) as e:
        eta.trace(fn, *specs)
    msg = str(e.value)
    assert "Fix" in msg or "fix" in msg
    for n in needles:
        assert n in msg, msg


def test_unknown_intrinsic_and_missing_context():
    with pytest.raises(TraceError, match="ForwardPass epilogue"):
        eta.trace(lambda: intrinsics.output(0, "logits"))
    ctx = eta.IntrinsicContext.for_logits(16)
    with pytest.raises(ValidationError, match="'hidden' is not in this trace's context"):
        eta.trace(lambda: intrinsics.output(0, "hidden"), context=ctx)
    with pytest.raises(ValidationError, match="unknown intrinsic 'hiden'. Fix: use one of"):
        eta.trace(lambda: intrinsics.output(0, "hiden"), context=ctx)
    with pytest.raises(ValidationError, match="row 1 out of range"):
        eta.trace(lambda: intrinsics.output(1), context=ctx)
    p = eta.trace(lambda: eta.reduce_argmax(intrinsics.output(0)), context=ctx)
    assert p.nodes[0].op == "intrinsic" and intrinsics.vocab.__doc__


def test_tensors_cannot_cross_traces():
    saved = []
    eta.trace(lambda x: saved.append(x) or x, eta.spec([2], dtype.f32))
    with pytest.raises(TraceError, match="another trace"):
        eta.trace(lambda y: y + saved[0], eta.spec([2], dtype.f32))


def test_ops_outside_trace_raise():
    with pytest.raises(TraceError, match="inside eta.trace"):
        eta.iota(4)


def test_dead_code_is_dropped_and_duplicates_merged():
    def fn(x):
        _unused = eta.exp(x) * 7.0
        return x + 1.0, x + 1.0
    p = eta.trace(fn, eta.spec([2], dtype.f32))
    assert [n.op for n in p.nodes].count("exp") == 0
    assert p.outputs[0] == p.outputs[1]


def test_composite_masks_are_bool_and_keep_shape():
    p = eta.trace(lambda x: (eta.top_k_mask(x, 3), eta.top_p_mask(x, 0.5), eta.min_p_mask(x, 0.1)),
                  eta.spec([2, 10], dtype.f32))
    assert all(t.dtype == dtype.bool and t.shape == (2, 10) for t in p.output_types)
