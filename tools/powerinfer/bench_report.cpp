#include "bench_report.h"

#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/bandwidth_probe.h"
#include "core/compute_probe.h"

namespace pi::cli {
namespace {

using Json = nlohmann::ordered_json;

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  va_list ap, again;
  va_start(ap, f);
  va_copy(again, ap);
  const int n = std::vsnprintf(nullptr, 0, f, ap);
  va_end(ap);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, f, again);
  va_end(again);
  return out;
}

constexpr double kMiB = 1048576.0, kGiB = 1073741824.0;

std::string basename(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

std::string format_label(const ModelSummary& m) {
  if (!m.powerinfer) return "GGUF";
  return m.has_predictors ? "PWRI" : "PWRI (no predictors)";
}

std::string size_text(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  return b >= kGiB ? fmt("%.2f GiB", b / kGiB) : fmt("%.2f MiB", b / kMiB);
}

std::string params_text(int64_t n) {
  if (n >= 1000000000) return fmt("%.2f B", static_cast<double>(n) / 1e9);
  if (n >= 1000000) return fmt("%.2f M", static_cast<double>(n) / 1e6);
  return fmt("%.1f K", static_cast<double>(n) / 1e3);
}

std::string load_text(const LoadAverage& l) {
  return l.m1 < 0 ? "unknown" : fmt("%.2f / %.2f / %.2f", l.m1, l.m5, l.m15);
}

Json load_json(const LoadAverage& l) {
  if (l.m1 < 0) return nullptr;
  return Json::array({l.m1, l.m5, l.m15});
}

// --moe-ram rows: how the expert cache did and the disk's bound.
std::string expert_reads_markdown(const BenchReport& r) {
  std::string s;
  for (const BenchRow& row : r.rows) {
    if (!row.expert_reads.on) continue;
    if (s.empty()) {
      s = "\n| model | threads | test | t/s | cached | read ahead | read waiting | next-layer guesses right | "
          "MiB read/token | disk-bound t/s | of disk bound | peak RSS |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    }
    const ExpertReads& e = row.expert_reads;
    const double asked = static_cast<double>(e.hits + e.read_ahead_used + e.misses);
    const auto pct = [&](uint64_t n) { return asked > 0 ? fmt("%.1f%%", 100.0 * static_cast<double>(n) / asked) : std::string("-"); };
    const std::string guess = e.guessed > 0 ? fmt("%.1f%%", 100.0 * static_cast<double>(e.guessed_right) / static_cast<double>(e.guessed)) : "-";
    s += fmt("| %s | %d | %s | %.2f | %s | %s | %s | %s | %.1f | %s | %s | %s |\n", basename(r.models[row.model].path).c_str(),
             row.threads, row.test.c_str(), row.ts_median, pct(e.hits).c_str(), pct(e.read_ahead_used).c_str(),
             pct(e.misses).c_str(), guess.c_str(), row.expert_bytes_per_token / kMiB,
             row.disk_bound_ts > 0 ? fmt("%.2f", row.disk_bound_ts).c_str() : "-",
             row.disk_bound_ts > 0 ? fmt("%.0f%%", 100 * row.disk_ratio).c_str() : "-", size_text(row.peak_rss).c_str());
  }
  if (!s.empty()) {
    s += "\nExperts read on demand (--moe-ram): of the experts each layer's router chose, those the cache "
         "held (cached), read ahead of the layer (SmallThinker: routed before attention; others: the next "
         "layer's router on this layer's input), or read while the layer waited; MiB read/token: from the "
         "file, in 4 KiB-aligned ranges; disk-bound t/s: the disk probe's rate (as many reads at a time as the "
         "stream's readers) / that.\n";
  }
  return s;
}

Json probe_json(const ProbeStats& p) {
  Json j{{"threads", p.threads},
         {"gbps_median", p.median},
         {"gbps_min", p.min},
         {"gbps_max", p.max},
         {"passes_gbps", p.passes}};
  if (!p.scattered_passes.empty()) {
    j["scattered_gbps_median"] = p.scattered;
    j["scattered_passes_gbps"] = p.scattered_passes;
  }
  return j;
}

Json compute_json(const BenchReport& r) {
  Json table = Json::array();
  for (const ComputeStats& c : r.compute)
    table.push_back(Json{{"threads", c.threads},
                         {"path", c.path},
                         {"instructions", c.instructions},
                         {"gmacs_median", c.median},
                         {"gmacs_min", c.min},
                         {"gmacs_max", c.max},
                         {"passes_gmacs", c.passes}});
  return Json{{"int8_path", r.int8_path.empty() ? Json(nullptr) : Json(r.int8_path)},
              {"pass_seconds", kComputePassSeconds},
              {"skipped", r.compute_skipped},
              {"table", table}};
}

// The compute table (nothing when no path was measured).
std::string compute_markdown(const BenchReport& r) {
  if (r.compute.empty()) return "";
  std::string s =
      "\n| compute path | instructions | threads | GMAC/s (median) | min | max |\n"
      "|---|---|---|---|---|---|\n";
  for (const ComputeStats& c : r.compute)
    s += fmt("| %s | %s | %d | %.1f | %.1f | %.1f |\n", c.path.c_str(), c.instructions.c_str(),
             c.threads, c.median, c.min, c.max);
  std::string skipped;
  for (const std::string& n : r.compute_skipped) skipped += (skipped.empty() ? "" : ", ") + n;
  s += fmt("\nCompute probe: multiply-accumulates per second (1e9; an int8 MAC is one u8 x s8 "
           "product and its add) of one instruction sequence over independent accumulators in "
           "registers, on every thread of the pool, median of %d passes of about %.0f ms "
           "(core/compute_probe.h).%s%s\n",
           r.options.probe_passes, 1000 * kComputePassSeconds,
           skipped.empty() ? "" : " Not available here: ", skipped.empty() ? "" : (skipped + ".").c_str());
  return s;
}

Json nullable(bool present, double v) { return present ? Json(v) : Json(nullptr); }

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) {
    if (c == '"') q += '"';
    q += c;
  }
  return q + "\"";
}

