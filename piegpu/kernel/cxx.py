"""The C++ family shared by CUDA, HIP and Metal: one helper prelude and one op rule table.

Each target supplies a short header that defines four macros the prelude is written
against, then reuses everything here:

    ETA_FN          qualifiers of a device helper (`__device__ __forceinline__`, `inline`)
    ETA_AS_FLOAT(u) reinterpret 32 bits as float     ETA_AS_UINT(f)  the reverse
    ETA_MATH(name)  the single-precision libm function (`expf`, `metal::exp` for exp)

Integer semantics follow eta exactly: i32 arithmetic is done on unsigned values and
converted back (signed overflow is undefined behaviour in C++, wrapping in eta), x/0 is
x, x%0 is 0, INT_MIN/-1 is INT_MIN, shift amounts are masked with 31. Float predicates
test the bits: Metal compiles with fast math by default, which may assume no NaN or inf.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass, replace
from typing import Callable

from . import ir
from .cstyle import CStyle, f32_bits, f32_repr
from .plan import Limits

# CUDA, HIP and Apple GPUs all run 1024 threads per group; the grid is still folded at
# 65535 groups per dimension, the smallest y limit among them.
CXX_LIMITS = Limits(max_workgroup=1024, max_groups_per_dim=65535)

PRELUDE = """\
// eta helpers (one copy per translation unit, so several programs may share one)
#ifndef ETA_PRELUDE
#define ETA_PRELUDE
ETA_FN bool eta_isnan(float x) { return (ETA_AS_UINT(x) & 0x7fffffffu) > 0x7f800000u; }
ETA_FN bool eta_isinf(float x) { return (ETA_AS_UINT(x) & 0x7fffffffu) == 0x7f800000u; }
ETA_FN float eta_nan() { return ETA_AS_FLOAT(0x7fc00000u); }
ETA_FN bool eta_eq_f32(float a, float b) { return !eta_isnan(a) && !eta_isnan(b) && a == b; }
// NaN != x is true (unordered); every ordered compare with NaN is false
ETA_FN bool eta_ne_f32(float a, float b) { return !eta_eq_f32(a, b); }
ETA_FN bool eta_lt_f32(float a, float b) { return !eta_isnan(a) && !eta_isnan(b) && a < b; }
ETA_FN bool eta_le_f32(float a, float b) { return !eta_isnan(a) && !eta_isnan(b) && a <= b; }
ETA_FN float eta_max_f32(float a, float b) {
  if (eta_isnan(a) || eta_isnan(b)) { return eta_nan(); }
  return a > b ? a : b;
}
ETA_FN float eta_min_f32(float a, float b) {
  if (eta_isnan(a) || eta_isnan(b)) { return eta_nan(); }
  return a < b ? a : b;
}
ETA_FN float eta_sign_f32(float x) {
  if (eta_isnan(x)) { return x; }
  return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x);
}
ETA_FN float eta_tanh(float x) {
  if (ETA_MATH(fabs)(x) > 9.0f) { return x > 0.0f ? 1.0f : -1.0f; }
  return ETA_MATH(tanh)(x);
}
// f32 -> int truncates toward zero and saturates at the f32 values nearest the limits; NaN -> 0
ETA_FN int eta_f2i(float x) {
  if (eta_isnan(x)) { return 0; }
  if (x <= -2147483648.0f) { return -2147483647 - 1; }
  if (x >= 2147483520.0f) { return 2147483520; }
  return (int)x;
}
ETA_FN uint eta_f2u(float x) {
  if (eta_isnan(x) || x <= 0.0f) { return 0u; }
  if (x >= 4294967040.0f) { return 4294967040u; }
  return (uint)x;
}
// i32 arithmetic wraps modulo 2^32: compute on uint (signed overflow is UB in C++)
ETA_FN int eta_add_i32(int a, int b) { return (int)((uint)a + (uint)b); }
ETA_FN int eta_sub_i32(int a, int b) { return (int)((uint)a - (uint)b); }
ETA_FN int eta_mul_i32(int a, int b) { return (int)((uint)a * (uint)b); }
ETA_FN int eta_neg_i32(int a) { return (int)(0u - (uint)a); }
ETA_FN int eta_abs_i32(int a) { return a < 0 ? eta_neg_i32(a) : a; }
ETA_FN int eta_sign_i32(int a) { return a > 0 ? 1 : (a < 0 ? -1 : 0); }
// x / 0 = x, x % 0 = 0, INT_MIN / -1 = INT_MIN (WGSL's rules: no backend traps)
ETA_FN int eta_div_i32(int a, int b) {
  if (b == 0) { return a; }
  if (b == -1) { return eta_neg_i32(a); }
  return a / b;
}
ETA_FN int eta_rem_i32(int a, int b) { return (b == 0 || b == -1) ? 0 : a % b; }
ETA_FN uint eta_div_u32(uint a, uint b) { return b == 0u ? a : a / b; }
ETA_FN uint eta_rem_u32(uint a, uint b) { return b == 0u ? 0u : a % b; }
ETA_FN int eta_shl_i32(int a, int b) { return (int)((uint)a << ((uint)b & 31u)); }
ETA_FN int eta_shr_i32(int a, int b) { return a >> ((uint)b & 31u); }
ETA_FN uint eta_shl_u32(uint a, uint b) { return a << (b & 31u); }
ETA_FN uint eta_shr_u32(uint a, uint b) { return a >> (b & 31u); }
ETA_FN int eta_max_i32(int a, int b) { return a > b ? a : b; }
ETA_FN int eta_min_i32(int a, int b) { return a < b ? a : b; }
ETA_FN uint eta_max_u32(uint a, uint b) { return a > b ? a : b; }
ETA_FN uint eta_min_u32(uint a, uint b) { return a < b ? a : b; }
// C fmod, exact for every finite input: integer long division of the mantissas
// (a float formula such as a - b * trunc(a / b) is wrong near multiples of b).
// Subnormal mantissas are normalized first so each step subtracts at most once; the
// remainder m * 2^(eb - 150) is assembled from bits, so no float op can flush it.
ETA_FN float eta_fmod(float a, float b) {
  uint ua = ETA_AS_UINT(a) & 0x7fffffffu;
  uint ub = ETA_AS_UINT(b) & 0x7fffffffu;
  if (eta_isnan(a) || eta_isnan(b) || eta_isinf(a) || ub == 0u) { return eta_nan(); }
  if (eta_isinf(b) || ua < ub) { return a; }
  uint sign = ETA_AS_UINT(a) & 0x80000000u;
  int ea = (int)(ua >> 23);
  int eb = (int)(ub >> 23);
  uint ma = ua & 0x7fffffu;
  uint mb = ub & 0x7fffffu;
  if (ea == 0) {
    ea = 1;
    while (ma < 0x800000u) { ma = ma << 1; ea = ea - 1; }
  } else {
    ma = ma | 0x800000u;
  }
  if (eb == 0) {
    eb = 1;
    while (mb < 0x800000u) { mb = mb << 1; eb = eb - 1; }
  } else {
    mb = mb | 0x800000u;
  }
  uint m = ma;
  for (int e = ea; e > eb; e = e - 1) {
    if (m >= mb) { m = m - mb; }
    m = m << 1;
  }
  if (m >= mb) { m = m - mb; }
  if (m == 0u) { return ETA_AS_FLOAT(sign); }
  while (m < 0x800000u && eb > 1) { m = m << 1; eb = eb - 1; }
  uint bits;
  if (eb < 1) {
    bits = m >> (1 - eb);  // below a subnormal b: exact, the low bits are zero
  } else if (m < 0x800000u) {
    bits = m;
  } else {
    bits = ((uint)eb << 23) | (m & 0x7fffffu);
  }
  return ETA_AS_FLOAT(bits | sign);
}
// C pow: negative bases with integral exponents, pow(x, 0) = 1, pow(1, y) = 1, pow(-1, +-inf) = 1
ETA_FN float eta_pow(float a, float b) {
  if (b == 0.0f || a == 1.0f) { return 1.0f; }
  if (eta_isnan(a) || eta_isnan(b)) { return eta_nan(); }
  float m = ETA_MATH(fabs)(a);
  if (m == 1.0f && eta_isinf(b)) { return 1.0f; }
  float half_b = b * 0.5f;
  bool integral = ETA_MATH(floor)(b) == b;
  bool odd = integral && ETA_MATH(floor)(half_b) != half_b;
  if (a < 0.0f && !integral && !eta_isinf(a)) { return eta_nan(); }
  float r;
  if (m == 0.0f) {
    r = b > 0.0f ? 0.0f : ETA_AS_FLOAT(0x7f800000u);
  } else {
    r = ETA_MATH(pow)(m, b);
  }
  return ((ETA_AS_UINT(a) >> 31) == 1u && odd) ? -r : r;
}
#endif
"""


def cxx_ops(math: Callable[[str], str]) -> dict:
    """The op rule table of the C++ family; `math(f)` names the f32 libm function f."""
    return {
        "neg.float": "(-{0})", "neg.int": "eta_neg_i32({0})", "neg.uint": "(0u - {0})",
        "abs_.float": math("fabs") + "({0})", "abs_.int": "eta_abs_i32({0})", "abs_.uint": "({0})",
        "sign.float": "eta_sign_f32({0})", "sign.int": "eta_sign_i32({0})", "sign.uint": "({0} != 0u ? 1u : 0u)",
        "recip": "(1.0f / {0})", "exp": math("exp") + "({0})", "log": math("log") + "({0})",
        "sqrt": math("sqrt") + "({0})", "rsqrt": math("rsqrt") + "({0})", "sin": math("sin") + "({0})",
        "cos": math("cos") + "({0})", "tanh": "eta_tanh({0})", "floor": math("floor") + "({0})",
        "isnan": "eta_isnan({0})", "isinf": "eta_isinf({0})",
        "not_": "(!{0})", "bit_not": "(~{0})",
        "add": "({0} + {1})", "add.int": "eta_add_i32({0}, {1})",
        "sub": "({0} - {1})", "sub.int": "eta_sub_i32({0}, {1})",
        "mul": "({0} * {1})", "mul.int": "eta_mul_i32({0}, {1})",
        "div.float": "({0} / {1})", "div.int": "eta_div_i32({0}, {1})", "div.uint": "eta_div_u32({0}, {1})",
        "rem.float": "eta_fmod({0}, {1})", "rem.int": "eta_rem_i32({0}, {1})", "rem.uint": "eta_rem_u32({0}, {1})",
        "maximum.float": "eta_max_f32({0}, {1})", "maximum.int": "eta_max_i32({0}, {1})",
        "maximum.uint": "eta_max_u32({0}, {1})",
        "minimum.float": "eta_min_f32({0}, {1})", "minimum.int": "eta_min_i32({0}, {1})",
        "minimum.uint": "eta_min_u32({0}, {1})",
        "pow": "eta_pow({0}, {1})",
        "eq": "({0} == {1})", "eq.float": "eta_eq_f32({0}, {1})",
        "ne": "({0} != {1})", "ne.float": "eta_ne_f32({0}, {1})",
        "lt": "({0} < {1})", "lt.float": "eta_lt_f32({0}, {1})",
        "le": "({0} <= {1})", "le.float": "eta_le_f32({0}, {1})",
        "gt": "({0} > {1})", "gt.float": "eta_lt_f32({1}, {0})",
        "ge": "({0} >= {1})", "ge.float": "eta_le_f32({1}, {0})",
        "and_": "({0} && {1})", "or_": "({0} || {1})",
        "bit_and": "({0} & {1})", "bit_or": "({0} | {1})", "bit_xor": "({0} ^ {1})",
        "shl.int": "eta_shl_i32({0}, {1})", "shl.uint": "eta_shl_u32({0}, {1})",
        "shr.int": "eta_shr_i32({0}, {1})", "shr.uint": "eta_shr_u32({0}, {1})",
        "select": "({0} ? {1} : {2})",
    }


CASTS = {
    ("float", "int"): "eta_f2i({0})", ("float", "uint"): "eta_f2u({0})",
    ("int", "float"): "(float)({0})", ("uint", "float"): "(float)({0})",
    ("int", "uint"): "(uint)({0})", ("uint", "int"): "(int)({0})",
    ("bool", "float"): "({0} ? 1.0f : 0.0f)", ("bool", "int"): "({0} ? 1 : 0)", ("bool", "uint"): "({0} ? 1u : 0u)",
    ("float", "bool"): "eta_ne_f32({0}, 0.0f)", ("int", "bool"): "({0} != 0)", ("uint", "bool"): "({0} != 0u)",
}


def _names(node, kinds: tuple) -> set:
    """Names of the Var/Builtin nodes of the given kinds read anywhere in a KIR tree."""
    found: set = set()

    def walk(x) -> None:
        if isinstance(x, kinds):
            found.add(x.name)
        elif isinstance(x, (tuple, list)):
            for y in x:
                walk(y)
        elif is_dataclass(x) and not isinstance(x, ir.Kernel):
            for f in fields(x):
                if f.name != "name":  # a statement's own name is a definition, not a use
                    walk(getattr(x, f.name))
    walk(node)
    return found


def builtins_used(body: tuple) -> set:
    """Names of the thread-index builtins (gid, lid, wid) a kernel body reads."""
    return _names(body, (ir.Builtin,))


def prune_lets(body: tuple) -> tuple:
    """The body without unused Let bindings (pure values the planner bound but no one read).

    C++ compilers warn about every one of them; removing them changes nothing else.
    """
    def strip(stmts: tuple, used: set) -> tuple:
        out = []
        for s in stmts:
            if isinstance(s, ir.Let) and s.name not in used:
                continue
            if isinstance(s, ir.If):
                s = ir.If(s.cond, strip(s.then, used), strip(s.orelse, used))
            elif isinstance(s, ir.For):
                s = ir.For(s.var, s.start, s.end, s.step, strip(s.body, used))
            out.append(s)
        return tuple(out)

    while True:
        pruned = strip(body, _names(body, (ir.Var,)))
        if pruned == body:
            return body
        body = pruned


class CxxStyle(CStyle):
    """Rules every C++ target shares; a target adds its header, bit casts, atomics and signature."""

    casts = CASTS
    to_bits_rules = {"uint": "{0}", "bool": "({0} ? 1u : 0u)", "int": "(uint)({0})", "float": "ETA_AS_UINT({0})"}
    from_bits_rules = {"uint": "{0}", "bool": "({0} != 0u)", "int": "(int)({0})", "float": "ETA_AS_FLOAT({0})"}
    prelude = PRELUDE
    version = "cxx"
    limits = CXX_LIMITS
    header: tuple = ()  # lines that define ETA_FN, ETA_AS_FLOAT, ETA_AS_UINT, ETA_MATH
    # the target's spelling of: thread index in the group, group x and y, number of groups in x
    local_index = group_x = group_y = groups_x = ""

    def __init__(self, prefix: str = ""):
        self.prefix = prefix  # kernel-name prefix, so several programs can share one translation unit

    def expr(self, e) -> str:
        e = ir.fold(e)
        if isinstance(e, ir.Op) and e.op in ("div", "rem") and e.dtype in (ir.I32, ir.U32):
            d = e.args[1]
            # A constant divisor other than 0 and -1 needs no guard (index math is all like this).
            if isinstance(d, ir.Const) and d.value not in (0, -1):
                sym = "/" if e.op == "div" else "%"
                return f"({self.expr(e.args[0])} {sym} {self.expr(d)})"
        return super().expr(e)

    # ---- literals and bit casts ---------------------------------------------------------
    def literal(self, value, dt) -> str:
        if dt == ir.F32:
            v = float(value)
            if v != v or v in (float("inf"), float("-inf")):
                return f"ETA_AS_FLOAT({f32_bits(v):#010x}u)"
            s = f32_repr(v) + "f"
            return f"({s})" if s.startswith("-") else s
        if dt == ir.I32:
            v = int(value)
            if v == -(1 << 31):
                return "(-2147483647 - 1)"
            return f"({v})" if v < 0 else str(v)
        if dt == ir.U32:
            return f"{int(value) & 0xFFFFFFFF}u"
        return "true" if value else "false"

    def bitcast(self, x: str, src, dst) -> str:
        return self.from_bits(self.to_bits(x, src), dst)

    # ---- statements ------------------------------------------------------------------------
    def let(self, name: str, dt, value: str) -> str:
        return f"const {self.type_name(dt)} {name} = {value};"

    def decl(self, name: str, dt, value: str) -> str:
        return f"{self.type_name(dt)} {name} = {value};"

    def for_header(self, var: str, start: str, end: str, step: str) -> str:
        return f"for (uint {var} = {start}; {var} < {end}; {var} += {step}) {{"

    # ---- kernels ------------------------------------------------------------------------------
    def kernel(self, k: ir.Kernel, plan) -> list:
        """The lines of one kernel, unused Let bindings left out."""
        return super().kernel(replace(k, body=prune_lets(k.body)), plan)

    def thread_ids(self, k: ir.Kernel, groups: tuple) -> list:
        """Lines defining the builtins the body reads (wid is also needed by the overshoot guard)."""
        used = builtins_used(k.body)
        overshoot = groups[0] * groups[1] > k.groups
        out = []
        if "lid" in used or "gid" in used:
            out.append(f"  const uint lid = {self.local_index};")
        if used & {"wid", "gid"} or overshoot:
            out.append(f"  const uint wid = {self.group_x} + {self.group_y} * {self.groups_x};")
        if "gid" in used:
            out.append(f"  const uint gid = wid * {k.workgroup}u + lid;")
        if overshoot:
            out.append(f"  if (wid >= {k.groups}u) {{ return; }}")
        return out

    def module_open(self, plan) -> list:
        lines = [f"// piegpu eta program {plan.prog.hash[:16]} ({self.version})"]
        lines += list(self.header)
        lines.append(self.prelude.rstrip("\n"))
        return lines
