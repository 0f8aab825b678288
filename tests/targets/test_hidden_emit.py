"""An epilogue reading `intrinsics.output(i, "hidden")` beside the logits compiles through every emitter: one more
intrinsic binding (`in_hidden`) planned once for all targets; WGSL and SPIR-V build on the device (naga), SPIR-V
passes spirv-val, CUDA and HIP pass nvcc + ptxas, MSL passes clang; StableHLO refuses it like any runtime op."""

from __future__ import annotations

import pytest

from piegpu import Channel, CompileError, dtype, eta
from piegpu.eta import IntrinsicContext, intrinsics
from piegpu.eta.backends import emit
from piegpu.kernel.plan import plan
from tests.targets.test_compile_cxx import TARGETS, _tool
from tests.targets.toolchains import check_all


def hidden_epilogue() -> eta.Program:
    """Row 1's hidden state and both rows' logits, the way a value head or a steering epilogue would read them."""
    out, token = Channel([2], dtype.f32).named("out"), Channel([1], dtype.i32).named("token")

    def fn():
        h = intrinsics.output(1, "hidden")
        logits = intrinsics.outputs("logits")
        out.put(eta.reduce_max(logits) + eta.reduce_sum(h * h))
        token.put(eta.reshape(eta.reduce_argmax(intrinsics.output(1, "logits") + eta.reduce_sum(h)), [1]))
    return eta.trace(fn, context=IntrinsicContext.for_pass(1000, 96, rows=2))


def test_hidden_is_one_more_intrinsic_binding_sized_to_the_rows_read():
    p = plan(hidden_epilogue())
    words = {b.name: b.words for b in p.bindings if b.kind == "intrinsic"}
    assert words == {"in_hidden": 2 * 96, "in_logits": 2 * 1000}


@pytest.mark.parametrize("target", ["wgsl", "spirv"])
def test_wgsl_and_spirv_build_on_the_device(gpu, target):
    from piegpu.runtime.compiled import compile_program
    compiled = compile_program(hidden_epilogue(), target, gpu)
    assert {b["info"]["name"] for b in compiled.bindings if b["kind"] == "intrinsic"} == {"hidden", "logits"}
    if target == "wgsl":
        assert "in_hidden" in compiled.code


def test_spirv_module_passes_spirv_val():
    from tests.spirv.validator import MISSING, SPIRV_VAL, validate
    if SPIRV_VAL is None:
        pytest.skip(MISSING)
    assert validate(emit(hidden_epilogue(), "spirv")) is None


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_cxx_targets_compile(target):
    _tool(target)
    suffix, _, make = TARGETS[target]
    source = emit(hidden_epilogue(), target, prefix="hidden_")
    assert "in_hidden" in source
    problems = check_all([("hidden-epilogue", source)], suffix, make())
    assert not problems, "\n".join(problems)


def test_stablehlo_refuses_it_like_every_runtime_op():
    with pytest.raises(CompileError, match="ForwardPass"):
        hidden_epilogue().emit("stablehlo")
