#include "bench_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string_view>

#include "cli_checks.h"
#include "core/bandwidth_probe.h"
#include "core/compute_probe.h"
#include "model/expert_stream.h"
#include "core/log.h"
#include "core/mapped_file.h"
#include "core/thread_pool.h"
#include "gguf/reader.h"
#include "kernels/cpu/kernels.h"
#include "model/model.h"
#include "powerinfer/engine.h"
#include "sparse/act_sparsity.h"
#include "runtime/engine_access.h"

namespace pi::cli {
namespace {

using Clock = std::chrono::steady_clock;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool has_predictors(const gguf::File& f) { return f.find_tensor("blk.0.fc1.weight") != nullptr; }

// The modes to run for a file: the requested ones that apply to it, or its natural mode.
std::vector<BenchMode> modes_for(const BenchOptions& o, bool powerinfer) {
  if (o.modes.empty()) return {powerinfer ? BenchMode::Sparse : BenchMode::Dense};
  std::vector<BenchMode> out;
  for (BenchMode m : o.modes)
    if (m == BenchMode::Dense || powerinfer) out.push_back(m);
  return out;
}

// Opens every file before anything is timed, so that a missing file or a sparse request on a
// dense file fails at once rather than after the other models' runs.
Status check_models(const BenchOptions& o) {
  for (const std::string& path : o.models) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
      return err("%s: no such model file", path.c_str());
    auto f = gguf::File::open(path);
    if (!f.ok()) return f.error();
    if (sparse::has_act_sparsity(*f)) continue;  // calibrated: sparse is thresholded
    // A mixture of experts may have sparse (ReGLU) experts: the session says whether it started sparse.
    const auto arch = f->get_string("general.architecture");
    if (arch.ok() && f->find(*arch + ".expert_count") != nullptr) continue;
    const bool wants_sparse =
        std::find(o.modes.begin(), o.modes.end(), BenchMode::Sparse) != o.modes.end();
    const bool only_sparse = wants_sparse && o.modes.size() == 1;
    if (only_sparse && !f->is_powerinfer())
      return err(
          "--sparse: %s is a dense GGUF file; sparse execution needs a PowerInfer (PWRI) "
          "file with predictors (run it with --dense, or use --mode dense,sparse to run "
          "PowerInfer files both ways and dense files dense)",
          path.c_str());
    if (wants_sparse && f->is_powerinfer() && !has_predictors(*f))
      return err(
          "--sparse: %s is a PowerInfer file without predictors (blk.N.fc1/fc2); it can "
          "only run --dense",
          path.c_str());
    if (!o.modes.empty() && wants_sparse && !f->is_powerinfer())
      log_warn("%s is a dense GGUF file: it runs dense only", path.c_str());
  }
  return Status::Ok();
}

ModelSummary summarize_model(const Engine& engine) {
  const ModelInfo& info = engine.info();
  const model::Model& m = runtime::EngineAccess::model(engine);
  const gguf::File& f = m.file();
  const model::HParams& hp = m.hparams();
  ModelSummary s;
  s.path = info.path;
  s.name = info.name;
  s.arch = info.architecture;
  s.powerinfer = info.powerinfer;
  s.has_predictors = has_predictors(f);
  s.calibrated = sparse::has_act_sparsity(f);
  s.sparse_experts = hp.sparse_experts();
  s.activation = info.activation;
  s.synth_activity = f.get_number_or("synth.activity", -1.0);
  s.file_bytes = info.file_bytes;
  s.mmap = info.mmap;
  s.huge_page_bytes = info.huge_page_bytes;
  s.n_layer = hp.n_layer;
  s.n_embd = hp.n_embd;
  s.n_ff = hp.n_ff;
  s.n_head = hp.n_head;
  s.n_head_kv = hp.n_head_kv;
  s.n_vocab = hp.n_vocab;
  s.weight_bytes_per_token = info.weight_bytes_per_token;
  std::map<DType, uint64_t> bytes_by_type;
  for (const gguf::TensorInfo& t : f.tensors()) {
    s.params += t.shape.numel();
    bytes_by_type[t.type] += t.nbytes;
    if (ends_with(t.name, ".fc1.weight") || ends_with(t.name, ".fc2.weight")) {
      s.predictor_params += t.shape.numel();
      s.predictor_bytes += t.nbytes;
    }
  }
  const auto top =
      std::max_element(bytes_by_type.begin(), bytes_by_type.end(),
                       [](const auto& a, const auto& b) { return a.second < b.second; });
  s.type = top != bytes_by_type.end() ? std::string(dtype_name(top->first)) : "?";
  auto elements = [](const model::Matrix& w) { return w.present() ? w.rows * w.cols : int64_t{0}; };
  for (const model::LayerWeights& L : m.weights().layers) {
    model::each_layer_matrix(L, [&](const model::LayerTensor& t, const model::Matrix& w) {
      if (t.group == model::Group::Ffn) s.ffn_bytes += model::token_bytes(hp, t, w);
      // Of a stack of experts, a token multiplies by the n_expert_used it routes to.
      const int64_t n = elements(w);
      s.layer_matrix_params += t.stack == model::Dim::None || !w.present() ? n : n / hp.n_expert * hp.n_expert_used;
    });
  }
  s.head_params = elements(m.weights().output);
  s.kv_bytes_per_cell = static_cast<uint64_t>(hp.n_layer * 2 * hp.n_head_kv * hp.head_dim) * 2;
  return s;
}

// Median, min and max of `passes` (0s for none) into a ProbeStats or ComputeStats.
template <typename Stats>
Stats spread(int threads, std::vector<double> passes) {
  Stats p;
  p.threads = threads;
  p.median = median_of(passes);
  p.min = passes.empty() ? 0 : *std::min_element(passes.begin(), passes.end());
  p.max = passes.empty() ? 0 : *std::max_element(passes.begin(), passes.end());
  p.passes = std::move(passes);
  return p;
}

ProbeStats probe_stats(int threads, std::vector<double> passes) {
  return spread<ProbeStats>(threads, std::move(passes));
}

// The int8 path the kernels of `isa` multiply quantized blocks with (src/kernels/cpu:
// vpdpbusd zmm for AVX-512, vpmaddubsw + vpmaddwd for AVX2); none for the scalar kernels.
std::optional<ComputePath> kernel_int8_path(cpu::Isa isa) {
  if (isa == cpu::Isa::Avx512) return ComputePath::Int8Vnni512;
  if (isa == cpu::Isa::Avx2) return ComputePath::Int8Avx2;
  return std::nullopt;
}

// The compute table for `counts` threads: `paths` on each (unavailable ones skipped, with one
// log line each), o.probe_passes passes of kComputePassSeconds.
void measure_compute_table(const BenchOptions& o, const std::vector<int>& counts,
                           const std::vector<ComputePath>& paths, BenchReport& report) {
  std::vector<ComputePath> run;
  for (ComputePath path : paths) {
    if (compute_path_available(path)) {
      run.push_back(path);
      continue;
    }
    report.compute_skipped.emplace_back(compute_path_name(path));
    log_info("bench: compute probe: %s (%s) is not available on this CPU or build: skipped",
             compute_path_name(path).data(), compute_path_instructions(path).data());
  }
  for (int t : counts) {
    ThreadPool pool(t);
    for (ComputePath path : run) {
      ComputeStats st = spread<ComputeStats>(t, measure_compute(pool, path, o.probe_passes));
      st.path = std::string(compute_path_name(path));
      st.instructions = std::string(compute_path_instructions(path));
      log_info("bench: compute %d thread%s: %.1f GMAC/s %s (%s, median of %d passes)", t,
               t == 1 ? "" : "s", st.median, st.path.c_str(), st.instructions.c_str(),
               o.probe_passes);
      report.compute.push_back(std::move(st));
    }
  }
}

// Each dense prompt row's MACs per token and share of the int8 peak on its thread count. A
// ppP run multiplies every layer matrix for each token and the head for the last token of
// each batch (only it gets logits). Sparse rows compute the predicted rows by paths that do
// not count their MACs, and hybrid rows run partly on the device: neither gets a share.
void int8_shares(BenchReport& report) {
  for (BenchRow& row : report.rows) {
    if (row.n_prompt <= 0 || row.mode != BenchMode::Dense || row.hybrid.present) continue;
    for (const ComputeStats& c : report.compute) {
      if (c.threads != row.threads || c.path != report.int8_path || c.median <= 0) continue;
      const ModelSummary& md = report.models[row.model];
      const int64_t batches = (row.n_prompt + row.n_batch - 1) / std::max<int64_t>(row.n_batch, 1);
      const double macs = static_cast<double>(row.n_prompt) * static_cast<double>(md.layer_matrix_params) +
                          static_cast<double>(batches) * static_cast<double>(md.head_params);
      row.has_int8 = true;
      row.macs_per_token = macs / static_cast<double>(row.n_prompt);
      row.int8_peak_gmacs = c.median;
      row.int8_ratio = row.macs_per_token * row.ts_median / (c.median * 1e9);
    }
  }
}

// Sums the expert-read counters of one repetition into a row's.
void add_expert_reads(ExpertReads& sum, const ExpertReads& r) {
  if (!r.on) return;
  sum.on = true;
  sum.slots = r.slots;
  sum.cache_bytes = r.cache_bytes;
  sum.direct_io = r.direct_io;
  sum.hits += r.hits;
  sum.misses += r.misses;
  sum.read_ahead += r.read_ahead;
  sum.read_ahead_used += r.read_ahead_used;
  sum.guessed += r.guessed;
  sum.guessed_right += r.guessed_right;
  sum.bytes_read += r.bytes_read;
  sum.read_s += r.read_s;
  sum.wait_s += r.wait_s;
}

// Sparse counters of the session since the last reset, summed over layers.
struct SparseTotals {
  int64_t tokens = 0;  // tokens per layer
  int64_t neurons = 0, predicted = 0, computed = 0;
  uint64_t bytes = 0;
};

SparseTotals sparse_totals(const Session& s) {
  SparseTotals t;
  const SparsityReport r = s.sparsity();
  if (r.thresholded) {
    // Bytes the thresholded products read; tokens: those of a layer (every site sees each).
    for (const SiteSparsity& site : r.sites) {
      for (uint64_t b : site.bytes) t.bytes += b;
      t.neurons += site.entries.empty() ? 0 : site.entries[0];
      t.computed += site.kept.empty() ? 0 : site.kept[0];
    }
    t.tokens = r.sites.empty() ? 0 : r.sites[0].tokens;
    t.predicted = t.computed;
    return t;
  }
  if (!r.layers.empty()) t.tokens = r.layers[0].tokens;
  for (const LayerSparsity& l : r.layers) {
    t.neurons += l.tokens * l.n_ff;
    t.predicted += l.predicted;
    t.computed += l.computed;
    t.bytes += l.bytes;
  }
  return t;
}

// Weight bytes of the matrices the thresholded sites of a run read (all of them, as a dense
// step reads them): what a calibrated file's sparse run reads only partly.
uint64_t site_matrix_bytes(const model::ModelWeights& w, const SparsityReport& r) {
  uint64_t n = 0;
  for (const SiteSparsity& s : r.sites) {
    const std::optional<sparse::Site> site = sparse::parse_site(s.site);
    if (!site) continue;
    for (const model::LayerWeights& L : w.layers) n += model::site_matrix_bytes(L, *site);
  }
  return n;
}

// One model, mode and thread count: a session and the tests run on it.
class RowRunner {
 public:
  // `site_bytes`: for a calibrated file's sparse session, site_matrix_bytes() (else 0).
  RowRunner(const BenchOptions& o, const ModelSummary& model, const BandwidthProbe& probe,
            Session& session, int32_t bos, int threads, uint64_t site_bytes)
      : o_(o),
        model_(model),
        probe_(probe),
        session_(session),
        bos_(bos),
        pool_(threads),
        site_bytes_(site_bytes) {}

