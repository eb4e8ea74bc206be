// `powerinfer plan -m MODEL --vram-budget GiB [--stats FILE] [-c N] [--json]`: what the
// placement planner (src/sparse/placement.h) puts on the device for this budget, context and
// batch: per layer where attention lives, the hot neurons, the activation mass they cover and
// the bytes; totals. The plan comes from the GPU index beside the model when that index was
// solved for exactly this request (model, statistics, budget, granularity, context, batch),
// else it is solved and the index written (--no-write-index: not written). --sweep N adds
// the activation mass covered at N budgets from 0 to everything; --plot PNG draws it with
// tools/plot/plot_placement.py (a development tool needing matplotlib).
//
// A PowerInfer file needs activation statistics (`powerinfer profile`, `synth
// --activation-dir`, tools/convert/convert_activations.py): without --stats the command fails
// and says how to make them. A GGUF file is placed in whole layers (llama.cpp -ngl).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sys/wait.h>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cli_checks.h"
#include "commands.h"
#include "core/log.h"
#include "model/model.h"
#include "runtime/context.h"
#include "runtime/hybrid_plan.h"
#include "runtime/kv_cache.h"
#include "sparse/activation_stats.h"
#include "sparse/gpu_index.h"
#include "sparse/placement.h"
#include "sparse/placement_model.h"

namespace pi::cli {
namespace {

struct PlanOptions {
  std::string model;
  double budget_gib = -1;
  std::string stats;
  int64_t n_ctx = 0;
  int64_t n_batch = 512;
  int64_t granularity = 32;
  std::string cache_type_k = "f16";  // -ctk/-ctv: the KV bytes counted on the device
  std::string cache_type_v = "f16";
  std::string index;  // empty: <model>.generated.gpuidx
  bool json = false;
  bool reset_index = false;
  bool disable_index = false;
  bool no_write = false;
  int sweep = 0;
  std::string plot;
  bool cpu_moe = false;  // --cpu-moe, --n-cpu-moe N, -ot REGEX=CPU: FFNs kept on the CPU
  int64_t n_cpu_moe = 0;
  std::vector<std::string> override_tensor;
};

double mib(double bytes) { return bytes / 1048576.0; }

void print_text(const PlanOptions& o, const model::Model& m, const sparse::IndexedPlan& ip,
                const sparse::PlacementRequest& req, const std::string& index_path) {
  const sparse::PlacementPlan& p = ip.plan;
  const model::HParams& hp = m.hparams();
  const bool experts = hp.is_moe();
  const int64_t units = experts ? hp.n_expert : hp.n_ff;
  std::printf("model: %s (%s, %s, %lld layers, %s %lld)\n", o.model.c_str(), hp.arch_name.c_str(),
              experts          ? "mixture of experts: the most chosen experts on the device"
              : hp.powerinfer ? "PowerInfer: hot neurons on the device"
                              : "GGUF: whole layers",
              static_cast<long long>(hp.n_layer), experts ? "experts" : "n_ff", static_cast<long long>(units));
  std::printf("request: budget %.3f GiB (%llu bytes), n_ctx %lld (KV %s/%s), n_batch %lld, granularity %lld\n",
              static_cast<double>(p.budget) / 1073741824.0, static_cast<unsigned long long>(p.budget),
              static_cast<long long>(req.n_ctx), std::string(dtype_name(req.kv_type_k)).c_str(),
              std::string(dtype_name(req.kv_type_v)).c_str(), static_cast<long long>(req.n_batch),
              static_cast<long long>(p.granularity));
  if (ip.loaded) std::printf("plan: loaded from %s\n", index_path.c_str());
  else std::printf("plan: solved (%s)%s\n", ip.reason.c_str(), p.exact ? "" : ", greedy (3+ row sizes)");
  std::printf("%5s %6s %15s %8s %12s %14s\n", "layer", "attn", experts ? "experts" : "hot neurons", "mass",
              "device MiB", "CPU MiB/token");
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const sparse::LayerPlan& L = p.layers[l];
    char hot[32];
    std::snprintf(hot, sizeof hot, "%zu/%lld", L.device_neurons.size(), static_cast<long long>(units));
    const bool split = hp.powerinfer || (experts && !sparse::ffn_kept_on_cpu(req.ffn_on_cpu, static_cast<int64_t>(l)));
    std::printf("%5zu %6s %15s %7.1f%% %12.2f %14.3f\n", l, L.dense_on_device ? "device" : "cpu",
                split ? hot : "-", L.mass_total > 0 ? 100.0 * L.mass_device / L.mass_total : 0.0,
                mib(static_cast<double>(L.device_bytes)), mib(L.cpu_bytes_per_token));
  }
  std::printf("head: %s; scratch %.2f MiB\n", p.head_on_device ? "device" : "cpu",
              mib(static_cast<double>(p.scratch_bytes)));
  std::printf("total: device %.2f MiB of %.2f MiB (%.2f MiB unused); %lld %s; %s covered %.2f%%; "
              "CPU reads %.2f MiB/token of %.2f MiB all-CPU (%.1f%%)\n",
              mib(static_cast<double>(p.device_bytes)), mib(static_cast<double>(p.budget)),
              mib(static_cast<double>(p.budget - p.device_bytes)),
              static_cast<long long>(p.n_device_neurons()), experts ? "experts" : "hot neurons",
              experts ? "routed tokens" : "activation mass", 100.0 * p.mass_covered(),
              mib(p.cpu_bytes_per_token), mib(p.cpu_bytes_all_cpu),
              p.cpu_bytes_all_cpu > 0 ? 100.0 * p.cpu_bytes_per_token / p.cpu_bytes_all_cpu : 0.0);
}

nlohmann::json plan_json(const sparse::PlacementPlan& p, int64_t n_ff) {
  nlohmann::json j;
  j["budget_bytes"] = p.budget;
  j["granularity"] = p.granularity;
  j["exact"] = p.exact;
  j["n_dense_layers"] = p.n_dense_layers;
  j["head_on_device"] = p.head_on_device;
  j["scratch_bytes"] = p.scratch_bytes;
  j["device_bytes"] = p.device_bytes;
  j["hot_neurons"] = p.n_device_neurons();
  j["mass_covered"] = p.mass_covered();
  j["cpu_bytes_per_token"] = p.cpu_bytes_per_token;
  j["cpu_bytes_all_cpu"] = p.cpu_bytes_all_cpu;
  nlohmann::json layers = nlohmann::json::array();
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const sparse::LayerPlan& L = p.layers[l];
    layers.push_back({{"layer", l},
                      {"attn_on_device", L.dense_on_device},
                      {"hot_neurons", L.device_neurons.size()},
                      {"n_ff", n_ff},
                      {"mass_covered", L.mass_total > 0 ? L.mass_device / L.mass_total : 0.0},
                      {"device_bytes", L.device_bytes},
                      {"cpu_bytes_per_token", L.cpu_bytes_per_token}});
  }
  j["layers"] = layers;
  return j;
}

