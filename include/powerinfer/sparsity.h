// Sparse inference in the public API: the session options that choose sparse or dense
// execution of PowerInfer (PWRI) files, and the per-layer statistics a session collects.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pi {

struct SparseOptions {
  // PWRI files run sparse (predictor + active neurons only) unless dense is set; dense still
  // uses the file's ReLU FFN. Ordinary GGUF files always run dense.
  bool dense = false;
  // Predictor threshold (neuron active iff logit >= threshold). Unset: threshold_env if not
  // empty, else the file's powerinfer.sparse_threshold, else 0. "-inf" predicts every neuron.
  std::optional<float> threshold;
  // The text of the original's environment variable LLAMA_SPARSE_PRED_THRESHOLD as the front
  // end read it (the CLI and Python do; the library reads no environment); empty: unset. An
  // unparsable value is an error naming the variable.
  std::string threshold_env;
  // Also compute the dense FFN of every layer and compare (recall, precision, FFN output
  // deviation). About doubles the FFN work; the generated output is unchanged.
  bool check_predictor = false;
  // Files calibrated by `powerinfer calibrate` (activation thresholds, docs/ACT_SPARSITY.md):
  // the sparsity to run at (unset: the file's target): model-wide (the share of the layers'
  // projection bytes left unread) through the file's allocation when it has one, else the
  // share of activations zeroed at each site; levels of single sites that override it
  // ("ffn_in=0.3,attn_out=0.6"); `uniform_sparsity` ignores the allocation (every site at
  // `sparsity`); and the sites to sparsify, comma-separated from attn_in, attn_out, ffn_in,
  // ffn_gate (unset: every site the file calibrated). `dense` runs such files densely.
  std::optional<double> sparsity;
  std::optional<std::string> site_sparsity;
  bool uniform_sparsity = false;
  std::optional<std::string> sites;
};

// Counters of one layer since the session was created or reset_sparsity() was called.
struct LayerSparsity {
  int64_t tokens = 0;     // tokens this layer processed
  int64_t n_ff = 0;       // neurons of the layer
  int64_t predicted = 0;  // predicted active, summed over tokens
  int64_t computed = 0;   // nonzero activations accumulated from ffn_down_t, summed over tokens
  uint64_t bytes = 0;     // predictor + FFN weight bytes read (rows actually read)
  // Batched gate/up products by path: per-token, lists, union, dense (sparse/batch_cost.h).
  int64_t batch_paths[4] = {0, 0, 0, 0};
  double predict_s = 0, rows_s = 0, down_s = 0;  // wall time in predictor, gate/up, down
  // With check_predictor:
  int64_t truly_active = 0;  // nonzero activations of the dense FFN, summed over tokens
  int64_t caught = 0;        // truly active and predicted
  double max_abs_dev = 0;    // max |sparse - dense| FFN output element
  double max_abs_dense = 0;  // max |dense| FFN output element

  double active_fraction() const {
    return tokens > 0 ? double(predicted) / double(tokens * n_ff) : 0.0;
  }
  double recall() const { return truly_active > 0 ? double(caught) / double(truly_active) : 1.0; }
  double precision() const { return predicted > 0 ? double(caught) / double(predicted) : 1.0; }
};

// Calibrated files: one thresholded site, per layer since the session was created or reset.
struct SiteSparsity {
  std::string site;             // attn_in, attn_out, ffn_in or ffn_gate
  int64_t tokens = 0;           // tokens layer 0 ran
  std::vector<int64_t> entries;  // entries thresholded (tokens x width)
  std::vector<int64_t> kept;     // entries at or above the threshold
  std::vector<uint64_t> bytes;   // weight bytes the site's products read
  std::vector<double> seconds;   // wall time of the site's products
  std::vector<float> thresholds;
  std::vector<float> levels;          // the calibrated level each layer's threshold is for
  std::vector<uint64_t> weight_bytes;  // bytes of the layer's projections the site cuts

  double zeroed_fraction() const {
    int64_t e = 0, k = 0;
    for (size_t l = 0; l < entries.size(); ++l) e += entries[l], k += kept[l];
    return e > 0 ? 1.0 - double(k) / double(e) : 0.0;
  }
};

struct SparsityReport {
  bool sparse = false;   // the session runs the sparse FFN
  bool checked = false;  // check_predictor was on
  float threshold = 0.0f;
  // "flag", "LLAMA_SPARSE_PRED_THRESHOLD", "powerinfer.sparse_threshold" or "default"
  std::string threshold_source;
  uint64_t ffn_bytes_dense = 0;  // bytes of all FFN matrices (gate, up, down) of all layers
  std::vector<LayerSparsity> layers;
  // Calibrated files run with activation thresholds:
  bool thresholded = false;
  double act_sparsity = 0;        // the sparsity level run
  bool allocated = false;         // site levels from the file's allocation (act_sparsity model-wide)
  uint64_t projection_bytes = 0;  // bytes of every projection of every layer
  std::vector<SiteSparsity> sites;  // the sites run

  // The share of the projection bytes left unread: sum over sites and layers of the zeroed
  // share times the bytes the site cuts, over projection_bytes.
  double model_wide_zeroed() const {
    double skipped = 0;
    for (const SiteSparsity& s : sites) {
      for (size_t l = 0; l < s.entries.size() && l < s.weight_bytes.size(); ++l) {
        if (s.entries[l] > 0)
          skipped += double(s.weight_bytes[l]) * (1.0 - double(s.kept[l]) / double(s.entries[l]));
      }
    }
    return projection_bytes > 0 ? skipped / double(projection_bytes) : 0.0;
  }
};

}  // namespace pi
