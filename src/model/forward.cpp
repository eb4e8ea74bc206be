#include "model/forward.h"

#include "model/moe_ffn.h"

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
  unsigned roles;  // the lane roles that need it
};

std::vector<BufferSpec> buffer_specs(const HParams& hp, int64_t n_batch, int64_t n_logits) {
  const int64_t qkv = hp.arch == Arch::Falcon ? n_batch * (hp.n_embd_q() + 2 * hp.n_embd_kv()) : 0;
  constexpr unsigned R = StepBuffers::kResidual, L = StepBuffers::kLayers, H = StepBuffers::kHead;
  constexpr unsigned E = StepBuffers::kEmbed;
  const int64_t pos = hp.has_pos_embd ? n_batch * hp.n_embd : 0;
  return {{&StepBuffers::x, "step buffer x", n_batch * hp.n_embd, R | L | H},
          {&StepBuffers::pos, "step buffer pos", pos, E},
          {&StepBuffers::h, "step buffer h", n_batch * hp.n_embd, L},
          {&StepBuffers::ffn_in, "step buffer ffn_in", n_batch * hp.n_embd, L},
          {&StepBuffers::qkv, "step buffer qkv", qkv, L},
          {&StepBuffers::q, "step buffer q", n_batch * hp.n_embd_q(), L},
          {&StepBuffers::k, "step buffer k", n_batch * hp.n_embd_kv(), L},
          {&StepBuffers::v, "step buffer v", n_batch * hp.n_embd_kv(), L},
          {&StepBuffers::attn, "step buffer attn", n_batch * hp.n_embd_q(), L},
          {&StepBuffers::proj, "step buffer proj", n_batch * hp.n_embd, L},
          {&StepBuffers::ffn_out, "step buffer ffn_out", n_batch * hp.n_embd, L},
          {&StepBuffers::out_in, "step buffer out_in", n_logits * hp.n_embd, H},
          {&StepBuffers::logits, "step buffer logits", n_logits * hp.n_vocab, H}};
}

}  // namespace

Result<StepBuffers> StepBuffers::allocate(backend::Device& dev, const HParams& hp, int64_t n_batch,
                                          int64_t n_logits, unsigned roles) {
  StepBuffers b;
  for (const BufferSpec& s : buffer_specs(hp, n_batch, n_logits)) {
    if (s.floats == 0 || (s.roles & roles) == 0) continue;
    auto buf = dev.alloc(static_cast<size_t>(s.floats) * sizeof(float), s.what);
    if (!buf.ok()) return buf.error();
    b.*s.member = std::move(*buf);
  }
  return b;
}

std::vector<uint64_t> StepBuffers::allocations(const HParams& hp, int64_t n_batch,
                                               int64_t n_logits, unsigned roles) {
  std::vector<uint64_t> out;
  for (const BufferSpec& s : buffer_specs(hp, n_batch, n_logits))
    if (s.floats != 0 && (s.roles & roles) != 0)
      out.push_back(static_cast<uint64_t>(s.floats) * sizeof(float));
  return out;
}

uint64_t StepBuffers::bytes(const HParams& hp, int64_t n_batch, int64_t n_logits, unsigned roles) {
  uint64_t n = 0;
  for (uint64_t b : allocations(hp, n_batch, n_logits, roles)) n += b;
  return n;
}

Result<std::unique_ptr<Forward>> Forward::create(const Model& model, const ModelWeights& weights,
                                                 backend::Device& dev, ForwardOptions opts,
                                                 std::unique_ptr<FfnStep> ffn) {
  opts.n_batch = std::max<int64_t>(opts.n_batch, 1);
  if (ffn == nullptr) {
    auto step = make_ffn(model, weights, dev, opts.n_batch);
    if (!step.ok()) return step.error();
    ffn = std::move(*step);
  }
  return create(model, {LaneSpec{&dev, &weights}}, LanePlan::single(model.hparams().n_layer), opts,
                std::move(ffn));
}

