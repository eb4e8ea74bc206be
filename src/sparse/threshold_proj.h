// The attention projections with input thresholding (model::ProjStep), for files calibrated
// by `powerinfer calibrate` (act_sparsity.h): per layer and token, the entries of the
// projection's input whose magnitude is below the layer's threshold are zeroed, and only the
// rows of the transposed weights (attn_{q,k,v}_t, attn_output_t) of the kept entries are read:
//
//   attn_in   q, k, v = sum over j with |h_j| >= t of h_j * {q,k,v}_t[j, :]
//   attn_out  y       = sum over j with |a_j| >= t of a_j * out_t[j, :]
//
// A site switched off, or a projection stored in the row layout, runs densely (DenseProj's
// maths). With every threshold 0 the result is the dense projection's up to summation order.
// The masks and lists are host work on mapped device memory (as SparseFfn's filters); all
// scratch is allocated by create(). Thread-safety: one ThresholdProj per Forward.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/device.h"
#include "core/error.h"
#include "model/proj.h"
#include "sparse/act_sparsity.h"
#include "sparse/sparse_ffn.h"

namespace pi::sparse {

class ThresholdProj final : public model::ProjStep {
 public:
  // Runs on `dev` (every layer's lane), with scratch there for batches of up to max_tokens.
  // Uses thr's attn_in and attn_out thresholds (a site that is off runs densely).
  static Result<std::unique_ptr<ThresholdProj>> create(const model::Model& model,
                                                       backend::Device& dev, int64_t max_tokens,
                                                       const SiteThresholds& thr);
  // Device bytes create() allocates.
  static uint64_t scratch_bytes(const model::HParams& hp, int64_t max_tokens);

  void qkv(int64_t il, backend::Ops& ops, const model::AttnWeights& w,
           const model::QkvIo& io) override;
  void out(int64_t il, backend::Ops& ops, const model::AttnWeights& w, const float* A, int64_t m,
           float* Y) override;

  // Counters of attn_in and attn_out (the other sites' vectors are empty).
  const SiteStats& stats() const { return stats_; }
  void reset_stats();

 private:
  ThresholdProj(const model::Model& model, backend::Device& dev, const SiteThresholds& thr);
  // Masks n columns of m tokens at device address X into xs_ (kept columns in lists_);
  // returns the host's view of the masked copy's device address.
  float* mask(const float* X, int64_t m, int64_t n, float t, SiteLayerStats& st);

  const model::HParams& hp_;
  backend::Device& dev_;
  SiteThresholds thr_;
  model::DenseProj dense_;
  SiteStats stats_;
  RowLists lists_;
  backend::Buffer xs_;  // f32 [max_tokens, max(n_embd, n_embd_q)]  the masked input
};

}  // namespace pi::sparse
