// Row-major products as column-major SGEMMs: a row-major [a, b] matrix with rows ld apart is
// a column-major [b, a] one with leading dimension ld.
//   linear:   Yc [T, m] (ld ldy, at row r0) = Wc^T Xc, Wc [cols, T] the tile, Xc [cols, m].
//   linear_t: Yc [cols, m] = Dc [cols, T] Gc [T, m], G [m, T] the gathered coefficients.
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/vendor.cuh"

namespace pi::gpu {
namespace {

constexpr int kThreads = 256;

// G[i, k] = A[i, rows[k0 + k]] (rows null: k0 + k), i < m, k < T.
__global__ void __launch_bounds__(kThreads)
    gather_kernel(const float* A, int64_t lda, const int32_t* rows, int64_t k0, int64_t T,
                  int64_t m, float* G) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= m * T) return;
  const int64_t t = i / T, k = i % T;
  const int64_t r = rows != nullptr ? rows[k0 + k] : k0 + k;
  G[i] = A[t * lda + r];
}

GemmStatus cuda_failed(const char* call, cudaError_t e) {
  return e == cudaSuccess ? GemmStatus{} : GemmStatus{call, static_cast<int>(e)};
}

}  // namespace

GemmStatus gemm_linear(cublasHandle_t h, const WeightRef& w, const float* X, int64_t ldx, int64_t m,
                       float* Y, int64_t ldy, const GemmScratch& s, cudaStream_t stream) {
  const float one = 1.0f, zero = 0.0f;
  if (m == 0 || w.rows == 0) return {};
  if (w.type == DType::F32 && w.stride % 4 == 0) {
    const cublasStatus_t st = cublasSgemm(
        h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.rows), static_cast<int>(m),
        static_cast<int>(w.cols), &one, reinterpret_cast<const float*>(w.data),
        static_cast<int>(w.stride / 4), X, static_cast<int>(ldx), &zero, Y, static_cast<int>(ldy));
    return st == CUBLAS_STATUS_SUCCESS ? GemmStatus{}
                                       : GemmStatus{"cublasSgemm", static_cast<int>(st)};
  }
  const int64_t T = s.tile_floats / w.cols;
  if (T < 1) return GemmStatus{"gemm_linear: tile too small for one row", 0};
  for (int64_t r0 = 0; r0 < w.rows; r0 += T) {
    const int64_t nr = w.rows - r0 < T ? w.rows - r0 : T;
    if (GemmStatus e =
            cuda_failed("dequant_rows", dequant_rows(w, nullptr, r0, nr, s.tile, w.cols, stream));
        !e.ok())
      return e;
    const cublasStatus_t st =
        cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(nr), static_cast<int>(m),
                    static_cast<int>(w.cols), &one, s.tile, static_cast<int>(w.cols), X,
                    static_cast<int>(ldx), &zero, Y + r0, static_cast<int>(ldy));
    if (st != CUBLAS_STATUS_SUCCESS) return GemmStatus{"cublasSgemm", static_cast<int>(st)};
  }
  return {};
}

GemmStatus gemm_linear_t(cublasHandle_t h, const WeightRef& D, const int32_t* rows, int64_t n,
                         const float* A, int64_t lda, int64_t m, float* Y, int64_t ldy,
                         const GemmScratch& s, cudaStream_t stream) {
  if (m == 0) return {};
  if (n == 0) {
    for (int64_t i = 0; i < m; ++i)
      if (GemmStatus e =
              cuda_failed("cudaMemsetAsync", cudaMemsetAsync(Y + i * ldy, 0, D.cols * 4, stream));
          !e.ok())
        return e;
    return {};
  }
  int64_t T = s.tile_floats / D.cols;
  if (s.gather_floats / m < T) T = s.gather_floats / m;
  if (T < 1) return GemmStatus{"gemm_linear_t: scratch too small for one row", 0};
  const float one = 1.0f, zero = 0.0f;
  for (int64_t k0 = 0; k0 < n; k0 += T) {
    const int64_t nk = n - k0 < T ? n - k0 : T;
    const int32_t* r = rows != nullptr ? rows + k0 : nullptr;
    if (GemmStatus e =
            cuda_failed("dequant_rows", dequant_rows(D, r, k0, nk, s.tile, D.cols, stream));
        !e.ok())
      return e;
    const auto blocks = static_cast<unsigned>(ceil_div(m * nk, kThreads));
    if (GemmStatus e = cuda_failed(
            "gather_kernel",
            launch(gather_kernel, blocks, kThreads, 0, stream, A, lda, rows, k0, nk, m, s.gather));
        !e.ok())
      return e;
    const cublasStatus_t st =
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(D.cols), static_cast<int>(m),
                    static_cast<int>(nk), &one, s.tile, static_cast<int>(D.cols), s.gather,
                    static_cast<int>(nk), k0 == 0 ? &zero : &one, Y, static_cast<int>(ldy));
    if (st != CUBLAS_STATUS_SUCCESS) return GemmStatus{"cublasSgemm", static_cast<int>(st)};
  }
  return {};
}

}  // namespace pi::gpu
