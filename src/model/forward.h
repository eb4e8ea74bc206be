// The forward pass shared by every architecture, driven by the model's HParams:
//
//   x = embed(tokens)  (+ position_embd[positions] where the positions are learned: opt)
//   for each layer:
//     h = norm(x);  q, k, v = proj(h) (+ biases);  rope(q, k) unless positions are learned
//     store k, v at the tokens' positions
//     a = out · attention(q, cache) (+ bias)
//     sequential (llama, bamboo, qwen2, opt): x += a;  x += ffn(norm'(x))
//     parallel   (falcon):                    x += a + ffn(norm'(x) or h)
//   logits = head · norm_out(x)     (Head::Logits)
//   hidden = norm_out(x), every token  (Head::Hidden: embeddings; the head is not computed)
//
// Which of these steps a model takes is data: the HParams (has_rope, has_pos_embd,
// parallel_residual) and the biases its weights have.
// A batch of m tokens is processed with matrix x matrix products (m = 1 is generation).
// eval() runs tokens at consecutive positions whose cells are the positions (one sequence);
// eval_batch() runs any tokens placed by a KvBatch (several sequences, shared cells). Both
// compute each token's numbers with the same kernels, and attention visits a token's cells in
// its list order, so a token's results do not depend on which path ran it as long as the
// kernels' many-token and one-token forms agree (docs/ARCHITECTURE.md, batch invariance).
// The forward pass runs on a device (backend::Device) through its ops: weights are views in
// that device's memory (the model file's mapping on the CPU), and so are the activations, in
// StepBuffers allocated from the device once for the largest batch; eval() and eval_batch()
// allocate nothing. Token ids, positions and cell lists stay on the host. The contiguous case
// is a cell list too (cell c holds position c, attending cells 0..pos), so there is one
// attention path. A hybrid pass runs on several devices ("lanes": the CPU and a GPU): a
// LanePlan says which lane runs the embedding, each layer and the head, and the residual
// stream is copied where consecutive parts change lanes (the hybrid executor). The attention
// projections and the FFN are swappable steps (ProjStep, FfnStep).
// Thread-safety: one Forward per session.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/error.h"
#include "model/ffn.h"
#include "model/kv_view.h"
#include "model/model.h"
#include "model/proj.h"
#include "backend/device.h"
#include "backend/ops.h"

namespace pi::model {

// What a pass computes after the layers: the logits of the asked rows through the output
// head, or the normalized final hidden states norm_out(x) of every token of the batch
// (llama.cpp's result_norm, what embeddings pool) without the head's product.
enum class Head { Logits, Hidden };

struct ForwardOptions {
  int64_t n_batch = 512;    // most tokens per eval() call
  bool all_logits = false;  // logits for every token of a batch, not only the last
  int64_t n_outputs = 1;    // most logit rows one eval_batch() call may ask for
};

// Activations of one step for up to n_batch tokens, row-major [tokens, features], in the
// device's memory. A lane allocates only what its roles need (Forward's lanes).
struct StepBuffers {
  backend::Buffer x;        // f32 [n_batch, n_embd]  residual stream
  backend::Buffer pos;      // f32 [n_batch, n_embd]  learned position rows (has_pos_embd)
  backend::Buffer h;        // f32 [n_batch, n_embd]  attention input (normalized x)
  backend::Buffer ffn_in;   // f32 [n_batch, n_embd]  FFN input (normalized)
  backend::Buffer qkv;      // f32 [n_batch, n_embd_q + 2 n_embd_kv]  fused projection (falcon)
  backend::Buffer q;        // f32 [n_batch, n_embd_q]
  backend::Buffer k;        // f32 [n_batch, n_embd_kv]
  backend::Buffer v;        // f32 [n_batch, n_embd_kv]
  backend::Buffer attn;     // f32 [n_batch, n_embd_q]  attention output, heads concatenated
  backend::Buffer proj;     // f32 [n_batch, n_embd]  attention output projection
  backend::Buffer ffn_out;  // f32 [n_batch, n_embd]
  backend::Buffer out_in;   // f32 [n_logits, n_embd]  normalized input of the output head
  backend::Buffer logits;   // f32 [n_logits, n_vocab]

