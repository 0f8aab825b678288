"""WGSL rules Tint enforces and naga does not, checked on the emitted source (no browser needed).

A const-expression whose value is NaN or inf is a shader-creation error in WGSL (Tint:
"value nan cannot be represented as 'f32'"); naga accepts it. The emitter therefore builds
non-finite floats through a function call (eta_f32_bits), which is never a const-expression.
"""

from __future__ import annotations

import re

import numpy as np

from piegpu import dtype, eta
from tests.eta.op_cases import CASES
from tests.progen import random_program

CONST_BITCAST = re.compile(r"bitcast<f32>\(\s*0x([0-9a-fA-F]{1,8})u?\s*\)")


def nonfinite_const_bitcasts(code: str) -> list:
    """bitcast<f32>(literal) expressions of NaN or inf bits in `code`."""
    bad = []
    code = re.sub(r"//[^\n]*", "", code)  # comments may quote the pattern
    for m in CONST_BITCAST.finditer(code):
        bits = int(m.group(1), 16)
        if (bits >> 23) & 0xFF == 0xFF:
            bad.append(m.group(0))
    return bad


def test_checker_finds_the_pattern():
    assert nonfinite_const_bitcasts("let x = bitcast<f32>(0x7fc00000u);") == ["bitcast<f32>(0x7fc00000u)"]
    assert nonfinite_const_bitcasts("let x = bitcast<f32>(0xff800000u);") == ["bitcast<f32>(0xff800000u)"]
    assert nonfinite_const_bitcasts("let x = bitcast<f32>(0x3f800000u);") == []
    assert nonfinite_const_bitcasts("// bitcast<f32>(0x7fc00000u) is one") == []


def test_nonfinite_literals_are_not_const_expressions():
    def fn(x):
        y = eta.select(eta.isnan(x), float("inf"), x)
        return eta.maximum(y, float("-inf")), eta.select(x > 0.0, float("nan"), y)
    code = eta.trace(fn, eta.spec([4], dtype.f32)).emit("wgsl")
    assert "eta_f32_bits(0x7f800000u)" in code and "eta_f32_bits(0xff800000u)" in code
    assert nonfinite_const_bitcasts(code) == []
    prog = eta.trace(fn, eta.spec([4], dtype.f32))
    x = np.array([np.nan, 1.0, -2.0, np.inf], np.float32)
    for a, b in zip(prog.run(x), prog.run(x, backend="interp")):
        np.testing.assert_array_equal(a, b)


def test_no_op_case_or_random_program_has_them():
    progs = [eta.trace(fn, *specs) for cases in CASES.values() for fn, specs, _ in cases]
    progs += [random_program(seed)[0] for seed in range(100)]
    for prog in progs:
        assert nonfinite_const_bitcasts(prog.emit("wgsl")) == [], prog.pretty()
