#include "sparse/gpu_index.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>

#include "gguf/reader.h"
#include "gguf/writer.h"
#include "sparse/placement_model.h"

namespace pi::sparse {
namespace {

constexpr const char* kBlockCount = "generic.gpu_index.block_count";
constexpr const char* kCapacity = "split.vram_capacity";
constexpr const char* kModelFp = "powerinfer.gpu_index.model_fingerprint";
constexpr const char* kStatsFp = "powerinfer.gpu_index.stats_fingerprint";
constexpr const char* kGranularity = "powerinfer.gpu_index.granularity";
constexpr const char* kNCtx = "powerinfer.gpu_index.n_ctx";
constexpr const char* kNBatch = "powerinfer.gpu_index.n_batch";
constexpr const char* kKvTypeK = "powerinfer.gpu_index.kv_type_k";
constexpr const char* kKvTypeV = "powerinfer.gpu_index.kv_type_v";
constexpr const char* kDenseLayers = "powerinfer.gpu_index.dense_layers";
constexpr const char* kHead = "powerinfer.gpu_index.head_on_device";
constexpr const char* kReserved = "powerinfer.gpu_index.reserved_bytes";
constexpr const char* kNWindow = "powerinfer.gpu_index.n_window";

std::string idx_name(size_t l) { return "blk." + std::to_string(l) + ".gpu_idx"; }
std::string bucket_name(size_t l) { return "blk." + std::to_string(l) + ".gpu_bucket"; }

Result<std::vector<int32_t>> read_i32(const gguf::File& f, const std::string& name) {
  auto t = f.tensor(name);
  if (!t.ok()) return t.error();
  if (t->type() != DType::I32 || t->shape().rank != 1) {
    return err("%s: tensor '%s' must be 1-D i32 (type id 18), found %s rank %d", f.path().c_str(),
               name.c_str(), std::string(dtype_name(t->type())).c_str(), t->shape().rank);
  }
  std::vector<int32_t> v(static_cast<size_t>(t->shape()[0]));
  if (!v.empty()) std::memcpy(v.data(), t->data, v.size() * sizeof(int32_t));
  return v;
}

}  // namespace

std::string gpu_index_path(const std::string& model_path) { return model_path + ".generated.gpuidx"; }

std::string stats_fingerprint(const ActivationStats& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  };
  mix(&s.n_tokens, sizeof s.n_tokens);
  for (const auto& c : s.counts) {
    const uint64_t n = c.size();
    mix(&n, sizeof n);
    mix(c.data(), c.size() * sizeof(float));
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "fnv1a64:%016llx", static_cast<unsigned long long>(h));
  return buf;
}

IndexKey index_key(const gguf::File& model, const ActivationStats* stats, const PlacementRequest& req) {
  IndexKey key;
  key.model_fingerprint = model_fingerprint(model);
  key.stats_fingerprint = stats ? stats_fingerprint(*stats) : "";
  key.granularity = req.granularity;
  key.budget = req.budget;
  key.n_ctx = req.n_ctx;
  key.n_batch = req.n_batch;
  key.n_window = req.n_window > 0 && req.n_window < req.n_ctx ? req.n_window : 0;
  key.kv_type_k = req.kv_type_k;
  key.kv_type_v = req.kv_type_v;
  return key;
}