// The activation mass the plan covers; for experts also the share of (token, expert) pairs the
// device computed in the run.
std::string mass_text(const PlacementInfo& p) {
  const int64_t pairs = p.expert_pairs_device + p.expert_pairs_cpu;
  if (!p.experts || pairs == 0) return fmt("%.1f%%", 100 * p.mass_covered);
  return fmt("%.1f%% / %.1f%%", 100 * p.mass_covered,
             100.0 * static_cast<double>(p.expert_pairs_device) / static_cast<double>(pairs));
}

// The rows on a GPU-like device: what the plan put there, the traffic, and the model.
std::string hybrid_markdown(const BenchReport& r) {
  std::string s =
      "\n| model | mode | device | budget GiB | threads | test | t/s | min - max | layers on "
      "device | head | hot neurons (experts) | mass (experts: planned / served) | device MiB | CPU MiB/token | device MiB/token | "
      "to device KiB/token | from device KiB/token | copies/token | model t/s | of model |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const BenchRow& row : r.rows) {
    const HybridRow& h = row.hybrid;
    if (!h.present) continue;
    const PlacementInfo& p = h.placement;
    const std::string model = h.model_ts > 0 ? fmt("%.2f", h.model_ts) : "-";
    const std::string of = h.model_ts > 0 ? fmt("%.0f%%", 100 * h.model_ratio) : "-";
    s += fmt("| %s | %s | %s | %s | %d | %s | %.2f | %.2f - %.2f | %lld/%lld | %s | %lld/%lld | "
             "%s | %.1f | %.2f | %.2f | %.1f | %.1f | %.1f | %s | %s |\n",
             basename(r.models[row.model].path).c_str(), mode_name(row.mode), h.device.c_str(),
             h.has_budget ? fmt("%.3g", static_cast<double>(h.budget) / kGiB).c_str() : "free",
             row.threads, row.test.c_str(), row.ts_median, row.ts_min, row.ts_max,
             static_cast<long long>(p.layers_on_device), static_cast<long long>(p.n_layer),
             p.head_on_device ? "device" : "cpu", static_cast<long long>(p.hot_neurons),
             static_cast<long long>(p.n_neurons), mass_text(p).c_str(),
             static_cast<double>(p.device_bytes) / kMiB, p.cpu_bytes_per_token / kMiB,
             p.device_bytes_per_token / kMiB, h.bytes_to_device / 1024, h.bytes_from_device / 1024,
             h.copies, model.c_str(), of.c_str());
  }
  s += "\nDevice MiB: the ledger (every device allocation and the runtime margin). CPU and device "
       "MiB/token: what the plan expects each side to read per token (weights, and the KV cache "
       "at the full context). To/from device: copies measured over the timed tokens. Model t/s "
       "(generation): the hybrid step's roofline model (tools/powerinfer/bench_hybrid.h): each "
       "layer's bytes at the rate of the side that reads them (CPU: the read probe, its "
       "scattered share for cold FFN rows; device: its measured matrix-vector rate), the FFN "
       "halves overlapped, plus the measured hand-off time per copy and launch time per device op.\n";
  for (const BenchRow& row : r.rows) {
    if (!row.hybrid.present || row.hybrid.model_ts <= 0) continue;
    const HybridRow& h = row.hybrid;
    s += fmt("Rates used (%d thread%s): CPU %.1f GB/s sequential, %.1f GB/s scattered; device "
             "%.1f GB/s; hand-off %.1f us; launch %.1f us per device op (%.0f ops per token).\n",
             row.threads, row.threads == 1 ? "" : "s", h.cpu_gbps, h.cpu_scattered_gbps,
             h.device_rates.read_gbps, h.device_rates.handoff_us, h.device_rates.launch_us, h.ops);
    break;
  }
  return s;
}

