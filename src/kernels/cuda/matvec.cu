// Blocks of 4 lane groups; group g of the grid takes listed row g (matvec_rows) or list entry
// g (matvec_csr, which finds its token by binary search in the offsets).
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/matvec.cuh"
#include "kernels/cuda/row_dot.cuh"

namespace pi::gpu {
namespace {

constexpr int kThreads = 128;
constexpr int kGroupsPerBlock = kThreads / kGroup;

template <DType T, bool kVec, int kTok>
__global__ void __launch_bounds__(kThreads)
    matvec_rows_kernel(WeightRef w, const int32_t* rows, int64_t n, ActRef x, int64_t m, float* Y,
                       int64_t ldy) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * kGroupsPerBlock + group_id();
  if (g >= n) return;  // the whole group leaves together
  const int64_t r = rows != nullptr ? rows[g] : g;
  const uint8_t* row = w.data + r * w.stride;
  for (int64_t t0 = 0; t0 < m; t0 += kTok) {
    const int nt = static_cast<int>(m - t0 < kTok ? m - t0 : kTok);
    float acc[kTok];
    if constexpr (q8_path(T)) {
      row_dot_q8<T, kTok>(row, w.cols, x.q + t0 * w.cols, x.s + t0 * (w.cols / 32), nt, acc);
    } else {
      row_dot_f32<T, kVec, kTok>(row, w.cols, x.x + t0 * x.ldx, x.ldx, nt, acc);
    }
    if (lane_id() == 0) {
#pragma unroll
      for (int t = 0; t < kTok; ++t)
        if (t < nt) Y[(t0 + t) * ldy + r] = acc[t];
    }
  }
}

// The token of list entry e: the last i with offsets[i] <= e.
__device__ __forceinline__ int64_t token_of(const int64_t* offsets, int64_t m, int64_t e) {
  int64_t lo = 0, hi = m;  // offsets[lo] <= e < offsets[hi]
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (offsets[mid] <= e)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

template <DType T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    matvec_csr_kernel(WeightRef w, const int32_t* idx, const int64_t* offsets, int64_t m,
                      int64_t total, ActRef x, float* Y, int64_t ldy) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * kGroupsPerBlock + group_id();
  if (e >= total) return;
  const int64_t t = token_of(offsets, m, e);
  const int64_t r = idx[e];
  const float v = row_dot<T, kVec>(w.data + r * w.stride, w.cols, x, t);
  if (lane_id() == 0) Y[t * ldy + r] = v;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Whether the f32 path may use 16-byte loads: rows and activation rows 16-byte aligned.
bool vec_ok(const WeightRef& w, const ActRef& x) {
  return aligned16(w.data) && w.stride % 16 == 0 && aligned16(x.x) && (x.ldx * 4) % 16 == 0;
}

}  // namespace

cudaError_t matvec_rows(const WeightRef& w, const int32_t* rows, int64_t n, const ActRef& x,
                        int64_t m, float* Y, int64_t ldy, cudaStream_t stream) {
  if (n == 0 || m == 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>(ceil_div(n, kGroupsPerBlock));
  const bool vec = vec_ok(w, x);
  // One token (decode) has its own instantiation, unrolled for loads in flight; more tokens
  // share each row read, kMatvecTokens at a time. A token's sum is the same in both.
  const auto start = [&](auto kernel) {
    return launch(kernel, blocks, kThreads, 0, stream, w, rows, n, x, m, Y, ldy);
  };
  return with_type(w.type, [&](auto tag) {
    constexpr DType T = decltype(tag)::value;
    if constexpr (Unit<T>::kFloat) {
      if (vec) {
        return m == 1 ? start(matvec_rows_kernel<T, true, 1>)
                      : start(matvec_rows_kernel<T, true, kMatvecTokens>);
      }
    }
    return m == 1 ? start(matvec_rows_kernel<T, false, 1>)
                  : start(matvec_rows_kernel<T, false, kMatvecTokens>);
  });
}

cudaError_t matvec_csr(const WeightRef& w, const int32_t* idx, const int64_t* offsets, int64_t m,
                       int64_t total, const ActRef& x, float* Y, int64_t ldy, cudaStream_t stream) {
  if (total == 0 || m == 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>(ceil_div(total, kGroupsPerBlock));
  const bool vec = vec_ok(w, x);
  const auto start = [&](auto kernel) {
    return launch(kernel, blocks, kThreads, 0, stream, w, idx, offsets, m, total, x, Y, ldy);
  };
  return with_type(w.type, [&](auto tag) {
    constexpr DType T = decltype(tag)::value;
    if constexpr (Unit<T>::kFloat) {
      if (vec) return start(matvec_csr_kernel<T, true>);
    }
    return start(matvec_csr_kernel<T, false>);
  });
}

}  // namespace pi::gpu
