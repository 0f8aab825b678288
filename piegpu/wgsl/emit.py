"""The WGSL target: rule tables over the shared C-family renderer (kernel/cstyle.py).

Elementwise op rules are WGSL.ops and WGSL.casts below; every other op becomes KIR in
piegpu/kernel/ first (which file: the table in piegpu/targets.py). wgpu (naga) validates
and translates the source.
"""

from __future__ import annotations

from ..kernel import ir
from ..kernel.cstyle import CStyle, f32_bits, f32_repr, grid

VERSION = "wgsl-4"

PRELUDE = """\
// NaN and inf from their bits through a function: a function call is never a WGSL
// const-expression, while bitcast<f32>(0x7fc00000u) is one, and a const-expression
// that yields NaN or inf is a shader-creation error (Tint rejects it; naga accepts it).
fn eta_f32_bits(bits: u32) -> f32 { return bitcast<f32>(bits); }
fn eta_isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn eta_isinf(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u; }
fn eta_max_f32(a: f32, b: f32) -> f32 {
  if (eta_isnan(a) || eta_isnan(b)) { return eta_f32_bits(0x7fc00000u); }
  return max(a, b);
}
fn eta_min_f32(a: f32, b: f32) -> f32 {
  if (eta_isnan(a) || eta_isnan(b)) { return eta_f32_bits(0x7fc00000u); }
  return min(a, b);
}
// NaN != x is true (unordered), whatever the driver's float compare does
fn eta_ne_f32(a: f32, b: f32) -> bool { return eta_isnan(a) || eta_isnan(b) || a != b; }
fn eta_sign_f32(x: f32) -> f32 { if (eta_isnan(x)) { return x; } return sign(x); }
fn eta_tanh(x: f32) -> f32 { if (abs(x) > 9.0) { return sign(x); } return tanh(x); }
fn eta_f2i(x: f32) -> i32 {
  if (eta_isnan(x)) { return 0i; }
  return i32(clamp(x, -2147483648.0, 2147483520.0));
}
fn eta_f2u(x: f32) -> u32 {
  if (eta_isnan(x)) { return 0u; }
  return u32(clamp(x, 0.0, 4294967040.0));
}
// C fmod, exact for every finite input (subnormals too): integer long division of the
// normalized mantissas, the result assembled from bits (a float formula such as
// a - b * trunc(a / b) is wrong near multiples of b).
fn eta_fmod(a: f32, b: f32) -> f32 {
  let ua = bitcast<u32>(a) & 0x7fffffffu;
  let ub = bitcast<u32>(b) & 0x7fffffffu;
  if (eta_isnan(a) || eta_isnan(b) || eta_isinf(a) || ub == 0u) { return eta_f32_bits(0x7fc00000u); }
  if (eta_isinf(b) || ua < ub) { return a; }
  let sign = bitcast<u32>(a) & 0x80000000u;
  var ea = i32(ua >> 23u);
  var eb = i32(ub >> 23u);
  var ma = ua & 0x7fffffu;
  var mb = ub & 0x7fffffu;
  if (ea == 0) {
    ea = 1;
    while (ma < 0x800000u) { ma = ma << 1u; ea = ea - 1; }
  } else {
    ma = ma | 0x800000u;
  }
  if (eb == 0) {
    eb = 1;
    while (mb < 0x800000u) { mb = mb << 1u; eb = eb - 1; }
  } else {
    mb = mb | 0x800000u;
  }
  var m = ma;
  for (var e = ea; e > eb; e = e - 1) {
    if (m >= mb) { m = m - mb; }
    m = m << 1u;
  }
  if (m >= mb) { m = m - mb; }
  if (m == 0u) { return bitcast<f32>(sign); }
  while (m < 0x800000u && eb > 1) { m = m << 1u; eb = eb - 1; }
  var bits: u32 = 0u;
  if (eb < 1) {
    bits = m >> u32(1 - eb);
  } else if (m < 0x800000u) {
    bits = m;
  } else {
    bits = (u32(eb) << 23u) | (m & 0x7fffffu);
  }
  return bitcast<f32>(bits | sign);
}
fn eta_pow(a: f32, b: f32) -> f32 {
  if (b == 0.0 || a == 1.0) { return 1.0; }
  if (eta_isnan(a) || eta_isnan(b)) { return eta_f32_bits(0x7fc00000u); }
  let m = abs(a);
  if (m == 1.0 && eta_isinf(b)) { return 1.0; }
  let half = b * 0.5;
  let integral = floor(b) == b;
  let odd = integral && floor(half) != half;
  if (a < 0.0 && !integral && !eta_isinf(a)) { return eta_f32_bits(0x7fc00000u); }
  var r: f32;
  if (m == 0.0) {
    r = select(eta_f32_bits(0x7f800000u), 0.0, b > 0.0);
  } else {
    r = exp2(b * log2(m));
  }
  if ((bitcast<u32>(a) >> 31u) == 1u && odd) { return -r; }
  return r;
}
"""


