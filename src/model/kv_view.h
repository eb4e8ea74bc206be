// The forward pass's view of KV-cache storage. The cache itself (its cells, capacity and the
// positions they hold) is runtime's KvCache; the model only reads and writes cell contents
// through this view, so the model layer needs nothing from runtime.
#pragma once

#include <cstdint>
#include <vector>

namespace pi::model {

// Keys and values of one layer, f16 bit patterns [n_ctx, n_head_kv, head_dim]: cell c holds
// the (RoPE-rotated) key and the value of the token at position c.
struct KvLayer {
  uint16_t* k = nullptr;
  uint16_t* v = nullptr;
};

struct KvView {
  std::vector<KvLayer> layers;  // one per model layer
  int64_t n_ctx = 0;            // cells per layer
};

}  // namespace pi::model
