// The attention block's projections of each layer as a swappable step (as FfnStep is the
// FFN's): the forward pass hands the step the normalized attention input and gets q, k, v;
// then hands it the attention output and gets the output projection, which it adds to the
// residual stream. DenseProj computes them densely; a sparse engine may supply a step that
// computes them otherwise.
#pragma once

#include <cstdint>

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

// Every input channel of every projection (the forward pass's default step). Stateless: one
// DenseProj serves every lane.
class DenseProj final : public ProjStep {
 public:
  explicit DenseProj(const HParams& hp) : hp_(hp) {}
  void qkv(int64_t il, backend::Ops& ops, const AttnWeights& w, const QkvIo& io) override;
  void out(int64_t il, backend::Ops& ops, const AttnWeights& w, const float* A, int64_t m,
           float* Y) override;

 private:
  HParams hp_;
};

}  // namespace pi::model