  // What a lane does, and so which buffers it needs: the residual stream x (every lane), the
  // layers (every buffer but the head's), the output head (out_in, logits), the embedding
  // (pos).
  enum Role : unsigned { kResidual = 1, kLayers = 2, kHead = 4, kEmbed = 8, kAll = 15 };

  static Result<StepBuffers> allocate(backend::Device& dev, const HParams& hp, int64_t n_batch,
                                      int64_t n_logits, unsigned roles = kAll);
  // The sizes allocate() asks for, one entry per allocation (a ledger counts their device
  // footprints).
  static std::vector<uint64_t> allocations(const HParams& hp, int64_t n_batch, int64_t n_logits,
                                           unsigned roles = kAll);
  // Bytes allocate() asks for in all.
  static uint64_t bytes(const HParams& hp, int64_t n_batch, int64_t n_logits,
                        unsigned roles = kAll);
};

// One device's part of a forward pass: the device, the weights as it sees them (views in its
// memory; only the parts the LanePlan gives it are read) and its step buffers.
struct LaneSpec {
  backend::Device* dev = nullptr;
  const ModelWeights* weights = nullptr;
};

// Which lane (an index into the lane list) runs each part of the forward pass. The residual
// stream follows the work: it is copied between devices where consecutive parts run on
// different lanes (the embedding, each layer's attention and norms, the head).
struct LanePlan {
  int embed = 0;
  std::vector<int> layers;  // [n_layer]
  int head = 0;
  // Every part on lane 0.
  static LanePlan single(int64_t n_layer) {
    return LanePlan{0, std::vector<int>(static_cast<size_t>(n_layer), 0), 0};
  }
};

class Forward {
 public:
  // Runs `model` with `weights` (views in dev's memory: the model's own on the CPU) on `dev`;
  // allocates the step buffers and installs `ffn`, or a DenseFfn when it is null. All three
  // must outlive the Forward.
  static Result<std::unique_ptr<Forward>> create(const Model& model, const ModelWeights& weights,
                                                 backend::Device& dev, ForwardOptions opts,
                                                 std::unique_ptr<FfnStep> ffn = nullptr);
  // Runs the parts of the pass on several devices as `plan` says (`ffn`, required, runs each
  // layer's FFN on the lane of its layer: its inputs and output are that lane's memory). The
  // first lane must be host-addressable (token ids and the residual copies go through it).
  static Result<std::unique_ptr<Forward>> create(const Model& model, std::vector<LaneSpec> lanes,
                                                 LanePlan plan, ForwardOptions opts,
                                                 std::unique_ptr<FfnStep> ffn);

  const ForwardOptions& options() const { return opts_; }
  const LanePlan& lane_plan() const { return plan_; }

  // Replaces the per-layer FFN step (the sparse engine installs its own). The step must accept
  // batches of options().n_batch tokens.
  void set_ffn(std::unique_ptr<FfnStep> ffn) { ffn_ = std::move(ffn); }
  FfnStep& ffn() { return *ffn_; }
  // Replaces the attention projections' step (default: DenseProj). The step must accept
  // batches of options().n_batch tokens.
  void set_proj(std::unique_ptr<ProjStep> proj) { proj_ = std::move(proj); }

  // Runs tokens at positions pos0 .. pos0 + m - 1 (1 <= m <= n_batch). Cells [0, pos0) of `kv`
  // must hold the keys and values of the earlier positions; cells [pos0, pos0 + m) are written.
  // Fails (writing nothing) for an empty or oversized batch, a token id outside the
  // vocabulary, or positions beyond kv.n_ctx. Returns when every device has finished.
  // With Head::Hidden the pass ends at the output norm: hidden() holds every token's row.
  Status eval(std::span<const int32_t> tokens, int64_t pos0, const KvView& kv,
              Head head = Head::Logits);