  Status prompt_test(int64_t n, BenchRow& row) {
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    std::mt19937_64 rng(0x5EEDu + static_cast<uint64_t>(n));
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(model_.n_vocab - 1));
    for (int32_t& t : tokens) t = id(rng);
    auto once = [&]() -> Result<double> {
      session_.reset();
      session_.reset_sparsity();
      const auto t0 = Clock::now();
      PI_TRY(session_.prompt(tokens));
      return seconds_since(t0);
    };
    auto warmup = once();
    if (!warmup.ok()) return warmup.error();
    return repeat(row, n, once);
  }

  Status gen_test(int64_t n, BenchRow& row) {
    auto run = [&](int64_t count) -> Result<double> {
      session_.reset();
      const int32_t first[1] = {bos_};
      PI_TRY(session_.prompt(first));
      session_.reset_sparsity();
      const auto t0 = Clock::now();
      for (int64_t i = 0; i < count; ++i) PI_TRY(session_.advance(session_.sample()));
      return seconds_since(t0);
    };
    if (o_.warmup_gen > 0) {
      auto warmup = run(std::min<int64_t>(n, o_.warmup_gen));
      if (!warmup.ok()) return warmup.error();
    }
    return repeat(row, n, [&] { return run(n); });
  }

 private:
  // The timed repetitions of `once` (which returns the seconds of one run of `tokens`
  // tokens), with probe passes before the first and after each; sparse counters are summed
  // over the repetitions. Fills the row's samples, fractions, bytes and ratios.
  template <typename Once>
  Status repeat(BenchRow& row, int64_t tokens, Once once) {
    std::vector<double> passes = probe_.measure(pool_, o_.probe_passes);
    // A sparse generation row's roofline counts its FFN rows at the scattered rate: measured
    // in the same minutes as the runs too, since the host moves it as much as the sequential one.
    const bool scattered = row.mode == BenchMode::Sparse && row.n_gen > 0;
    std::vector<double> scattered_passes;
    if (scattered)
      scattered_passes =
          probe_.measure_scattered(pool_, o_.probe_passes, kScatterChunkBytes, o_.scatter_fraction);
    SparseTotals sum;
    const PlacementInfo before = session_.placement();
    for (int r = 0; r < o_.reps; ++r) {
      auto dt = once();
      if (!dt.ok()) return dt.error();
      row.samples.push_back(*dt > 0 ? static_cast<double>(tokens) / *dt : 0.0);
      add_expert_reads(row.expert_reads, session_.expert_reads());
      const SparseTotals t = sparse_totals(session_);
      sum.tokens += t.tokens;
      sum.neurons += t.neurons;
      sum.predicted += t.predicted;
      sum.computed += t.computed;
      sum.bytes += t.bytes;
      passes.push_back(probe_.pass(pool_).gbps);
      if (scattered)
        scattered_passes.push_back(probe_
                                       .scattered_pass(pool_, kScatterChunkBytes, o_.scatter_fraction,
                                                       static_cast<uint64_t>(o_.probe_passes + r + 1))
                                       .gbps);
      log_debug("bench:   repetition %d/%d: %.2f tokens/s", r + 1, o_.reps, row.samples.back());
    }
    row.probe = probe_stats(row.threads, std::move(passes));
    if (scattered) {
      row.probe.scattered = median_of(scattered_passes);
      row.probe.scattered_passes = std::move(scattered_passes);
    }
    if (before.hybrid) {
      HybridRow& h = row.hybrid;
      h.present = true;
      h.placement = session_.placement();
      const double n = static_cast<double>(tokens) * o_.reps;
      h.device = h.placement.device;
      h.bytes_to_device = static_cast<double>(h.placement.bytes_to_device - before.bytes_to_device) / n;
      h.bytes_from_device =
          static_cast<double>(h.placement.bytes_from_device - before.bytes_from_device) / n;
      h.copies = static_cast<double>(h.placement.copies_to_device + h.placement.copies_from_device -
                                     before.copies_to_device - before.copies_from_device) / n;
      h.ops = static_cast<double>(h.placement.device_ops - before.device_ops) / n;
    }
    if (row.mode == BenchMode::Sparse && sum.neurons > 0) {
      row.active_fraction = static_cast<double>(sum.predicted) / static_cast<double>(sum.neurons);
      row.computed_fraction = static_cast<double>(sum.computed) / static_cast<double>(sum.neurons);
    }
    if (row.n_gen > 0) {
      row.has_bytes = true;
      ByteBreakdown& b = row.bytes;
      b.other_weights = static_cast<double>(model_.weight_bytes_per_token - model_.ffn_bytes);
      // Cells read by the k-th generated token (k = 0 .. n-1): the BOS, earlier tokens, itself.
      b.kv =
          static_cast<double>(model_.kv_bytes_per_cell) * (static_cast<double>(row.n_gen) + 3) / 2;
      if (row.mode == BenchMode::Dense) {
        b.ffn = static_cast<double>(model_.ffn_bytes);
      } else if (site_bytes_ > 0 && sum.tokens > 0) {
        // Thresholded: the sites' rows (scattered) and every other weight once.
        b.other_weights = static_cast<double>(model_.weight_bytes_per_token - site_bytes_);
        b.ffn = static_cast<double>(sum.bytes) / static_cast<double>(sum.tokens);
      } else if (sum.tokens > 0 && before.hybrid) {
        // Hybrid: the predictors run on the device, and the CPU's counters see only its cold
        // rows; the hot rows the device reads are in hybrid.device_bytes_per_token.
        b.predictors = static_cast<double>(model_.predictor_bytes);
        b.ffn = static_cast<double>(sum.bytes) / static_cast<double>(sum.tokens);
      } else if (sum.tokens > 0) {
        b.predictors = static_cast<double>(model_.predictor_bytes);
        b.ffn = static_cast<double>(sum.bytes) / static_cast<double>(sum.tokens) - b.predictors;
      }
    }
    summarize(row);
    if (row.has_bytes) {
      row.gbps = row.bytes.total() * row.ts_median / 1e9;
      row.probe_ratio = row.probe.median > 0 ? row.gbps / row.probe.median : 0.0;
    }
    return Status::Ok();
  }

