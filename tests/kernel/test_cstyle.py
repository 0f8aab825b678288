"""kernel/cstyle.py: the C-family statement walker, driven by a toy dialect's rule tables.

The toy dialect below is the smallest CStyle subclass: tables plus the syntax hooks.
It shows what the walker owns (statements, folding, rule lookup, errors) apart from
any real target.
"""

from __future__ import annotations

import struct

import pytest

from piegpu import CompileError, dtype, eta
from piegpu.kernel import ir
from piegpu.kernel.cstyle import CStyle, f32_bits, f32_repr, grid
from piegpu.kernel.ir import BOOL, F32, I32, U32, Builtin, Const, Var
from piegpu.kernel.plan import plan


class Toy(CStyle):
    target = "toy"
    types = {"f32": "float", "i32": "int", "u32": "uint", "bool": "bool"}
    ops = {"add": "({0} + {1})", "mul": "({0} * {1})", "lt": "({0} < {1})", "select": "({0} ? {1} : {2})",
           "exp": "expf({0})", "maximum.float": "fmaxf({0}, {1})", "maximum": "max({0}, {1})"}
    casts = {("uint", "float"): "(float)({0})", ("int", "uint"): "{to}({0})"}

    def literal(self, value, dt) -> str:
        return f32_repr(value) + "f" if dt == F32 else str(value).lower() if dt == BOOL else f"{value}"

    def load(self, buf, idx, dt):
        return f"{buf}[{idx}].{dt.name}"

    def store(self, buf, idx, value, dt):
        return f"{buf}[{idx}].{dt.name} = {value};"

    def let(self, name, dt, value):
        return f"const {self.type_name(dt)} {name} = {value};"

    def decl(self, name, dt, value):
        return f"{self.type_name(dt)} {name} = {value};"

    def for_header(self, var, start, end, step):
        return f"for (uint {var} = {start}; {var} < {end}; {var} += {step}) {{"

    def barrier(self):
        return "sync();"

    def kernel_open(self, k, plan):
        return [f"kernel {k.name}[{k.workgroup}] {{"]


def f32(v: float) -> float:
    return struct.unpack("<f", struct.pack("<f", v))[0]


def test_f32_literals_round_trip_shortest():
    for v in (0.1, 1.0, -2.5, 3.4028234663852886e38, 1e-45, 16777217.0):
        s = f32_repr(v)
        assert f32(float(s)) == f32(v), (v, s)  # the literal rounds back to the same f32
        assert "." in s or "e" in s, s  # reads as a float literal in every C dialect
    assert f32_repr(0.1) == "0.1" and f32_repr(1.0) == "1.0" and f32_repr(16777217.0) == "16777216.0"
    assert f32_bits(1.0) == 0x3F800000 and f32_bits(-0.0) == 0x80000000


def test_grid_folds_workgroup_counts_into_two_dimensions():
    assert grid(10) == (10, 1) and grid(65535) == (65535, 1)
    for groups in (65536, 200_000, 65535 * 3 + 1, 10 ** 7):
        x, y = grid(groups)
        assert x <= 65535 and x * y >= groups and x * (y - 1) < groups, (groups, x, y)
    assert grid(9, max_per_dim=4) == (3, 3)


def test_expressions_use_the_rule_tables_and_fold_constants():
    t = Toy()
    x, i = Var("x", F32), Var("i", U32)
    assert t.expr(ir.Op("add", (x, Const(1.0, F32)), F32)) == "(x + 1.0f)"
    assert t.expr(ir.Op("maximum", (x, x), F32)) == "fmaxf(x, x)"  # "op.kind" overrides the plain op rule
    assert t.expr(ir.Op("maximum", (i, i), U32)) == "max(i, i)"
    assert t.expr(ir.Op("cast", (i,), F32)) == "(float)(i)"
    assert t.expr(ir.Op("cast", (Var("n", I32),), U32)) == "uint(n)"  # {to} is the type name
    assert t.expr(ir.Op("select", (Var("c", BOOL), x, Const(0.0, F32)), F32)) == "(c ? x : 0.0f)"
    # all-constant subexpressions never reach the target (a compiler could reject 1 % 0)
    assert t.expr(ir.Op("add", (ir.Op("mul", (Const(2, U32), Const(3, U32)), U32), i), U32)) == "(6 + i)"
    assert t.expr(ir.Load("arena", ir.add(ir.u32(8), Builtin("gid")), F32)) == "arena[(8 + gid)].f32"


def test_a_missing_rule_is_a_compile_error_naming_target_op_and_fix():
    t = Toy()
    with pytest.raises(CompileError, match=r"toy: no rule for op 'sin' on f32. Fix: add it to the toy rule table"):
        t.expr(ir.Op("sin", (Var("x", F32),), F32))
    with pytest.raises(CompileError, match="toy: no cast rule f32 -> i32"):
        t.expr(ir.Op("cast", (Var("x", F32),), I32))


def test_statements_of_a_planned_kernel_render_in_order():
    p = plan(eta.trace(lambda x: eta.reduce_sum(eta.exp(x)), eta.spec([3, 5], dtype.f32)))
    (k,) = p.kernels
    lines = Toy().kernel(k, p)
    assert lines == [
        "kernel k0_reduce_sum[64] {",
        "  if ((gid < 3)) {",
        "    float acc_1 = 0.0f;",
        "    for (uint j_2 = 0; j_2 < 5; j_2 += 1) {",
        "      const float v_3 = arena[((gid * 5) + j_2)].f32;",
        "      const float v_4 = expf(v_3);",
        "      acc_1 = (acc_1 + v_4);",
        "    }",
        "    arena[(16 + gid)].f32 = acc_1;",
        "  }",
        "}",
    ], "\n".join(lines)


def test_unknown_statements_are_a_compile_error():
    t = Toy()
    t._kernel = ir.Kernel("k", 1, 1, ())
    with pytest.raises(CompileError, match="toy: cannot render statement"):
        t.stmt(object(), 0, [])
