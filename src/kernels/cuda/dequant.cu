// One thread per unit of a row (hd_blocks.h), and one per element of a float row's partial
// last unit; a grid-stride loop over every (row, item).
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/vendor.cuh"

namespace pi::gpu {
namespace {

constexpr int kThreads = 256;

template <DType T>
__global__ void __launch_bounds__(kThreads)
    dequant_kernel(WeightRef w, const int32_t* rows, int64_t r0, int64_t n, float* out,
                   int64_t ldo) {
  constexpr int E = Unit<T>::kElems;
  const int64_t full = w.cols / E;
  const int64_t items = full + (w.cols - full * E);
  const int64_t total = n * items;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t k = i / items, it = i % items;
    const int64_t r = rows != nullptr ? rows[k] : r0 + k;
    const uint8_t* row = w.data + r * w.stride;
    float* o = out + k * ldo;
    if (it < full) {
      float v[E];
      decode_unit<T>(row, it, v);
#pragma unroll
      for (int j = 0; j < E; ++j) o[it * E + j] = v[j];
    } else if constexpr (Unit<T>::kFloat) {
      const int64_t j = full * E + (it - full);
      o[j] = decode_elem<T>(row, j);
    }
  }
}

}  // namespace

cudaError_t dequant_rows(const WeightRef& w, const int32_t* rows, int64_t r0, int64_t n, float* out,
                         int64_t ldo, cudaStream_t stream) {
  if (n == 0 || w.cols == 0) return cudaSuccess;
  return with_type(w.type, [&](auto tag) {
    constexpr DType T = decltype(tag)::value;
    constexpr int E = Unit<T>::kElems;
    const int64_t items = w.cols / E + w.cols % E;
    const int64_t blocks = ceil_div(n * items, kThreads);
    const auto grid = static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
    return launch(dequant_kernel<T>, grid, kThreads, 0, stream, w, rows, r0, n, out, ldo);
  });
}

}  // namespace pi::gpu
