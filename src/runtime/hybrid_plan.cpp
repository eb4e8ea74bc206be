#include "runtime/hybrid_plan.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <regex>

#include "core/log.h"
#include "model/ffn.h"
#include "model/layout_cache.h"
#include "model/hybrid_moe.h"
#include "model/moe_ffn.h"
#include "runtime/kv_cache.h"
#include "sparse/activation_stats.h"
#include "sparse/gpu_index.h"
#include "sparse/placement_model.h"
#include "sparse/predictor.h"

namespace pi::runtime {
namespace {

size_t sz(int64_t n) { return static_cast<size_t>(n); }

bool runs_sparse(const model::Model& m, const ContextOptions& o) {
  return m.hparams().powerinfer && !o.dense && sparse::has_predictors(m.file());
}

// Logit rows a context's step buffers hold (as Context and Forward size them).
int64_t logit_rows(const ContextOptions& o) {
  return std::max<int64_t>({o.all_logits ? o.n_batch : 1, static_cast<int64_t>(o.n_seq_max), 1});
}

uint64_t footprints(const backend::Device& dev, const std::vector<uint64_t>& sizes) {
  uint64_t n = 0;
  for (uint64_t b : sizes) n += dev.alloc_footprint(b);
  return n;
}

// What the device can run: the dense blocks, the head, the neuron rows.
struct DeviceCan {
  bool dense = true, head = true, neurons = true;
};

// The device's ffn_rows has no biases: a biased FFN (opt) keeps its neurons on the CPU, whose
// sparse FFN adds them (its dense blocks still move). A model read into memory may hold a
// matrix in the CPU's layout (R16, Model::load): the device gets it in the file's layout
// (place_planned), so that is the type asked about.
DeviceCan device_can(const model::Model& m, const backend::Device& dev, bool split) {
  DeviceCan c;
  const model::ModelWeights& w = m.weights();
  const auto vectors_ok = [](const model::Vector&) {};
  const auto linear_ok = [&](const model::Matrix& t) {
    return dev.supports(backend::Op::Linear, model::file_layout(t.type));
  };
  for (const model::LayerWeights& L : w.layers) {
    model::each_dense_view(
        L, !split, [&](const model::Matrix& t) { c.dense = c.dense && linear_ok(t); }, vectors_ok);
    if (split) {
      for (const model::Matrix* t : {&L.ffn.gate, &L.ffn.up, &L.ffn.down_t})
        if (t->present()) c.neurons = c.neurons && dev.supports(backend::Op::FfnRows, t->type);
      c.neurons = c.neurons && !L.ffn.up_b.present() && !L.ffn.down_b.present();
    }
  }
  model::each_head_view(
      w, [&](const model::Matrix& t) { c.head = c.head && linear_ok(t); },
      vectors_ok);
  if (m.hparams().is_moe()) {
    // Experts placed one by one: the device computes them with the dense products, the
    // transposed down with linear_t.
    for (const model::LayerWeights& L : w.layers) {
      const model::FfnWeights& f = L.ffn;
      for (const model::Matrix* t : {&f.gate_exps, &f.up_exps, &f.down_exps})
        if (t->present()) c.neurons = c.neurons && linear_ok(*t);
      if (f.down_exps_t.present())
        c.neurons = c.neurons && dev.supports(backend::Op::LinearT, model::file_layout(f.down_exps_t.type));
      c.dense = c.dense && linear_ok(f.gate_inp);
    }
  }
  return c;
}

// A name to show beside a pattern that finds nothing: layer 0's first FFN matrix, which is
// what -ot patterns are usually written for.
std::string example_tensor_name(const model::Model& m) {
  std::string name;
  if (!m.weights().layers.empty())
    model::each_layer_matrix(m.weights().layers.front(), [&](const model::LayerTensor& t, const model::Matrix& x) {
      if (name.empty() && x.present() && t.group == model::Group::Ffn) name = x.name;
    });
  return name.empty() ? m.file().tensors().front().name : name;
}

// Ledger lines of the dense views: by the group of the table row that holds `m`.
const char* line_of(const model::Matrix& m, const model::LayerWeights& L) {
  bool ffn = false;
  model::each_layer_matrix(L, [&](const model::LayerTensor& t, const model::Matrix& x) {
    ffn = ffn || (&x == &m && t.group == model::Group::Ffn);
  });
  return ffn ? "FFN weights" : "attention weights";
}

// The device lane's StepBuffers by role, at their footprints: x alone, the layers' other
// buffers, the head's other buffers.
sparse::ScratchBytes lane_scratch(const model::HParams& hp, const ContextOptions& o,
                                  const backend::Device& dev) {
  const int64_t rows = logit_rows(o);
  using SB = model::StepBuffers;
  const uint64_t x = footprints(dev, SB::allocations(hp, o.n_batch, rows, SB::kResidual));
  sparse::ScratchBytes s;
  s.lane = x;
  s.dense = footprints(dev, SB::allocations(hp, o.n_batch, rows, SB::kLayers)) - x;
  s.head = footprints(dev, SB::allocations(hp, o.n_batch, rows, SB::kHead)) - x;
  return s;
}

}  // namespace

Result<std::vector<bool>> ffn_on_cpu_layers(const model::Model& m, const ContextOptions& o, bool split) {
  const model::HParams& hp = m.hparams();
  std::vector<bool> kept(static_cast<size_t>(hp.n_layer), false);
  if (hp.is_moe())
    for (int64_t il = 0; il < hp.n_layer; ++il) kept[static_cast<size_t>(il)] = il < o.n_cpu_moe;
  // "A=CPU,B=CPU" in one string is llama.cpp's spelling too.
  std::vector<std::string> specs;
  for (const std::string& s : o.tensor_overrides) {
    size_t at = 0;
    while (at <= s.size()) {
      const size_t comma = s.find(',', at);
      const std::string part = s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
      if (!part.empty()) specs.push_back(part);
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
  }
  if (!specs.empty() && split) {
    return err("-ot: a PowerInfer file run sparse places its FFN neuron by neuron (--vram-budget); "
               "--disable-gpu-index keeps every FFN neuron on the CPU");
  }
  // llama.cpp's rule: a tensor goes where the first pattern that finds it says. CPU keeps it
  // on the CPU; any other target (CUDA0, ...) names the device, which takes what -ngl or
  // --vram-budget give it.
  struct Rule {
    std::string spec;
    std::regex re;
    bool cpu = false;
    bool found = false;  // decides where some layer matrix goes
  };
  std::vector<Rule> rules;
  for (const std::string& spec : specs) {
    const size_t eq = spec.rfind('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      return err("-ot '%s': expected PATTERN=TARGET (TARGET: CPU, or the device)", spec.c_str());
    const std::string pattern = spec.substr(0, eq), target = spec.substr(eq + 1);
    std::string upper = target;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    Rule r;
    r.spec = spec;
    r.cpu = upper.rfind("CPU", 0) == 0;
    try {
      r.re = std::regex(pattern);
    } catch (const std::regex_error& e) {
      return err("-ot '%s': '%s' is not a regular expression: %s", spec.c_str(), pattern.c_str(), e.what());
    }
    if (!r.cpu)
      log_info("-ot '%s': %s is the device here: what the pattern finds goes where -ngl or --vram-budget put it",
               spec.c_str(), target.c_str());
    rules.push_back(std::move(r));
  }
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    Status st = Status::Ok();
    model::each_layer_matrix(m.weights().layers[static_cast<size_t>(il)],
                             [&](const model::LayerTensor& t, const model::Matrix& x) {
                               if (!x.present() || !st.ok()) return;
                               for (Rule& r : rules) {
                                 if (!std::regex_search(x.name, r.re)) continue;
                                 r.found = true;
                                 if (r.cpu && t.group == model::Group::Ffn) kept[static_cast<size_t>(il)] = true;
                                 if (r.cpu && t.group != model::Group::Ffn)
                                   st = err("-ot '%s' finds %s: only a layer's FFN matrices (a mixture's router "
                                            "and experts) can be kept on the CPU here (-ngl places whole layers)",
                                            r.spec.c_str(), x.name.c_str());
                                 break;  // the first pattern that finds it decides
                               }
                             });
    if (!st.ok()) return st.error();
  }
  // A pattern that finds no tensor of the file at all is a typo or the wrong file: refused, as
  // the other bad patterns are. One that finds only what an earlier pattern took, or only the
  // embeddings or head (which -ngl places), changes nothing: a warning.
  for (const Rule& r : rules) {
    if (r.found) continue;
    const auto& tensors = m.file().tensors();
    const auto any = std::find_if(tensors.begin(), tensors.end(),
                                  [&](const gguf::TensorInfo& t) { return std::regex_search(t.name, r.re); });
    if (any == tensors.end())
      return err("-ot '%s': the pattern finds no tensor of %s (names look like %s)", r.spec.c_str(),
                 m.file().path().c_str(), tensors.empty() ? "?" : example_tensor_name(m).c_str());
    log_warn("-ot '%s' finds %s, which it does not move (an earlier pattern or -ngl decides)", r.spec.c_str(),
             any->name.c_str());
  }
  return kept;
}

bool HybridSetup::ffn_on_device(int64_t il) const {
  return plan.layers[static_cast<size_t>(il)].dense_on_device && !split && !experts &&
         !sparse::ffn_kept_on_cpu(ffn_on_cpu, il);
}

bool HybridSetup::router_on_device(int64_t il) const {
  return experts && plan.layers[static_cast<size_t>(il)].dense_on_device && !sparse::ffn_kept_on_cpu(ffn_on_cpu, il);
}

int64_t HybridSetup::n_device_experts() const { return experts ? plan.n_device_neurons() : 0; }

bool HybridSetup::uses_device() const {
  return plan.n_dense_layers > 0 || plan.head_on_device || plan.n_device_neurons() > 0;
}

model::MoeSplit moe_split(const HybridSetup& h) {
  model::MoeSplit s;
  s.attn_on_device = h.layout.attn_on_device;
  s.device_experts = h.layout.hot;
  s.cache_experts = h.cache_experts;
  for (size_t il = 0; il < h.layout.attn_on_device.size(); ++il)
    s.route_on_device.push_back(h.router_on_device(static_cast<int64_t>(il)));
  return s;
}

unsigned device_lane_roles(const model::LanePlan& lanes) {
  unsigned roles = 0;
  if (std::find(lanes.layers.begin(), lanes.layers.end(), kDeviceLane) != lanes.layers.end())
    roles |= model::StepBuffers::kResidual | model::StepBuffers::kLayers;
  if (lanes.head == kDeviceLane)
    roles |= model::StepBuffers::kResidual | model::StepBuffers::kHead;
  return roles;
}

std::string find_stats(const std::string& model_path, const std::string& given) {
  if (!given.empty()) return given;
  const std::string beside = model_path + ".activations.gguf";
  std::error_code ec;
  if (std::filesystem::exists(beside, ec)) return beside;
  const std::filesystem::path folder = std::filesystem::path(model_path).parent_path() / "activation";
  for (const char* first : {"activation_0.pt", "activation_0.npy"})
    if (std::filesystem::exists(folder / first, ec)) return folder.string();
  return std::string();
}

Result<HybridSetup> plan_hybrid(const model::Model& m, const ContextOptions& o,
                                backend::Device& dev, uint64_t budget) {
  const model::HParams& hp = m.hparams();
  const std::string& path = m.file().path();
  HybridSetup out;
  out.budget = budget;
  out.split = runs_sparse(m, o);
  // -ngl places whole layers, as llama.cpp does; the planner places experts one by one.
  out.experts = hp.is_moe() && o.n_gpu_layers < 0;
  if (o.expert_cache < 0) return err("--expert-cache must be >= 0 (got %d)", o.expert_cache);
  if (o.expert_cache > 0 && !hp.is_moe())
    return err("--expert-cache: %s is not a mixture of experts", path.c_str());
  if (o.expert_cache > 0 && !out.experts)
    return err("--expert-cache: -ngl places whole layers; the cache comes with experts placed by --vram-budget");
  auto kept = ffn_on_cpu_layers(m, o, out.split);
  if (!kept.ok()) return kept.error();
  out.ffn_on_cpu = std::move(*kept);
  const uint64_t margin = dev.runtime_margin();
  if (budget < margin) {
    return err("--vram-budget: %s is less than the %s device %s keeps for its runtime",
               mib_text(budget).c_str(), mib_text(margin).c_str(), dev.name().c_str());
  }

  // Statistics (PowerInfer files run sparse).
  std::optional<sparse::ActivationStats> stats;
  if (out.split || out.experts) {
    out.stats_path = find_stats(path, o.stats_path);
    if (!out.stats_path.empty()) {
      auto s = sparse::read_activation_stats(out.stats_path);
      if (!s.ok()) return s.error();
      stats = std::move(*s);
    }
  }

  // The problem at the device's true costs.
  const DeviceCan can = device_can(m, dev, out.split);
  sparse::PlacementRequest req;
  req.budget = budget - margin;
  req.n_ctx = o.n_ctx;
  req.n_window = kv_cells(hp, o).window;
  req.kv_type_k = o.kv_types.k;
  req.kv_type_v = o.kv_types.v;
  req.n_batch = o.n_batch;
  req.n_outputs = logit_rows(o);
  req.granularity = out.experts ? 1 : o.granularity;
  req.split = out.split;
  req.experts = out.experts;
  req.ffn_on_cpu = out.ffn_on_cpu;
  req.allow_neurons = !o.disable_gpu_index && can.neurons;
  req.allow_missing_stats = true;
  req.footprint = [&dev](uint64_t n) { return dev.alloc_footprint(n); };
  req.neuron_extra_bytes = sparse::HybridFfn::kNeuronIdBytes;
  sparse::ScratchBytes s = lane_scratch(hp, o, dev);
  uint64_t cache_bytes = 0;  // --expert-cache's slots
  if (out.split) {
    const sparse::ScratchBytes f = sparse::HybridFfn::scratch(m, dev, o.n_batch);
    s.dense += f.dense;
    // The hot rows of a layer are one allocation: its footprint rounding and the alignment of
    // the ids after them are not linear in the neurons; this bounds them.
    s.neurons = f.neurons + static_cast<uint64_t>(hp.n_layer) * (dev.alloc_footprint(1) - 1 + 63);
  } else if (out.experts) {
    // The device's MoE step whenever anything is placed (a device layer routes there, a device
    // expert computes there), the inputs of CPU layers with device experts, and the rounding of
    // each layer's expert stacks.
    s.common += footprints(dev, model::ffn_device_allocations(hp, o.n_batch));
    s.neurons += dev.alloc_footprint(static_cast<uint64_t>(o.n_batch * hp.n_embd) * sizeof(float)) +
                 static_cast<uint64_t>(hp.n_layer) * 3 * (dev.alloc_footprint(1) - 1);
    // gpt-oss's expert biases go whole with a layer's first device expert: reserved for every
    // layer (1.1 MiB a layer for gpt-oss-20b).
    for (const model::LayerWeights& L : m.weights().layers)
      model::each_expert_bias(L.ffn, [&](const model::Vector& b) { s.neurons += dev.alloc_footprint(b.nbytes()); });
    // The cache's slots come out of the budget first.
    for (int64_t il = 0; il < hp.n_layer; ++il)
      if (!sparse::ffn_kept_on_cpu(out.ffn_on_cpu, il))
        cache_bytes += static_cast<uint64_t>(std::min<int64_t>(o.expert_cache, hp.n_expert)) *
                       sparse::expert_bytes(m.weights().layers[sz(il)], hp.n_expert);
    s.common += cache_bytes;
  } else {
    s.dense += footprints(dev, model::ffn_device_allocations(hp, o.n_batch));
  }
  req.scratch = s;
  auto problem = sparse::placement_problem(m, stats ? &*stats : nullptr, req);
  if (!problem.ok()) return problem.error();
  problem->allow_dense = can.dense;
  problem->allow_head = can.head;

  // The plan: -ngl for whole layers, else the index or the solver.
  if (o.n_gpu_layers >= 0 && out.split) {
    log_warn("%s: -ngl places whole layers of dense files; a PowerInfer file run sparse is "
             "placed by --vram-budget (-ngl ignored)", path.c_str());
  }
  if (o.n_gpu_layers >= 0 && !out.split) {
    const int64_t n = std::min<int64_t>(o.n_gpu_layers, hp.n_layer);
    const bool head = o.n_gpu_layers > hp.n_layer;
    if ((n > 0 && !can.dense) || (head && !can.head))
      return err("-ngl %d: device %s cannot run this file's weight types", o.n_gpu_layers,
                 dev.name().c_str());
    auto plan = sparse::evaluate_placement(*problem, n, head,
                                           std::vector<std::vector<int32_t>>(sz(hp.n_layer)));
    if (!plan.ok()) {
      return err("%s: -ngl %d does not fit the device budget (%s): %s", path.c_str(),
                 o.n_gpu_layers, mib_text(budget).c_str(), plan.error().message.c_str());
    }
    out.plan = std::move(*plan);
    out.origin = "-ngl " + std::to_string(o.n_gpu_layers);
  } else {
    sparse::IndexKey key = sparse::index_key(m.file(), stats ? &*stats : nullptr, req);
    key.reserved = cache_bytes;
    sparse::IndexOptions io;
    io.reset = o.reset_gpu_index;
    io.disable = o.disable_gpu_index;
    io.write_errors_fatal = false;
    const std::string index =
        o.gpu_index_path.empty() ? sparse::gpu_index_path(path) : o.gpu_index_path;
    auto ip = sparse::plan_with_index(index, *problem, key, io);
    if (!ip.ok()) return ip.error();
    out.plan = std::move(ip->plan);
    out.origin = ip->loaded ? "loaded from " + index : "solved (" + ip->reason + ")";
  }

  // What each layer reads per token, by side.
  for (size_t l = 0; l < problem->layers.size(); ++l) {
    // (a window layer reads at most its window's cells; its store counts in dense_read_bytes)
    const uint64_t kv_all = sparse::kv_layer_bytes(hp, kv_cells(hp, o).of(hp, static_cast<int64_t>(l)),
                                                   o.kv_types.k, o.kv_types.v);
    const sparse::LayerCost& c = problem->layers[l];
    const sparse::LayerPlan& L = out.plan.layers[l];
    HybridSetup::LayerBytes b;
    b.dense = static_cast<double>(c.dense_read_bytes - kv_all);
    b.kv_per_cell = static_cast<double>(kv_all) / static_cast<double>(o.n_ctx);
    b.hot = L.mass_device * static_cast<double>(c.neuron_bytes);
    // Plus what a layer keeps on the CPU whatever the plan (--cpu-moe: its router and experts).
    b.cold = (L.mass_total - L.mass_device) * static_cast<double>(c.neuron_bytes) +
             static_cast<double>(c.cpu_read_bytes);
    out.layer_bytes.push_back(b);
  }
  out.head_bytes = static_cast<double>(problem->head_bytes);

  // The cache's first occupants: each layer's most chosen experts after the static ones (the
  // lowest ids without statistics).
  if (o.expert_cache > 0) {
    if (!out.uses_device())
      return err("--expert-cache %d: the budget (%s) does not hold %d experts per layer beside what must go first",
                 o.expert_cache, mib_text(budget).c_str(), o.expert_cache);
    out.cache_experts.resize(sz(hp.n_layer));
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      if (sparse::ffn_kept_on_cpu(out.ffn_on_cpu, il)) continue;
      const std::vector<int32_t>& hot = out.plan.layers[sz(il)].device_neurons;
      std::vector<int32_t> rest;
      for (int32_t e = 0; e < hp.n_expert; ++e)
        if (std::find(hot.begin(), hot.end(), e) == hot.end()) rest.push_back(e);
      const std::vector<float>& freq = problem->layers[sz(il)].freq;
      std::stable_sort(rest.begin(), rest.end(), [&](int32_t a, int32_t b) { return freq[sz(a)] > freq[sz(b)]; });
      rest.resize(std::min<size_t>(rest.size(), static_cast<size_t>(o.expert_cache)));
      out.cache_experts[sz(il)] = std::move(rest);
    }
    // Every expert static: no cache.
    if (std::all_of(out.cache_experts.begin(), out.cache_experts.end(), [](const auto& c) { return c.empty(); }))
      out.cache_experts.clear();
  }

  // Lanes and the neuron split.
  out.lanes.embed = kHostLane;
  out.lanes.layers.resize(sz(hp.n_layer));
  out.layout.attn_on_device.resize(sz(hp.n_layer));
  out.layout.hot.resize(sz(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const sparse::LayerPlan& L = out.plan.layers[sz(il)];
    out.lanes.layers[sz(il)] = L.dense_on_device ? kDeviceLane : kHostLane;
    out.layout.attn_on_device[sz(il)] = L.dense_on_device;
    out.layout.hot[sz(il)] = L.device_neurons;
  }
  out.lanes.head = out.plan.head_on_device ? kDeviceLane : kHostLane;

  // The ledger: every allocation the context will make on the device.
  out.ledger = Ledger(dev, budget);
  if (!out.uses_device()) return out;
  const unsigned roles = device_lane_roles(out.lanes);
  if (roles != 0) {
    out.ledger.add_all("step buffers", model::StepBuffers::allocations(hp, o.n_batch,
                                                                       logit_rows(o), roles));
  }
  const model::ModelWeights& w = m.weights();
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    if (!out.plan.layers[sz(il)].dense_on_device) continue;
    const model::LayerWeights& L = w.layers[sz(il)];
    model::each_dense_view(
        L, out.ffn_on_device(il), [&](const model::Matrix& t) { out.ledger.add(line_of(t, L), t.nbytes()); },
        [&](const model::Vector& v) { out.ledger.add("norms and biases", v.nbytes()); });
    if (out.router_on_device(il)) {
      out.ledger.add("routers", L.ffn.gate_inp.nbytes());
      if (L.ffn.gate_inp_b.present()) out.ledger.add("routers", L.ffn.gate_inp_b.nbytes());
    }
    out.ledger.add("KV cache", KvCache::storage_bytes(hp, kv_cells(hp, o), o.kv_types, il, 1));
  }
  if (out.plan.head_on_device) {
    model::each_head_view(
        w, [&](const model::Matrix& t) { out.ledger.add("output head", t.nbytes()); },
        [&](const model::Vector& v) { out.ledger.add("output head", v.nbytes()); });
  }
  if (out.experts) {
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      const auto n_dev = static_cast<uint64_t>(out.layout.hot[sz(il)].size() +
                                               (out.cache_experts.empty() ? 0 : out.cache_experts[sz(il)].size()));
      if (n_dev == 0) continue;
      const model::FfnWeights& f = w.layers[sz(il)].ffn;
      model::each_expert_stack(f, [&](const model::Matrix& t) {
        out.ledger.add("experts", t.nbytes() / static_cast<uint64_t>(hp.n_expert) * n_dev);
      });
      // Their biases whole, one allocation each (context_hybrid.cpp places them so).
      if (!out.ffn_on_device(il))
        model::each_expert_bias(f, [&](const model::Vector& b) { out.ledger.add("experts", b.nbytes()); });
    }
    out.ledger.add_all("FFN scratch", model::ffn_device_allocations(hp, o.n_batch));
    out.ledger.add_all("MoE FFN inputs", model::HybridMoeFfn::device_allocations(hp, moe_split(out), o.n_batch));
  } else if (out.split) {
    auto allocs = sparse::HybridFfn::device_allocations(m, dev, out.layout, o.n_batch);
    if (!allocs.ok()) return allocs.error();
    for (const sparse::DeviceAlloc& a : *allocs) out.ledger.add(a.what, a.bytes);
  } else {
    bool ffn = false;
    for (int64_t il = 0; il < hp.n_layer; ++il) ffn = ffn || out.ffn_on_device(il);
    if (ffn) out.ledger.add_all("FFN scratch", model::ffn_device_allocations(hp, o.n_batch));
  }
  PI_TRY(out.ledger.check(path + ": the placement"));
  return out;
}

}  // namespace pi::runtime
