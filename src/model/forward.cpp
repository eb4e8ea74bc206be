#include "model/forward.h"

#include <algorithm>

namespace pi::model {
namespace {

// Logit rows the buffers hold: every token of a batch with all_logits, else one, and at least
// the outputs of a general batch.
int64_t logit_rows(const ForwardOptions& o) {
  return std::max<int64_t>({o.all_logits ? o.n_batch : 1, o.n_outputs, 1});
}

struct BufferSpec {
  backend::Buffer StepBuffers::*member;
  const char* what;
  int64_t floats;
};

std::vector<BufferSpec> buffer_specs(const HParams& hp, int64_t n_batch, int64_t n_logits) {
  const int64_t qkv = hp.arch == Arch::Falcon ? n_batch * (hp.n_embd_q() + 2 * hp.n_embd_kv()) : 0;
  return {{&StepBuffers::x, "step buffer x", n_batch * hp.n_embd},
          {&StepBuffers::h, "step buffer h", n_batch * hp.n_embd},
          {&StepBuffers::ffn_in, "step buffer ffn_in", n_batch * hp.n_embd},
          {&StepBuffers::qkv, "step buffer qkv", qkv},
          {&StepBuffers::q, "step buffer q", n_batch * hp.n_embd_q()},
          {&StepBuffers::k, "step buffer k", n_batch * hp.n_embd_kv()},
          {&StepBuffers::v, "step buffer v", n_batch * hp.n_embd_kv()},
          {&StepBuffers::attn, "step buffer attn", n_batch * hp.n_embd_q()},
          {&StepBuffers::proj, "step buffer proj", n_batch * hp.n_embd},
          {&StepBuffers::ffn_out, "step buffer ffn_out", n_batch * hp.n_embd},
          {&StepBuffers::out_in, "step buffer out_in", n_logits * hp.n_embd},
          {&StepBuffers::logits, "step buffer logits", n_logits * hp.n_vocab}};
}

}  // namespace

Result<StepBuffers> StepBuffers::allocate(backend::Device& dev, const HParams& hp, int64_t n_batch,
                                          int64_t n_logits) {
  StepBuffers b;
  for (const BufferSpec& s : buffer_specs(hp, n_batch, n_logits)) {
    if (s.floats == 0) continue;
    auto buf = dev.alloc(static_cast<size_t>(s.floats) * sizeof(float), s.what);
    if (!buf.ok()) return buf.error();
    b.*s.member = std::move(*buf);
  }
  return b;
}

uint64_t StepBuffers::bytes(const HParams& hp, int64_t n_batch, int64_t n_logits) {
  uint64_t n = 0;
  for (const BufferSpec& s : buffer_specs(hp, n_batch, n_logits))
    n += static_cast<uint64_t>(s.floats) * sizeof(float);
  return n;
}

Result<std::unique_ptr<Forward>> Forward::create(const Model& model, const ModelWeights& weights,
                                                 backend::Device& dev, ForwardOptions opts,
                                                 std::unique_ptr<FfnStep> ffn) {
  opts.n_batch = std::max<int64_t>(opts.n_batch, 1);
  auto buf = StepBuffers::allocate(dev, model.hparams(), opts.n_batch, logit_rows(opts));
  if (!buf.ok()) return buf.error();
  if (ffn == nullptr) {
    auto dense = DenseFfn::create(model, weights, dev, opts.n_batch);
    if (!dense.ok()) return dense.error();
    ffn = std::move(*dense);
  }
  std::unique_ptr<Forward> f(new Forward(model, weights, dev, opts, std::move(*buf)));
  f->set_ffn(std::move(ffn));
  return f;
}

Forward::Forward(const Model& model, const ModelWeights& weights, backend::Device& dev,
                 ForwardOptions opts, StepBuffers buf)
    : model_(model),
      w_(weights),
      dev_(dev),
      ops_(dev.ops()),
      opts_(opts),
      buf_(std::move(buf)),
      pos_(static_cast<size_t>(opts.n_batch)),
      len_(static_cast<size_t>(opts.n_batch)) {}

std::span<const float> Forward::logits() const {
  const size_t n = n_logit_rows_ * static_cast<size_t>(n_vocab());
  if (n == 0) return {};
  return {static_cast<const float*>(dev_.map(buf_.logits.data(), n * sizeof(float))), n};
}

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
  for (int64_t i = 0; i < m; ++i) {
    pos_[static_cast<size_t>(i)] = static_cast<int32_t>(pos0 + i);
    len_[static_cast<size_t>(i)] = pos0 + i + 1;
  }
  // Cell c holds position c: each token attends cells 0 .. its position, in order.
  const KvBatch at{pos_.data(), pos_.data(), nullptr, nullptr, len_.data()};
  layers(tokens, at, kv);
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
  layers(tokens, b, kv);
  output_head(outputs, m, 0);
  return Status::Ok();
}

