// Attention over the KV cache (f16, Q8_0 or Q4_0 keys and values: KvRef) by cell lists (Ops::attention): query row i (f32
// [n_head, head_dim]) attends the cells of its list in order; query head h reads kv head
// h / (n_head / n_head_kv). Split over cells for long lists: a token's list of L cells is cut
// into attn_chunks(L) consecutive chunks, each chunk's block keeps its maximum score, its sum
// of exp(score - max) and its unnormalised output, and the chunks are combined in order
// (deterministic; no atomics).
#pragma once

#include "kernels/cuda/hd.h"
#include "kernels/cuda/kv_store.cuh"
#include "kernels/cuda/runtime.h"

namespace pi::gpu {

constexpr int kAttnChunkCells = 256;  // cells per chunk up to kAttnMaxChunks chunks
constexpr int kAttnMaxChunks = 64;
constexpr int64_t kAttnMaxChunkCells = 8192;  // the scores of a chunk sit in shared memory

PI_HD constexpr int attn_chunks(int64_t len) {
  if (len <= 0) return 0;
  const int64_t c = ceil_div(len, kAttnChunkCells);
  return static_cast<int>(c < kAttnMaxChunks ? c : kAttnMaxChunks);
}
// Cells in the longest chunk of a list of len cells (0 for an empty list).
PI_HD constexpr int64_t attn_chunk_cells(int64_t len) {
  return len <= 0 ? 0 : ceil_div(len, attn_chunks(len));
}

struct AttnArgs {
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;
  // Attention sinks (device memory, f32 [n_head], or nullptr): one more logit per head in the
  // softmax, with no value; the combine kernel adds it to the chunks' max and sum.
  const float* sinks = nullptr;
};

// Token i's list (device memory): cells[begin[i] .. begin[i] + len[i]), or cells null: 0 ..
// len[i] - 1 (begin unused).
struct CellLists {
  const int32_t* cells = nullptr;
  const int64_t* begin = nullptr;
  const int64_t* len = nullptr;
};

// Floats of scratch per token for lists of up to max_len cells.
inline int64_t attention_partial_floats(const AttnArgs& a, int64_t max_len) {
  return a.n_head * attn_chunks(max_len) * (a.head_dim + 2);
}

// out[i] for tokens i in [t0, t0 + nt) (Q, out f32 [m, n_head * head_dim]); max_len bounds
// every len[i]; partial holds nt * attention_partial_floats(a, max_len) floats.
// max_len past kAttnMaxChunks * kAttnMaxChunkCells is refused (cudaErrorInvalidValue).
cudaError_t attention(const AttnArgs& a, const float* Q, const KvRef& kv, const CellLists& l,
                      int64_t max_len, int64_t t0, int64_t nt, float* partial, float* out,
                      cudaStream_t stream);

}  // namespace pi::gpu
