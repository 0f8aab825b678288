// HIP-on-NVIDIA compatibility header for compile checks: HIP's kernel language is
// CUDA's, so under nvcc <hip/hip_runtime.h> only has to bring in the CUDA runtime
// (ROCm's own header does the same for the NVIDIA platform).
#pragma once
#define __HIP_PLATFORM_NVIDIA__ 1
#include <cuda_runtime.h>