Json hybrid_json(const HybridRow& h) {
  if (!h.present) return nullptr;
  const PlacementInfo& p = h.placement;
  Json mem = Json::array();
  for (const DeviceMemoryLine& l : p.memory)
    mem.push_back(Json{{"what", l.what}, {"count", l.count}, {"bytes", l.bytes}});
  return Json{{"device", h.device},
              {"budget_bytes", h.has_budget ? Json(h.budget) : Json(nullptr)},
              {"plan_origin", p.origin},
              {"layers_on_device", p.layers_on_device},
              {"n_layer", p.n_layer},
              {"head_on_device", p.head_on_device},
              {"hot_neurons", p.hot_neurons},
              {"n_neurons", p.n_neurons},
              {"mass_covered", p.mass_covered},
              {"expert_pairs_device", p.expert_pairs_device},
              {"expert_pairs_cpu", p.expert_pairs_cpu},
              {"expert_uploads", p.expert_uploads},
              {"expert_upload_bytes", p.expert_upload_bytes},
              {"device_bytes", p.device_bytes},
              {"cpu_bytes_per_token", p.cpu_bytes_per_token},
              {"device_bytes_per_token", p.device_bytes_per_token},
              {"bytes_h2d_per_token", h.bytes_to_device},
              {"bytes_d2h_per_token", h.bytes_from_device},
              {"copies_per_token", h.copies},
              {"device_ops_per_token", h.ops},
              {"launch_us", h.device_rates.launch_us},
              {"model_ts", h.model_ts > 0 ? Json(h.model_ts) : Json(nullptr)},
              {"model_ratio", h.model_ts > 0 ? Json(h.model_ratio) : Json(nullptr)},
              {"device_gbps", h.device_rates.read_gbps},
              {"handoff_us", h.device_rates.handoff_us},
              {"cpu_gbps", h.cpu_gbps},
              {"cpu_scattered_gbps", h.cpu_scattered_gbps},
              {"device_memory", mem}};
}

}  // namespace

