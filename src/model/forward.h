// The forward pass shared by every architecture, driven by the model's HParams:
//
//   x = embed(tokens)
//   for each layer:
//     h = norm(x);  q, k, v = proj(h);  rope(q, k);  store k, v at the tokens' positions
//     a = out · attention(q, cache)
//     sequential (llama, bamboo): x += a;  x += ffn(norm'(x))
//     parallel   (falcon):        x += a + ffn(norm'(x) or h)
//   logits = head · norm_out(x)
//
// A batch of m tokens is processed with matrix x matrix products (m = 1 is generation).
// All activations live in StepBuffers, allocated once for the largest batch; eval() allocates
// nothing. Thread-safety: one Forward per session.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/error.h"
#include "model/ffn.h"
#include "model/kv_view.h"
#include "model/model.h"
#include "model/ops.h"

namespace pi::model {

struct ForwardOptions {
  int64_t n_batch = 512;    // most tokens per eval() call
  bool all_logits = false;  // logits for every token of a batch, not only the last
};

// Activations of one step for up to n_batch tokens, row-major [tokens, features].
struct StepBuffers {
  std::vector<float> x;        // f32 [n_batch, n_embd]  residual stream
  std::vector<float> h;        // f32 [n_batch, n_embd]  attention input (normalized x)
  std::vector<float> ffn_in;   // f32 [n_batch, n_embd]  FFN input (normalized)
  std::vector<float> qkv;      // f32 [n_batch, n_embd_q + 2 n_embd_kv]  fused projection (falcon)
  std::vector<float> q;        // f32 [n_batch, n_embd_q]
  std::vector<float> k;        // f32 [n_batch, n_embd_kv]
  std::vector<float> v;        // f32 [n_batch, n_embd_kv]
  std::vector<float> attn;     // f32 [n_batch, n_embd_q]  attention output, heads concatenated
  std::vector<float> proj;     // f32 [n_batch, n_embd]  attention output projection
  std::vector<float> ffn_out;  // f32 [n_batch, n_embd]
  std::vector<float> out_in;   // f32 [n_logits, n_embd]  normalized input of the output head
  std::vector<float> logits;   // f32 [n_logits, n_vocab]  n_logits = n_batch or 1

  static StepBuffers allocate(const HParams& hp, int64_t n_batch, bool all_logits);
};

class Forward {
 public:
  // `model` and `ops` must outlive the Forward. Installs a DenseFfn.
  Forward(const Model& model, Ops& ops, ForwardOptions opts);

  const ForwardOptions& options() const { return opts_; }

  // Replaces the per-layer FFN step (the sparse engine installs its own). The step must accept
  // batches of options().n_batch tokens.
  void set_ffn(std::unique_ptr<FfnStep> ffn) { ffn_ = std::move(ffn); }

  // Runs tokens at positions pos0 .. pos0 + m - 1 (1 <= m <= n_batch). Cells [0, pos0) of `kv`
  // must hold the keys and values of the earlier positions; cells [pos0, pos0 + m) are written.
  // Fails (writing nothing) for an empty or oversized batch, a token id outside the
  // vocabulary, or positions beyond kv.n_ctx.
  Status eval(std::span<const int32_t> tokens, int64_t pos0, const KvView& kv);

  // Logits of the last eval(): one row per token with all_logits, else the last token's row.
  // f32 [rows, n_vocab]
  std::span<const float> logits() const {
    return {buf_.logits.data(), n_logit_rows_ * static_cast<size_t>(n_vocab())};
  }
  int64_t n_vocab() const { return static_cast<int64_t>(model_.hparams().n_vocab); }

 private:
  void attention_block(int64_t il, int64_t m, int64_t pos0, const KvLayer& kv);
  void output_head(int64_t m);

  const Model& model_;
  Ops& ops_;
  ForwardOptions opts_;
  StepBuffers buf_;
  std::unique_ptr<FfnStep> ffn_;
  size_t n_logit_rows_ = 0;
};

}  // namespace pi::model
