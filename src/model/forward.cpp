#include "model/forward.h"

#include <algorithm>

namespace pi::model {
namespace {

std::vector<float> zeros(int64_t n) { return std::vector<float>(static_cast<size_t>(n), 0.0f); }

}  // namespace

StepBuffers StepBuffers::allocate(const HParams& hp, int64_t n_batch, int64_t n_logits) {
  StepBuffers b;
  b.x = zeros(n_batch * hp.n_embd);
  b.h = zeros(n_batch * hp.n_embd);
  b.ffn_in = zeros(n_batch * hp.n_embd);
  if (hp.arch == Arch::Falcon) b.qkv = zeros(n_batch * (hp.n_embd_q() + 2 * hp.n_embd_kv()));
  b.q = zeros(n_batch * hp.n_embd_q());
  b.k = zeros(n_batch * hp.n_embd_kv());
  b.v = zeros(n_batch * hp.n_embd_kv());
  b.attn = zeros(n_batch * hp.n_embd_q());
  b.proj = zeros(n_batch * hp.n_embd);
  b.ffn_out = zeros(n_batch * hp.n_embd);
  b.out_in = zeros(n_logits * hp.n_embd);
  b.logits = zeros(n_logits * hp.n_vocab);
  return b;
}

namespace {

// Logit rows the buffers hold: every token of a batch with all_logits, else one, and at least
// the outputs of a general batch.
int64_t logit_rows(const ForwardOptions& o) {
  return std::max<int64_t>({o.all_logits ? o.n_batch : 1, o.n_outputs, 1});
}

}  // namespace

Forward::Forward(const Model& model, Ops& ops, ForwardOptions opts)
    : model_(model),
      ops_(ops),
      opts_(opts),
      buf_(StepBuffers::allocate(model.hparams(), std::max<int64_t>(opts.n_batch, 1),
                                 logit_rows(opts))),
      ffn_(std::make_unique<DenseFfn>(model, ops, std::max<int64_t>(opts.n_batch, 1))) {}

Status Forward::check_tokens(std::span<const int32_t> tokens) const {
  const HParams& hp = model_.hparams();
  const auto m = static_cast<int64_t>(tokens.size());
  if (m < 1 || m > opts_.n_batch) {
    return err("batch of %lld tokens (must be 1..%lld)", static_cast<long long>(m),
               static_cast<long long>(opts_.n_batch));
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= hp.n_vocab) {
      return err("token id %d outside the vocabulary [0, %lld)", t,
                 static_cast<long long>(hp.n_vocab));
    }
  }
  return Status::Ok();
}

Status Forward::eval(std::span<const int32_t> tokens, int64_t pos0, const KvView& kv) {
  const auto m = static_cast<int64_t>(tokens.size());
  PI_TRY(check_tokens(tokens));
  if (pos0 < 0 || pos0 + m > kv.n_ctx) {
    return err("context overflow: positions %lld..%lld do not fit a context of %lld",
               static_cast<long long>(pos0), static_cast<long long>(pos0 + m - 1),
               static_cast<long long>(kv.n_ctx));
  }
  layers(tokens, Placement{pos0, nullptr}, kv);
  const int64_t rows = opts_.all_logits ? m : 1;
  output_head({}, m, rows);
  return Status::Ok();
}

Status Forward::eval_batch(std::span<const int32_t> tokens, const KvBatch& b, const KvView& kv,
                           std::span<const int32_t> outputs) {
  const auto m = static_cast<int64_t>(tokens.size());
  PI_TRY(check_tokens(tokens));
  if (static_cast<int64_t>(outputs.size()) > logit_rows(opts_)) {
    return err("%zu logit rows asked for, at most %lld per batch", outputs.size(),
               static_cast<long long>(logit_rows(opts_)));
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (outputs[k] < 0 || outputs[k] >= m || (k > 0 && outputs[k] <= outputs[k - 1]))
      return err("logit rows must be ascending token indices in [0, %lld)", static_cast<long long>(m));
  }
  const auto bad_cell = [&](int64_t c) { return c < 0 || c >= kv.n_ctx; };
  for (int64_t i = 0; i < m; ++i) {
    if (b.pos[i] < 0 || bad_cell(b.cell[i]))
      return err("token %lld: position %d in cell %d (context of %lld cells)",
                 static_cast<long long>(i), b.pos[i], b.cell[i],
                 static_cast<long long>(kv.n_ctx));
    if (b.attn_len[i] < 1 || b.attn_len[i] > kv.n_ctx)
      return err("token %lld attends %lld cells (must be 1..%lld)", static_cast<long long>(i),
                 static_cast<long long>(b.attn_len[i]), static_cast<long long>(kv.n_ctx));
    for (int64_t k = 0; k < b.attn_len[i]; ++k) {
      if (bad_cell(b.attn_cells[b.attn_begin[i] + k]))
        return err("token %lld attends cell %d outside the context of %lld cells",
                   static_cast<long long>(i), b.attn_cells[b.attn_begin[i] + k],
                   static_cast<long long>(kv.n_ctx));
    }
  }
  layers(tokens, Placement{0, &b}, kv);
  output_head(outputs, m, 0);
  return Status::Ok();
}

