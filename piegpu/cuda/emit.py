"""The CUDA target: C++ family rules plus CUDA's signature, thread ids, barriers and atomics.

Launch layout of the emitted source (one translation unit per program):

- One `extern "C" __global__` function per KIR kernel, in dispatch order; launch them
  in that order on one stream (each kernel reads what the earlier ones wrote).
- Arguments, in `plan.bindings` order: one `uint*` per binding (arena first, then the
  runtime intrinsics, then one per channel), each an array of 32-bit words. Program
  inputs and outputs live in the arena at `plan.inputs` / `plan.outputs` word offsets.
- Grid: `kernel.cstyle.grid(kernel.groups, plan.limits.max_groups_per_dim)` as
  (x, y, 1); a block beyond `groups` returns at once. Block: (kernel.workgroup, 1, 1).
  Planning uses kernel/cxx.CXX_LIMITS (1024 threads, 65535 groups per dimension) unless
  `emit(prog, limits)` says otherwise.
- Shared memory is static (`__shared__` arrays); no dynamic shared memory is needed.
- A comment above each kernel repeats its grid and block.

Compile with `nvcc -ptx` (or NVRTC) for sm_50 or newer, without --use_fast_math (it
flushes subnormals and approximates division; eta expects IEEE f32).
"""

from __future__ import annotations

from ..kernel import ir
from ..kernel.cstyle import grid
from ..kernel.cxx import CxxStyle, cxx_ops

VERSION = "cuda-3"


class CUDA(CxxStyle):
    """CUDA rules. CUDA(prefix) puts `prefix` before every kernel name (several programs, one translation unit)."""

    target = "cuda"
    version = VERSION
    types = {"f32": "float", "i32": "int", "u32": "uint", "bool": "bool"}
    ops = cxx_ops(lambda f: f + "f")
    header = ("typedef unsigned int uint;",
              "#define ETA_FN __device__ __forceinline__",
              "#define ETA_AS_FLOAT(u) __uint_as_float(u)",
              "#define ETA_AS_UINT(f) __float_as_uint(f)",
              "#define ETA_MATH(name) name##f")
    local_index, group_x, group_y, groups_x = "threadIdx.x", "blockIdx.x", "blockIdx.y", "gridDim.x"
    atomic_ref = "&{buf}[{idx}]"
    atomic_max_rule = "atomicMax({ref}, {value});"
    atomic_add_rule = "atomicAdd({ref}, {value});"

    def barrier(self) -> str:
        return "__syncthreads();"

    def atomic_add_f32(self, ref: str, value: str) -> list:
        # A compare-and-swap loop, as on every other target (no denormal flushing).
        return ["{",
                f"  uint* eta_p = {ref};",
                f"  const float eta_v = {value};",
                "  uint eta_old = *eta_p;",
                "  for (;;) {",
                "    const uint eta_seen = atomicCAS(eta_p, eta_old, ETA_AS_UINT(ETA_AS_FLOAT(eta_old) + eta_v));",
                "    if (eta_seen == eta_old) { break; }",
                "    eta_old = eta_seen;",
                "  }",
                "}"]

    def kernel_open(self, k: ir.Kernel, plan) -> list:
        gx, gy = grid(k.groups, plan.limits.max_groups_per_dim)
        args = ", ".join(f"uint* {b.name}" for b in plan.bindings)
        out = [f"// launch: grid ({gx}, {gy}, 1), block ({k.workgroup}, 1, 1)",
               f'extern "C" __global__ void __launch_bounds__({k.workgroup}) {self.prefix}{k.name}({args}) {{']
        out += [f"  __shared__ {self.type_name(s.dtype)} {self.shared_name(s.name)}[{s.size}];" for s in k.shared]
        return out + self.thread_ids(k, (gx, gy))
