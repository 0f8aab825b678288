"""kernel/ir.py: the KIR of a simple kernel, index arithmetic, and constant folding."""

from __future__ import annotations

import itertools

import pytest

from piegpu import dtype, eta
from piegpu.kernel import ir
from piegpu.kernel.ir import BOOL, F32, I32, U32, Builtin, Const, If, Let, Load, Op, Store, Var
from piegpu.kernel.plan import plan

GID = Builtin("gid")


def test_the_kir_of_a_simple_kernel():
    """x * 2 + 1 over f32[8]: one guarded map kernel, input at arena word 0, output at word 8."""
    p = plan(eta.trace(lambda x: x * 2.0 + 1.0, eta.spec([8], dtype.f32)))
    (k,) = p.kernels
    assert (k.name, k.workgroup, k.groups, k.shared, k.atomic) == ("k0_map", 64, 1, (), frozenset())
    v1, v2, v3 = Var("v_1", F32), Var("v_2", F32), Var("v_3", F32)
    assert k.body == (If(Op("lt", (GID, Const(8, U32)), BOOL), (
        Let("v_1", Load("arena", GID, F32)),
        Let("v_2", Op("mul", (v1, Const(2.0, F32)), F32)),
        Let("v_3", Op("add", (v2, Const(1.0, F32)), F32)),
        Store("arena", Op("add", (Const(8, U32), GID), U32), v3),
    )),)
    assert p.inputs == [(0, eta.spec([8], dtype.f32))]
    assert [off for off, _ in p.outputs] == [8] and p.bindings[0].words == 16


def test_constructors_fold_index_arithmetic():
    x = Var("x", U32)
    assert ir.add(x, ir.u32(0)) is x and ir.add(ir.u32(0), x) is x
    assert ir.mul(x, ir.u32(1)) is x and ir.mul(ir.u32(0), x) == Const(0, U32)
    assert ir.sub(x, ir.u32(0)) is x and ir.div(x, ir.u32(1)) is x and ir.rem(x, ir.u32(1)) == Const(0, U32)
    assert ir.add(ir.u32(3), ir.u32(4)) == ir.u32(7)
    assert ir.sub(ir.u32(3), ir.u32(4)) == ir.u32(0xFFFFFFFF)  # u32 wraps
    assert ir.mul(ir.u32(1 << 31), ir.u32(2)) == ir.u32(0)
    assert ir.div(ir.u32(7), ir.u32(0)) == Op("div", (ir.u32(7), ir.u32(0)), U32)  # left for fold's x/0 rule
    assert ir.select(Const(True, BOOL), x, ir.u32(1)) is x
    assert ir.cast(Const(-1, I32), U32) == ir.u32(0xFFFFFFFF)
    assert ir.cast(ir.u32(0xFFFFFFFF), I32) == Const(-1, I32)
    assert ir.cast(x, U32) is x


@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 1, 5), (1, 1, 3), (2, 3, 1, 2)])
def test_linear_and_delinear_are_inverse(shape):
    size = 1
    for d in shape:
        size *= d
    for flat in range(size):
        idx = ir.delinear(ir.u32(flat), shape)
        assert all(isinstance(i, Const) for i in idx)
        assert [i.value for i in idx] == list(next(itertools.islice(itertools.product(*map(range, shape)), flat,
                                                                    None)))
        assert ir.linear(idx, shape) == ir.u32(flat)
    # size-1 dims never cost index math
    idx = ir.delinear(Var("f", U32), (1, 4))
    assert idx[0] == ir.u32(0)


def test_fold_uses_the_interpreters_integer_rules():
    """Backends never see constant expressions a WGSL compiler would reject (x % 0, i32 overflow)."""
    assert ir.fold(Op("rem", (ir.u32(1), ir.u32(0)), U32)) == ir.u32(0)  # x % 0 is 0
    assert ir.fold(Op("div", (ir.u32(9), ir.u32(0)), U32)) == ir.u32(9)  # x / 0 is x
    assert ir.fold(Op("add", (Const((1 << 31) - 1, I32), Const(1, I32)), I32)) == Const(-(1 << 31), I32)
    assert ir.fold(Op("div", (Const(-7, I32), Const(2, I32)), I32)) == Const(-3, I32)  # toward zero
    nested = Op("mul", (Op("add", (Const(1.5, F32), Const(2.5, F32)), F32), Var("y", F32)), F32)
    assert ir.fold(nested) == Op("mul", (Const(4.0, F32), Var("y", F32)), F32)
    assert ir.fold(Var("y", F32)) == Var("y", F32)


def test_const_normalises_python_values():
    assert ir.const(1, F32) == Const(1.0, F32) and isinstance(ir.const(1, F32).value, float)
    assert ir.const(2, BOOL) == Const(True, BOOL)
    assert ir.u32(-1) == Const(0xFFFFFFFF, U32)
