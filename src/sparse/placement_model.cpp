#include "sparse/placement_model.h"

#include <cstdio>

#include "sparse/predictor.h"

namespace pi::sparse {
namespace {

uint64_t matrix_bytes(const model::Matrix& m) { return m.present() ? m.nbytes() : 0; }
uint64_t vector_bytes(const model::Vector& v) {
  return v.present() ? static_cast<uint64_t>(v.n) * sizeof(float) : 0;
}

struct Fnv {
  uint64_t h = 0xcbf29ce484222325ull;
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  }
  void str(const std::string& s) {
    const uint64_t n = s.size();
    bytes(&n, sizeof n);
    bytes(s.data(), s.size());
  }
  void u64(uint64_t v) { bytes(&v, sizeof v); }
};

}  // namespace

uint64_t kv_layer_bytes(const model::HParams& hp, int64_t n_ctx) {
  return 2ull * static_cast<uint64_t>(n_ctx) * static_cast<uint64_t>(hp.n_embd_kv()) * 2ull;
}

uint64_t step_scratch_bytes(const model::HParams& hp, int64_t n_batch, int64_t n_outputs) {
  const auto per_token = static_cast<uint64_t>(5 * hp.n_embd + 2 * (hp.n_embd_q() + 2 * hp.n_embd_kv()) +
                                               hp.n_embd_q() + 2 * hp.n_ff);
  const auto per_output = static_cast<uint64_t>(hp.n_embd + hp.n_vocab);
  return (per_token * static_cast<uint64_t>(n_batch) + per_output * static_cast<uint64_t>(n_outputs)) *
         sizeof(float);
}

Result<PlacementProblem> placement_problem(const model::Model& m, const ActivationStats* stats,
                                           const PlacementRequest& req) {
  const model::HParams& hp = m.hparams();
  const model::ModelWeights& w = m.weights();
  if (req.n_ctx <= 0 || req.n_batch <= 0 || req.n_outputs <= 0) {
    return err("placement: n_ctx %lld, n_batch %lld and n_outputs %lld must be positive",
               static_cast<long long>(req.n_ctx), static_cast<long long>(req.n_batch),
               static_cast<long long>(req.n_outputs));
  }
  const bool split = hp.powerinfer && !w.layers.empty() && w.layers[0].ffn.down_t.present();
  if (split) {
    if (stats == nullptr) {
      return err("%s: no activation statistics for this PowerInfer file: measure them with "
                 "`powerinfer profile -m %s -f TEXT -o STATS` and pass --stats STATS",
                 m.file().path().c_str(), m.file().path().c_str());
    }
    PI_TRY(check_stats_fit(*stats, hp.n_layer, hp.n_ff, model_fingerprint(m.file()), "statistics"));
  }
  auto preds = load_predictors(m);
  if (!preds.ok()) return preds.error();
  PlacementProblem p;
  p.budget = req.budget;
  p.granularity = req.granularity;
  p.allow_neurons = req.allow_neurons;
  p.head_bytes = matrix_bytes(w.output) + vector_bytes(w.out_norm) + vector_bytes(w.out_norm_b);
  p.scratch_bytes = step_scratch_bytes(hp, req.n_batch, req.n_outputs);
  const uint64_t kv = kv_layer_bytes(hp, req.n_ctx);
  p.layers.resize(w.layers.size());
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const model::AttnWeights& a = w.layers[l].attn;
    const model::FfnWeights& f = w.layers[l].ffn;
    LayerCost& L = p.layers[l];
    uint64_t weights = matrix_bytes(a.q) + matrix_bytes(a.k) + matrix_bytes(a.v) +
                       matrix_bytes(a.qkv) + matrix_bytes(a.out) + vector_bytes(a.norm) +
                       vector_bytes(a.norm_b) + vector_bytes(f.norm) + vector_bytes(f.norm_b);
    if (!preds->empty()) weights += (*preds)[l].nbytes();
    if (split) {
      L.split = true;
      L.neuron_bytes = (f.gate.present() ? f.gate.row_stride() : 0) + f.up.row_stride() +
                       f.down_t.row_stride();
      const std::vector<double> fr = stats->frequencies(static_cast<int64_t>(l));
      L.freq.assign(fr.begin(), fr.end());
    } else {
      L.split = false;
      weights += matrix_bytes(f.gate) + matrix_bytes(f.up) + matrix_bytes(f.down) + matrix_bytes(f.down_t);
    }
    L.dense_bytes = weights + kv;
    L.dense_read_bytes = weights + kv;
  }
  return p;
}

std::string model_fingerprint(const gguf::File& f) {
  Fnv h;
  std::string arch;
  if (const gguf::Value* a = f.find("general.architecture"); a != nullptr && a->as_string()) arch = *a->as_string();
  h.str(arch);
  h.u64(f.is_powerinfer() ? 1 : 0);
  const std::string prefix = arch + ".";
  for (const gguf::KeyValue& kv : f.metadata()) {
    if (kv.key.compare(0, prefix.size(), prefix) != 0 || !kv.value.as_number()) continue;
    h.str(kv.key);
    h.str(kv.value.to_string());
  }
  for (const gguf::TensorInfo& t : f.tensors()) {
    h.str(t.name);
    h.u64(static_cast<uint64_t>(t.type));
    for (int d = 0; d < t.shape.rank; ++d) h.u64(static_cast<uint64_t>(t.shape[d]));
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "fnv1a64:%016llx", static_cast<unsigned long long>(h.h));
  return buf;
}

}  // namespace pi::sparse
