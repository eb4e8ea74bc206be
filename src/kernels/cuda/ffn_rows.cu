// Stage 1 runs a fixed grid whose lane groups stride over the list entries (the total,
// offsets[m], is read on the device), each finding its token by binary search.
#include <algorithm>

#include "kernels/cuda/act_quant.cuh"
#include "kernels/cuda/axpy_t.cuh"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/ffn_rows.cuh"
#include "kernels/cuda/row_dot.cuh"

namespace pi::gpu {
namespace {

constexpr int kThreads = 128;
constexpr int kGroupsPerBlock = kThreads / kGroup;
constexpr int64_t kMaxBlocks = 2048;

int64_t align256(int64_t b) { return (b + 255) / 256 * 256; }

struct Work {
  float* a;
  int8_t* q;
  Q8Scale* s;
  float* partial;
};

Work carve(void* work, int64_t m, int64_t n_rows, int64_t n_embd) {
  auto* p = static_cast<uint8_t*>(work);
  Work w{};
  w.a = reinterpret_cast<float*>(p);
  p += align256(m * n_rows * 4);
  w.q = reinterpret_cast<int8_t*>(p);
  w.s = reinterpret_cast<Q8Scale*>(p + align256(m * n_embd));
  p += q8_bytes(m, n_embd);
  w.partial = reinterpret_cast<float*>(p);
  return w;
}

__device__ __forceinline__ int64_t token_of(const int64_t* offsets, int64_t m, int64_t e) {
  int64_t lo = 0, hi = m;
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
    gateup_kernel(int kind, WeightRef gate, WeightRef up, ActRef x, const int32_t* idx,
                  const int64_t* offsets, int64_t m, float* a) {
  const int64_t total = offsets[m];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kGroupsPerBlock;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * kGroupsPerBlock + group_id(); e < total;
       e += stride) {
    const int64_t t = token_of(offsets, m, e);
    const int64_t r = idx[e];
    float v = 0.0f;
    if (kind == kFfnPlain) {
      const float u = row_dot<T, kVec>(up.data + r * up.stride, up.cols, x, t);
      v = u > 0.0f ? u : 0.0f;
    } else {
      const float g = row_dot<T, kVec>(gate.data + r * gate.stride, gate.cols, x, t);
      if (g > 0.0f) {  // ReLU(gate) == 0 zeroes the neuron whatever up is
        const float u = row_dot<T, kVec>(up.data + r * up.stride, up.cols, x, t);
        v = g * (kind == kFfnBoth ? (u < 0.0f ? 0.0f : u) : u);
      }
    }
    if (lane_id() == 0) a[e] = v;
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

int64_t ffn_rows_work_bytes(int64_t m, int64_t n_rows, int64_t n_embd) {
  const int64_t groups = m < kFfnTokens ? m : kFfnTokens;
  return align256(m * n_rows * 4) + q8_bytes(m, n_embd) +
         align256(groups * axpy_t_partial_floats(n_rows, n_embd) * 4);
}

cudaError_t ffn_rows(const FfnRowsArgs& a, void* work, float* Y, cudaStream_t stream) {
  const int64_t m = a.m, n_rows = a.up.rows, n_embd = a.up.cols;
  if (m == 0) return cudaSuccess;
  if (a.kind != kFfnPlain && a.gate.type != a.up.type) return cudaErrorInvalidValue;
  const Work w = carve(work, m, n_rows, n_embd);
  ActRef x{a.X, n_embd, w.q, w.s};
  if (q8_path(a.up.type)) {
    if (const cudaError_t e = quantize_q8(a.X, n_embd, m, n_embd, w.q, w.s, stream);
        e != cudaSuccess)
      return e;
  }
  const int64_t blocks =
      std::min<int64_t>(kMaxBlocks, std::max<int64_t>(1, ceil_div(m * n_rows, kGroupsPerBlock)));
  const bool vec = aligned16(a.up.data) && a.up.stride % 16 == 0 && aligned16(a.X) &&
                   (n_embd * 4) % 16 == 0 &&
                   (a.kind == kFfnPlain || (aligned16(a.gate.data) && a.gate.stride % 16 == 0));
  const cudaError_t e = with_type(a.up.type, [&](auto tag) {
    constexpr DType T = decltype(tag)::value;
    const auto start = [&](auto kernel) {
      return launch(kernel, static_cast<unsigned>(blocks), kThreads, 0, stream, a.kind, a.gate,
                    a.up, x, a.idx, a.offsets, m, w.a);
    };
    if constexpr (Unit<T>::kFloat) {
      if (vec) return start(gateup_kernel<T, true>);
    }
    return start(gateup_kernel<T, false>);
  });
  if (e != cudaSuccess) return e;
  const TLists lists{a.idx, a.offsets, 0, w.a, 0};
  for (int64_t t0 = 0; t0 < m; t0 += kFfnTokens) {
    const int64_t nt = m - t0 < kFfnTokens ? m - t0 : kFfnTokens;
    if (const cudaError_t e2 = axpy_t(a.down, lists, n_rows, t0, nt, w.partial, Y, n_embd, stream);
        e2 != cudaSuccess)
      return e2;
  }
  return cudaSuccess;
}

}  // namespace pi::gpu
