// The NeonDot kernel table: the NEON table with the dot leaves (neon_matrix.h) compiled for
// ARMv8.2 with the dot product, so their integer products are SDOT instructions. The prepared
// activations have the same layout as the baseline's. Compiled with
// -march=armv8.2-a+dotprod+fp16; reached only through neon_dot_table() after the HWCAP check
// (isa.cpp).
#include "kernels/cpu/neon_leaves.h"
#include "kernels/cpu/neon_matrix.h"

#if !defined(__ARM_FEATURE_DOTPROD)
#error "neon_dot.cpp must be compiled with the dot-product extension (+dotprod)"
#endif

namespace pi::cpu::detail {
namespace {

size_t dot_act_bytes(DType t, int64_t cols) { return n_act_bytes(t, cols); }
void dot_prepare_act(DType t, const float* x, int64_t cols, uint8_t* out) { n_prepare_act(t, x, cols, out); }
void dot_dot(const DotTask& t) { n_dot(t); }

}  // namespace

const KernelTable& neon_dot_table() {
  static const KernelTable table = [] {
    KernelTable t = neon_table();
    t.isa = Isa::NeonDot;
    t.act_bytes = dot_act_bytes;
    t.prepare_act = dot_prepare_act;
    t.dot = dot_dot;
    return t;
  }();
  return table;
}

}  // namespace pi::cpu::detail
