#include "model/forward.h"

#include <algorithm>

namespace pi::model {
namespace {

std::vector<float> zeros(int64_t n) { return std::vector<float>(static_cast<size_t>(n), 0.0f); }

}  // namespace

StepBuffers StepBuffers::allocate(const HParams& hp, int64_t n_batch, bool all_logits) {
  StepBuffers b;
  const int64_t n_logits = all_logits ? n_batch : 1;
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

Forward::Forward(const Model& model, Ops& ops, ForwardOptions opts)
    : model_(model),
      ops_(ops),
      opts_(opts),
      buf_(StepBuffers::allocate(model.hparams(), std::max<int64_t>(opts.n_batch, 1),
                                 opts.all_logits)),
      ffn_(std::make_unique<DenseFfn>(model, ops, std::max<int64_t>(opts.n_batch, 1))) {}

Status Forward::eval(std::span<const int32_t> tokens, int64_t pos0, const KvView& kv) {
  const HParams& hp = model_.hparams();
  const ModelWeights& w = model_.weights();
  const auto m = static_cast<int64_t>(tokens.size());
  if (m < 1 || m > opts_.n_batch) {
    return err("batch of %lld tokens (must be 1..%lld)", static_cast<long long>(m),
               static_cast<long long>(opts_.n_batch));
  }
  if (pos0 < 0 || pos0 + m > kv.n_ctx) {
    return err("context overflow: positions %lld..%lld do not fit a context of %lld",
               static_cast<long long>(pos0), static_cast<long long>(pos0 + m - 1),
               static_cast<long long>(kv.n_ctx));
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= hp.n_vocab) {
      return err("token id %d outside the vocabulary [0, %lld)", t,
                 static_cast<long long>(hp.n_vocab));
    }
  }

  const int64_t n_embd = hp.n_embd;
  float* x = buf_.x.data();
  ops_.embed(w.tok_embd, tokens.data(), m, x);

  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const LayerWeights& L = w.layers[static_cast<size_t>(il)];
    ops_.norm(hp.norm, x, L.attn.norm, L.attn.norm_b, m, n_embd, hp.norm_eps, buf_.h.data());
    attention_block(il, m, pos0, kv.layers[static_cast<size_t>(il)]);

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
  output_head(m);
  return Status::Ok();
}

void Forward::attention_block(int64_t il, int64_t m, int64_t pos0, const KvLayer& kv) {
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
    ops_.linear(a.q, buf_.h.data(), m, q);
    ops_.linear(a.k, buf_.h.data(), m, k);
    ops_.linear(a.v, buf_.h.data(), m, v);
  }
  ops_.rope(q, m, hp.n_head, hp, pos0);
  ops_.rope(k, m, hp.n_head_kv, hp, pos0);
  ops_.store_kv(k, v, m, n_kv, kv, pos0);
  ops_.attention(q, m, kv, hp, pos0, buf_.attn.data());
  ops_.linear(a.out, buf_.attn.data(), m, buf_.proj.data());
}

void Forward::output_head(int64_t m) {
  const HParams& hp = model_.hparams();
  const ModelWeights& w = model_.weights();
  const int64_t rows = opts_.all_logits ? m : 1;
  const float* x = buf_.x.data() + (m - rows) * hp.n_embd;
  ops_.norm(hp.norm, x, w.out_norm, w.out_norm_b, rows, hp.n_embd, hp.norm_eps, buf_.out_in.data());
  ops_.linear(w.output, buf_.out_in.data(), rows, buf_.logits.data());
  n_logit_rows_ = static_cast<size_t>(rows);
}

}  // namespace pi::model