Status write_gpu_index(const std::string& path, const PlacementPlan& plan, const IndexKey& key,
                       const std::vector<int64_t>& n_ff) {
  if (n_ff.size() != plan.layers.size()) {
    return err("%s: %zu layer sizes for a plan of %zu layers", path.c_str(), n_ff.size(), plan.layers.size());
  }
  gguf::Writer w(gguf::Magic::PWRI);
  PI_TRY(w.add_kv("general.architecture", gguf::Value(std::string(gguf::kGpuIndexArch))));
  PI_TRY(w.add_kv(kBlockCount, gguf::Value(static_cast<uint32_t>(plan.layers.size()))));
  PI_TRY(w.add_kv(kCapacity, gguf::Value(key.budget)));
  PI_TRY(w.add_kv(kModelFp, gguf::Value(key.model_fingerprint)));
  PI_TRY(w.add_kv(kStatsFp, gguf::Value(key.stats_fingerprint)));
  PI_TRY(w.add_kv(kGranularity, gguf::Value(static_cast<uint32_t>(key.granularity))));
  PI_TRY(w.add_kv(kNCtx, gguf::Value(static_cast<uint64_t>(key.n_ctx))));
  PI_TRY(w.add_kv(kNBatch, gguf::Value(static_cast<uint64_t>(key.n_batch))));
  PI_TRY(w.add_kv(kReserved, gguf::Value(key.reserved)));
  if (key.n_window > 0) PI_TRY(w.add_kv(kNWindow, gguf::Value(static_cast<uint64_t>(key.n_window))));
  PI_TRY(w.add_kv(kKvTypeK, gguf::Value(static_cast<uint32_t>(key.kv_type_k))));
  PI_TRY(w.add_kv(kKvTypeV, gguf::Value(static_cast<uint32_t>(key.kv_type_v))));
  PI_TRY(w.add_kv(kDenseLayers, gguf::Value(static_cast<uint32_t>(plan.n_dense_layers))));
  PI_TRY(w.add_kv(kHead, gguf::Value(plan.head_on_device)));
  std::vector<std::vector<int32_t>> masks(plan.layers.size());
  for (size_t l = 0; l < plan.layers.size(); ++l) {
    auto& m = masks[l];
    m.assign(static_cast<size_t>(n_ff[l]), 0);
    for (int32_t id : plan.layers[l].device_neurons) {
      if (id < 0 || id >= n_ff[l]) return err("%s: layer %zu: neuron %d outside 0..%lld", path.c_str(), l, id, static_cast<long long>(n_ff[l]));
      m[static_cast<size_t>(id)] = 1;
    }
    PI_TRY(w.add_tensor(idx_name(l), DType::I32, Shape{n_ff[l]}));
    PI_TRY(w.add_tensor(bucket_name(l), DType::I32,
                        Shape{static_cast<int64_t>(plan.layers[l].device_neurons.size())}));
  }
  // Written to a temporary name and renamed, so a reader never sees half a file.
  const std::string tmp = path + ".tmp";
  PI_TRY(w.begin(tmp));
  for (size_t l = 0; l < plan.layers.size(); ++l) {
    PI_TRY(w.write(std::as_bytes(std::span(masks[l]))));
    PI_TRY(w.write(std::as_bytes(std::span(plan.layers[l].device_neurons))));
  }
  PI_TRY(w.finish());
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return err("%s: cannot rename %s: %s", path.c_str(), tmp.c_str(), ec.message().c_str());
  return Status::Ok();
}

