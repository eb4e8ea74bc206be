// PowerInfer activation predictors. Per layer a bias-free two-layer MLP
//
//   logits = fc2 · ReLU(fc1 · h)        fc1 [r, n_embd], fc2 [n_ff, r]
//
// on the predictor input h (llama, bamboo: the residual stream after attention, before
// ffn_norm; falcon: the layer input). Neuron i is predicted active iff logits[i] >= threshold
// (no sigmoid, no top-k; threshold 0 equals sigmoid >= 0.5). The rank r is read from each
// layer's fc1 tensor and may differ between layers. fc1 and fc2 may have any computable type.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/error.h"
#include "gguf/reader.h"
#include "model/model.h"
#include "model/weights.h"

namespace pi::sparse {

// The predictor of one layer: views into the model file.
struct PredictorWeights {
  model::Matrix fc1;  // [r, n_embd]
  model::Matrix fc2;  // [n_ff, r]

  int64_t rank() const { return fc1.rows; }
  uint64_t nbytes() const { return fc1.nbytes() + fc2.nbytes(); }
};

// True when the file has a predictor for layer 0 (blk.0.fc1.weight or blk.0.fc2.weight).
bool has_predictors(const gguf::File& f);

// Loads blk.N.fc1.weight and blk.N.fc2.weight of every layer, with shape checks. Returns an
// empty vector when the file has no predictor at all (no blk.0.fc1/fc2); fails when only some
// layers or only one of a layer's two tensors are present, or a shape does not fit.
Result<std::vector<PredictorWeights>> load_predictors(const model::Model& m);

// The predictor threshold and where it came from.
enum class ThresholdSource { Flag, Env, File, Default };
struct Threshold {
  float value = 0.0f;
  ThresholdSource source = ThresholdSource::Default;
};

// The metadata key and environment variable of the original PowerInfer.
inline constexpr const char* kThresholdKey = "powerinfer.sparse_threshold";
inline constexpr const char* kThresholdEnv = "LLAMA_SPARSE_PRED_THRESHOLD";

// Precedence: `flag` when set, else `env_value` when non-null and non-empty (the value of
// kThresholdEnv a front end read; the library reads no environment), else the file's powerinfer.sparse_threshold, else 0. Values may be
// -inf / inf ("-inf" predicts every neuron, "inf" none). Fails on an unparsable or NaN value,
// naming the variable or key.
Result<Threshold> resolve_threshold(const gguf::File& f, std::optional<float> flag,
                                    const char* env_value);

const char* threshold_source_name(ThresholdSource s);

}  // namespace pi::sparse
