// The attention block's projections of each layer as a swappable step (as FfnStep is the
// FFN's): the forward pass hands the step the normalized attention input and gets q, k, v;
// then hands it the attention output and gets the output projection, which it adds to the
// residual stream. DenseProj computes them densely from whichever layout the file stores
// (weights.h: a projection may be stored transposed); the sparse engine supplies a step that
// skips the input channels of small magnitude (sparse/threshold_proj.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/ops.h"
#include "model/model.h"

namespace pi::model {

// Device addresses of the lane that runs the layer; m tokens.
struct QkvIo {
  const float* h = nullptr;  // f32 [m, n_embd]  normalized attention input
  int64_t m = 0;
  float* q = nullptr;    // f32 [m, n_embd_q]
  float* k = nullptr;    // f32 [m, n_embd_kv]
  float* v = nullptr;    // f32 [m, n_embd_kv]
  float* qkv = nullptr;  // f32 [m, n_embd_q + 2 n_embd_kv]  scratch for fused weights (falcon)
};

class ProjStep {
 public:
  virtual ~ProjStep() = default;
  // q, k, v of layer il from io.h, computed with `ops` and `w`: the ops and the layer's
  // weights of the lane that runs the layer (its device's memory).
  virtual void qkv(int64_t il, backend::Ops& ops, const AttnWeights& w, const QkvIo& io) = 0;
  // Y = out · A: the output projection of the attention output A f32 [m, n_embd_q] to
  // Y f32 [m, n_embd] (overwritten).
  virtual void out(int64_t il, backend::Ops& ops, const AttnWeights& w, const float* A, int64_t m,
                   float* Y) = 0;
};

// Y[i] = W · X[i] for m tokens from either layout: `w` [n_out, n_in] when present, else its
// transpose `w_t` [n_in, n_out] over all its rows (`all_rows` lists 0 .. at least n_in - 1).
//   X f32 [m, n_in], Y f32 [m, n_out]
void linear_any(backend::Ops& ops, const Matrix& w, const Matrix& w_t, const float* X, int64_t m,
                std::span<const int32_t> all_rows, float* Y);

// 0, 1, ..., n - 1.
std::vector<int32_t> iota_rows(int64_t n);

// Every input channel of every projection (the forward pass's default step). Stateless but
// for the row list of the transposed layouts: one DenseProj serves every lane.
class DenseProj final : public ProjStep {
 public:
  explicit DenseProj(const HParams& hp);
  void qkv(int64_t il, backend::Ops& ops, const AttnWeights& w, const QkvIo& io) override;
  void out(int64_t il, backend::Ops& ops, const AttnWeights& w, const float* A, int64_t m,
           float* Y) override;

 private:
  HParams hp_;
  std::vector<int32_t> all_rows_;  // 0 .. max(n_embd, n_embd_q) - 1
};

}  // namespace pi::model
