"""The HIP target: the CUDA rules under the HIP runtime header.

HIP's kernel language is CUDA's (`extern "C" __global__`, threadIdx/blockIdx/gridDim,
`__shared__`, `__syncthreads()`, atomicMax/atomicAdd/atomicCAS on unsigned words,
__uint_as_float/__float_as_uint), so the launch layout is the CUDA target's exactly:
one kernel per KIR kernel in dispatch order; arguments in `plan.bindings` order, each
a `uint*` of 32-bit words; grid (x, y, 1) folded by `kernel.cstyle.grid`, a block past
`groups` returning at once; block (kernel.workgroup, 1, 1); static shared arrays.
Compile with `hipcc --genco` or hipRTC.
"""

from __future__ import annotations

from .emit import CUDA

VERSION = "hip-3"


class HIP(CUDA):
    """HIP rules: CUDA's, with the HIP runtime header."""

    target = "hip"
    version = VERSION
    header = ("#include <hip/hip_runtime.h>",) + CUDA.header