  const BenchOptions& o_;
  const ModelSummary& model_;
  const BandwidthProbe& probe_;
  Session& session_;
  int32_t bos_;
  ThreadPool pool_;  // the probe's threads, as many as the session's
  uint64_t site_bytes_ = 0;
};

// Maps every weight page into this process: a dense step on a throwaway session reads every
// matrix once. A sparse session's own warm-up touches only the predicted rows; without this,
// page faults on rows first used in later tokens would be timed. `repack` as the timed
// sessions (--no-repack): the throwaway session must not make the copy they go without.
Status map_all_weights(const Engine& engine, int32_t bos, int threads, bool repack) {
  SessionOptions so = env_session_options();
  so.repack = repack;
  so.n_ctx = 8;
  so.n_batch = 1;
  so.n_threads = threads;
  so.sampling.temperature = 0.0f;
  so.sparse.dense = true;
  auto s = Session::create(engine, so);
  if (!s.ok()) return s.error();
  return (*s)->warmup(bos);
}

// The direct-read rate of each model file, in reads of about an expert's part (1 MiB), for
// rows that read experts from the file (--moe-ram) or a --probe run given files.
Status disk_probes(const BenchOptions& o, BenchReport& report) {
  if (o.model_flags.moe_ram.empty() && !o.probe_only) return Status::Ok();
  for (const std::string& path : o.models) {
    for (int depth : {1, model::ExpertStream::kReaders}) {
      auto d = probe_direct_read(path, size_t{1} << 20, uint64_t{256} << 20, depth);
      if (!d.ok()) return d.error();
      log_info("bench: disk: %s read %s in %zu KiB pieces at random offsets, %d at a time: %.0f MB/s", path.c_str(),
               d->direct ? "past the page cache (O_DIRECT)" : "through the page cache (no O_DIRECT here)",
               d->chunk >> 10, depth, d->mbps);
      report.disk.push_back({path, *d});
    }
  }
  return Status::Ok();
}

