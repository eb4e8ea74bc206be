// A model's weights placed on a device: the views the forward pass reads on that device, and
// the store that owns their device copies (none on the CPU, where the views are the model
// file's own).
#pragma once

#include "backend/weight_store.h"
#include "model/layout_cache.h"
#include "model/layer_tensors.h"

namespace pi::model {

struct PlacedWeights {
  backend::WeightStore store;
  ModelWeights weights;
};

// Places every weight of `w` on `dev` (uploading unless dev is host-addressable). Transposed
// weights (attn_*_t, ffn_gate_t, ffn_down_t) go in the device's layout for them
// (Device::transposed_layout of the file's type), converted by `layouts` (the model's; no copy
// when the model holds them in that layout already). Without `layouts` they stay as `w` has
// them, which every device must then read: pass it whenever `w` is a Model's weights.
//
// `dense` names the matrices that only the dense products read (weights.h: DenseOnly, usually
// Model::dense_only), which go in Device::dense_layout (the CPU's R16 layouts) the same way.
Result<PlacedWeights> place_weights(backend::Device& dev, const ModelWeights& w,
                                    LayoutCache* layouts = nullptr, DenseOnly dense = DenseOnly::None);

}  // namespace pi::model
