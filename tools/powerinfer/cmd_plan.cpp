// `powerinfer plan -m MODEL --vram-budget GiB [--stats FILE] [-c N] [--json]`: what the
// placement planner puts on the device for this budget, context and batch. The work is the
// library's (include/powerinfer/plan.h says how); this file holds the flags, the table or
// JSON on stdout, and --plot PNG, which draws the --sweep with tools/plot/plot_placement.py
// (a development tool needing matplotlib).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cli_checks.h"
#include "commands.h"
#include "core/log.h"
#include "core/os.h"
#include "powerinfer/plan.h"

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

void print_text(const PlanOptions& o, const PlanReport& r) {
  const int64_t units = r.n_units;
  std::printf("model: %s (%s, %s, %lld layers, %s %lld)\n", o.model.c_str(), r.arch.c_str(),
              r.experts       ? "mixture of experts: the most chosen experts on the device"
              : r.powerinfer ? "PowerInfer: hot neurons on the device"
                             : "GGUF: whole layers",
              static_cast<long long>(r.n_layer), r.experts ? "experts" : "n_ff", static_cast<long long>(units));
  std::printf("request: budget %.3f GiB (%llu bytes), n_ctx %lld (KV %s/%s), n_batch %lld, granularity %lld\n",
              static_cast<double>(r.budget) / 1073741824.0, static_cast<unsigned long long>(r.budget),
              static_cast<long long>(r.n_ctx), r.kv_type_k.c_str(), r.kv_type_v.c_str(),
              static_cast<long long>(r.n_batch), static_cast<long long>(r.granularity));
  if (r.loaded) std::printf("plan: loaded from %s\n", r.index_path.c_str());
  else std::printf("plan: solved (%s)%s\n", r.reason.c_str(), r.exact ? "" : ", greedy (3+ row sizes)");
  std::printf("%5s %6s %15s %8s %12s %14s\n", "layer", "attn", r.experts ? "experts" : "hot neurons", "mass",
              "device MiB", "CPU MiB/token");
  for (size_t l = 0; l < r.layers.size(); ++l) {
    const PlanLayer& L = r.layers[l];
    char hot[32];
    std::snprintf(hot, sizeof hot, "%lld/%lld", static_cast<long long>(L.device_units), static_cast<long long>(units));
    std::printf("%5zu %6s %15s %7.1f%% %12.2f %14.3f\n", l, L.attn_on_device ? "device" : "cpu",
                L.split ? hot : "-", 100.0 * L.mass_covered, mib(static_cast<double>(L.device_bytes)),
                mib(L.cpu_bytes_per_token));
  }
  std::printf("head: %s; scratch %.2f MiB\n", r.head_on_device ? "device" : "cpu",
              mib(static_cast<double>(r.scratch_bytes)));
  std::printf("total: device %.2f MiB of %.2f MiB (%.2f MiB unused); %lld %s; %s covered %.2f%%; "
              "CPU reads %.2f MiB/token of %.2f MiB all-CPU (%.1f%%)\n",
              mib(static_cast<double>(r.device_bytes)), mib(static_cast<double>(r.budget)),
              mib(static_cast<double>(r.budget - r.device_bytes)), static_cast<long long>(r.device_units),
              r.experts ? "experts" : "hot neurons", r.experts ? "routed tokens" : "activation mass",
              100.0 * r.mass_covered, mib(r.cpu_bytes_per_token), mib(r.cpu_bytes_all_cpu),
              r.cpu_bytes_all_cpu > 0 ? 100.0 * r.cpu_bytes_per_token / r.cpu_bytes_all_cpu : 0.0);
}

nlohmann::json plan_json(const PlanReport& r) {
  nlohmann::json j;
  j["budget_bytes"] = r.budget;
  j["granularity"] = r.granularity;
  j["exact"] = r.exact;
  j["n_dense_layers"] = r.n_dense_layers;
  j["head_on_device"] = r.head_on_device;
  j["scratch_bytes"] = r.scratch_bytes;
  j["device_bytes"] = r.device_bytes;
  j["hot_neurons"] = r.device_units;
  j["mass_covered"] = r.mass_covered;
  j["cpu_bytes_per_token"] = r.cpu_bytes_per_token;
  j["cpu_bytes_all_cpu"] = r.cpu_bytes_all_cpu;
  nlohmann::json layers = nlohmann::json::array();
  for (size_t l = 0; l < r.layers.size(); ++l) {
    const PlanLayer& L = r.layers[l];
    layers.push_back({{"layer", l},
                      {"attn_on_device", L.attn_on_device},
                      {"hot_neurons", L.device_units},
                      {"n_ff", r.n_units},
                      {"mass_covered", L.mass_covered},
                      {"device_bytes", L.device_bytes},
                      {"cpu_bytes_per_token", L.cpu_bytes_per_token}});
  }
  j["layers"] = layers;
  return j;
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
  const int rc = os::system_exit_code(status);
  if (rc != 0) {
    return err("--plot: `%s` failed (exit %d; the script needs python3 with matplotlib); the data "
               "is in %s", cmd.c_str(), rc, json_path.c_str());
  }
  return Status::Ok();
}

int run_plan(const PlanOptions& o) {
  PlanParams p;
  p.model = o.model;
  p.vram_budget_gib = o.budget_gib;
  p.stats = o.stats;
  p.n_ctx = o.n_ctx;
  p.n_batch = o.n_batch;
  p.granularity = o.granularity;
  p.cache_type_k = o.cache_type_k;
  p.cache_type_v = o.cache_type_v;
  p.index = o.index;
  p.reset_index = o.reset_index;
  p.disable_index = o.disable_index;
  p.write_index = !o.no_write;
  p.cpu_moe = o.cpu_moe;
  p.n_cpu_moe = o.n_cpu_moe;
  p.override_tensor = o.override_tensor;
  // --plot draws a sweep of 41 budgets unless --sweep says how many; the table shows none. An
  // out-of-range --sweep goes to the library, which refuses it.
  p.sweep = o.sweep > 0 ? o.sweep : (o.plot.empty() ? 0 : 41);
  if (o.sweep < 0 || o.sweep > 10000) p.sweep = o.sweep;
  else if (!o.json && o.plot.empty()) p.sweep = 0;
  auto r = plan_placement(p);
  if (!r.ok()) return fail(r.error());
  if (!r->loaded && o.json) log_info("plan: solved: %s", r->reason.c_str());

  if (!o.json) print_text(o, *r);
  if (!o.json && o.plot.empty()) return 0;
  nlohmann::json j = plan_json(*r);
  j["unit"] = r->experts ? "expert" : "neuron";
  j["model"] = o.model;
  j["powerinfer"] = r->powerinfer;
  j["n_ctx"] = r->n_ctx;
  j["n_batch"] = r->n_batch;
  j["index"] = {{"path", r->index_path}, {"loaded", r->loaded}, {"reason", r->reason}};
  if (!r->sweep.empty()) {
    nlohmann::json points = nlohmann::json::array();
    for (const PlanPoint& q : r->sweep)
      points.push_back({{"budget_bytes", q.budget_bytes},
                        {"device_bytes", q.device_bytes},
                        {"mass_covered", q.mass_covered},
                        {"n_dense_layers", q.n_dense_layers},
                        {"cpu_bytes_per_token", q.cpu_bytes_per_token}});
    j["sweep"] = points;
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
