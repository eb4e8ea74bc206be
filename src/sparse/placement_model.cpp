#include "sparse/placement_model.h"

#include <algorithm>
#include <cstdio>

#include "sparse/predictor.h"

namespace pi::sparse {
namespace {

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

uint64_t kv_layer_bytes(const model::HParams& hp, int64_t n_ctx, DType k_type, DType v_type) {
  const int64_t n = n_ctx * hp.n_embd_kv();
  return row_bytes(k_type, n) + row_bytes(v_type, n);
}

uint64_t step_scratch_bytes(const model::HParams& hp, int64_t n_batch, int64_t n_outputs) {
  const auto per_token = static_cast<uint64_t>(5 * hp.n_embd + 2 * (hp.n_embd_q() + 2 * hp.n_embd_kv()) +
                                               hp.n_embd_q() + 2 * hp.n_ff);
  const auto per_output = static_cast<uint64_t>(hp.n_embd + hp.n_vocab);
  return (per_token * static_cast<uint64_t>(n_batch) + per_output * static_cast<uint64_t>(n_outputs)) *
         sizeof(float);
}

uint64_t expert_bytes(const model::LayerWeights& layer, int64_t n_expert) {
  uint64_t n = 0;
  model::each_expert_stack(layer.ffn, [&](const model::Matrix& m) { n += m.nbytes() / static_cast<uint64_t>(n_expert); });
  return n;
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
  const bool split =
      req.split && hp.powerinfer && !w.layers.empty() && w.layers[0].ffn.down_t.present();
  bool no_stats = false;
  if (split) {
    if (stats == nullptr && !req.allow_missing_stats) {
      return err("%s: no activation statistics for this PowerInfer file: measure them with "
                 "`powerinfer profile -m %s -f TEXT -o STATS` and pass --stats STATS",
                 m.file().path().c_str(), m.file().path().c_str());
    }
    no_stats = stats == nullptr;
    if (!no_stats)
      PI_TRY(check_stats_fit(*stats, hp.n_layer, hp.n_ff, model_fingerprint(m.file()), "statistics"));
  }
  const bool experts = req.experts && hp.is_moe();
  if (experts && stats != nullptr) {
    const std::string what = "statistics";
    const std::string fp = model_fingerprint(m.file());
    if (!stats->model_fingerprint.empty() && stats->model_fingerprint != fp)
      return err("%s: statistics were measured on another model (fingerprint %s, this model %s)", what.c_str(),
                 stats->model_fingerprint.c_str(), fp.c_str());
    if (!stats->has_experts() || stats->n_expert != hp.n_expert || stats->n_layer() != hp.n_layer ||
        static_cast<int64_t>(stats->expert_counts.size()) != hp.n_layer)
      return err("%s: the statistics hold no routing of %lld layers of %lld experts (profile this file with "
                 "`powerinfer profile`)",
                 what.c_str(), static_cast<long long>(hp.n_layer), static_cast<long long>(hp.n_expert));
  }
  auto preds = load_predictors(m);
  if (!preds.ok()) return preds.error();
  const auto fp = [&req](uint64_t n) { return req.footprint ? req.footprint(n) : n; };
  // Read bytes and device bytes of a group of tensors.
  // A token reads n_expert_used of a stack's n_expert experts.
  const auto read_of = [&hp](const model::Matrix& x) {
    return x.stack > 1 ? x.nbytes() / static_cast<uint64_t>(x.stack) * static_cast<uint64_t>(hp.n_expert_used)
                       : x.nbytes();
  };
  struct Bytes {
    uint64_t read = 0, device = 0;
    void add(uint64_t n, const std::function<uint64_t(uint64_t)>& f, uint64_t n_read) {
      if (n == 0) return;
      read += n_read;
      device += f(n);
    }
    void add(uint64_t n, const std::function<uint64_t(uint64_t)>& f) {
      if (n == 0) return;
      read += n;
      device += f(n);
    }
  };
  PlacementProblem p;
  p.budget = req.budget;
  p.granularity = req.granularity;
  p.allow_neurons = req.allow_neurons;
  {
    Bytes head;
    model::each_head_view(
        w, [&](const model::Matrix& m) { head.add(m.nbytes(), fp); },
        [&](const model::Vector& v) { head.add(v.nbytes(), fp); });
    p.head_bytes = head.device;
  }
  if (req.scratch) {
    p.scratch_bytes = req.scratch->common;
    p.scratch_lane_bytes = req.scratch->lane;
    p.scratch_dense_bytes = req.scratch->dense;
    p.scratch_head_bytes = req.scratch->head;
    p.scratch_neuron_bytes = req.scratch->neurons;
  } else {
    p.scratch_bytes = step_scratch_bytes(hp, req.n_batch, req.n_outputs);
  }
  p.layers.resize(w.layers.size());
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const int64_t cells = hp.layer_swa(static_cast<int64_t>(l)) && req.n_window > 0 ? req.n_window : req.n_ctx;
    const uint64_t kv = kv_layer_bytes(hp, cells, req.kv_type_k, req.kv_type_v);
    const model::FfnWeights& f = w.layers[l].ffn;
    LayerCost& L = p.layers[l];
    Bytes b;
    const bool kept = ffn_kept_on_cpu(req.ffn_on_cpu, static_cast<int64_t>(l));
    const bool expert_units = experts && !kept;
    const bool with_ffn = !split && !experts && !kept;
    model::each_dense_view(
        w.layers[l], with_ffn, [&](const model::Matrix& m) { b.add(m.nbytes(), fp, read_of(m)); },
        [&](const model::Vector& v) { b.add(v.nbytes(), fp); });
    if (expert_units) {
      b.add(f.gate_inp.nbytes(), fp);
      if (f.gate_inp_b.present()) b.add(f.gate_inp_b.nbytes(), fp);
    }
    if (!split && kept) {
      // The FFN kept on the CPU: read there per token whatever the plan.
      model::each_layer_tensor(
          w.layers[l],
          [&](const model::LayerTensor& t, const model::Matrix& m) {
            if (m.present() && t.group == model::Group::Ffn) L.cpu_read_bytes += read_of(m);
          },
          [&](const model::LayerTensor& t, const model::Vector& v) {
            if (v.present() && t.group == model::Group::Ffn) L.cpu_read_bytes += v.nbytes();
          });
    }
    if (!preds->empty()) {
      b.add((*preds)[l].fc1.nbytes(), fp);
      b.add((*preds)[l].fc2.nbytes(), fp);
    }
    if (split) {
      L.split = true;
      L.neuron_bytes = (f.gate.present() ? f.gate.row_stride() : 0) + f.up.row_stride() +
                       f.down_t.row_stride() + req.neuron_extra_bytes;
      if (no_stats) {
        L.freq.assign(static_cast<size_t>(hp.n_ff), kUnknownFrequency);
      } else {
        const std::vector<double> fr = stats->frequencies(static_cast<int64_t>(l));
        L.freq.assign(fr.begin(), fr.end());
      }
    } else if (expert_units) {
      L.split = true;
      L.neuron_bytes = expert_bytes(w.layers[l], hp.n_expert);
      if (stats == nullptr) {
        L.freq.assign(static_cast<size_t>(hp.n_expert),
                      static_cast<float>(static_cast<double>(hp.n_expert_used) / static_cast<double>(hp.n_expert)));
      } else {
        const std::vector<double> sh = stats->expert_shares(static_cast<int64_t>(l));
        L.freq.clear();
        for (double x : sh) L.freq.push_back(static_cast<float>(std::min(1.0, x)));
      }
    } else {
      L.split = false;
    }
    L.dense_bytes = b.device + fp(kv);
    L.dense_read_bytes = b.read + kv;
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
