// Chunk kernel: a block of 128 threads per (chunk, head, token). The query head goes to shared
// memory; lane groups take the chunk's cells in turn (group g: cells g, g + 4, ...), lanes the
// head's dimensions (each key and value element decoded by kv_elem: f16, or a Q8_0 / Q4_0
// block's d * q), and write score = scale * q · k; the block's max and sum of exp in fixed
// order; then thread d accumulates sum over the chunk's cells, in order, of p * v[d].
// Combine kernel: a block per (head, token), thread d over the head's dimensions; a head's
// sink (gpt-oss) joins the max and the sum here, once.
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/hd_kv.h"
#include "kernels/cuda/hd_scalar.h"
#include "kernels/cuda/vendor.cuh"

namespace pi::gpu {
namespace {

constexpr int kThreads = 128;
constexpr int kGroups = kThreads / kGroup;

__device__ __forceinline__ float nan_max(float a, float b) { return (b > a || b != b) ? b : a; }

// The block's NaN-propagating max (op 0) or sum (op 1) of v, in every thread.
__device__ float block_reduce(float v, bool sum, float* sh) {
  if (sum) {
    v = group_sum(v);
  } else {
    v = group_max(v);
  }
  if (lane_id() == 0) sh[group_id()] = v;
  __syncthreads();
  float r = sh[0];
  for (int g = 1; g < kGroups; ++g) r = sum ? r + sh[g] : nan_max(r, sh[g]);
  __syncthreads();
  return r;
}

__device__ __forceinline__ int64_t cell_at(const CellLists& l, int64_t t, int64_t j) {
  return l.cells != nullptr ? static_cast<int64_t>(l.cells[l.begin[t] + j]) : j;
}

__global__ void __launch_bounds__(kThreads)
    chunk_kernel(AttnArgs a, const float* Q, KvRef kv, CellLists l, int64_t t0, int max_chunks,
                 float* partial) {
  float* sh = dynamic_smem<float>();  // q [head_dim], then the chunk's scores
  __shared__ float red[kGroups];
  const int64_t tz = blockIdx.z, t = t0 + tz, h = blockIdx.y;
  const int c = static_cast<int>(blockIdx.x);
  const int64_t len = l.len[t];
  const int C = attn_chunks(len);
  if (c >= C) return;
  const int64_t j0 = len * c / C, j1 = len * (c + 1) / C;
  const int64_t hd = a.head_dim;
  const int64_t g = h / (a.n_head / a.n_head_kv);
  float* q = sh;
  float* score = sh + hd;
  for (int64_t d = threadIdx.x; d < hd; d += kThreads) q[d] = Q[t * a.n_head * hd + h * hd + d];
  __syncthreads();
  const auto* kb = reinterpret_cast<const uint8_t*>(kv.k);
  const auto* vb = reinterpret_cast<const uint8_t*>(kv.v);
  for (int64_t j = j0 + group_id(); j < j1; j += kGroups) {
    const uint8_t* k =
        kb + kv_bytes(kv.k_kind, g * kv.head_stride + cell_at(l, t, j) * kv.cell_stride);
    float s = 0.0f;
    for (int64_t d = lane_id(); d < hd; d += kGroup) s = fmaf(q[d], kv_elem(kv.k_kind, k, d), s);
    s = group_sum(s);
    if (lane_id() == 0) score[j - j0] = s * a.scale;
  }
  __syncthreads();
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < j1 - j0; j += kThreads) mx = nan_max(mx, score[j]);
  mx = block_reduce(mx, false, red);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < j1 - j0; j += kThreads) {
    const float p = expf(score[j] - mx);
    score[j] = p;
    sum += p;
  }
  sum = block_reduce(sum, true, red);  // also orders the writes of score before the reads
  float* out = partial + ((tz * a.n_head + h) * max_chunks + c) * (hd + 2);
  for (int64_t d = threadIdx.x; d < hd; d += kThreads) {
    float o = 0.0f;
    for (int64_t j = j0; j < j1; ++j) {
      const uint8_t* v =
          vb + kv_bytes(kv.v_kind, g * kv.head_stride + cell_at(l, t, j) * kv.cell_stride);
      o = fmaf(score[j - j0], kv_elem(kv.v_kind, v, d), o);
    }
    out[d] = o;
  }
  if (threadIdx.x == 0) {
    out[hd] = mx;
    out[hd + 1] = sum;
  }
}

__global__ void __launch_bounds__(kThreads)
    combine_kernel(AttnArgs a, CellLists l, int64_t t0, int max_chunks, const float* partial,
                   float* out) {
  const int64_t tz = blockIdx.y, t = t0 + tz, h = blockIdx.x, hd = a.head_dim;
  const int C = attn_chunks(l.len[t]);
  const float* p = partial + (tz * a.n_head + h) * max_chunks * (hd + 2);
  const float sink = a.sinks != nullptr ? a.sinks[h] : -INFINITY;
  float M = sink;
  for (int c = 0; c < C; ++c) M = nan_max(M, p[c * (hd + 2) + hd]);
  float L = 0.0f;
  for (int c = 0; c < C; ++c) L += p[c * (hd + 2) + hd + 1] * expf(p[c * (hd + 2) + hd] - M);
  if (a.sinks != nullptr) L += expf(sink - M);
  float* o = out + t * a.n_head * hd + h * hd;
  for (int64_t d = threadIdx.x; d < hd; d += kThreads) {
    float acc = 0.0f;
    for (int c = 0; c < C; ++c) acc += p[c * (hd + 2) + d] * expf(p[c * (hd + 2) + hd] - M);
    o[d] = C > 0 ? acc / L : 0.0f;
  }
}

}  // namespace

cudaError_t attention(const AttnArgs& a, const float* Q, const KvRef& kv, const CellLists& l,
                      int64_t max_len, int64_t t0, int64_t nt, float* partial, float* out,
                      cudaStream_t stream) {
  if (nt == 0 || a.n_head == 0) return cudaSuccess;
  const int C = attn_chunks(max_len);
  const int64_t chunk = attn_chunk_cells(max_len);
  if (chunk > kAttnMaxChunkCells) return cudaErrorInvalidValue;
  if (C > 0) {
    const size_t smem = static_cast<size_t>(a.head_dim + chunk) * sizeof(float);
    if (smem > 48 * 1024) {
      const cudaError_t e =
          cudaFuncSetAttribute(reinterpret_cast<const void*>(&chunk_kernel),
                               cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
      if (e != cudaSuccess) return e;
    }
    const dim3 grid(static_cast<unsigned>(C), static_cast<unsigned>(a.n_head),
                    static_cast<unsigned>(nt));
    if (const cudaError_t e =
            launch(chunk_kernel, grid, kThreads, smem, stream, a, Q, kv, l, t0, C, partial);
        e != cudaSuccess)
      return e;
  }
  const dim3 grid(static_cast<unsigned>(a.n_head), static_cast<unsigned>(nt));
  return launch(combine_kernel, grid, kThreads, 0, stream, a, l, t0, C > 0 ? C : 1, partial, out);
}

}  // namespace pi::gpu
