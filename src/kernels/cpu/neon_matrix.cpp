// The ARMv8.0 NEON dot leaves (neon_matrix.h; integer products by SMULL / SADALP). Compiled
// for the aarch64 baseline.
#include "kernels/cpu/neon_leaves.h"
#include "kernels/cpu/neon_matrix.h"

namespace pi::cpu::detail {

size_t neon_act_bytes(DType t, int64_t cols) { return n_act_bytes(t, cols); }
void neon_prepare_act(DType t, const float* x, int64_t cols, uint8_t* out) { n_prepare_act(t, x, cols, out); }
void neon_dot(const DotTask& t) { n_dot(t); }

}  // namespace pi::cpu::detail
