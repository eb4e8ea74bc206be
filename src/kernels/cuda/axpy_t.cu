// Stage 1: a block of 128 threads per (segment s, group of 128 units of D's columns, token);
// thread c owns unit c of its group (hd_blocks.h: 32 columns of a block format, 4 or 8 of a
// float one, or the partial last unit of a float row, element by element). The block walks
// its segment 8 rows at a time: the first lanes load the rows' numbers and coefficients,
// drop the zero coefficients keeping list order (ballot), and every thread decodes its unit
// of the kept rows, their loads issued together (hd_raw.h) before the sums. Stage 2: a thread per
// column adds the token's segments in order.
#include "kernels/cuda/axpy_t.cuh"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/hd_raw.h"
#include "kernels/cuda/vendor.cuh"

namespace pi::gpu {
namespace {

constexpr int kThreads = 128;
constexpr int kBatch = 8;  // rows loaded together

__device__ __forceinline__ int64_t list_len(const TLists& l, int64_t t) {
  return l.offsets != nullptr ? l.offsets[t + 1] - l.offsets[t] : l.n;
}

template <DType T>
__global__ void __launch_bounds__(kThreads)
    partial_kernel(WeightRef D, TLists l, int64_t t0, int S_max, float* partial) {
  constexpr int E = Unit<T>::kElems;
  const int64_t t = t0 + blockIdx.z;
  const int64_t n = list_len(l, t);
  const int S = segments(n);
  const int s = static_cast<int>(blockIdx.x);
  if (s >= S) return;  // the whole block
  const int64_t base = l.offsets != nullptr ? l.offsets[t] : 0;
  const int64_t k0 = seg_begin(n, S, s), k1 = seg_begin(n, S, s + 1);
  const int64_t full = D.cols / E;
  const int64_t u = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  const bool tail = Unit<T>::kFloat && u == full && D.cols % E != 0;

  __shared__ int32_t rows_sh[kBatch];
  __shared__ float a_sh[kBatch];
  __shared__ int count_sh;
  float acc[E];
#pragma unroll
  for (int j = 0; j < E; ++j) acc[j] = 0.0f;

  for (int64_t kb = k0; kb < k1; kb += kBatch) {
    if (threadIdx.x < kGroup) {
      const int j = static_cast<int>(threadIdx.x);
      const int64_t k = kb + j;
      int32_t r = 0;
      float a = 0.0f;
      if (j < kBatch && k < k1) {
        r = l.idx != nullptr ? l.idx[base + k] : static_cast<int32_t>(k);
        a = l.lda > 0 ? l.A[t * l.lda + r] : l.A[base + k];
      }
      const uint32_t keep = group_ballot(a != 0.0f);
      if (a != 0.0f) {
        const int at = __popc(keep & lanes_below());
        rows_sh[at] = r;
        a_sh[at] = a;
      }
      if (j == 0) count_sh = __popc(keep);
    }
    __syncthreads();
    const int cnt = count_sh;
    if (u < full) {
      constexpr int kB = raw_batch(T);
      for (int b0 = 0; b0 < cnt; b0 += kB) {
        RawUnit<T> w[kB];
#pragma unroll
        for (int b = 0; b < kB; ++b)
          if (b0 + b < cnt)
            w[b] = load_raw<T>(D.data + static_cast<int64_t>(rows_sh[b0 + b]) * D.stride, u);
#pragma unroll
        for (int b = 0; b < kB; ++b) {
          if (b0 + b < cnt) {
            const float a = a_sh[b0 + b];
#pragma unroll
            for (int j = 0; j < E; ++j) acc[j] = fmaf(a, raw_value<T>(w[b], j), acc[j]);
          }
        }
      }
    } else if constexpr (Unit<T>::kFloat) {
      if (tail) {
        const int64_t rest = D.cols - full * E;
        for (int b = 0; b < cnt; ++b) {
          const uint8_t* row = D.data + static_cast<int64_t>(rows_sh[b]) * D.stride;
#pragma unroll
          for (int j = 0; j < E; ++j)
            if (j < rest) acc[j] = fmaf(a_sh[b], decode_elem<T>(row, full * E + j), acc[j]);
        }
      }
    }
    __syncthreads();
  }
  float* p = partial + (static_cast<int64_t>(blockIdx.z) * S_max + s) * D.cols;
  if (u < full) {
#pragma unroll
    for (int j = 0; j < E; ++j) p[u * E + j] = acc[j];
  } else if (tail) {
#pragma unroll
    for (int j = 0; j < E; ++j)
      if (j < D.cols - full * E) p[full * E + j] = acc[j];
  }
}

__global__ void __launch_bounds__(256) combine_kernel(TLists l, int64_t t0, int64_t cols, int S_max,
                                                      const float* partial, float* Y, int64_t ldy) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
  if (c >= cols) return;
  const int64_t t = t0 + blockIdx.y;
  const int S = segments(list_len(l, t));
  Y[t * ldy + c] =
      combine_segments(partial + static_cast<int64_t>(blockIdx.y) * S_max * cols + c, S, cols);
}

}  // namespace

cudaError_t axpy_t(const WeightRef& D, const TLists& l, int64_t max_len, int64_t t0, int64_t nt,
                   float* partial, float* Y, int64_t ldy, cudaStream_t stream) {
  if (nt == 0 || D.cols == 0) return cudaSuccess;
  const int S_max = segments(max_len);
  if (S_max > 0) {
    const cudaError_t e = with_type(D.type, [&](auto tag) {
      constexpr DType T = decltype(tag)::value;
      constexpr int E = Unit<T>::kElems;
      const int64_t units = D.cols / E + (D.cols % E != 0 ? 1 : 0);
      const dim3 grid(static_cast<unsigned>(S_max),
                      static_cast<unsigned>(ceil_div(units, kThreads)), static_cast<unsigned>(nt));
      return launch(partial_kernel<T>, grid, kThreads, 0, stream, D, l, t0, S_max, partial);
    });
    if (e != cudaSuccess) return e;
  }
  const dim3 grid(static_cast<unsigned>(ceil_div(D.cols, 256)), static_cast<unsigned>(nt));
  return launch(combine_kernel, grid, 256, 0, stream, l, t0, D.cols, S_max > 0 ? S_max : 1, partial,
                Y, ldy);
}

}  // namespace pi::gpu