class WGSL(CStyle):
    """WGSL rules."""

    target = "wgsl"
    version = VERSION
    types = {"f32": "f32", "i32": "i32", "u32": "u32", "bool": "bool"}
    ops = {
        "neg": "(-{0})", "neg.uint": "(0u - {0})", "neg.float": "(-{0})",
        "abs_": "abs({0})",
        "sign.float": "eta_sign_f32({0})", "sign.int": "sign({0})", "sign.uint": "select(0u, 1u, {0} != 0u)",
        "recip": "(1.0 / {0})", "exp": "exp({0})", "log": "log({0})", "sqrt": "sqrt({0})",
        "rsqrt": "inverseSqrt({0})", "sin": "sin({0})", "cos": "cos({0})", "tanh": "eta_tanh({0})",
        "floor": "floor({0})", "isnan": "eta_isnan({0})", "isinf": "eta_isinf({0})",
        "not_": "(!{0})", "bit_not": "(~{0})",
        "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
        "rem": "({0} % {1})", "rem.float": "eta_fmod({0}, {1})",
        "maximum": "max({0}, {1})", "maximum.float": "eta_max_f32({0}, {1})",
        "minimum": "min({0}, {1})", "minimum.float": "eta_min_f32({0}, {1})",
        "pow": "eta_pow({0}, {1})",
        "eq": "({0} == {1})", "ne": "({0} != {1})", "ne.float": "eta_ne_f32({0}, {1})", "lt": "({0} < {1})", "le": "({0} <= {1})",
        "gt": "({0} > {1})", "ge": "({0} >= {1})",
        "and_": "({0} && {1})", "or_": "({0} || {1})",
        "bit_and": "({0} & {1})", "bit_or": "({0} | {1})", "bit_xor": "({0} ^ {1})",
        "shl": "({0} << (u32({1}) & 31u))", "shr": "({0} >> (u32({1}) & 31u))",
        "select": "select({2}, {1}, {0})",
    }
    casts = {
        ("float", "int"): "eta_f2i({0})", ("float", "uint"): "eta_f2u({0})",
        ("int", "float"): "f32({0})", ("uint", "float"): "f32({0})",
        ("int", "uint"): "bitcast<u32>({0})", ("uint", "int"): "bitcast<i32>({0})",
        ("bool", "float"): "select(0.0, 1.0, {0})", ("bool", "int"): "select(0i, 1i, {0})",
        ("bool", "uint"): "select(0u, 1u, {0})",
        ("float", "bool"): "eta_ne_f32({0}, 0.0)", ("int", "bool"): "({0} != 0i)", ("uint", "bool"): "({0} != 0u)",
    }
    to_bits_rules = {"uint": "{0}", "bool": "select(0u, 1u, {0})", "int": "bitcast<u32>({0})",
                     "float": "bitcast<u32>({0})"}
    from_bits_rules = {"uint": "{0}", "bool": "({0} != 0u)", "int": "bitcast<i32>({0})", "float": "bitcast<f32>({0})"}
    # an atomic buffer's words are reached through its array<atomic<u32>> view, bound as `<name>_at`
    atomic_ref = "&{buf}_at[{idx}]"
    atomic_max_rule = "atomicMax({ref}, {value});"
    atomic_add_rule = "atomicAdd({ref}, {value});"
    prelude = PRELUDE

    def literal(self, value, dt) -> str:
        if dt == ir.F32:
            v = float(value)
            if v != v or v in (float("inf"), float("-inf")):
                return f"eta_f32_bits({f32_bits(v):#010x}u)"  # not a const-expression: see PRELUDE
            return f32_repr(v)
        if dt == ir.I32:
            v = int(value)
            return f"bitcast<i32>({v & 0xFFFFFFFF:#010x}u)" if v == -(1 << 31) else f"{v}i"
        if dt == ir.U32:
            return f"{int(value) & 0xFFFFFFFF}u"
        return "true" if value else "false"

    def load(self, buf: str, idx: str, dt) -> str:
        if buf in self._kernel.atomic:  # such a buffer is only touched through its atomic view
            return self.from_bits(f"atomicLoad({self.atomic_ref.format(buf=buf, idx=idx)})", dt)
        return super().load(buf, idx, dt)

    def store(self, buf: str, idx: str, value: str, dt) -> str:
        if buf in self._kernel.atomic:
            return f"atomicStore({self.atomic_ref.format(buf=buf, idx=idx)}, {self.to_bits(value, dt)});"
        return super().store(buf, idx, value, dt)

    def bitcast(self, x: str, src, dst) -> str:
        return f"bitcast<{self.type_name(dst)}>({x})"

    def let(self, name: str, dt, value: str) -> str:
        return f"let {name}: {self.type_name(dt)} = {value};"

    def decl(self, name: str, dt, value: str) -> str:
        return f"var {name}: {self.type_name(dt)} = {value};"

    def for_header(self, var: str, start: str, end: str, step: str) -> str:
        return f"for (var {var}: u32 = {start}; {var} < {end}; {var} = {var} + {step}) {{"

    def barrier(self) -> str:
        return "storageBarrier(); workgroupBarrier();"

    def atomic_add_f32(self, ref: str, value: str) -> list:
        return ["loop {",
                f"  let old = atomicLoad({ref});",
                f"  let res = atomicCompareExchangeWeak({ref}, old, bitcast<u32>(bitcast<f32>(old) + {value}));",
                "  if (res.exchanged) { break; }",
                "}"]

    def kernel_open(self, k: ir.Kernel, plan) -> list:
        gx, gy = grid(k.groups, plan.limits.max_groups_per_dim)
        out = [f"var<workgroup> {self.shared_name(s.name)}: array<{self.type_name(s.dtype)}, {s.size}>;"
               for s in k.shared]
        out += [f"@compute @workgroup_size({k.workgroup})",
                f"fn {k.name}(@builtin(local_invocation_index) lid: u32, "
                "@builtin(workgroup_id) wgid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {",
                "  let wid: u32 = wgid.x + wgid.y * nwg.x;",
                f"  let gid: u32 = wid * {k.workgroup}u + lid;"]
        if gx * gy > k.groups:
            out.append(f"  if (wid >= {k.groups}u) {{ return; }}")
        return out

    def module_open(self, plan) -> list:
        lines = [f"// piegpu eta program {plan.prog.hash[:16]} ({VERSION})"]
        atomic_bufs = {b for k in plan.kernels for b in k.atomic}
        for i, b in enumerate(plan.bindings):
            lines.append(f"@group(0) @binding({i}) var<storage, read_write> {b.name}: array<u32>;")
            if b.name in atomic_bufs:
                lines.append(f"@group(0) @binding({i}) var<storage, read_write> {b.name}_at: array<atomic<u32>>;")
        lines.append(self.prelude)
        return lines