// Rows that read experts on demand: bytes per token and the disk's bound on t/s.
void disk_shares(BenchReport& report) {
  for (BenchRow& row : report.rows) {
    if (!row.expert_reads.on || row.samples.empty()) continue;
    const double tokens = static_cast<double>((row.n_gen > 0 ? row.n_gen : row.n_prompt)) *
                          static_cast<double>(row.samples.size());
    row.expert_bytes_per_token = static_cast<double>(row.expert_reads.bytes_read) / tokens;
    for (const DiskStats& d : report.disk) {
      // The rate at the readers' depth: what the expert stream can get.
      if (d.path != report.models[row.model].path || row.expert_bytes_per_token <= 0 ||
          d.probe.depth != model::ExpertStream::kReaders)
        continue;
      row.disk_bound_ts = d.probe.mbps * 1e6 / row.expert_bytes_per_token;
      row.disk_ratio = row.ts_median / row.disk_bound_ts;
    }
  }
}

Status run_model(const BenchOptions& o, const BandwidthProbe& probe, size_t index,
                 BenchReport& report) {
  const std::string& path = o.models[index];
  log_info("bench: loading %s", path.c_str());
  const uint64_t rss_before = resident_bytes();
  reset_peak_resident();
  auto engine = Engine::load(path, load_options(o.model_flags, o.load));
  if (!engine.ok()) return engine.error();
  report.models.push_back(summarize_model(**engine));
  report.models.back().rss_before_load = rss_before;
  const ModelSummary& model = report.models.back();
  const Vocabulary* tok = (*engine)->vocabulary();
  const int32_t bos = tok != nullptr && tok->bos() >= 0 ? tok->bos() : 0;

  int64_t n_ctx = 1;
  for (int64_t p : o.n_prompt) n_ctx = std::max(n_ctx, p);
  for (int64_t n : o.n_gen) n_ctx = std::max(n_ctx, n + 1);
  if (model.n_vocab < 1) return err("%s: the model has no vocabulary rows", path.c_str());

  bool mapped = false;
  // Calibrated files in sparse mode: one pass per sparsity asked for (none: the file's target).
  std::vector<std::optional<double>> levels = {std::nullopt};
  if (model.calibrated && !o.sparsities.empty()) levels.assign(o.sparsities.begin(), o.sparsities.end());
  for (BenchMode mode : modes_for(o, model.powerinfer || model.calibrated || model.sparse_experts)) {
   for (const std::optional<double>& level : mode == BenchMode::Sparse ? levels : std::vector<std::optional<double>>{std::nullopt}) {
    for (int threads : o.threads) {
     for (const std::optional<uint64_t>& budget : o.budgets) {
      SessionOptions so = env_session_options();
      so.n_ctx = n_ctx;
      so.n_batch = o.n_batch;
      so.n_threads = threads;
      so.sampling.temperature = 0.0f;  // greedy
      so.sparse.dense = mode == BenchMode::Dense;
      so.device = o.device;
      ModelFlags flags = o.model_flags;
      flags.vram_budget.clear();  // the list: one row per budget
      PI_TRY(apply_hybrid_flags(flags, so));
      so.vram_budget = budget;
      if (model.calibrated && mode == BenchMode::Sparse) {
        so.sparse.sparsity = level;
        if (!o.sparsity_sites.empty()) so.sparse.sites = o.sparsity_sites;
      }
      if (mode == BenchMode::Sparse && !mapped) {
        PI_TRY(map_all_weights(**engine, bos, threads, so.repack));
        mapped = true;
      }
      auto session = Session::create(**engine, so);
      if (!session.ok()) return session.error();
      const SparsityReport started = (*session)->sparsity();
      if (mode == BenchMode::Sparse && !started.sparse && !started.thresholded)
        return err("%s: the session did not start sparse (no usable predictors)", path.c_str());
      PI_TRY((*session)->warmup(bos));
      RowRunner runner(o, model, probe, **session, bos, threads,
                       started.thresholded ? site_matrix_bytes(runtime::EngineAccess::model(**engine).weights(), started) : 0);

      auto add_row = [&](int64_t n_prompt, int64_t n_gen) -> Status {
        BenchRow row;
        row.model = index;
        row.mode = mode;
        row.threads = threads;
        row.n_batch = (*session)->n_batch();
        row.n_prompt = n_prompt;
        row.n_gen = n_gen;
        row.test = n_prompt > 0 ? "pp" + std::to_string(n_prompt) : "tg" + std::to_string(n_gen);
        row.hybrid.has_budget = budget.has_value();
        row.hybrid.budget = budget.value_or(0);
        if (started.thresholded) {
          row.act_sparsity = started.act_sparsity;
          char s[32];
          std::snprintf(s, sizeof s, "@s%.2f", started.act_sparsity);
          row.test += s;
        }
        row.load_1m = read_load_average().m1;
        log_info("bench: %s %s t=%d %s (load %.2f)", std::filesystem::path(path).filename().c_str(),
                 mode_name(mode), threads, row.test.c_str(), row.load_1m);
        PI_TRY(n_prompt > 0 ? runner.prompt_test(n_prompt, row) : runner.gen_test(n_gen, row));
        row.peak_rss = peak_resident_bytes();
        std::string each;
        for (double v : row.samples)
          each += (each.empty() ? "" : ", ") + std::to_string(v).substr(0, 8);
        if (row.has_bytes) {
          log_info(
              "bench:   median %.2f tokens/s (%s), %.1f MiB/token, %.1f GB/s = %.0f%% of probe "
              "%.1f GB/s",
              row.ts_median, each.c_str(), row.bytes.total() / 1048576.0, row.gbps,
              100 * row.probe_ratio, row.probe.median);
        } else {
          log_info("bench:   median %.2f tokens/s (%s)", row.ts_median, each.c_str());
        }
        report.rows.push_back(std::move(row));
        return Status::Ok();
      };
      for (int64_t p : o.n_prompt) PI_TRY(add_row(p, 0));
      for (int64_t n : o.n_gen) PI_TRY(add_row(0, n));
     }
    }
   }
  }
  // Held in place since the load (Model::load), or copied by the first session that placed the
  // weights (model::LayoutCache); the copies a device made back into the file's layout count
  // as copies too.
  ModelSummary& md = report.models[index];
  md.repacked_in_place_bytes = runtime::EngineAccess::model(**engine).repacked_in_place_bytes();
  md.layout_copy_bytes = runtime::EngineAccess::model(**engine).layouts().bytes();
  md.repacked_bytes = md.repacked_in_place_bytes + md.layout_copy_bytes;
  md.peak_rss = peak_resident_bytes();
  return Status::Ok();
}

