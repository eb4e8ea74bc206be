#include "synth_model.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "core/progress.h"
#include "core/thread_pool.h"
#include "gguf/writer.h"
#include "synth_activity.h"
#include "sparse/activation_stats.h"
#include "sparse/placement_model.h"
#include "synth_weights.h"
#include "tensor/quant.h"

namespace pi::workflows::synth {

namespace {

constexpr size_t kChunkBytes = size_t{4} << 20;  // output bytes generated per pool job

// DIR/activation_N.npy per layer, and `stats` gets the same probabilities for
// DIR/activation_stats.gguf (written once the model file exists, to record its fingerprint).
Status write_activations(const Spec& s, Generator& gen, Report& rep, sparse::ActivationStats& stats) {
  std::error_code ec;
  std::filesystem::create_directories(s.activation_dir, ec);
  if (ec)
    return err("%s: cannot create directory: %s", s.activation_dir.c_str(), ec.message().c_str());
  // Probabilities are expected counts per token: n_tokens = 1.
  stats.n_tokens = 1;
  stats.source = "synth";
  for (int64_t l = 0; l < s.n_layer; ++l) {
    gen.prepare_layer(l);
    auto p = gen.probabilities();
    const std::string path =
        (std::filesystem::path(s.activation_dir) / ("activation_" + std::to_string(l) + ".npy"))
            .string();
    PI_TRY(write_npy_f32(path, p));
    stats.counts.emplace_back(p.begin(), p.end());
    ++rep.n_activation_files;
  }
  return Status::Ok();
}

Status write_stats_file(const Spec& s, sparse::ActivationStats& stats) {
  auto f = gguf::File::open(s.output);
  if (!f.ok()) return f.error();
  stats.model_fingerprint = sparse::model_fingerprint(*f);
  return sparse::write_activation_stats(
      (std::filesystem::path(s.activation_dir) / kStatsFileName).string(), stats);
}

}  // namespace

Result<Report> write_model(const Spec& s, int threads, bool progress) {
  Report rep;
  auto law = solve_power_law(s.n_ff, s.activity, s.hot_fraction, s.hot_share, kMaxProbability);
  if (!law.ok()) return law.error();
  rep.alpha = law->alpha;
  Generator gen(s, *law);
  sparse::ActivationStats stats;
  if (!s.activation_dir.empty()) PI_TRY(write_activations(s, gen, rep, stats));

  gguf::Writer w(s.pwri ? gguf::Magic::PWRI : gguf::Magic::GGUF);
  PI_TRY(add_metadata(w, s, law->alpha));
  const std::vector<TensorPlan> plan = plan_tensors(s);
  uint64_t total = 0;
  for (const TensorPlan& t : plan) {
    PI_TRY(w.add_tensor(t.name, t.type, t.shape));
    total += row_bytes(t.type, t.shape.cols()) * static_cast<uint64_t>(t.shape.rows());
  }
  PI_TRY(w.begin(s.output));

  ThreadPool pool(std::max(1, threads));
  std::vector<std::vector<float>> rows(static_cast<size_t>(pool.size()));
  std::vector<std::vector<float>> scratch(static_cast<size_t>(pool.size()));
  std::vector<std::byte> chunk;
  std::optional<ProgressBar> bar;
  if (progress) bar.emplace("synth", total);
  uint64_t done = 0;
  double p_sum = 0;
  int64_t p_count = 0;
  for (const TensorPlan& t : plan) {
    if (t.layer >= 0 && (t.kind == Kind::Key || t.kind == Kind::ExpertKey)) {
      gen.prepare_layer(t.layer);
      for (float p : gen.probabilities()) p_sum += p;
      p_count += static_cast<int64_t>(gen.probabilities().size());
    } else if (t.layer >= 0) {
      gen.prepare_layer(t.layer);
    }
    const int64_t cols = t.shape.cols(), n_rows = t.shape.rows();
    const size_t rb = row_bytes(t.type, cols);
    const int64_t per_chunk =
        std::clamp<int64_t>(static_cast<int64_t>(kChunkBytes / rb), 1, n_rows);
    chunk.resize(rb * static_cast<size_t>(per_chunk));
    for (auto& r : rows) r.resize(static_cast<size_t>(cols));
    for (auto& sc : scratch) sc.resize(gen.scratch_size());
    std::atomic<bool> failed{false};
    std::mutex err_mu;
    std::string err_msg;
    for (int64_t r0 = 0; r0 < n_rows; r0 += per_chunk) {
      const int64_t nr = std::min(per_chunk, n_rows - r0);
      pool.parallel_for(
          nr,
          [&](int64_t i, int thread) {
            float* row = rows[static_cast<size_t>(thread)].data();
            gen.row(t, r0 + i, row, scratch[static_cast<size_t>(thread)].data());
            Status st = quantize_row(t.type, row, chunk.data() + static_cast<size_t>(i) * rb, cols);
            if (!st.ok() && !failed.exchange(true)) {
              std::lock_guard lock(err_mu);
              err_msg = st.error().message;
            }
          },
          Schedule::Dynamic, 8);
      if (failed)
        return err("%s: tensor '%s': %s", s.output.c_str(), t.name.c_str(), err_msg.c_str());
      PI_TRY(w.write(std::span(chunk.data(), rb * static_cast<size_t>(nr))));
      done += rb * static_cast<uint64_t>(nr);
      if (bar) bar->update(done);
    }
    ++rep.n_tensors;
  }
  PI_TRY(w.finish());
  if (bar) bar->finish();
  rep.expected_activity = p_count > 0 ? p_sum / static_cast<double>(p_count) : 0;
  std::error_code ec;
  rep.file_bytes = std::filesystem::file_size(s.output, ec);
  if (!s.activation_dir.empty()) PI_TRY(write_stats_file(s, stats));
  return rep;
}

}  // namespace pi::workflows::synth