void Forward::layers(std::span<const int32_t> tokens, const Placement& at, const KvView& kv) {
  const HParams& hp = model_.hparams();
  const ModelWeights& w = model_.weights();
  const auto m = static_cast<int64_t>(tokens.size());
  const int64_t n_embd = hp.n_embd;
  float* x = buf_.x.data();
  ops_.embed(w.tok_embd, tokens.data(), m, x);

  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const LayerWeights& L = w.layers[static_cast<size_t>(il)];
    ops_.norm(hp.norm, x, L.attn.norm, L.attn.norm_b, m, n_embd, hp.norm_eps, buf_.h.data());
    attention_block(il, m, at, kv.layers[static_cast<size_t>(il)]);

    const float* ffn_in = buf_.ffn_in.data();
    if (hp.parallel_residual) {
      // Falcon: attention and FFN both read the layer input; the 7B layout shares its norm.
      if (L.ffn.norm.present()) {
        ops_.norm(hp.norm, x, L.ffn.norm, L.ffn.norm_b, m, n_embd, hp.norm_eps, buf_.ffn_in.data());
      } else {
        ffn_in = buf_.h.data();
      }
      ffn_->run(il, FfnInput{ffn_in, x, m}, buf_.ffn_out.data());
      ops_.add(x, buf_.proj.data(), m * n_embd);
      ops_.add(x, buf_.ffn_out.data(), m * n_embd);
    } else {
      ops_.add(x, buf_.proj.data(), m * n_embd);
      ops_.norm(hp.norm, x, L.ffn.norm, L.ffn.norm_b, m, n_embd, hp.norm_eps, buf_.ffn_in.data());
      ffn_->run(il, FfnInput{ffn_in, x, m}, buf_.ffn_out.data());
      ops_.add(x, buf_.ffn_out.data(), m * n_embd);
    }
  }
}

void Forward::attention_block(int64_t il, int64_t m, const Placement& at, const KvLayer& kv) {
  const HParams& hp = model_.hparams();
  const AttnWeights& a = model_.weights().layers[static_cast<size_t>(il)].attn;
  const int64_t n_q = hp.n_embd_q(), n_kv = hp.n_embd_kv();
  float* q = buf_.q.data();
  float* k = buf_.k.data();
  float* v = buf_.v.data();
  if (a.qkv.present()) {
    ops_.linear(a.qkv, buf_.h.data(), m, buf_.qkv.data());
    const int64_t stride = n_q + 2 * n_kv;
    for (int64_t i = 0; i < m; ++i) {
      const float* row = buf_.qkv.data() + i * stride;
      std::copy(row, row + n_q, q + i * n_q);
      std::copy(row + n_q, row + n_q + n_kv, k + i * n_kv);
      std::copy(row + n_q + n_kv, row + stride, v + i * n_kv);
    }
  } else {
    ops_.linear3(a.q, a.k, a.v, buf_.h.data(), m, q, k, v);
  }
  if (at.batch == nullptr) {
    ops_.rope(q, m, hp.n_head, hp, at.pos0);
    ops_.rope(k, m, hp.n_head_kv, hp, at.pos0);
    ops_.store_kv(k, v, m, hp, kv, at.pos0);
    ops_.attention(q, m, kv, hp, at.pos0, buf_.attn.data());
  } else {
    const KvBatch& b = *at.batch;
    ops_.rope_at(q, m, hp.n_head, hp, b.pos);
    ops_.rope_at(k, m, hp.n_head_kv, hp, b.pos);
    ops_.store_kv_cells(k, v, m, hp, kv, b.cell);
    ops_.attention_cells(q, m, kv, hp, b, buf_.attn.data());
  }
  ops_.linear(a.out, buf_.attn.data(), m, buf_.proj.data());
}

void Forward::output_head(std::span<const int32_t> rows, int64_t m, int64_t n) {
  const HParams& hp = model_.hparams();
  const ModelWeights& w = model_.weights();
  n_logit_rows_ = 0;
  if (rows.empty() && n == 0) return;
  if (rows.empty()) {
    const float* x = buf_.x.data() + (m - n) * hp.n_embd;
    ops_.norm(hp.norm, x, w.out_norm, w.out_norm_b, n, hp.n_embd, hp.norm_eps, buf_.out_in.data());
  } else {
    n = static_cast<int64_t>(rows.size());
    for (int64_t j = 0; j < n; ++j) {
      ops_.norm(hp.norm, buf_.x.data() + rows[static_cast<size_t>(j)] * hp.n_embd, w.out_norm,
                w.out_norm_b, 1, hp.n_embd, hp.norm_eps, buf_.out_in.data() + j * hp.n_embd);
    }
  }
  ops_.linear(w.output, buf_.out_in.data(), n, buf_.logits.data());
  n_logit_rows_ = static_cast<size_t>(n);
}

}  // namespace pi::model
