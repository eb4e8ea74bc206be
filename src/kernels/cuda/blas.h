// cuBLAS for the many-token products (gemm.cu) and the CUDA backend; with PI_GPU_EMU (tests)
// the CPU emulation's (emu.h).
#pragma once

#if defined(PI_GPU_EMU)
#include "kernels/cuda/emu.h"
#else
#include <cublas_v2.h>
#endif
