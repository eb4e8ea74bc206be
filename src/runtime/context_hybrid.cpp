// Context::create on a device that is not the host: the hybrid executor. The plan and its
// ledger come first (hybrid_plan.h); then exactly what the ledger counts is allocated: the
// dense blocks and head the plan puts on the device, the KV cache of those layers, the device
// lane's step buffers and the FFN split's rows and scratch. The CPU lane reads the model's
// own weights (the file's mapping) and keeps the other layers' KV cache in host memory.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/registry.h"
#include "core/log.h"
#include "model/hybrid_moe.h"
#include "model/layout_cache.h"
#include "model/moe_ffn.h"
#include "runtime/context.h"
#include "sparse/act_sparsity.h"
#include "sparse/placement_model.h"

namespace pi::runtime {
namespace {

size_t sz(int64_t n) { return static_cast<size_t>(n); }

// The FFN step of device layers whose FFN runs on the host (LaneFfn's third step).
constexpr int kBridgeStep = 2;

// Places the views of the parts the plan puts on the device; the others stay host views (the
// device lane never reads them).
Result<model::PlacedWeights> place_planned(backend::Device& dev, const model::Model& m,
                                           const HybridSetup& h) {
  model::PlacedWeights p{backend::WeightStore(dev), m.weights()};
  std::vector<std::byte> staging;
  const auto place = [&](auto& view) -> Status {
    if constexpr (std::is_same_v<std::decay_t<decltype(view)>, model::Matrix>) {
      // A transposed matrix the model holds in the CPU's layout (Model::load) is uploaded in
      // the device's, converted through host staging that lives only for the upload.
      const DType want = dev.transposed_layout(model::file_layout(view.type));
      if (view.present() && want != view.type) {
        staging.resize(view.nbytes());
        PI_TRY(model::convert_rows(view, want, staging.data()));
        model::Matrix converted = view;
        converted.type = want;
        converted.data = staging.data();
        auto placed = p.store.place(converted);
        if (!placed.ok()) return placed.error();
        view = *placed;
        return Status::Ok();
      }
    }
    auto placed = p.store.place(view);
    if (!placed.ok()) return placed.error();
    view = *placed;
    return Status::Ok();
  };
  Status st = Status::Ok();
  const auto each = [&](auto& view) {
    if (st.ok()) st = place(view);
  };
  std::vector<std::byte> gathered;
  for (int64_t il = 0; il < m.hparams().n_layer; ++il) {
    model::LayerWeights& L = p.weights.layers[sz(il)];
    if (h.plan.layers[sz(il)].dense_on_device) model::each_dense_view(L, h.ffn_on_device(il), each, each);
    if (h.router_on_device(il)) {
      each(L.ffn.gate_inp);
      if (L.ffn.gate_inp_b.present()) each(L.ffn.gate_inp_b);
    }
    // Experts placed one by one: each stack on the device holds the layer's device experts,
    // in id order (HybridMoeFfn maps ids to their places).
    std::vector<int32_t> ids = h.experts ? h.layout.hot[sz(il)] : std::vector<int32_t>{};
    if (!h.cache_experts.empty()) ids.insert(ids.end(), h.cache_experts[sz(il)].begin(), h.cache_experts[sz(il)].end());
    if (ids.empty()) continue;
    // The experts' biases (gpt-oss) go whole: a few KiB, read by expert id.
    if (!h.ffn_on_device(il))
      model::each_expert_bias(L.ffn, each);
    model::each_expert_stack(L.ffn, [&](model::Matrix& stack) {
      if (!st.ok()) return;
      const int64_t n_exp = m.hparams().n_expert;
      const size_t one = stack.nbytes() / static_cast<size_t>(n_exp);
      gathered.resize(one * ids.size());
      for (size_t s = 0; s < ids.size(); ++s)
        std::memcpy(gathered.data() + s * one, model::expert_rows(stack, ids[s], n_exp).data, one);
      model::Matrix compact = stack;
      compact.rows = stack.rows / n_exp * static_cast<int64_t>(ids.size());
      compact.stack = static_cast<int64_t>(ids.size());
      compact.data = gathered.data();
      st = place(compact);
      stack = compact;
    });
  }
  if (h.plan.head_on_device) model::each_head_view(p.weights, each, each);
  if (!st.ok()) return st.error();
  return p;
}

}  // namespace

Result<std::unique_ptr<Context>> Context::create_hybrid(const model::Model& model,
                                                        ContextOptions opts,
                                                        std::unique_ptr<backend::Device> dev) {
  const model::HParams& hp = model.hparams();
  // The device took the budget at creation (ContextOptions::vram_budget) and took its own
  // working memory out of it (cuda: scratch arena, cuBLAS): the plan gets what is left, so
  // that everything the process holds on the device stays within --vram-budget.
  // (A budget of 0 means nothing on the device, where the device's own 0 means all it has.)
  const uint64_t budget = opts.vram_budget ? std::min(*opts.vram_budget, dev->memory().free())
                                           : dev->memory().free();
  if (opts.vram_budget && *opts.vram_budget > budget)
    log_info("%s: %s of the %s budget is the device's own working memory; the plan has %s",
             dev->name().c_str(), mib_text(*opts.vram_budget - budget).c_str(),
             mib_text(*opts.vram_budget).c_str(), mib_text(budget).c_str());
  auto setup = plan_hybrid(model, opts, *dev, budget);
  if (!setup.ok()) return setup.error();
  backend::DeviceOptions ho;
  ho.name = "cpu";
  ho.n_threads = opts.n_threads;
  ho.isa = opts.device.isa;
  auto host = backend::make_device(ho);
  if (!host.ok()) return host.error();
  if (!opts.dense && sparse::has_act_sparsity(model.file())) {
    log_warn("%s: activation thresholds (powerinfer calibrate) run on host devices only: on %s "
             "this file runs dense", model.file().path().c_str(), dev->name().c_str());
  }
  if (model.hparams().powerinfer && !opts.dense && !setup->split) {
    log_warn("%s: PowerInfer file without predictors (blk.N.fc1/fc2): running dense",
             model.file().path().c_str());
  }
  const int64_t all_neurons = hp.n_layer * hp.n_ff;
  if (setup->experts && setup->stats_path.empty() && setup->plan.n_device_neurons() > 0 &&
      setup->plan.n_device_neurons() < hp.n_layer * hp.n_expert && setup->origin.rfind("loaded", 0) != 0) {
    log_warn("%s: no routing statistics: the %lld experts on the device are any %lld, not the most "
             "chosen (measure them with `powerinfer profile -m MODEL -f TEXT -o %s.activations.gguf`)",
             model.file().path().c_str(), static_cast<long long>(setup->plan.n_device_neurons()),
             static_cast<long long>(setup->plan.n_device_neurons()), model.file().path().c_str());
  }
  if (setup->split && setup->stats_path.empty() && setup->plan.n_device_neurons() > 0 &&
      setup->plan.n_device_neurons() < all_neurons && setup->origin.rfind("loaded", 0) != 0) {
    log_warn("%s: no activation statistics: the %lld hot neurons on the device are any %lld, "
             "not the most active (measure them with `powerinfer profile -m MODEL -f TEXT -o "
             "%s.activations.gguf`)",
             model.file().path().c_str(), static_cast<long long>(setup->plan.n_device_neurons()),
             static_cast<long long>(setup->plan.n_device_neurons()), model.file().path().c_str());
  }
  const uint64_t used_before = dev->memory().used;

  auto placed = place_planned(*dev, model, *setup);
  if (!placed.ok()) return placed.error();
  // KV cache: one block per device layer (as the ledger counts them), the rest on the host.
  std::vector<KvStorage> kv;
  const int64_t n_dev = setup->plan.n_dense_layers;
  for (int64_t il = 0; il < n_dev; ++il) {
    auto b = dev->alloc(KvCache::storage_bytes(hp, kv_cells(hp, opts), opts.kv_types, il, 1), "KV cache");
    if (!b.ok()) return b.error();
    kv.push_back(KvStorage{std::move(*b), il, 1});
  }
  const uint64_t host_kv =
      n_dev < hp.n_layer ? KvCache::storage_bytes(hp, kv_cells(hp, opts), opts.kv_types, n_dev, hp.n_layer - n_dev)
                         : 0;
  if (n_dev < hp.n_layer) {
    auto b = (*host)->alloc(host_kv, "KV cache");
    if (!b.ok()) return b.error();
    kv.push_back(KvStorage{std::move(*b), n_dev, hp.n_layer - n_dev});
  }

  std::unique_ptr<Context> ctx(
      new Context(model, opts, std::move(dev), std::move(*placed), std::move(kv)));
  ctx->host_ = std::move(*host);
  ctx->hybrid_ = std::move(*setup);
  PI_TRY(ctx->build_hybrid_forward());
  if (host_kv > 0) ctx->host_memory_.push_back(LedgerLine{"KV cache", 1, host_kv});

  const HybridSetup& h = *ctx->hybrid_;
  const uint64_t used = ctx->dev_->memory().used - used_before;
  if (used != h.ledger.allocated()) {
    log_warn("%s: the device holds %s, the ledger counted %s", model.file().path().c_str(),
             mib_text(used).c_str(), mib_text(h.ledger.allocated()).c_str());
  }
  log_info("hybrid: %s + cpu; plan %s; %lld of %lld layers' attention, head %s, %lld %s "
           "(%.1f%% of the %s) on %s",
           ctx->dev_->name().c_str(), h.origin.c_str(), static_cast<long long>(h.plan.n_dense_layers),
           static_cast<long long>(hp.n_layer), h.plan.head_on_device ? "on the device" : "on the CPU",
           static_cast<long long>(h.plan.n_device_neurons()), h.experts ? "experts" : "hot neurons",
           100.0 * h.plan.mass_covered(), h.experts ? "routed tokens" : "activation mass",
           ctx->dev_->name().c_str());
  if (!h.cache_experts.empty()) {
    int64_t slots = 0;
    for (const std::vector<int32_t>& ids : h.cache_experts) slots += static_cast<int64_t>(ids.size());
    log_info("expert cache: %lld slots in %lld layers hold recently used experts (--expert-cache %d)",
             static_cast<long long>(slots), static_cast<long long>(hp.n_layer), ctx->opts_.expert_cache);
  }
  log_info("device memory (%s):\n%s", ctx->dev_->name().c_str(), h.ledger.table().c_str());
  return ctx;
}

Status Context::build_hybrid_forward() {
  const HybridSetup& h = *hybrid_;
  const model::ForwardOptions fo{opts_.n_batch, opts_.all_logits, opts_.n_seq_max};
  sparse::SparseConfig cfg;
  if (h.split) {
    auto thr = sparse::resolve_threshold(model_.file(), opts_.sparse_threshold,
                                         opts_.sparse_threshold_env.empty() ? nullptr : opts_.sparse_threshold_env.c_str());
    if (!thr.ok()) return thr.error();
    threshold_ = *thr;
    cfg = sparse::SparseConfig{thr->value, opts_.check_predictor};
  }
  if (!h.uses_device()) {
    // Nothing fits the device: the CPU-only pass, exactly.
    std::unique_ptr<model::FfnStep> ffn;
    if (h.split) {
      auto sf = sparse::SparseFfn::create(model_, model_.weights(), *host_, opts_.n_batch, cfg);
      if (!sf.ok()) return sf.error();
      sparse_ = sf->get();
      ffn = std::move(*sf);
    }
    auto f = model::Forward::create(model_, model_.weights(), *host_, fo, std::move(ffn));
    if (!f.ok()) return f.error();
    forward_ = std::move(*f);
    return Status::Ok();
  }
  std::vector<model::LaneSpec> lanes = {{host_.get(), &model_.weights()},
                                        {dev_.get(), &weights_.weights}};
  std::unique_ptr<model::FfnStep> ffn;
  if (h.split) {
    auto hf = sparse::HybridFfn::create(model_, *host_, *dev_, h.layout, opts_.n_batch, cfg);
    if (!hf.ok()) return hf.error();
    hybrid_ffn_ = hf->get();
    sparse_ = &(*hf)->cpu_part();
    ffn = std::move(*hf);
  } else if (h.experts) {
    // Experts placed one by one: one step splits each layer's experts between the lanes.
    auto on_host = model::MoeFfn::create(model_, model_.weights(), *host_, opts_.n_batch, opts_.dense);
    if (!on_host.ok()) return on_host.error();
    auto on_dev = model::MoeFfn::create(model_, weights_.weights, *dev_, opts_.n_batch, opts_.dense);
    if (!on_dev.ok()) return on_dev.error();
    moe_all_ = {on_host->get(), on_dev->get()};
    auto hm = model::HybridMoeFfn::create(model_.hparams(), std::move(*on_host), std::move(*on_dev), *dev_,
                                          moe_split(h), opts_.n_batch, &model_.weights(), &weights_.weights);
    if (!hm.ok()) return hm.error();
    hybrid_moe_ = hm->get();
    ffn = std::move(*hm);
  } else {
    // Whole layers: each runs its FFN on its lane (a mixture of experts routes there too),
    // except device layers whose experts stay on the CPU (--cpu-moe), which hand their FFN
    // input to the host step and take its output back.
    const model::HParams& hp = model_.hparams();
    std::vector<int> step_of = h.lanes.layers;
    bool device_ffn = false, bridged = false;
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      if (h.lanes.layers[sz(il)] != kDeviceLane) continue;
      if (h.ffn_on_device(il)) {
        device_ffn = true;
      } else {
        step_of[sz(il)] = kBridgeStep;
        bridged = true;
      }
    }
    std::vector<std::unique_ptr<model::FfnStep>> steps(3);
    for (int lane : {kHostLane, kDeviceLane}) {
      if (lane == kDeviceLane && !device_ffn) continue;
      auto d = model::make_ffn(model_, *lanes[sz(lane)].weights, *lanes[sz(lane)].dev, opts_.n_batch,
                               opts_.dense);
      if (!d.ok()) return d.error();
      if (auto* moe = dynamic_cast<model::MoeFfn*>(d->get()); moe != nullptr) moe_all_.push_back(moe);
      steps[sz(lane)] = std::move(*d);
    }
    if (bridged) {
      auto b = model::HostFfnBridge::create(*steps[sz(kHostLane)], *dev_, hp.n_embd, opts_.n_batch);
      if (!b.ok()) return b.error();
      steps[sz(kBridgeStep)] = std::move(*b);
    }
    ffn = std::make_unique<model::LaneFfn>(std::move(steps), std::move(step_of));
  }
  auto f = model::Forward::create(model_, std::move(lanes), h.lanes, fo, std::move(ffn));
  if (!f.ok()) return f.error();
  forward_ = std::move(*f);
  return Status::Ok();
}

}  // namespace pi::runtime
