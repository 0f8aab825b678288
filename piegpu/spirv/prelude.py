"""Helper OpFunctions shared by every kernel of a module: exact fmod and C pow (the WGSL prelude's).

Each builder writes the body of one helper through `c`, the emit.Coder of that function
(not imported here: emit.py imports this module).
"""

from __future__ import annotations

from ..kernel.ir import BOOL, F32, I32, U32
from .spec import OP


def build_fmod(c) -> None:
    """C fmod, exact for every finite input: integer long division of the mantissas.

    A float formula such as a - b * trunc(a / b) is wrong near multiples of b.
    """
    a, b = c.params
    ua_full, ub_full = c.op(OP.Bitcast, U32, a), c.op(OP.Bitcast, U32, b)
    sign = c.op(OP.BitwiseAnd, U32, ua_full, c.const(0x80000000, U32))
    ua = c.op(OP.BitwiseAnd, U32, ua_full, c.const(0x7FFFFFFF, U32))
    ub = c.op(OP.BitwiseAnd, U32, ub_full, c.const(0x7FFFFFFF, U32))
    bad = c.any_(c.isnan(a), c.isnan(b), c.isinf(a), c.op(OP.IEqual, BOOL, ub, c.const(0, U32)))
    keep_a = c.any_(c.isinf(b), c.op(OP.ULessThan, BOOL, ua, ub))
    res = c.fn.local(c.ty(F32), "fmod_r")
    c.fn.do(OP.Store, res, a)

    def divide():
        def unpack(u):
            e_raw = c.op(OP.ShiftRightLogical, U32, u, c.const(23, U32))
            m_raw = c.op(OP.BitwiseAnd, U32, u, c.const(0x7FFFFF, U32))
            sub = c.op(OP.IEqual, BOOL, e_raw, c.const(0, U32))  # subnormal: exponent 1, no hidden bit
            e = c.select(sub, c.const(1, U32), e_raw, U32)
            m = c.select(sub, m_raw, c.op(OP.BitwiseOr, U32, m_raw, c.const(0x800000, U32)), U32)
            return e, m
        ea, ma = unpack(ua)
        eb, mb = unpack(ub)
        m = c.fn.local(c.ty(U32), "fmod_m")
        c.fn.do(OP.Store, m, ma)
        steps = c.op(OP.ISub, U32, ea, eb)
        i = c.fn.local(c.ty(U32), "fmod_i")
        c.fn.do(OP.Store, i, c.const(0, U32))

        def reduce_once(v):
            return c.select(c.op(OP.UGreaterThanEqual, BOOL, v, mb), c.op(OP.ISub, U32, v, mb), v, U32)

        def body():
            v = reduce_once(c.op(OP.Load, U32, m))
            c.fn.do(OP.Store, m, c.op(OP.ShiftLeftLogical, U32, v, c.const(1, U32)))

        def step():
            c.fn.do(OP.Store, i, c.op(OP.IAdd, U32, c.op(OP.Load, U32, i), c.const(1, U32)))

        c.fn.loop(lambda: c.op(OP.ULessThan, BOOL, c.op(OP.Load, U32, i), steps), body, step)
        rem = reduce_once(c.op(OP.Load, U32, m))
        exp = c.op(OP.ISub, I32, c.op(OP.Bitcast, I32, eb), c.const(150, I32))
        mag = c.ext(F32, "Ldexp", c.op(OP.ConvertUToF, F32, rem), exp)
        signed = c.op(OP.BitwiseOr, U32, c.op(OP.Bitcast, U32, mag), sign)
        c.fn.do(OP.Store, res, c.op(OP.Bitcast, F32, signed))

    c.fn.if_(c.op(OP.LogicalNot, BOOL, c.any_(bad, keep_a)), divide)
    c.fn.ret(c.select(bad, c.nan(), c.op(OP.Load, F32, res), F32))


def build_pow(c) -> None:
    """C pow: 1 for b == 0 or a == 1; NaN in; |a| == 1 with infinite b is 1; negative base needs an
    integral exponent (sign from its parity); 0 to a negative power is inf; else exp2(b * log2|a|)."""
    a, b = c.params
    m = c.ext(F32, "FAbs", a)
    one = c.const(1.0, F32)
    integral = c.op(OP.FOrdEqual, BOOL, c.ext(F32, "Floor", b), b)
    half = c.op(OP.FMul, F32, b, c.const(0.5, F32))
    odd = c.op(OP.LogicalAnd, BOOL, integral, c.op(OP.FOrdNotEqual, BOOL, c.ext(F32, "Floor", half), half))
    m_zero = c.op(OP.FOrdEqual, BOOL, m, c.const(0.0, F32))
    at_zero = c.select(c.op(OP.FOrdGreaterThan, BOOL, b, c.const(0.0, F32)), c.const(0.0, F32),
                       c.const(float("inf"), F32), F32)
    r = c.select(m_zero, at_zero, c.ext(F32, "Exp2", c.op(OP.FMul, F32, b, c.ext(F32, "Log2", m))), F32)
    neg_sign = c.op(OP.IEqual, BOOL, c.op(OP.ShiftRightLogical, U32, c.op(OP.Bitcast, U32, a), c.const(31, U32)),
                    c.const(1, U32))
    r = c.select(c.op(OP.LogicalAnd, BOOL, neg_sign, odd), c.op(OP.FNegate, F32, r), r, F32)
    neg_frac = c.op(OP.LogicalAnd, BOOL, c.op(OP.FOrdLessThan, BOOL, a, c.const(0.0, F32)),
                    c.op(OP.LogicalAnd, BOOL, c.op(OP.LogicalNot, BOOL, integral),
                         c.op(OP.LogicalNot, BOOL, c.isinf(a))))
    r = c.select(neg_frac, c.nan(), r, F32)
    r = c.select(c.op(OP.LogicalAnd, BOOL, c.op(OP.FOrdEqual, BOOL, m, one), c.isinf(b)), one, r, F32)
    r = c.select(c.op(OP.LogicalOr, BOOL, c.isnan(a), c.isnan(b)), c.nan(), r, F32)
    unit = c.op(OP.LogicalOr, BOOL, c.op(OP.FOrdEqual, BOOL, b, c.const(0.0, F32)),
                c.op(OP.FOrdEqual, BOOL, a, one))
    c.fn.ret(c.select(unit, one, r, F32))


# helper name -> (builder, parameter dtypes, result dtype)
HELPERS = {
    "fmod": (build_fmod, (F32, F32), F32),
    "pow": (build_pow, (F32, F32), F32),
}
