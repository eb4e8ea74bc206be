// The forward pass's view of KV-cache storage. The cache itself (its cells, capacity, the
// positions and sequences they hold) is runtime's KvCache; the model only reads and writes
// cell contents through this view and is told where each token goes (KvBatch), so the model
// layer needs nothing from runtime and knows nothing of sequences.
#pragma once

#include <cstdint>
#include <vector>

namespace pi::model {

// Keys and values of one layer, f16 bit patterns: cell c holds the (RoPE-rotated) key and
// the value of one token; kv head h of cell c starts head_stride * h + cell_stride * c
// elements in. The KV cache stores head-major [n_head_kv, n_ctx, head_dim] (head_stride =
// n_ctx * head_dim, cell_stride = head_dim), so that attention streams each head's keys and
// values contiguously (cell-major rows of 256 bytes 8 KiB apart ran at a quarter of the
// memory bandwidth: docs/BENCHMARKS.md).
struct KvLayer {
  uint16_t* k = nullptr;
  uint16_t* v = nullptr;
  int64_t head_stride = 0;
  int64_t cell_stride = 0;
};

struct KvView {
  std::vector<KvLayer> layers;  // one per model layer
  int64_t n_ctx = 0;            // cells per layer
};

// Where each token of a general batch of m tokens sits: token i is at position pos[i], its key
// and value are written to cell cell[i], and it attends the cells
// attn_cells[attn_begin[i] .. attn_begin[i] + attn_len[i]) in that order (its own cell among
// them). Lists of different tokens may share storage. All arrays are owned by the caller.
struct KvBatch {
  const int32_t* pos = nullptr;         // [m]
  const int32_t* cell = nullptr;        // [m]
  const int32_t* attn_cells = nullptr;  // cells, shared storage
  const int64_t* attn_begin = nullptr;  // [m]
  const int64_t* attn_len = nullptr;    // [m]
};

}  // namespace pi::model
