// AVX2 leaves of the K-quants Q2_K..Q6_K: activations quantized once per call to one int8
// scale per 256-element super-block (kquant_simd.h), integer dot products by vpmaddubsw and
// vpmaddwd with the sub-block scales, and the axpy over decoded super-blocks (Q6_K's axpy is
// in avx2_axpy.cpp). Compiled with -mavx2 -mfma -mf16c.
#include "kernels/cpu/avx2_leaves.h"
#include "kernels/cpu/kquant_simd.h"

namespace pi::cpu::detail {

size_t avx2_kq_act_bytes(DType, int64_t cols) { return static_cast<size_t>(cols / 256) * kKSlot; }

void avx2_kq_prepare(DType, const float* x, int64_t cols, uint8_t* out) {
  kq_prepare(x, cols, out, kNaturalOrder);
}

void avx2_kq_dot(const DotTask& t) {
  const int64_t nsb = t.cols / 256;
  kq_drive(t, [&](auto nt, auto two, const uint8_t* row, const uint8_t* next, const uint8_t* const* acts, float* out) {
    kq_dot_row<decltype(nt)::value, decltype(two)::value>(t.type, row, next, acts, nsb, out);
  });
}

void avx2_kq_axpy(const AxpyTask& t) { kq_axpy(t); }

}  // namespace pi::cpu::detail