std::string format_markdown(const BenchReport& r) {
  const MachineInfo& m = r.machine;
  const BuildInfo& b = r.build;
  std::string s = "## powerinfer bench\n\n";
  s += fmt("- date: %s\n", m.date_utc.c_str());
  s +=
      fmt("- machine: %s, %d logical CPUs, %.1f GiB RAM, %s; CPU flags: %s\n", m.cpu_model.c_str(),
          m.logical_cpus, m.mem_gib, m.os.c_str(), m.cpu_flags.empty() ? "-" : m.cpu_flags.c_str());
  s += fmt("- kernels: %s; read probe: %s loads over %zu MiB, median of %d passes\n",
           m.kernel_isa.c_str(), r.probe_isa.c_str(), r.probe_bytes >> 20, r.options.probe_passes);
  s += fmt("- load average (1 / 5 / 15 min): %s at start, %s at end\n",
           load_text(r.load_start).c_str(), load_text(r.load_end).c_str());
  s += fmt("- build: powerinfer %s, commit %s, %s, %s, flags `%s`\n", b.version.c_str(),
           b.commit.c_str(), b.compiler.c_str(), b.build_type.c_str(), b.flags.c_str());

  if (!r.models.empty()) {
    s += "\n| # | model | arch | type | format | size | params | layers | n_embd | n_ff | act | "
         "synth activity | dense MiB/token |\n";
    s += "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (size_t i = 0; i < r.models.size(); ++i) {
      const ModelSummary& md = r.models[i];
      s += fmt("| %zu | %s | %s | %s | %s | %s | %s | %lld | %lld | %lld | %s | %s | %.1f |\n",
               i + 1, basename(md.path).c_str(), md.arch.c_str(), md.type.c_str(),
               format_label(md).c_str(), size_text(md.file_bytes).c_str(),
               params_text(md.params).c_str(), static_cast<long long>(md.n_layer),
               static_cast<long long>(md.n_embd), static_cast<long long>(md.n_ff),
               md.activation.c_str(),
               md.synth_activity >= 0 ? fmt("%.2f", md.synth_activity).c_str() : "-",
               static_cast<double>(md.weight_bytes_per_token) / kMiB);
    }
    for (size_t i = 0; i < r.models.size(); ++i) {
      const ModelSummary& md = r.models[i];
      if (md.mmap) continue;
      s += fmt("\nModel %zu read into memory: %.0f of %.0f MiB in huge pages (--mmap maps it).\n", i + 1,
               static_cast<double>(md.huge_page_bytes) / kMiB, static_cast<double>(md.file_bytes) / kMiB);
    }
    for (size_t i = 0; i < r.models.size(); ++i) {
      const ModelSummary& md = r.models[i];
      if (md.repacked_bytes == 0) continue;
      s += fmt("\nModel %zu: %s of weights repacked at load for the CPU's kernels (transposed for its axpy, "
               "16-row groups for its dense products), %s of "
               "them in place (no extra memory) (--no-repack: the file's layout).\n",
               i + 1, size_text(md.repacked_bytes).c_str(), size_text(md.repacked_in_place_bytes).c_str());
    }
    for (size_t i = 0; i < r.models.size(); ++i) {
      const ModelSummary& md = r.models[i];
      if (md.peak_rss == 0) continue;
      s += fmt("\nModel %zu: peak resident memory %s (%s held before its load: the read probe's "
               "buffer), file %s.\n",
               i + 1, size_text(md.peak_rss).c_str(), size_text(md.rss_before_load).c_str(),
               size_text(md.file_bytes).c_str());
    }
  }

  s += fmt("\n| threads | probe GB/s (median) | min | max | scattered GB/s (%zu-byte rows, %.0f%%) | "
           "scattered / sequential |\n|---|---|---|---|---|---|\n",
           kScatterChunkBytes, 100 * r.options.scatter_fraction);
  for (const ProbeStats& p : r.probe)
    s += fmt("| %d | %.1f | %.1f | %.1f | %.1f | %.0f%% |\n", p.threads, p.median, p.min, p.max,
             p.scattered, p.median > 0 ? 100 * p.scattered / p.median : 0.0);
  s += compute_markdown(r);
  for (const DiskStats& d : r.disk)
    s += fmt("\nDisk: %s read %s, %zu KiB at random offsets, %d at a time: %.0f MB/s.\n", basename(d.path).c_str(),
             d.probe.direct ? "past the page cache (O_DIRECT)" : "through the page cache (the file system refused O_DIRECT)",
             d.probe.chunk >> 10, d.probe.depth, d.probe.mbps);
  s += expert_reads_markdown(r);

  if (r.options.probe_only) return s;
  bool any_host = false, any_hybrid = false;
  for (const BenchRow& row : r.rows) (row.hybrid.present ? any_hybrid : any_host) = true;
  if (any_hybrid) s += hybrid_markdown(r);
  if (!any_host) return s;
  s += "\n| model | mode | threads | test | t/s | min - max | active | MiB/token | GB/s | "
       "probe GB/s | of probe | of roofline | of int8 peak |\n";
  s += "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const BenchRow& row : r.rows) {
    if (row.hybrid.present) continue;
    const ModelSummary& md = r.models[row.model];
    const std::string active =
        row.active_fraction >= 0 ? fmt("%.1f%%", 100 * row.active_fraction) : "all";
    std::string bytes = "-", gbps = "-", ratio = "-", roofline = "-";
    if (row.has_bytes) {
      bytes = fmt("%.1f", row.bytes.total() / kMiB);
      gbps = fmt("%.1f", row.gbps);
      ratio = fmt("%.0f%%", 100 * row.probe_ratio);
      roofline = fmt("%.0f%%", 100 * row.roofline_ratio);
    }
    const std::string int8 = row.has_int8 ? fmt("%.1f%%", 100 * row.int8_ratio) : "-";
    s += fmt("| %s | %s | %d | %s | %.2f | %.2f - %.2f | %s | %s | %s | %.1f | %s | %s | %s |\n",
             basename(md.path).c_str(), mode_name(row.mode), row.threads, row.test.c_str(),
             row.ts_median, row.ts_min, row.ts_max, active.c_str(), bytes.c_str(), gbps.c_str(),
             row.probe.median, ratio.c_str(), roofline.c_str(), int8.c_str());
  }
  s +=
      fmt("\nt/s: median of %d repetitions after a warm-up run. MiB/token (generation): weights "
          "read per token (sparse: attention, output head, predictors and the FFN rows the "
          "predictor selected, as counted by the sparse engine) plus the KV cache read. GB/s = "
          "MiB/token x t/s; of probe = GB/s / the read probe on as many threads, measured "
          "around the row's repetitions. Of roofline: t/s / the t/s if every byte were read at "
          "the probe's rate, except the sparse rows (scattered: the predicted FFN rows, or a "
          "calibrated file's kept rows of every projection), read at the scattered probe's "
          "share of it, its passes also around the row's repetitions (--scatter-fraction of "
          "the 2304-byte rows).\n",
          r.options.reps);
  if (r.int8_path.empty()) {
    s += "\nOf int8 peak: none (the scalar kernels have no int8 SIMD path to compare with).\n";
    return s;
  }
  s += fmt("\nOf int8 peak (dense prompt rows): MACs per token x t/s over the compute probe's %s "
           "rate (the int8 path of the %s kernels) on as many threads, measured before the "
           "models. A ppN run's MACs: N x the elements of every layer matrix (attention and FFN), "
           "plus the output head once per batch of -b tokens (only a batch's last token gets "
           "logits); a head tied to the token embedding counts as a multiply, the embedding's "
           "row lookup does not. Left out: attention scores and weighted values (they grow with "
           "the context; about 1%% of a 7B layer's MACs at pp512), so the share is slightly low. "
           "Float weight types (f32, f16, bf16) multiply in f32 FMA, whose peak is lower (the "
           "compute table): for them the share understates how busy the cores are. Sparse and "
           "device rows: none (the predicted rows' kernels do not count their MACs).\n",
           r.int8_path.c_str(), r.machine.kernel_isa.c_str());
  return s;
}