Result<GpuIndex> read_gpu_index(const std::string& path) {
  auto f = gguf::File::open(path);
  if (!f.ok()) return f.error();
  if (!f->is_gpu_index()) {
    return err("%s: not a GPU index (needs PWRI magic and general.architecture = %s)", path.c_str(),
               gguf::kGpuIndexArch);
  }
  auto n_layer = f->get_int(kBlockCount);
  if (!n_layer.ok()) return n_layer.error();
  if (*n_layer <= 0 || *n_layer > 100000) {
    return err("%s: %s %lld is not in 1..100000", path.c_str(), kBlockCount, static_cast<long long>(*n_layer));
  }
  GpuIndex idx;
  auto cap = f->get_int(kCapacity);
  if (!cap.ok()) return cap.error();
  if (*cap < 0) return err("%s: %s is negative", path.c_str(), kCapacity);
  idx.vram_capacity = static_cast<uint64_t>(*cap);
  for (int64_t l = 0; l < *n_layer; ++l) {
    const auto L = static_cast<size_t>(l);
    auto mask = read_i32(*f, idx_name(L));
    if (!mask.ok()) return mask.error();
    auto bucket = read_i32(*f, bucket_name(L));
    if (!bucket.ok()) return bucket.error();
    size_t ones = 0;
    for (size_t i = 0; i < mask->size(); ++i) {
      const int32_t v = (*mask)[i];
      if (v != 0 && v != 1) {
        return err("%s: %s[%zu] is %d, not 0 or 1", path.c_str(), idx_name(L).c_str(), i, v);
      }
      ones += static_cast<size_t>(v);
    }
    if (ones != bucket->size()) {
      return err("%s: layer %lld: gpu_idx marks %zu neurons, gpu_bucket lists %zu", path.c_str(),
                 static_cast<long long>(l), ones, bucket->size());
    }
    for (size_t k = 0; k < bucket->size(); ++k) {
      const int32_t id = (*bucket)[k];
      if (id < 0 || static_cast<size_t>(id) >= mask->size() || (*mask)[static_cast<size_t>(id)] != 1 ||
          (k > 0 && id <= (*bucket)[k - 1])) {
        return err("%s: %s[%zu] = %d: ids must ascend and be marked in gpu_idx", path.c_str(),
                   bucket_name(L).c_str(), k, id);
      }
    }
    idx.n_ff.push_back(static_cast<int64_t>(mask->size()));
    idx.hot.push_back(std::move(*bucket));
  }
  if (f->find(kModelFp) != nullptr) {
    auto mfp = f->get_string(kModelFp);
    if (!mfp.ok()) return mfp.error();
    auto sfp = f->get_string(kStatsFp);
    if (!sfp.ok()) return sfp.error();
    auto g = f->get_int(kGranularity);
    if (!g.ok()) return g.error();
    auto n_ctx = f->get_int(kNCtx);
    if (!n_ctx.ok()) return n_ctx.error();
    auto n_batch = f->get_int(kNBatch);
    if (!n_batch.ok()) return n_batch.error();
    auto dense = f->get_int(kDenseLayers);
    if (!dense.ok()) return dense.error();
    if (*dense < 0 || *dense > *n_layer) {
      return err("%s: %s %lld is not in 0..%lld", path.c_str(), kDenseLayers,
                 static_cast<long long>(*dense), static_cast<long long>(*n_layer));
    }
    const gguf::Value* head = f->find(kHead);
    if (head == nullptr || !std::holds_alternative<bool>(head->data)) {
      return err("%s: metadata key '%s' missing or not a bool", path.c_str(), kHead);
    }
    idx.has_key = true;
    idx.key = IndexKey{*mfp, *sfp, *g, idx.vram_capacity, *n_ctx, *n_batch};
    // Files written before the KV cache had types: f16, the only type then.
    for (auto [name, out] : {std::pair{kKvTypeK, &idx.key.kv_type_k}, std::pair{kKvTypeV, &idx.key.kv_type_v}}) {
      if (f->find(name) == nullptr) continue;
      auto t = f->get_int(name);
      if (!t.ok()) return t.error();
      if (*t != static_cast<int64_t>(DType::F16) && *t != static_cast<int64_t>(DType::Q8_0) &&
          *t != static_cast<int64_t>(DType::Q4_0)) {
        return err("%s: %s %lld is not a KV cache type (f16 1, q8_0 8, q4_0 2)", path.c_str(), name,
                   static_cast<long long>(*t));
      }
      *out = static_cast<DType>(*t);
    }
    // Files written before anything was reserved beside the plan: 0.
    if (f->find(kReserved) != nullptr) {
      auto r = f->get_int(kReserved);
      if (!r.ok()) return r.error();
      if (*r < 0) return err("%s: %s %lld is negative", path.c_str(), kReserved, static_cast<long long>(*r));
      idx.key.reserved = static_cast<uint64_t>(*r);
    }
    // Files written before sliding-window layers had their own store: 0, the whole context.
    if (f->find(kNWindow) != nullptr) {
      auto r = f->get_int(kNWindow);
      if (!r.ok()) return r.error();
      if (*r < 0) return err("%s: %s %lld is negative", path.c_str(), kNWindow, static_cast<long long>(*r));
      idx.key.n_window = *r;
    }
    idx.n_dense_layers = *dense;
    idx.head_on_device = std::get<bool>(head->data);
  }
  return idx;
}

