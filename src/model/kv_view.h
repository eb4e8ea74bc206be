// The forward pass's view of KV-cache storage. The cache itself (its cells, capacity, the
// positions and sequences they hold) is runtime's KvCache; the model only reads and writes
// cell contents through this view and is told where each token goes (KvBatch), so the model
// layer needs nothing from runtime and knows nothing of sequences.
#pragma once

#include <cstdint>
#include <vector>

namespace pi::model {

// Keys and values of one layer, f16 bit patterns [n_ctx, n_head_kv, head_dim]: cell c holds
// the (RoPE-rotated) key and the value of one token.
struct KvLayer {
  uint16_t* k = nullptr;
  uint16_t* v = nullptr;
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