Result<std::unique_ptr<Forward>> Forward::create(const Model& model, std::vector<LaneSpec> specs,
                                                 LanePlan plan, ForwardOptions opts,
                                                 std::unique_ptr<FfnStep> ffn) {
  const HParams& hp = model.hparams();
  opts.n_batch = std::max<int64_t>(opts.n_batch, 1);
  const auto n_lanes = static_cast<int>(specs.size());
  const auto bad = [&](int l) { return l < 0 || l >= n_lanes; };
  if (n_lanes < 1 || ffn == nullptr || static_cast<int64_t>(plan.layers.size()) != hp.n_layer ||
      bad(plan.embed) || bad(plan.head) ||
      std::any_of(plan.layers.begin(), plan.layers.end(), bad)) {
    return err("forward pass: a lane plan for %d lanes and %lld layers that does not fit them",
               n_lanes, static_cast<long long>(hp.n_layer));
  }
  if (n_lanes > 1 && !specs[0].dev->host_addressable())
    return err("forward pass: the first of several lanes must be the host");
  std::vector<Lane> lanes;
  for (int l = 0; l < n_lanes; ++l) {
    // A lane holds the residual stream if it embeds, runs a layer or the head.
    unsigned roles = plan.embed == l ? StepBuffers::kResidual : 0u;
    if (std::find(plan.layers.begin(), plan.layers.end(), l) != plan.layers.end())
      roles |= StepBuffers::kResidual | StepBuffers::kLayers;
    if (plan.head == l) roles |= StepBuffers::kResidual | StepBuffers::kHead;
    if (plan.embed == l) roles |= StepBuffers::kEmbed;
    auto buf = StepBuffers::allocate(*specs[static_cast<size_t>(l)].dev, hp, opts.n_batch,
                                     logit_rows(opts), roles);
    if (!buf.ok()) return buf.error();
    const LaneSpec& s = specs[static_cast<size_t>(l)];
    lanes.push_back(Lane{s.dev, &s.dev->ops(), s.weights, std::move(*buf)});
  }
  std::unique_ptr<Forward> f(new Forward(model, std::move(lanes), std::move(plan), opts));
  f->set_ffn(std::move(ffn));
  return f;
}

Forward::Forward(const Model& model, std::vector<Lane> lanes, LanePlan plan, ForwardOptions opts)
    : model_(model),
      lanes_(std::move(lanes)),
      plan_(std::move(plan)),
      opts_(opts),
      pos_(static_cast<size_t>(opts.n_batch)),
      len_(static_cast<size_t>(opts.n_batch)),
      pos_rows_(model.hparams().has_pos_embd ? static_cast<size_t>(opts.n_batch) : 0),
      proj_(std::make_unique<DenseProj>(model.hparams())) {}

