// The forward pass's view of KV-cache storage. The cache itself (its cells, capacity, the
// positions and sequences they hold) is runtime's KvCache; the model only reads and writes
// cell contents through this view and is told where each token goes (KvBatch), so the model
// layer needs nothing from runtime and knows nothing of sequences.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/op_params.h"

namespace pi::model {

// Keys and values of one layer in the device's memory (layout: backend::KvLayer).
using backend::KvLayer;

struct KvView {
  std::vector<KvLayer> layers;  // one per model layer
  int64_t n_ctx = 0;            // cells per layer
};

// Where each token of a batch sits and which cells it attends (backend::KvBatch).
using backend::KvBatch;

}  // namespace pi::model