// Mass covered and CPU bytes at `n` budgets from 0 to everything the model could place.
Result<nlohmann::json> sweep(sparse::PlacementProblem p, int n) {
  uint64_t all = p.head_bytes + p.scratch_bytes;
  for (const sparse::LayerCost& L : p.layers) {
    all += L.dense_bytes + L.neuron_bytes * ((L.freq.size() + static_cast<size_t>(p.granularity) - 1) /
                                             static_cast<size_t>(p.granularity) *
                                             static_cast<size_t>(p.granularity));
  }
  nlohmann::json points = nlohmann::json::array();
  for (int i = 0; i < n; ++i) {
    p.budget = n == 1 ? all : all / static_cast<uint64_t>(n - 1) * static_cast<uint64_t>(i);
    if (i == n - 1) p.budget = all;
    auto plan = sparse::solve_placement(p);
    if (!plan.ok()) return plan.error();
    points.push_back({{"budget_bytes", p.budget},
                      {"device_bytes", plan->device_bytes},
                      {"mass_covered", plan->mass_covered()},
                      {"n_dense_layers", plan->n_dense_layers},
                      {"cpu_bytes_per_token", plan->cpu_bytes_per_token}});
  }
  return points;
}

// Writes `j` to PNG.json and runs tools/plot/plot_placement.py on it ($PI_PYTHON, else python3;
// the script needs matplotlib).
Status plot(const nlohmann::json& j, const std::string& png) {
  const std::string json_path = png + ".json";
  for (const std::string& p : {png, std::string(PI_PLOT_SCRIPT)}) {
    if (p.find('\'') != std::string::npos) return err("--plot: path %s contains a quote", p.c_str());
  }
  {
    std::ofstream out(json_path);
    out << j.dump(1) << "\n";
    if (!out) return err("%s: cannot write", json_path.c_str());
  }
  const char* py = std::getenv("PI_PYTHON");
  const std::string cmd = std::string(py != nullptr && *py != 0 ? py : "python3") + " '" +
                          PI_PLOT_SCRIPT + "' '" + json_path + "' -o '" + png + "'";
  const int status = std::system(cmd.c_str());
  const int rc = status == -1 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (rc != 0) {
    return err("--plot: `%s` failed (exit %d; the script needs python3 with matplotlib); the data "
               "is in %s", cmd.c_str(), rc, json_path.c_str());
  }
  return Status::Ok();
}