std::span<const float> Forward::logits() const {
  const size_t n = n_logit_rows_ * static_cast<size_t>(n_vocab());
  if (n == 0) return {};
  const Lane& L = lanes_[static_cast<size_t>(plan_.head)];
  return {static_cast<const float*>(L.dev->map(L.buf.logits.data(), n * sizeof(float))), n};
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

Status Forward::check_position(int64_t pos) const {
  const HParams& hp = model_.hparams();
  if (hp.n_pos > 0 && pos >= hp.n_pos) {
    return err("position %lld is beyond the %lld positions of the model's learned position "
               "table (position_embd)",
               static_cast<long long>(pos), static_cast<long long>(hp.n_pos));
  }
  return Status::Ok();
}

Status Forward::eval(std::span<const int32_t> tokens, int64_t pos0, const KvView& kv, Head head) {
  const auto m = static_cast<int64_t>(tokens.size());
  PI_TRY(check_tokens(tokens));
  if (pos0 < 0 || pos0 + m > kv.n_ctx) {
    return err("context overflow: positions %lld..%lld do not fit a context of %lld",
               static_cast<long long>(pos0), static_cast<long long>(pos0 + m - 1),
               static_cast<long long>(kv.n_ctx));
  }
  PI_TRY(check_position(pos0 + m - 1));
  for (int64_t i = 0; i < m; ++i) {
    pos_[static_cast<size_t>(i)] = static_cast<int32_t>(pos0 + i);
    len_[static_cast<size_t>(i)] = pos0 + i + 1;
  }
  // Cell c holds position c: each token attends cells 0 .. its position, in order.
  const KvBatch at{pos_.data(), pos_.data(), nullptr, nullptr, len_.data()};
  layers(tokens, at, kv);
  if (head == Head::Hidden) {
    output_hidden(m);
  } else {
    output_head({}, m, opts_.all_logits ? m : 1);
  }
  return Status::Ok();
}

Status Forward::eval_batch(std::span<const int32_t> tokens, const KvBatch& b, const KvView& kv,
                           std::span<const int32_t> outputs, Head head) {
  const auto m = static_cast<int64_t>(tokens.size());
  PI_TRY(check_tokens(tokens));
  if (head == Head::Hidden) outputs = {};
  if (static_cast<int64_t>(outputs.size()) > logit_rows(opts_)) {
    return err("%zu logit rows asked for, at most %lld per batch", outputs.size(),
               static_cast<long long>(logit_rows(opts_)));
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (outputs[k] < 0 || outputs[k] >= m || (k > 0 && outputs[k] <= outputs[k - 1]))
      return err("logit rows must be ascending token indices in [0, %lld)", static_cast<long long>(m));
  }
  if (model_.hparams().n_swa > 0 && b.attn_pos == nullptr)
    return err("a sliding-window model's batch must give the positions of the cells it attends");
  const auto bad_cell = [&](int64_t c) { return c < 0 || c >= kv.n_ctx; };
  for (int64_t i = 0; i < m; ++i) {
    if (b.pos[i] < 0 || bad_cell(b.cell[i]))
      return err("token %lld: position %d in cell %d (context of %lld cells)",
                 static_cast<long long>(i), b.pos[i], b.cell[i],
                 static_cast<long long>(kv.n_ctx));
    PI_TRY(check_position(b.pos[i]));
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
  if (head == Head::Hidden) {
    output_hidden(m);
  } else {
    output_head(outputs, m, 0);
  }
  return Status::Ok();
}

void Forward::sync_lanes() {
  for (Lane& L : lanes_) L.dev->sync_all();
}

void Forward::move_residual(int from, int to, int64_t m) {
  if (from == to) return;
  Lane& a = lanes_[static_cast<size_t>(from)];
  Lane& b = lanes_[static_cast<size_t>(to)];
  const size_t bytes = static_cast<size_t>(m * model_.hparams().n_embd) * sizeof(float);
  if (b.dev->host_addressable()) {
    // Device -> host: in order after the device's work on x; the host waits for it.
    a.dev->read_back(backend::kCompute, b.buf.x.data(), a.buf.x.data(), bytes);
  } else {
    // Host -> device, in order before the device's next work. The host's x is not written
    // again before the pass ends (the residual comes back by copy_out, after this copy).
    b.dev->copy_in(backend::kCompute, b.buf.x.data(), a.buf.x.data(), bytes);
  }
  x_lane_ = to;
}

void Forward::embed(std::span<const int32_t> tokens, const int32_t* pos) {
  const HParams& hp = model_.hparams();
  const auto m = static_cast<int64_t>(tokens.size());
  Lane& E = lanes_[static_cast<size_t>(plan_.embed)];
  float* x = E.buf.x.as<float>();
  E.ops->embed(E.w->tok_embd, tokens.data(), m, x);
  if (hp.has_pos_embd) {
    for (int64_t i = 0; i < m; ++i)
      pos_rows_[static_cast<size_t>(i)] = static_cast<int32_t>(pos[i] + hp.pos_offset);
    float* p = E.buf.pos.as<float>();
    E.ops->embed(E.w->pos_embd, pos_rows_.data(), m, p);
    E.ops->add(x, p, m * hp.n_embd);
  }
  x_lane_ = plan_.embed;
}

void Forward::layers(std::span<const int32_t> tokens, const KvBatch& at, const KvView& kv) {
  const HParams& hp = model_.hparams();
  const auto m = static_cast<int64_t>(tokens.size());
  const int64_t n_embd = hp.n_embd;
  const backend::NormParams np = hp.norm_params();
  embed(tokens, at.pos);
  const KvBatch swa_at = hp.n_swa > 0 ? window(at, m, kv.n_ctx) : at;

  for (int64_t il = 0; il < hp.n_layer; ++il) {
    move_residual(x_lane_, plan_.layers[static_cast<size_t>(il)], m);
    Lane& Ln = lanes_[static_cast<size_t>(x_lane_)];
    backend::Ops& ops = *Ln.ops;
    const LayerWeights& L = Ln.w->layers[static_cast<size_t>(il)];
    float* x = Ln.buf.x.as<float>();
    float* h = Ln.buf.h.as<float>();
    float* ffn_in = Ln.buf.ffn_in.as<float>();
    float* proj = Ln.buf.proj.as<float>();
    float* ffn_out = Ln.buf.ffn_out.as<float>();
    if (hp.router_before_attn) ffn_->before_attention(il, x, m);
    ops.norm(np, x, L.attn.norm, L.attn.norm_b, m, n_embd, h);
    attention_block(Ln, il, m, hp.layer_swa(il) ? swa_at : at, kv.layers[static_cast<size_t>(il)]);

    if (hp.parallel_residual) {
      // Falcon: attention and FFN both read the layer input; the 7B layout shares its norm.
      const float* in = h;
      if (L.ffn.norm.present()) {
        ops.norm(np, x, L.ffn.norm, L.ffn.norm_b, m, n_embd, ffn_in);
        in = ffn_in;
      }
      ffn_->run(il, FfnInput{in, x, m}, ffn_out);
      ops.add(x, proj, m * n_embd);
      ops.add(x, ffn_out, m * n_embd);
    } else {
      ops.add(x, proj, m * n_embd);
      ops.norm(np, x, L.ffn.norm, L.ffn.norm_b, m, n_embd, ffn_in);
      ffn_->run(il, FfnInput{ffn_in, x, m}, ffn_out);
      ops.add(x, ffn_out, m * n_embd);
    }
  }
}

KvBatch Forward::window(const KvBatch& at, int64_t m, int64_t n_ctx) {
  const int64_t w = model_.hparams().n_swa;
  swa_begin_.resize(static_cast<size_t>(m));
  swa_len_.resize(static_cast<size_t>(m));
  KvBatch b = at;
  if (at.attn_cells == nullptr) {
    // Cell c holds position c: token i's window is cells pos - w + 1 .. pos.
    if (static_cast<int64_t>(iota_cells_.size()) < n_ctx) {
      iota_cells_.resize(static_cast<size_t>(n_ctx));
      for (int64_t c = 0; c < n_ctx; ++c) iota_cells_[static_cast<size_t>(c)] = static_cast<int32_t>(c);
    }
    for (int64_t i = 0; i < m; ++i) {
      const int64_t first = std::max<int64_t>(0, at.attn_len[i] - w);
      swa_begin_[static_cast<size_t>(i)] = first;
      swa_len_[static_cast<size_t>(i)] = at.attn_len[i] - first;
    }
    b.attn_cells = iota_cells_.data();
  } else {
    if (at.window_attn_cells != nullptr) b.attn_cells = at.window_attn_cells;
    // Each list ascends in position: drop its entries at or below pos - w.
    for (int64_t i = 0; i < m; ++i) {
      const int32_t* p = at.attn_pos + at.attn_begin[i];
      const int32_t* first = std::upper_bound(p, p + at.attn_len[i], static_cast<int64_t>(at.pos[i]) - w,
                                              [](int64_t v, int32_t q) { return v < q; });
      swa_begin_[static_cast<size_t>(i)] = at.attn_begin[i] + (first - p);
      swa_len_[static_cast<size_t>(i)] = at.attn_len[i] - (first - p);
    }
  }
  if (at.window_cell != nullptr) b.cell = at.window_cell;
  b.attn_begin = swa_begin_.data();
  b.attn_len = swa_len_.data();
  return b;
}

void Forward::attention_block(Lane& Ln, int64_t il, int64_t m, const KvBatch& at,
                              const KvLayer& kv) {
  const HParams& hp = model_.hparams();
  backend::Ops& ops = *Ln.ops;
  StepBuffers& buf = Ln.buf;
  const AttnWeights& a = Ln.w->layers[static_cast<size_t>(il)].attn;
  float* q = buf.q.as<float>();
  float* k = buf.k.as<float>();
  float* v = buf.v.as<float>();
  const int64_t n_q = hp.n_embd_q(), n_kv = hp.n_embd_kv();
  proj_->qkv(il, ops, a, QkvIo{buf.h.as<float>(), m, q, k, v, buf.qkv.as<float>()});
  if (a.q_b.present()) ops.add_bias(q, a.q_b, m, n_q);
  if (a.k_b.present()) ops.add_bias(k, a.k_b, m, n_kv);
  if (a.v_b.present()) ops.add_bias(v, a.v_b, m, n_kv);
  // qwen3: each head's q and k RMS-normalized before RoPE (the layers' epsilon).
  const backend::NormParams head_norm{NormKind::RMS, hp.norm_eps};
  if (a.q_norm.present()) ops.norm(head_norm, q, a.q_norm, {}, m * hp.n_head, hp.head_dim, q);
  if (a.k_norm.present()) ops.norm(head_norm, k, a.k_norm, {}, m * hp.n_head_kv, hp.head_dim, k);
  backend::AttnParams ap = hp.attn_params();
  ap.sinks = a.sinks.data;  // (gpt-oss; nullptr: none)
  if (hp.layer_rope(il)) {
    const backend::RopeParams rp = hp.rope_params();
    ops.rope(rp, q, m, hp.n_head, at.pos);
    ops.rope(rp, k, m, hp.n_head_kv, at.pos);
  }
  ops.store_kv(ap, k, v, m, kv, at.cell);
  ops.attention(ap, q, m, kv, at, buf.attn.as<float>());
  float* proj = buf.proj.as<float>();
  proj_->out(il, ops, a, buf.attn.as<float>(), m, proj);
  if (a.out_b.present()) ops.add_bias(proj, a.out_b, m, hp.n_embd);
}

void Forward::output_hidden(int64_t m) {
  const HParams& hp = model_.hparams();
  n_logit_rows_ = 0;
  move_residual(x_lane_, plan_.head, m);
  Lane& Hd = lanes_[static_cast<size_t>(plan_.head)];
  float* x = Hd.buf.x.as<float>();
  // The residual stream is not read again in this pass: the norm may write over it.
  Hd.ops->norm(hp.norm_params(), x, Hd.w->out_norm, Hd.w->out_norm_b, m, hp.n_embd, x);
  n_hidden_rows_ = static_cast<size_t>(m);
  sync_lanes();
}

std::span<const float> Forward::hidden() const {
  const size_t n = n_hidden_rows_ * static_cast<size_t>(model_.hparams().n_embd);
  if (n == 0) return {};
  const Lane& L = lanes_[static_cast<size_t>(plan_.head)];
  return {static_cast<const float*>(L.dev->map(L.buf.x.data(), n * sizeof(float))), n};
}

void Forward::output_head(std::span<const int32_t> rows, int64_t m, int64_t n) {
  const HParams& hp = model_.hparams();
  n_logit_rows_ = 0;
  n_hidden_rows_ = 0;
  if (rows.empty() && n == 0) {
    sync_lanes();
    return;
  }
  move_residual(x_lane_, plan_.head, m);
  Lane& Hd = lanes_[static_cast<size_t>(plan_.head)];
  backend::Ops& ops = *Hd.ops;
  const ModelWeights& w = *Hd.w;
  const backend::NormParams np = hp.norm_params();
  const float* x_all = Hd.buf.x.as<float>();
  float* out_in = Hd.buf.out_in.as<float>();
  if (rows.empty()) {
    ops.norm(np, x_all + (m - n) * hp.n_embd, w.out_norm, w.out_norm_b, n, hp.n_embd, out_in);
  } else {
    n = static_cast<int64_t>(rows.size());
    for (int64_t j = 0; j < n; ++j) {
      ops.norm(np, x_all + rows[static_cast<size_t>(j)] * hp.n_embd, w.out_norm, w.out_norm_b, 1,
               hp.n_embd, out_in + j * hp.n_embd);
    }
  }
  ops.linear(w.output, out_in, n, Hd.buf.logits.as<float>());
  n_logit_rows_ = static_cast<size_t>(n);
  sync_lanes();
}

}  // namespace pi::model