void Forward::layers(std::span<const int32_t> tokens, const KvBatch& at, const KvView& kv) {
  const HParams& hp = model_.hparams();
  const auto m = static_cast<int64_t>(tokens.size());
  const int64_t n_embd = hp.n_embd;
  const backend::NormParams np = hp.norm_params();
  float* x = buf_.x.as<float>();
  float* h = buf_.h.as<float>();
  float* ffn_in = buf_.ffn_in.as<float>();
  float* proj = buf_.proj.as<float>();
  float* ffn_out = buf_.ffn_out.as<float>();
  ops_.embed(w_.tok_embd, tokens.data(), m, x);

  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const LayerWeights& L = w_.layers[static_cast<size_t>(il)];
    ops_.norm(np, x, L.attn.norm, L.attn.norm_b, m, n_embd, h);
    attention_block(il, m, at, kv.layers[static_cast<size_t>(il)]);

    if (hp.parallel_residual) {
      // Falcon: attention and FFN both read the layer input; the 7B layout shares its norm.
      const float* in = h;
      if (L.ffn.norm.present()) {
        ops_.norm(np, x, L.ffn.norm, L.ffn.norm_b, m, n_embd, ffn_in);
        in = ffn_in;
      }
      ffn_->run(il, FfnInput{in, x, m}, ffn_out);
      ops_.add(x, proj, m * n_embd);
      ops_.add(x, ffn_out, m * n_embd);
    } else {
      ops_.add(x, proj, m * n_embd);
      ops_.norm(np, x, L.ffn.norm, L.ffn.norm_b, m, n_embd, ffn_in);
      ffn_->run(il, FfnInput{ffn_in, x, m}, ffn_out);
      ops_.add(x, ffn_out, m * n_embd);
    }
  }
}

void Forward::attention_block(int64_t il, int64_t m, const KvBatch& at, const KvLayer& kv) {
  const HParams& hp = model_.hparams();
  const AttnWeights& a = w_.layers[static_cast<size_t>(il)].attn;
  const int64_t n_q = hp.n_embd_q(), n_kv = hp.n_embd_kv();
  float* q = buf_.q.as<float>();
  float* k = buf_.k.as<float>();
  float* v = buf_.v.as<float>();
  const float* h = buf_.h.as<float>();
  if (a.qkv.present()) {
    float* qkv = buf_.qkv.as<float>();
    ops_.linear(a.qkv, h, m, qkv);
    const int64_t stride = n_q + 2 * n_kv;
    ops_.copy_rows(qkv, stride, q, n_q, m, n_q);
    ops_.copy_rows(qkv + n_q, stride, k, n_kv, m, n_kv);
    ops_.copy_rows(qkv + n_q + n_kv, stride, v, n_kv, m, n_kv);
  } else {
    ops_.linear3(a.q, a.k, a.v, h, m, q, k, v);
  }
  const backend::RopeParams rp = hp.rope_params();
  const backend::AttnParams ap = hp.attn_params();
  ops_.rope(rp, q, m, hp.n_head, at.pos);
  ops_.rope(rp, k, m, hp.n_head_kv, at.pos);
  ops_.store_kv(ap, k, v, m, kv, at.cell);
  ops_.attention(ap, q, m, kv, at, buf_.attn.as<float>());
  ops_.linear(a.out, buf_.attn.as<float>(), m, buf_.proj.as<float>());
}

void Forward::output_head(std::span<const int32_t> rows, int64_t m, int64_t n) {
  const HParams& hp = model_.hparams();
  const ModelWeights& w = w_;
  const backend::NormParams np = hp.norm_params();
  const float* x_all = buf_.x.as<float>();
  float* out_in = buf_.out_in.as<float>();
  n_logit_rows_ = 0;
  if (rows.empty() && n == 0) return;
  if (rows.empty()) {
    ops_.norm(np, x_all + (m - n) * hp.n_embd, w.out_norm, w.out_norm_b, n, hp.n_embd, out_in);
  } else {
    n = static_cast<int64_t>(rows.size());
    for (int64_t j = 0; j < n; ++j) {
      ops_.norm(np, x_all + rows[static_cast<size_t>(j)] * hp.n_embd, w.out_norm, w.out_norm_b, 1,
                hp.n_embd, out_in + j * hp.n_embd);
    }
  }
  ops_.linear(w.output, out_in, n, buf_.logits.as<float>());
  n_logit_rows_ = static_cast<size_t>(n);
}

}  // namespace pi::model
