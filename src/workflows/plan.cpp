// The placement plan for a budget (include/powerinfer/plan.h): the request resolved, the
// statistics found and checked, the plan loaded from or written to the GPU index, a sweep of
// budgets.
#include "powerinfer/plan.h"

#include <algorithm>
#include <optional>
#include <tuple>

#include "core/log.h"
#include "model/model.h"
#include "runtime/context.h"
#include "runtime/engine_access.h"
#include "runtime/hybrid_plan.h"
#include "runtime/kv_cache.h"
#include "sparse/activation_stats.h"
#include "sparse/gpu_index.h"
#include "sparse/placement.h"
#include "sparse/placement_model.h"

namespace pi {
namespace {

Error bad_request(Error e) { return with_code(std::move(e), ErrorCode::BadRequest); }

// The plan at `n` budgets from 0 to everything the model could place.
Result<std::vector<PlanPoint>> sweep(sparse::PlacementProblem p, int n) {
  uint64_t all = p.head_bytes + p.scratch_bytes;
  for (const sparse::LayerCost& L : p.layers) {
    all += L.dense_bytes + L.neuron_bytes * ((L.freq.size() + static_cast<size_t>(p.granularity) - 1) /
                                             static_cast<size_t>(p.granularity) *
                                             static_cast<size_t>(p.granularity));
  }
  std::vector<PlanPoint> points;
  for (int i = 0; i < n; ++i) {
    p.budget = n == 1 ? all : all / static_cast<uint64_t>(n - 1) * static_cast<uint64_t>(i);
    if (i == n - 1) p.budget = all;
    auto plan = sparse::solve_placement(p);
    if (!plan.ok()) return plan.error();
    points.push_back({p.budget, plan->device_bytes, plan->mass_covered(), plan->n_dense_layers,
                      plan->cpu_bytes_per_token});
  }
  return points;
}

Result<runtime::KvTypes> kv_types(const PlanParams& p) {
  runtime::KvTypes kv;
  for (auto [flag, name, type] :
       {std::tuple{"-ctk", &p.cache_type_k, &kv.k}, std::tuple{"-ctv", &p.cache_type_v, &kv.v}}) {
    const std::optional<KvCacheType> t = kv_cache_type_from_name(*name);
    if (!t) return bad_request(err("%s %s: unknown KV cache type (supported: f16, q8_0, q4_0)", flag, name->c_str()));
    *type = runtime::kv_dtype(*t);
  }
  return kv;
}

// The statistics a session would use (--stats, else MODEL.activations.gguf, else the
// original's activation/ folder), checked against the model; none for a GGUF file's.
Result<std::optional<sparse::ActivationStats>> find_stats(const PlanParams& p, const model::Model& m,
                                                          std::string& path) {
  path = runtime::find_stats(p.model, p.stats);
  if (path.empty()) return std::optional<sparse::ActivationStats>{};
  if (p.stats.empty()) log_info("plan: statistics %s", path.c_str());
  auto s = sparse::read_activation_stats(path);
  if (!s.ok()) return s.error();
  const model::HParams& hp = m.hparams();
  if (hp.is_moe()) {
    // placement_problem checks that the routing statistics fit.
  } else if (hp.powerinfer) {
    PI_TRY(sparse::check_stats_fit(*s, hp.n_layer, hp.n_ff, sparse::model_fingerprint(m.file()), path));
  } else if (!p.stats.empty()) {
    log_warn("%s is a GGUF file: placed in whole layers, --stats is not used", p.model.c_str());
  }
  return std::optional<sparse::ActivationStats>(std::move(*s));
}

void report_plan(const sparse::PlacementPlan& pl, const sparse::PlacementRequest& req, const model::HParams& hp,
                 PlanReport& r) {
  r.exact = pl.exact;
  r.budget = pl.budget;
  r.granularity = pl.granularity;
  for (size_t l = 0; l < pl.layers.size(); ++l) {
    const sparse::LayerPlan& L = pl.layers[l];
    PlanLayer& o = r.layers.emplace_back();
    o.attn_on_device = L.dense_on_device;
    o.split = hp.powerinfer || (r.experts && !sparse::ffn_kept_on_cpu(req.ffn_on_cpu, static_cast<int64_t>(l)));
    o.device_units = static_cast<int64_t>(L.device_neurons.size());
    o.mass_covered = L.mass_total > 0 ? L.mass_device / L.mass_total : 0.0;
    o.device_bytes = L.device_bytes;
    o.cpu_bytes_per_token = L.cpu_bytes_per_token;
  }
  r.n_dense_layers = pl.n_dense_layers;
  r.head_on_device = pl.head_on_device;
  r.scratch_bytes = pl.scratch_bytes;
  r.device_bytes = pl.device_bytes;
  r.device_units = pl.n_device_neurons();
  r.mass_covered = pl.mass_covered();
  r.cpu_bytes_per_token = pl.cpu_bytes_per_token;
  r.cpu_bytes_all_cpu = pl.cpu_bytes_all_cpu;
}

}  // namespace

Result<PlanReport> plan_placement(const PlanParams& p) {
  auto budget = sparse::budget_from_gib(p.vram_budget_gib);
  if (!budget.ok()) return bad_request(budget.error());
  if (p.n_ctx < 0) return bad_request(err("-c must be >= 0 (got %lld)", static_cast<long long>(p.n_ctx)));
  if (p.n_batch < 1) return bad_request(err("-b must be >= 1 (got %lld)", static_cast<long long>(p.n_batch)));
  if (p.sweep < 0 || p.sweep > 10000) return bad_request(err("--sweep must be 0..10000 (got %d)", p.sweep));
  auto kv = kv_types(p);
  if (!kv.ok()) return kv.error();
  auto model = model::Model::load(p.model);
  if (!model.ok()) return model.error();
  const model::Model& m = **model;
  const model::HParams& hp = m.hparams();
  if (p.n_cpu_moe < 0)
    return bad_request(err("--n-cpu-moe must be >= 0 (got %lld)", static_cast<long long>(p.n_cpu_moe)));
  PI_TRY(runtime::check_kv_types(hp, *kv));
  PlanReport r;
  auto stats = find_stats(p, m, r.stats);
  if (!stats.ok()) return stats.error();
  const sparse::ActivationStats* st = *stats ? &**stats : nullptr;

  sparse::PlacementRequest req;
  req.budget = *budget;
  req.n_ctx = runtime::resolve_n_ctx(hp, p.n_ctx);
  req.n_batch = std::min(p.n_batch, req.n_ctx);
  req.kv_type_k = kv->k;
  req.kv_type_v = kv->v;
  req.experts = hp.is_moe();
  req.granularity = req.experts ? 1 : p.granularity;  // the units are whole experts
  req.allow_neurons = !p.disable_index;
  {
    runtime::ContextOptions co;
    co.n_cpu_moe = p.cpu_moe ? INT32_MAX : static_cast<int>(std::min<int64_t>(p.n_cpu_moe, INT32_MAX));
    co.tensor_overrides = p.override_tensor;
    auto kept = runtime::ffn_on_cpu_layers(m, co, hp.powerinfer);
    if (!kept.ok()) return kept.error();
    req.ffn_on_cpu = std::move(*kept);
  }
  auto problem = sparse::placement_problem(m, st, req);
  if (!problem.ok()) return problem.error();

  const sparse::IndexKey key = sparse::index_key(m.file(), st, req);
  sparse::IndexOptions io;
  io.reset = p.reset_index;
  io.disable = p.disable_index;
  io.write = p.write_index;
  r.index_path = p.index.empty() ? sparse::gpu_index_path(p.model) : p.index;
  auto ip = sparse::plan_with_index(r.index_path, *problem, key, io);
  if (!ip.ok()) return ip.error();

  r.arch = hp.arch_name;
  r.powerinfer = hp.powerinfer;
  r.experts = req.experts;
  r.n_layer = hp.n_layer;
  r.n_units = req.experts ? hp.n_expert : hp.n_ff;
  r.n_ctx = req.n_ctx;
  r.n_batch = req.n_batch;
  r.kv_type_k = std::string(dtype_name(req.kv_type_k));
  r.kv_type_v = std::string(dtype_name(req.kv_type_v));
  r.loaded = ip->loaded;
  r.reason = ip->reason;
  report_plan(ip->plan, req, hp, r);
  if (p.sweep > 0) {
    sparse::PlacementProblem all = *problem;
    if (p.disable_index) all.allow_neurons = false;
    auto pts = sweep(std::move(all), p.sweep);
    if (!pts.ok()) return pts.error();
    r.sweep = std::move(*pts);
  }
  return r;
}

}  // namespace pi
