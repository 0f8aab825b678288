"""The Metal target: C++ family rules plus MSL's signature, thread ids, barriers and atomics.

Launch layout of the emitted library (one MSL source per program):

- One `kernel void` function per KIR kernel, in dispatch order; encode them in that
  order into one compute command encoder of the default (serial) dispatch type, so each
  kernel sees what the earlier ones wrote.
- Buffers: `[[buffer(i)]]` for i in `plan.bindings` order (arena first, then the runtime
  intrinsics, then one per channel), each a `device uint*` of 32-bit words. Program
  inputs and outputs live in the arena at `plan.inputs` / `plan.outputs` word offsets.
- Threadgroups per grid: `kernel.cstyle.grid(kernel.groups, plan.limits.max_groups_per_dim)`
  as (x, y, 1) with dispatchThreadgroups; a threadgroup beyond `groups` returns at once.
  Threads per threadgroup: (kernel.workgroup, 1, 1). Planning uses kernel/cxx.CXX_LIMITS
  (1024 threads, 65535 groups per dimension) unless `emit(prog, limits)` says otherwise.
- Threadgroup arrays are declared inside each kernel; no setThreadgroupMemoryLength is needed.
- A comment above each kernel repeats its threadgroup grid and size.

Compile with fast math off (MTLCompileOptions.mathMode = MTLMathModeSafe, or
fastMathEnabled = NO) for IEEE arithmetic. The helpers classify NaN and inf inputs on
the bits, so comparisons, casts, max/min and fmod stay exact under fast math wherever the
true result is a number; fast math may still lose a NaN result, and Apple GPUs may flush
f32 subnormals to zero.
"""

from __future__ import annotations

from ..kernel import ir
from ..kernel.cstyle import grid
from ..kernel.cxx import CxxStyle, cxx_ops

VERSION = "msl-3"
_RELAXED = "memory_order_relaxed"


class MSL(CxxStyle):
    """Metal Shading Language rules. MSL(prefix) puts `prefix` before every kernel name."""

    target = "msl"
    version = VERSION
    types = {"f32": "float", "i32": "int", "u32": "uint", "bool": "bool"}
    ops = cxx_ops(lambda f: f)
    header = ("#include <metal_stdlib>",
              "using namespace metal;",
              "#define ETA_FN inline",
              "#define ETA_AS_FLOAT(u) as_type<float>(u)",
              "#define ETA_AS_UINT(f) as_type<uint>(f)",
              "#define ETA_MATH(name) metal::name")
    local_index, group_x, group_y, groups_x = "lid_", "wgid_.x", "wgid_.y", "nwg_.x"
    atomic_ref = "(device atomic_uint*)&{buf}[{idx}]"
    atomic_max_rule = "atomic_fetch_max_explicit({ref}, {value}, memory_order_relaxed);"
    atomic_add_rule = "atomic_fetch_add_explicit({ref}, {value}, memory_order_relaxed);"

    def barrier(self) -> str:
        return "threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);"

    def atomic_add_f32(self, ref: str, value: str) -> list:
        # Metal has no portable float atomic before Metal 3: compare-and-swap the bits.
        return ["{",
                f"  device atomic_uint* eta_p = {ref};",
                f"  const float eta_v = {value};",
                f"  uint eta_old = atomic_load_explicit(eta_p, {_RELAXED});",
                "  while (!atomic_compare_exchange_weak_explicit(eta_p, &eta_old,",
                f"      as_type<uint>(as_type<float>(eta_old) + eta_v), {_RELAXED}, {_RELAXED})) {{",
                "  }",
                "}"]

    def kernel_open(self, k: ir.Kernel, plan) -> list:
        gx, gy = grid(k.groups, plan.limits.max_groups_per_dim)
        params = [f"device uint* {b.name} [[buffer({i})]]" for i, b in enumerate(plan.bindings)]
        params += ["uint lid_ [[thread_index_in_threadgroup]]", "uint2 wgid_ [[threadgroup_position_in_grid]]",
                   "uint2 nwg_ [[threadgroups_per_grid]]"]
        out = [f"// launch: threadgroups ({gx}, {gy}, 1), threads per threadgroup ({k.workgroup}, 1, 1)",
               f"kernel void {self.prefix}{k.name}(" + (",\n    ".join(params)) + ") {"]
        out += [f"  threadgroup {self.type_name(s.dtype)} {self.shared_name(s.name)}[{s.size}];" for s in k.shared]
        return out + self.thread_ids(k, (gx, gy))