int run_plan(const PlanOptions& o) {
  auto budget = sparse::budget_from_gib(o.budget_gib);
  if (!budget.ok()) return fail(budget.error());
  if (o.n_ctx < 0) return fail(err("-c must be >= 0 (got %lld)", static_cast<long long>(o.n_ctx)));
  if (o.n_batch < 1) return fail(err("-b must be >= 1 (got %lld)", static_cast<long long>(o.n_batch)));
  if (o.sweep < 0 || o.sweep > 10000) return fail(err("--sweep must be 0..10000 (got %d)", o.sweep));
  runtime::KvTypes kv;
  for (auto [flag, name, type] : {std::tuple{"-ctk", &o.cache_type_k, &kv.k}, std::tuple{"-ctv", &o.cache_type_v, &kv.v}}) {
    if (*name == "f16") *type = DType::F16;
    else if (*name == "q8_0") *type = DType::Q8_0;
    else if (*name == "q4_0") *type = DType::Q4_0;
    else return fail(err("%s %s: unknown KV cache type (supported: f16, q8_0, q4_0)", flag, name->c_str()));
  }
  auto model = model::Model::load(o.model);
  if (!model.ok()) return fail(model.error());
  const model::Model& m = **model;
  if (o.n_cpu_moe < 0) return fail(err("--n-cpu-moe must be >= 0 (got %lld)", static_cast<long long>(o.n_cpu_moe)));
  if (Status s = runtime::check_kv_types(m.hparams(), kv); !s.ok()) return fail(s.error());
  std::optional<sparse::ActivationStats> stats;
  // As run does: --stats, else MODEL.activations.gguf, else the original's activation/ folder.
  const std::string stats_path = runtime::find_stats(o.model, o.stats);
  if (!stats_path.empty()) {
    if (o.stats.empty()) log_info("plan: statistics %s", stats_path.c_str());
    auto s = sparse::read_activation_stats(stats_path);
    if (!s.ok()) return fail(s.error());
    if (m.hparams().is_moe()) {
      // placement_problem checks that the routing statistics fit.
    } else if (m.hparams().powerinfer) {
      if (Status st = sparse::check_stats_fit(*s, m.hparams().n_layer, m.hparams().n_ff,
                                              sparse::model_fingerprint(m.file()), stats_path);
          !st.ok())
        return fail(st.error());
    } else if (!o.stats.empty()) {
      log_warn("%s is a GGUF file: placed in whole layers, --stats is not used", o.model.c_str());
    }
    stats = std::move(*s);
  }
  sparse::PlacementRequest req;
  req.budget = *budget;
  req.n_ctx = runtime::resolve_n_ctx(m.hparams(), o.n_ctx);
  req.n_batch = std::min(o.n_batch, req.n_ctx);
  req.kv_type_k = kv.k;
  req.kv_type_v = kv.v;
  req.experts = m.hparams().is_moe();
  req.granularity = req.experts ? 1 : o.granularity;  // the units are whole experts
  req.allow_neurons = !o.disable_index;
  {
    runtime::ContextOptions co;
    co.n_cpu_moe = o.cpu_moe ? INT32_MAX : static_cast<int>(std::min<int64_t>(o.n_cpu_moe, INT32_MAX));
    co.tensor_overrides = o.override_tensor;
    auto kept = runtime::ffn_on_cpu_layers(m, co, m.hparams().powerinfer);
    if (!kept.ok()) return fail(kept.error());
    req.ffn_on_cpu = std::move(*kept);
  }
  auto problem = sparse::placement_problem(m, stats ? &*stats : nullptr, req);
  if (!problem.ok()) return fail(problem.error());

  const sparse::IndexKey key = sparse::index_key(m.file(), stats ? &*stats : nullptr, req);
  sparse::IndexOptions io;
  io.reset = o.reset_index;
  io.disable = o.disable_index;
  io.write = !o.no_write;
  const std::string index_path = o.index.empty() ? sparse::gpu_index_path(o.model) : o.index;
  auto ip = sparse::plan_with_index(index_path, *problem, key, io);
  if (!ip.ok()) return fail(ip.error());
  if (!ip->loaded && o.json) log_info("plan: solved: %s", ip->reason.c_str());

  if (!o.json) print_text(o, m, *ip, req, index_path);
  if (!o.json && o.plot.empty()) return 0;
  nlohmann::json j = plan_json(ip->plan, req.experts ? m.hparams().n_expert : m.hparams().n_ff);
  j["unit"] = req.experts ? "expert" : "neuron";
  j["model"] = o.model;
  j["powerinfer"] = m.hparams().powerinfer;
  j["n_ctx"] = req.n_ctx;
  j["n_batch"] = req.n_batch;
  j["index"] = {{"path", index_path}, {"loaded", ip->loaded}, {"reason", ip->reason}};
  const int n_sweep = o.sweep > 0 ? o.sweep : (o.plot.empty() ? 0 : 41);
  if (n_sweep > 0) {
    sparse::PlacementProblem p = *problem;
    if (o.disable_index) p.allow_neurons = false;
    auto pts = sweep(std::move(p), n_sweep);
    if (!pts.ok()) return fail(pts.error());
    j["sweep"] = *pts;
  }
  if (o.json) std::printf("%s\n", j.dump(2).c_str());
  if (!o.plot.empty()) {
    if (Status s = plot(j, o.plot); !s.ok()) return fail(s.error());
  }
  return 0;
}

}  // namespace

