// Internal: the AVX2 (+FMA, F16C) matrix leaves (avx2_matrix.cpp), reached only through
// avx2_table().
#pragma once

#include "kernels/cpu/dispatch.h"

namespace pi::cpu::detail {

size_t avx2_act_bytes(DType t, int64_t cols);
void avx2_prepare_act(DType t, const float* x, int64_t cols, uint8_t* out);
void avx2_dot(const DotTask& task);
void avx2_axpy(const AxpyTask& task);

// The K-quants Q2_K..Q6_K (avx2_kquant.cpp; Q6_K's axpy is avx2_axpy's); the leaves above
// hand them over.
size_t avx2_kq_act_bytes(DType t, int64_t cols);
void avx2_kq_prepare(DType t, const float* x, int64_t cols, uint8_t* out);
void avx2_kq_dot(const DotTask& task);
void avx2_kq_axpy(const AxpyTask& task);

// MXFP4's dot products (avx2_mxfp4.cpp: eight-block activation slots); its axpy is avx2_axpy's.
size_t avx2_mx_act_bytes(int64_t cols);
void avx2_mx_prepare(const float* x, int64_t cols, uint8_t* out);
void avx2_mx_dot(const DotTask& task);

}  // namespace pi::cpu::detail
