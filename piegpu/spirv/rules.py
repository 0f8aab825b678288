"""The SPIR-V op rule table: each KIR elementwise op as an instruction sequence with eta semantics.

Keys are "op.kind" (kind of the input dtype: float, int, uint, bool) or plain "op"; a
rule gets the Coder, the argument ids and the input and result dtypes. Every guard the
WGSL prelude has is here too, because SPIR-V leaves the same corners undefined
(division by zero, INT_MIN / -1, out-of-range float->int conversion) and drivers may
apply fast-math to float compares, so NaN tests are integer bit tests.
"""

from __future__ import annotations

from ..kernel.ir import BOOL, F32, I32, U32
from .spec import OP

NAN_BITS = 0x7FC00000
F32_I32_MAX = 2147483520.0  # largest f32 below 2^31
F32_U32_MAX = 4294967040.0  # largest f32 below 2^32


def _bin(opcode):
    return lambda c, a, din, dout: c.op(opcode, dout, a[0], a[1])


def _un(opcode):
    return lambda c, a, din, dout: c.op(opcode, dout, a[0])


def _glsl(name):
    return lambda c, a, din, dout: c.ext(dout, name, *a)


def _neg_uint(c, a, din, dout):
    return c.op(OP.ISub, U32, c.const(0, U32), a[0])


def _abs_int(c, a, din, dout):
    # explicit, so abs(INT_MIN) wraps to INT_MIN like the interpreter
    neg = c.op(OP.SLessThan, BOOL, a[0], c.const(0, I32))
    return c.select(neg, c.op(OP.SNegate, I32, a[0]), a[0], I32)


def _sign_float(c, a, din, dout):
    return c.select(c.isnan(a[0]), a[0], c.ext(F32, "FSign", a[0]), F32)


def _sign_int(c, a, din, dout):
    pos = c.op(OP.SGreaterThan, BOOL, a[0], c.const(0, I32))
    neg = c.op(OP.SLessThan, BOOL, a[0], c.const(0, I32))
    return c.select(pos, c.const(1, I32), c.select(neg, c.const(-1, I32), c.const(0, I32), I32), I32)


def _sign_uint(c, a, din, dout):
    return c.select(c.op(OP.INotEqual, BOOL, a[0], c.const(0, U32)), c.const(1, U32), c.const(0, U32), U32)


def _recip(c, a, din, dout):
    return c.op(OP.FDiv, F32, c.const(1.0, F32), a[0])


def _tanh(c, a, din, dout):
    # tanh saturates above |x| > 9 (some drivers' tanh returns NaN for large |x|)
    big = c.op(OP.FOrdGreaterThan, BOOL, c.ext(F32, "FAbs", a[0]), c.const(9.0, F32))
    return c.select(big, c.ext(F32, "FSign", a[0]), c.ext(F32, "Tanh", a[0]), F32)


def _isnan(c, a, din, dout):
    return c.isnan(a[0])


def _isinf(c, a, din, dout):
    return c.isinf(a[0])


def _int_guard(c, a, dt):
    """(b == 0, the divisor with 0 and the INT_MIN / -1 overflow replaced by 1)."""
    x, y = a
    zero = c.op(OP.IEqual, BOOL, y, c.const(0, dt))
    bad = zero
    if dt == I32:
        overflow = c.op(OP.LogicalAnd, BOOL, c.op(OP.IEqual, BOOL, x, c.const(-(1 << 31), I32)),
                        c.op(OP.IEqual, BOOL, y, c.const(-1, I32)))
        bad = c.op(OP.LogicalOr, BOOL, zero, overflow)
    return zero, c.select(bad, c.const(1, dt), y, dt)


def _div_int(c, a, din, dout):
    # x / 0 is x; INT_MIN / -1 wraps to INT_MIN (= INT_MIN / 1)
    zero, safe = _int_guard(c, a, din)
    q = c.op(OP.SDiv if din == I32 else OP.UDiv, din, a[0], safe)
    return c.select(zero, a[0], q, din)


def _rem_int(c, a, din, dout):
    # x % 0 is 0 and INT_MIN % -1 is 0: both equal x % 1. OpSRem takes the dividend's sign (C).
    _, safe = _int_guard(c, a, din)
    return c.op(OP.SRem if din == I32 else OP.UMod, din, a[0], safe)


def _fmod(c, a, din, dout):
    return c.call("fmod", a)


def _pow(c, a, din, dout):
    return c.call("pow", a)


def _nan_or(c, a, value):
    either = c.op(OP.LogicalOr, BOOL, c.isnan(a[0]), c.isnan(a[1]))
    return c.select(either, c.nan(), value, F32)


def _max_float(c, a, din, dout):
    return _nan_or(c, a, c.ext(F32, "FMax", *a))


def _min_float(c, a, din, dout):
    return _nan_or(c, a, c.ext(F32, "FMin", *a))


def _ne_float(c, a, din, dout):
    # NaN != x is true (unordered), whatever the driver's float compare does
    either = c.op(OP.LogicalOr, BOOL, c.isnan(a[0]), c.isnan(a[1]))
    return c.op(OP.LogicalOr, BOOL, either, c.op(OP.FOrdNotEqual, BOOL, *a))