Runner add_plan(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* sub = app.add_subcommand(
      "plan", "Show what goes on the device under a VRAM budget (hot neurons or experts, attention, head)");
  sub->add_option("-m,--model", o->model, "Model file (GGUF or PowerInfer)")->required();
  sub->add_option("--vram-budget", o->budget_gib, "Device memory to use, GiB")->required();
  sub->add_option("--stats", o->stats,
                  "Activation statistics (powerinfer profile, synth --activation-dir, "
                  "convert_activations.py); required for PowerInfer files; a mixture of experts' routing "
                  "counts place its most chosen experts");
  sub->add_option("-c,--ctx-size", o->n_ctx, "Context the KV cache is sized for (0: the model's, at most 4096)");
  sub->add_option("-b,--batch-size", o->n_batch, "Tokens per step: sizes the scratch");
  sub->add_option("--cache-type-k", o->cache_type_k,
                  "KV cache type of keys (-ctk) the plan counts on the device: f16, q8_0 or q4_0, as run's")
      ->capture_default_str();
  sub->add_option("--cache-type-v", o->cache_type_v, "KV cache type of values (-ctv): f16, q8_0 or q4_0")
      ->capture_default_str();
  sub->add_option("--granularity", o->granularity, "Device neuron rows are allocated in multiples of this");
  sub->add_option("--gpu-index", o->index, "Index file (default: MODEL.generated.gpuidx)");
  sub->add_flag("--reset-gpu-index", o->reset_index, "Solve again even if the index matches");
  sub->add_flag("--disable-gpu-index", o->disable_index, "No FFN split: every neuron on the CPU; no index");
  sub->add_flag("--no-write-index", o->no_write, "Do not write the index after solving");
  sub->add_flag("--json", o->json, "JSON output");
  sub->add_flag("--cpu-moe", o->cpu_moe, "Mixtures of experts: every layer's router and experts stay on the CPU");
  sub->add_option("--n-cpu-moe", o->n_cpu_moe, "Mixtures of experts: the first N layers' routers and experts stay on the CPU");
  sub->add_option("--override-tensor", o->override_tensor,
                  "llama.cpp's -ot REGEX=CPU: layers whose FFN matrices match keep their FFN on the CPU");
  sub->add_option("--sweep", o->sweep, "With --json: mass covered at N budgets from 0 to all");
  sub->add_option("--plot", o->plot,
                  "Draw mass covered and CPU bytes against the budget to this PNG (python3 + matplotlib)");
  return [o] { return run_plan(*o); };
}

}  // namespace pi::cli
