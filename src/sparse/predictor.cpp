#include "sparse/predictor.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <string>

#include "model/arch.h"
#include "model/tensor_loader.h"

namespace pi::sparse {

bool has_predictors(const gguf::File& f) {
  return f.find_tensor(model::blk(0, "fc1.weight")) != nullptr ||
         f.find_tensor(model::blk(0, "fc2.weight")) != nullptr;
}

Result<std::vector<PredictorWeights>> load_predictors(const model::Model& m) {
  const model::HParams& hp = m.hparams();
  const gguf::File& f = m.file();
  std::vector<PredictorWeights> out;
  // Predictor tensors are never 1-D, so nothing is widened; the loader still wants a store.
  std::deque<std::vector<float>> widened;
  model::TensorLoader t(f, widened);
  if (!has_predictors(f)) return out;
  out.reserve(static_cast<size_t>(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string fc1 = model::blk(il, "fc1.weight"), fc2 = model::blk(il, "fc2.weight");
    const Shape* s1 = t.shape(fc1);
    if (s1 == nullptr || !t.has(fc2)) {
      return err("%s: layer %lld has no predictor ('%s' or '%s' missing) while layer 0 has one",
                 f.path().c_str(), static_cast<long long>(il), fc1.c_str(), fc2.c_str());
    }
    if (s1->rank != 2 || (*s1)[0] <= 0) {
      return err("%s: tensor '%s' has shape %s, expected [r, %lld]", f.path().c_str(), fc1.c_str(),
                 s1->str().c_str(), static_cast<long long>(hp.n_embd));
    }
    const int64_t r = (*s1)[0];
    PredictorWeights p;
    auto w1 = t.matrix(fc1, r, hp.n_embd);
    if (!w1.ok()) return w1.error();
    p.fc1 = std::move(*w1);
    auto w2 = t.matrix(fc2, hp.n_ff, r);
    if (!w2.ok()) return w2.error();
    p.fc2 = std::move(*w2);
    out.push_back(std::move(p));
  }
  return out;
}

namespace {

// Parses a float with strtof (accepts "inf", "-inf", exponents); the whole string must be used.
std::optional<float> parse_float(const char* s) {
  errno = 0;
  char* end = nullptr;
  const float v = std::strtof(s, &end);
  if (end == s) return std::nullopt;
  while (*end == ' ' || *end == '\t' || *end == '\n') ++end;
  if (*end != '\0' || std::isnan(v)) return std::nullopt;
  return v;
}

}  // namespace

Result<Threshold> resolve_threshold(const gguf::File& f, std::optional<float> flag,
                                    const char* env_value) {
  if (flag.has_value()) {
    if (std::isnan(*flag)) return err("sparse threshold must not be NaN");
    return Threshold{*flag, ThresholdSource::Flag};
  }
  if (env_value != nullptr && env_value[0] != '\0') {
    const auto v = parse_float(env_value);
    if (!v.has_value())
      return err("environment variable %s='%s' is not a number", kThresholdEnv, env_value);
    return Threshold{*v, ThresholdSource::Env};
  }
  if (const gguf::Value* v = f.find(kThresholdKey); v != nullptr) {
    auto n = f.get_number(kThresholdKey);
    if (!n.ok()) return n.error();
    if (std::isnan(*n)) return err("%s: key '%s' is NaN", f.path().c_str(), kThresholdKey);
    return Threshold{static_cast<float>(*n), ThresholdSource::File};
  }
  return Threshold{0.0f, ThresholdSource::Default};
}

const char* threshold_source_name(ThresholdSource s) {
  switch (s) {
    case ThresholdSource::Flag:
      return "flag";
    case ThresholdSource::Env:
      return kThresholdEnv;
    case ThresholdSource::File:
      return kThresholdKey;
    case ThresholdSource::Default:
      return "default";
  }
  return "?";
}

}  // namespace pi::sparse
