// `powerinfer run --sparsity-report / --check-predictor`: the per-layer sparsity table and the
// comparison of the sparse session's logits with a dense session fed the same tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "core/error.h"
#include "powerinfer/engine.h"

namespace pi::cli {

// A dense session (SparseOptions::dense) fed the tokens the sparse session is fed, whose
// next-token logits are compared with the sparse ones after every feed (teacher forcing: the
// dense run never chooses tokens, so the two stay on the same sequence).
class DenseShadow {
 public:
  static Result<std::unique_ptr<DenseShadow>> create(const Engine& engine, SessionOptions so);

  // Feeds `tokens` to the dense session and compares its last logits with `sparse_logits`.
  Status feed(std::span<const int32_t> tokens, std::span<const float> sparse_logits);

  int64_t positions() const { return n_; }
  double max_abs_dev() const { return max_dev_; }
  double max_abs_logit() const { return max_logit_; }
  int64_t argmax_agree() const { return agree_; }

 private:
  explicit DenseShadow(std::unique_ptr<Session> s) : session_(std::move(s)) {}
  std::unique_ptr<Session> session_;
  int64_t n_ = 0, agree_ = 0;
  double max_dev_ = 0, max_logit_ = 0;
};

// Prints the report to stderr (log_info): per layer the predicted active fraction (mean over
// the processed tokens), the fraction of neurons accumulated, and with the predictor check
// recall, precision, the true active fraction and the FFN output deviation; then weight bytes
// read per token and, with `shadow`, the final-logit deviation from the dense run.
void print_sparsity_report(const SparsityReport& r, const ModelInfo& info,
                           const DenseShadow* shadow);

}  // namespace pi::cli