  // Runs a general batch: token i at position b.pos[i], written to cell b.cell[i], attending
  // its listed cells (which must hold the keys and values of the earlier positions; its own
  // cell is written first). Logits are computed for the tokens listed in `outputs`
  // (ascending indices), at most options().n_outputs of them; logits() returns them in that
  // order. Fails (writing nothing) for an empty or oversized batch, a token id outside the
  // vocabulary, cells outside kv.n_ctx, empty attention lists or too many outputs.
  // With Head::Hidden `outputs` is ignored and hidden() holds every token's row.
  Status eval_batch(std::span<const int32_t> tokens, const KvBatch& b, const KvView& kv,
                    std::span<const int32_t> outputs, Head head = Head::Logits);

  // Logits of the last eval(): one row per token with all_logits, else the last token's row;
  // of the last eval_batch(): one row per output. f32 [rows, n_vocab]
  // On the host (the device's work is synchronised first).
  std::span<const float> logits() const;
  int64_t n_vocab() const { return static_cast<int64_t>(model_.hparams().n_vocab); }
  // The normalized final hidden states of the last pass run with Head::Hidden, one row per
  // token of its batch, f32 [m, n_embd]; empty after a pass that computed logits. On the host
  // (the device's work is synchronised first). Valid until the next pass.
  std::span<const float> hidden() const;

 private:
  struct Lane {
    backend::Device* dev;
    backend::Ops* ops;
    const ModelWeights* w;
    StepBuffers buf;
  };
  Forward(const Model& model, std::vector<Lane> lanes, LanePlan plan, ForwardOptions opts);
  Status check_tokens(std::span<const int32_t> tokens) const;
  // Positions beyond a learned position table are refused (RoPE models take any).
  Status check_position(int64_t pos) const;
  // x = embedding rows of the tokens (+ the learned rows of their positions).
  void embed(std::span<const int32_t> tokens, const int32_t* pos);
  void layers(std::span<const int32_t> tokens, const KvBatch& at, const KvView& kv);
  void attention_block(Lane& L, int64_t il, int64_t m, const KvBatch& at, const KvLayer& kv);
  // `at` with each token's list cut to the sliding window (hp.n_swa latest positions), in
  // swa_begin_ / swa_len_ (and iota_cells_ for eval()'s implicit lists).
  KvBatch window(const KvBatch& at, int64_t m, int64_t n_ctx);
  // Copies the residual stream of m tokens from lane `from` to lane `to`.
  void move_residual(int from, int to, int64_t m);
  // Logits of the rows listed in `rows` (ascending), or of the last `n` rows when rows is empty.
  void output_head(std::span<const int32_t> rows, int64_t m, int64_t n);
  // norm_out of all m rows of the residual stream, in place on the head's lane.
  void output_hidden(int64_t m);
  void sync_lanes();

  const Model& model_;
  std::vector<Lane> lanes_;
  LanePlan plan_;
  int x_lane_ = 0;  // the lane holding the residual stream during a pass
  ForwardOptions opts_;
  // eval()'s placement of its m tokens: positions pos0.. in cells pos0.., token i attending
  // cells 0 .. pos0 + i. Host memory, [n_batch].
  std::vector<int32_t> pos_;
  std::vector<int64_t> len_;
  std::vector<int32_t> pos_rows_;  // rows of position_embd of a batch's tokens, [n_batch]
  // Sliding-window layers' lists (window()): 0, 1, .., n_ctx - 1 as explicit cells, and each
  // token's cut list, [n_batch].
  std::vector<int32_t> iota_cells_;
  std::vector<int64_t> swa_begin_, swa_len_;
  std::unique_ptr<FfnStep> ffn_;
  std::unique_ptr<ProjStep> proj_;
  size_t n_logit_rows_ = 0;
  size_t n_hidden_rows_ = 0;
};

}  // namespace pi::model