// The device rates of the rows on a GPU-like device (measured once per thread count and weight
// type) and each generation row's model of the hybrid step.
Status model_hybrid_rows(BenchReport& report) {
  std::map<std::pair<int, std::string>, DeviceRates> rates, cpu_rates;
  for (BenchRow& row : report.rows) {
    HybridRow& h = row.hybrid;
    if (!h.present || row.n_gen == 0) continue;
    const ModelSummary& md = report.models[row.model];
    const auto key = std::make_pair(row.threads, md.type);
    if (rates.find(key) == rates.end()) {
      auto type = dtype_from_name(md.type);
      auto r = measure_device(report.options.device, row.threads, type ? *type : DType::F16);
      if (!r.ok()) return r.error();
      log_info("bench: device %s, %d thread%s: %.1f GB/s (%s matvec), hand-off %.1f us, "
               "launch %.1f us",
               report.options.device.c_str(), row.threads, row.threads == 1 ? "" : "s",
               r->read_gbps, md.type.c_str(), r->handoff_us, r->launch_us);
      rates[key] = *r;
      // The CPU side measured the same way: its matrix-vector kernel over the same weights.
      auto c = measure_device("cpu", row.threads, type ? *type : DType::F16);
      if (!c.ok()) return c.error();
      log_info("bench: cpu, %d thread%s: %.1f GB/s (%s matvec)", row.threads,
               row.threads == 1 ? "" : "s", c->read_gbps, md.type.c_str());
      cpu_rates[key] = *c;
    }
    h.device_rates = rates[key];
    // Each side at the rate of its kernels: the CPU's matvec rate (never above the row's read
    // probe), and for the cold rows that rate scaled by the probe's scattered/sequential ratio.
    h.cpu_gbps = std::min(row.probe.median, cpu_rates[key].read_gbps);
    double scatter = 1.0;
    for (const ProbeStats& p : report.probe)
      if (p.threads == row.threads && p.median > 0 && p.scattered > 0) scatter = p.scattered / p.median;
    h.cpu_scattered_gbps = h.cpu_gbps * scatter;
    const double kv_cells = (static_cast<double>(row.n_gen) + 3) / 2;
    const double t = hybrid_model_seconds(h.placement, CpuRates{h.cpu_gbps, h.cpu_scattered_gbps},
                                          h.device_rates, kv_cells, h.ops);
    h.model_ts = t > 0 ? 1.0 / t : 0.0;
    h.model_ratio = h.model_ts > 0 ? row.ts_median / h.model_ts : 0.0;
  }
  return Status::Ok();
}

}  // namespace