std::string format_json(const BenchReport& r) {
  const MachineInfo& m = r.machine;
  const BuildInfo& b = r.build;
  const BenchOptions& o = r.options;
  Json j;
  j["powerinfer_bench_version"] = 1;
  j["date_utc"] = m.date_utc;
  j["machine"] = Json{{"cpu_model", m.cpu_model},
                      {"cpu_flags", m.cpu_flags},
                      {"logical_cpus", m.logical_cpus},
                      {"mem_gib", m.mem_gib},
                      {"os", m.os},
                      {"kernel_isa", m.kernel_isa}};
  j["build"] = Json{{"version", b.version},
                    {"commit", b.commit},
                    {"compiler", b.compiler},
                    {"build_type", b.build_type},
                    {"flags", b.flags}};
  Json modes = Json::array();
  for (BenchMode md : o.modes) modes.push_back(mode_name(md));
  j["options"] = Json{{"probe_only", o.probe_only},
                      {"models", o.models},
                      {"n_prompt", o.n_prompt},
                      {"n_gen", o.n_gen},
                      {"threads", o.threads},
                      {"modes", modes},
                      {"reps", o.reps},
                      {"n_batch", o.n_batch},
                      {"probe_bytes", o.probe_bytes},
                      {"probe_passes", o.probe_passes},
                      {"warmup_gen", o.warmup_gen},
                      {"device", o.device}};
  j["load_average"] = Json{{"start", load_json(r.load_start)}, {"end", load_json(r.load_end)}};
  Json table = Json::array();
  for (const ProbeStats& p : r.probe) table.push_back(probe_json(p));
  j["probe"] = Json{{"isa", r.probe_isa},
                    {"bytes", r.probe_bytes},
                    {"table", table},
                    {"compute", compute_json(r)}};

  Json models = Json::array();
  for (const ModelSummary& md : r.models) {
    models.push_back(Json{{"path", md.path},
                          {"file", basename(md.path)},
                          {"name", md.name},
                          {"arch", md.arch},
                          {"type", md.type},
                          {"format", md.powerinfer ? "PWRI" : "GGUF"},
                          {"has_predictors", md.has_predictors},
                          {"activation", md.activation},
                          {"synth_activity", nullable(md.synth_activity >= 0, md.synth_activity)},
                          {"file_bytes", md.file_bytes},
                          {"mmap", md.mmap},
                          {"huge_page_bytes", md.huge_page_bytes},
                          {"repacked_bytes", md.repacked_bytes},
                          {"repacked_in_place_bytes", md.repacked_in_place_bytes},
                          {"layout_copy_bytes", md.layout_copy_bytes},
                          {"rss_before_load_bytes", md.rss_before_load},
                          {"peak_rss_bytes", md.peak_rss},
                          {"params", md.params},
                          {"predictor_params", md.predictor_params},
                          {"n_layer", md.n_layer},
                          {"n_embd", md.n_embd},
                          {"n_ff", md.n_ff},
                          {"n_head", md.n_head},
                          {"n_head_kv", md.n_head_kv},
                          {"n_vocab", md.n_vocab},
                          {"weight_bytes_per_token", md.weight_bytes_per_token},
                          {"ffn_bytes", md.ffn_bytes},
                          {"predictor_bytes", md.predictor_bytes},
                          {"kv_bytes_per_cell", md.kv_bytes_per_cell},
                          {"layer_matrix_params", md.layer_matrix_params},
                          {"head_params", md.head_params}});
  }
  j["models"] = models;

  Json rows = Json::array();
  for (const BenchRow& row : r.rows) {
    Json bytes = nullptr;
    if (row.has_bytes) {
      bytes = Json{{"other_weights", row.bytes.other_weights},
                   {"ffn", row.bytes.ffn},
                   {"predictors", row.bytes.predictors},
                   {"kv", row.bytes.kv},
                   {"total", row.bytes.total()}};
    }
    const bool sparse = row.active_fraction >= 0;
    rows.push_back(Json{{"model", row.model},
                        {"file", basename(r.models[row.model].path)},
                        {"mode", mode_name(row.mode)},
                        {"threads", row.threads},
                        {"n_batch", row.n_batch},
                        {"test", row.test},
                        {"n_prompt", row.n_prompt},
                        {"n_gen", row.n_gen},
                        {"reps", row.samples.size()},
                        {"samples_ts", row.samples},
                        {"ts_median", row.ts_median},
                        {"ts_min", row.ts_min},
                        {"ts_max", row.ts_max},
                        {"ts_stddev", row.ts_stddev},
                        {"active_fraction", nullable(sparse, row.active_fraction)},
                        {"computed_fraction", nullable(sparse, row.computed_fraction)},
                        {"bytes_per_token", bytes},
                        {"gbps", nullable(row.has_bytes, row.gbps)},
                        {"probe", probe_json(row.probe)},
                        {"probe_ratio", nullable(row.has_bytes, row.probe_ratio)},
                        {"roofline_ratio", nullable(row.has_bytes, row.roofline_ratio)},
                        {"macs_per_token", nullable(row.has_int8, row.macs_per_token)},
                        {"int8_peak_gmacs", nullable(row.has_int8, row.int8_peak_gmacs)},
                        {"int8_ratio", nullable(row.has_int8, row.int8_ratio)},
                        {"load_1m", nullable(row.load_1m >= 0, row.load_1m)},
                        {"peak_rss_bytes", row.peak_rss},
                        {"hybrid", hybrid_json(row.hybrid)},
                        {"expert_reads", row.expert_reads.on ? Json{{"hits", row.expert_reads.hits},
                                                                    {"read_ahead_used", row.expert_reads.read_ahead_used},
                                                                    {"misses", row.expert_reads.misses},
                                                                    {"read_ahead", row.expert_reads.read_ahead},
                                                                    {"guessed", row.expert_reads.guessed},
                                                                    {"guessed_right", row.expert_reads.guessed_right},
                                                                    {"bytes_read", row.expert_reads.bytes_read},
                                                                    {"bytes_per_token", row.expert_bytes_per_token},
                                                                    {"disk_bound_ts", row.disk_bound_ts},
                                                                    {"disk_ratio", row.disk_ratio},
                                                                    {"cache_bytes", row.expert_reads.cache_bytes}}
                                                               : Json()}});
  }
  j["results"] = rows;
  Json disk = Json::array();
  for (const DiskStats& d : r.disk)
    disk.push_back(Json{{"path", d.path}, {"mbps", d.probe.mbps}, {"chunk", d.probe.chunk}, {"depth", d.probe.depth},
                        {"direct", d.probe.direct}});
  j["disk"] = disk;
  return j.dump(2) + "\n";
}

