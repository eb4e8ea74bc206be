// Internal: the AVX-512 (F, BW, VL, DQ, VNNI) matrix leaves. avx512_matrix.cpp holds the
// activation quantizer and dot products, avx512_axpy.cpp the axpy; both are compiled with
// AVX-512 flags and reached only through avx512_table().
#pragma once

#include "kernels/cpu/dispatch.h"

namespace pi::cpu::detail {

size_t avx512_act_bytes(DType t, int64_t cols);
void avx512_prepare_act(DType t, const float* x, int64_t cols, uint8_t* out);
void avx512_dot(const DotTask& task);
void avx512_axpy(const AxpyTask& task);

// The K-quants Q2_K..Q5_K (avx512_kquant.cpp); the leaves above hand them over.
size_t avx512_kq_act_bytes(DType t, int64_t cols);
void avx512_kq_prepare(DType t, const float* x, int64_t cols, uint8_t* out);
void avx512_kq_dot(const DotTask& task);
void avx512_kq_axpy(const AxpyTask& task);

}  // namespace pi::cpu::detail