Status check_index_matches(const GpuIndex& idx, const IndexKey& key,
                           const std::vector<int64_t>& n_ff, const std::string& path) {
  if (!idx.has_key) {
    return err("%s: has no %s metadata (written by the original PowerInfer?)", path.c_str(), kModelFp);
  }
  if (idx.key.model_fingerprint != key.model_fingerprint) {
    return err("%s: solved for another model (fingerprint %s, this model %s)", path.c_str(),
               idx.key.model_fingerprint.c_str(), key.model_fingerprint.c_str());
  }
  if (idx.n_ff != n_ff) {
    return err("%s: has %zu layers of other sizes than the model's %zu", path.c_str(), idx.n_ff.size(), n_ff.size());
  }
  if (!key.stats_fingerprint.empty() && idx.key.stats_fingerprint != key.stats_fingerprint) {
    return err("%s: solved for other activation statistics (%s, now %s)", path.c_str(),
               idx.key.stats_fingerprint.c_str(), key.stats_fingerprint.c_str());
  }
  auto differs = [&](const char* what, long long was, long long now) {
    return err("%s: solved for %s %lld, now %lld", path.c_str(), what, was, now);
  };
  if (idx.key.budget != key.budget) return differs("budget (bytes)", static_cast<long long>(idx.key.budget), static_cast<long long>(key.budget));
  if (idx.key.granularity != key.granularity) return differs("granularity", idx.key.granularity, key.granularity);
  if (idx.key.n_ctx != key.n_ctx) return differs("n_ctx", idx.key.n_ctx, key.n_ctx);
  if (idx.key.n_batch != key.n_batch) return differs("n_batch", idx.key.n_batch, key.n_batch);
  if (idx.key.n_window != key.n_window)
    return differs("sliding-window cells (0: the whole context)", idx.key.n_window, key.n_window);
  if (idx.key.reserved != key.reserved)
    return differs("bytes reserved beside the plan (--expert-cache)", static_cast<long long>(idx.key.reserved),
                   static_cast<long long>(key.reserved));
  if (idx.key.kv_type_k != key.kv_type_k || idx.key.kv_type_v != key.kv_type_v) {
    return err("%s: solved for a KV cache of %s/%s (K/V), now %s/%s", path.c_str(),
               std::string(dtype_name(idx.key.kv_type_k)).c_str(), std::string(dtype_name(idx.key.kv_type_v)).c_str(),
               std::string(dtype_name(key.kv_type_k)).c_str(), std::string(dtype_name(key.kv_type_v)).c_str());
  }
  return Status::Ok();
}

Result<IndexedPlan> plan_with_index(const std::string& path, const PlacementProblem& problem,
                                    const IndexKey& key, const IndexOptions& opts) {
  IndexedPlan out;
  bool use_index = !opts.disable;
  std::vector<int64_t> n_ff;
  for (const LayerCost& L : problem.layers) {
    if (!L.split) use_index = false;
    n_ff.push_back(static_cast<int64_t>(L.freq.size()));
  }
  if (opts.disable) {
    out.reason = "--disable-gpu-index";
  } else if (!use_index) {
    out.reason = "no neuron split (dense file): no index";
  } else if (opts.reset) {
    out.reason = "--reset-gpu-index";
  } else {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      out.reason = path + ": no index yet";
    } else if (auto idx = read_gpu_index(path); !idx.ok()) {
      out.reason = idx.error().message;
    } else if (Status m = check_index_matches(*idx, key, n_ff, path); !m.ok()) {
      out.reason = m.error().message;
    } else if (auto plan = evaluate_placement(problem, idx->n_dense_layers, idx->head_on_device, idx->hot);
               !plan.ok()) {
      out.reason = path + ": " + plan.error().message;
    } else {
      out.plan = std::move(*plan);
      out.loaded = true;
      return out;
    }
  }
  PlacementProblem p = problem;
  if (opts.disable) p.allow_neurons = false;
  auto plan = solve_placement(p);
  if (!plan.ok()) return plan.error();
  out.plan = std::move(*plan);
  // A plan made without statistics places no neurons: it is not worth an index.
  if (use_index && opts.write && !key.stats_fingerprint.empty()) {
    if (Status w = write_gpu_index(path, out.plan, key, n_ff); !w.ok()) {
      if (opts.write_errors_fatal) return w.error();
      out.reason += "; index not written: " + w.error().message;
    }
  }
  return out;
}

}  // namespace pi::sparse