std::string format_csv(const BenchReport& r) {
  std::string s;
  if (r.options.probe_only) {
    // One column per compute path (its median GMAC/s), empty where it was not measured.
    s = "threads,probe_gbps_median,probe_gbps_min,probe_gbps_max,scattered_gbps_median,probe_isa,"
        "probe_bytes,cpu_model,commit";
    for (ComputePath path : kComputePaths) s += fmt(",%s_gmacs", compute_path_name(path).data());
    s += "\n";
    for (const ProbeStats& p : r.probe) {
      s += fmt("%d,%.3f,%.3f,%.3f,%.3f,%s,%zu,%s,%s", p.threads, p.median, p.min, p.max,
               p.scattered, r.probe_isa.c_str(), r.probe_bytes,
               csv_field(r.machine.cpu_model).c_str(), csv_field(r.build.commit).c_str());
      for (ComputePath path : kComputePaths) {
        std::string cell;
        for (const ComputeStats& c : r.compute)
          if (c.threads == p.threads && c.path == compute_path_name(path)) cell = fmt("%.3f", c.median);
        s += "," + cell;
      }
      s += "\n";
    }
    return s;
  }
  s = "file,arch,type,format,mode,threads,n_batch,test,n_prompt,n_gen,reps,ts_median,ts_min,ts_max,"
      "ts_stddev,active_fraction,bytes_per_token,gbps,probe_gbps,probe_ratio,roofline_ratio,"
      "load_1m,kernel_isa,cpu_model,commit,device,vram_budget,device_bytes,bytes_h2d_per_token,"
      "bytes_d2h_per_token,model_ts,macs_per_token,int8_peak_gmacs,int8_ratio\n";
  for (const BenchRow& row : r.rows) {
    const ModelSummary& md = r.models[row.model];
    const std::string active = row.active_fraction >= 0 ? fmt("%.5f", row.active_fraction) : "";
    const std::string bytes = row.has_bytes ? fmt("%.0f", row.bytes.total()) : "";
    const std::string gbps = row.has_bytes ? fmt("%.3f", row.gbps) : "";
    const std::string ratio = row.has_bytes ? fmt("%.4f", row.probe_ratio) : "";
    const std::string roofline = row.has_bytes ? fmt("%.4f", row.roofline_ratio) : "";
    const std::string macs = row.has_int8 ? fmt("%.0f", row.macs_per_token) : "";
    const std::string peak = row.has_int8 ? fmt("%.3f", row.int8_peak_gmacs) : "";
    const std::string int8 = row.has_int8 ? fmt("%.5f", row.int8_ratio) : "";
    s += fmt(
        "%s,%s,%s,%s,%s,%d,%lld,%s,%lld,%lld,%zu,%.4f,%.4f,%.4f,%.4f,%s,%s,%s,%.3f,%s,%s,%.2f,%s,%"
        "s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n",
        csv_field(basename(md.path)).c_str(), md.arch.c_str(), md.type.c_str(),
        md.powerinfer ? "PWRI" : "GGUF", mode_name(row.mode), row.threads,
        static_cast<long long>(row.n_batch), row.test.c_str(), static_cast<long long>(row.n_prompt),
        static_cast<long long>(row.n_gen), row.samples.size(), row.ts_median, row.ts_min,
        row.ts_max, row.ts_stddev, active.c_str(), bytes.c_str(), gbps.c_str(), row.probe.median,
        ratio.c_str(), roofline.c_str(), row.load_1m, r.machine.kernel_isa.c_str(),
        csv_field(r.machine.cpu_model).c_str(), csv_field(r.build.commit).c_str(),
        row.hybrid.present ? row.hybrid.device.c_str() : r.options.device.c_str(),
        row.hybrid.has_budget ? fmt("%llu", static_cast<unsigned long long>(row.hybrid.budget)).c_str() : "",
        row.hybrid.present ? fmt("%llu", static_cast<unsigned long long>(row.hybrid.placement.device_bytes)).c_str() : "",
        row.hybrid.present ? fmt("%.0f", row.hybrid.bytes_to_device).c_str() : "",
        row.hybrid.present ? fmt("%.0f", row.hybrid.bytes_from_device).c_str() : "",
        row.hybrid.model_ts > 0 ? fmt("%.4f", row.hybrid.model_ts).c_str() : "", macs.c_str(),
        peak.c_str(), int8.c_str());
  }
  return s;
}

}  // namespace pi::cli