void summarize(BenchRow& row) {
  const std::vector<double>& s = row.samples;
  if (s.empty()) return;
  row.ts_median = median_of(s);
  row.ts_min = *std::min_element(s.begin(), s.end());
  row.ts_max = *std::max_element(s.begin(), s.end());
  double mean = 0;
  for (double v : s) mean += v;
  mean /= static_cast<double>(s.size());
  double ss = 0;
  for (double v : s) ss += (v - mean) * (v - mean);
  row.ts_stddev = s.size() > 1 ? std::sqrt(ss / static_cast<double>(s.size() - 1)) : 0.0;
}

Result<BenchReport> run_bench(const BenchOptions& o) {
  BenchReport report;
  report.options = o;
  report.machine = read_machine_info();
  report.build = read_build_info();
  report.load_start = read_load_average();
  if (!o.probe_only) PI_TRY(check_models(o));

  if (o.probe_bytes < (size_t{1} << 30))
    log_warn("bench: the probe buffer (%zu MiB) is below 1 GiB: caches may inflate its rate",
             o.probe_bytes >> 20);
  auto probe = BandwidthProbe::create(o.probe_bytes);
  if (!probe.ok()) return probe.error();
  report.probe_isa = std::string(probe_isa_name((*probe)->isa()));
  report.probe_bytes = (*probe)->bytes();

  // The probe table: every thread count of -t, or 1..max(-t) for --probe.
  std::vector<int> counts = o.threads;
  if (o.probe_only) {
    counts.clear();
    for (int t = 1; t <= *std::max_element(o.threads.begin(), o.threads.end()); ++t)
      counts.push_back(t);
  }
  for (int t : counts) {
    ThreadPool pool(t);
    (void)(*probe)->pass(pool);  // wakes the workers, faults nothing (pages are resident)
    ProbeStats st = probe_stats(t, (*probe)->measure(pool, o.probe_passes));
    st.scattered_passes =
        (*probe)->measure_scattered(pool, o.probe_passes, kScatterChunkBytes, o.scatter_fraction);
    st.scattered = median_of(st.scattered_passes);
    report.probe.push_back(std::move(st));
    log_info("bench: probe %d thread%s: %.1f GB/s sequential, %.1f GB/s scattered (median of %d "
             "passes, %s loads, %zu MiB)",
             t, t == 1 ? "" : "s", report.probe.back().median, report.probe.back().scattered,
             o.probe_passes, report.probe_isa.c_str(), report.probe_bytes >> 20);
  }

  // The compute table: every path for --probe; a model run needs the kernels' int8 path alone.
  const std::optional<ComputePath> int8 = kernel_int8_path(cpu::default_isa());
  if (int8) report.int8_path = std::string(compute_path_name(*int8));
  std::vector<ComputePath> paths(kComputePaths.begin(), kComputePaths.end());
  if (!o.probe_only) paths = int8 ? std::vector<ComputePath>{*int8} : std::vector<ComputePath>{};
  measure_compute_table(o, counts, paths, report);

  PI_TRY(disk_probes(o, report));
  if (!o.probe_only)
    for (size_t i = 0; i < o.models.size(); ++i) PI_TRY(run_model(o, **probe, i, report));
  disk_shares(report);
  PI_TRY(model_hybrid_rows(report));
  int8_shares(report);
  for (BenchRow& row : report.rows) {
    if (row.hybrid.present || !row.has_bytes || row.probe.median <= 0 || row.ts_median <= 0) continue;
    double scatter = 1.0;  // scattered / sequential rate: the row's own passes, else the table's
    for (const ProbeStats& p : report.probe)
      if (p.threads == row.threads && p.median > 0 && p.scattered > 0) scatter = p.scattered / p.median;
    if (row.probe.scattered > 0) scatter = row.probe.scattered / row.probe.median;
    const double rows = row.mode == BenchMode::Sparse ? row.bytes.ffn : 0.0;
    const double seconds =
        ((row.bytes.total() - rows) + rows / scatter) / (row.probe.median * 1e9);
    row.roofline_ratio = seconds * row.ts_median;
  }
  report.load_end = read_load_average();
  return report;
}

}  // namespace pi::cli