def _shift(opcode):
    def rule(c, a, din, dout):
        amount = a[1] if din == U32 else c.op(OP.Bitcast, U32, a[1])
        return c.op(opcode, din, a[0], c.op(OP.BitwiseAnd, U32, amount, c.const(31, U32)))
    return rule


def _select(c, a, din, dout):
    return c.select(a[0], a[1], a[2], dout)


RULES = {
    "neg.float": _un(OP.FNegate), "neg.int": _un(OP.SNegate), "neg.uint": _neg_uint,
    "abs_.float": _glsl("FAbs"), "abs_.int": _abs_int, "abs_.uint": lambda c, a, din, dout: a[0],
    "sign.float": _sign_float, "sign.int": _sign_int, "sign.uint": _sign_uint,
    "recip": _recip, "exp": _glsl("Exp"), "log": _glsl("Log"), "sqrt": _glsl("Sqrt"),
    "rsqrt": _glsl("InverseSqrt"), "sin": _glsl("Sin"), "cos": _glsl("Cos"), "tanh": _tanh,
    "floor": _glsl("Floor"), "isnan": _isnan, "isinf": _isinf,
    "not_": _un(OP.LogicalNot), "bit_not": _un(OP.Not),
    "add.float": _bin(OP.FAdd), "add": _bin(OP.IAdd),
    "sub.float": _bin(OP.FSub), "sub": _bin(OP.ISub),
    "mul.float": _bin(OP.FMul), "mul": _bin(OP.IMul),
    "div.float": _bin(OP.FDiv), "div": _div_int,
    "rem.float": _fmod, "rem": _rem_int,
    "maximum.float": _max_float, "maximum.int": _glsl("SMax"), "maximum.uint": _glsl("UMax"),
    "minimum.float": _min_float, "minimum.int": _glsl("SMin"), "minimum.uint": _glsl("UMin"),
    "pow": _pow,
    "eq.float": _bin(OP.FOrdEqual), "eq.bool": _bin(OP.LogicalEqual), "eq": _bin(OP.IEqual),
    "ne.float": _ne_float, "ne.bool": _bin(OP.LogicalNotEqual), "ne": _bin(OP.INotEqual),
    "lt.float": _bin(OP.FOrdLessThan), "lt.int": _bin(OP.SLessThan), "lt.uint": _bin(OP.ULessThan),
    "le.float": _bin(OP.FOrdLessThanEqual), "le.int": _bin(OP.SLessThanEqual),
    "le.uint": _bin(OP.ULessThanEqual),
    "gt.float": _bin(OP.FOrdGreaterThan), "gt.int": _bin(OP.SGreaterThan), "gt.uint": _bin(OP.UGreaterThan),
    "ge.float": _bin(OP.FOrdGreaterThanEqual), "ge.int": _bin(OP.SGreaterThanEqual),
    "ge.uint": _bin(OP.UGreaterThanEqual),
    "and_": _bin(OP.LogicalAnd), "or_": _bin(OP.LogicalOr),
    "bit_and": _bin(OP.BitwiseAnd), "bit_or": _bin(OP.BitwiseOr), "bit_xor": _bin(OP.BitwiseXor),
    "shl": _shift(OP.ShiftLeftLogical), "shr.int": _shift(OP.ShiftRightArithmetic),
    "shr.uint": _shift(OP.ShiftRightLogical),
    "select": _select,
}


# ---- casts: (from kind, to kind) -> rule(c, x) ----------------------------------------------

def _f2int(lo: float, hi: float, dt, opcode):
    def rule(c, x):
        # NaN -> 0 and saturation are explicit: OpConvertFToS/U of an out-of-range value is undefined
        clean = c.select(c.isnan(x), c.const(0.0, F32), x, F32)
        return c.op(opcode, dt, c.ext(F32, "FClamp", clean, c.const(lo, F32), c.const(hi, F32)))
    return rule


def _from_bool(dt):
    return lambda c, x: c.select(x, c.const(1, dt), c.const(0, dt), dt)


def _to_bool(dt):
    return lambda c, x: c.op(OP.INotEqual, BOOL, x, c.const(0, dt))


CASTS = {
    ("float", "int"): _f2int(-2147483648.0, F32_I32_MAX, I32, OP.ConvertFToS),
    ("float", "uint"): _f2int(0.0, F32_U32_MAX, U32, OP.ConvertFToU),
    ("int", "float"): lambda c, x: c.op(OP.ConvertSToF, F32, x),
    ("uint", "float"): lambda c, x: c.op(OP.ConvertUToF, F32, x),
    ("int", "uint"): lambda c, x: c.op(OP.Bitcast, U32, x),
    ("uint", "int"): lambda c, x: c.op(OP.Bitcast, I32, x),
    ("bool", "float"): _from_bool(F32), ("bool", "int"): _from_bool(I32), ("bool", "uint"): _from_bool(U32),
    ("float", "bool"): lambda c, x: _ne_float(c, (x, c.const(0.0, F32)), F32, BOOL),
    ("int", "bool"): _to_bool(I32), ("uint", "bool"): _to_bool(U32),
}
