// Internal: the NEON leaves, reached only through neon_table() / neon_dot_table().
// neon_matrix.cpp (ARMv8.0) and neon_dot.cpp (ARMv8.2 + dot product) compile the same dot
// leaves (neon_matrix.h); the axpy (neon_axpy.cpp) and the small ops (neon_ops.cpp) are the
// baseline's on both ISAs.
#pragma once

#include "kernels/cpu/dispatch.h"

namespace pi::cpu::detail {

size_t neon_act_bytes(DType t, int64_t cols);
void neon_prepare_act(DType t, const float* x, int64_t cols, uint8_t* out);
void neon_dot(const DotTask& task);
void neon_axpy(const AxpyTask& task);

}  // namespace pi::cpu::detail
