// Context::embed: embeddings pooled from the normalized final hidden states (context.h).
#include <algorithm>
#include <cmath>

#include "runtime/context.h"

namespace pi::runtime {

Status Context::check_embed(std::span<const EmbedInput> inputs, const EmbedParams& p,
                            size_t out_size) const {
  const model::HParams& hp = model_.hparams();
  if (inputs.empty()) return err("embed: no inputs");
  bool seen[kMaxSeqs] = {};
  for (size_t i = 0; i < inputs.size(); ++i) {
    const EmbedInput& in = inputs[i];
    PI_TRY(check_seq(in.seq));
    if (seen[in.seq]) return err("embed: input %zu repeats sequence %d", i, in.seq);
    seen[in.seq] = true;
    if (in.tokens.empty()) return err("embed: input %zu has no tokens", i);
    for (int32_t t : in.tokens) {
      if (t < 0 || t >= hp.n_vocab) {
        return err("embed: input %zu: token id %d outside the vocabulary [0, %lld)", i, t,
                   static_cast<long long>(hp.n_vocab));
      }
    }
  }
  const size_t want = embed_rows(inputs, p.pooling) * static_cast<size_t>(hp.n_embd);
  if (out_size != want) return err("embed: output of %zu floats, %zu needed", out_size, want);
  return Status::Ok();
}

Status Context::embed(std::span<const EmbedInput> inputs, const EmbedParams& p,
                      std::span<float> out) {
  PI_TRY(check_embed(inputs, p, out.size()));
  const auto n_embd = static_cast<size_t>(model_.hparams().n_embd);
  // Empties the inputs' sequences; on every exit after this point as well.
  const auto clear = [&] {
    for (const EmbedInput& in : inputs) (void)cache_.apply(KvEdit::remove(in.seq, 0, kPosEnd));
  };
  clear();
  size_t total = 0;
  for (const EmbedInput& in : inputs) total += in.tokens.size();
  if (auto whole = cache_.find_slot(static_cast<int64_t>(total)); !whole.ok()) return whole.error();

  // Sequence -> input; each input's tokens at positions 0..n-1, inputs one after another.
  // With Pooling::None every token is its own row: input i's start at row first_row[i].
  const bool per_token = p.pooling == Pooling::None;
  std::vector<size_t> first_row(inputs.size(), 0);
  for (size_t i = 1; per_token && i < inputs.size(); ++i)
    first_row[i] = first_row[i - 1] + inputs[i - 1].tokens.size();
  int32_t input_of[kMaxSeqs];
  std::vector<BatchToken> batch;
  batch.reserve(total);
  for (size_t i = 0; i < inputs.size(); ++i) {
    input_of[inputs[i].seq] = static_cast<int32_t>(i);
    for (size_t k = 0; k < inputs[i].tokens.size(); ++k)
      batch.push_back({inputs[i].tokens[k], inputs[i].seq, static_cast<int32_t>(k), false});
  }
  // Pooled sums in double, [rows, n_embd] (rows: inputs, or tokens for None).
  std::vector<double> acc(out.size(), 0.0);
  for (size_t done = 0; done < batch.size();) {
    const size_t n = std::min(batch.size() - done, static_cast<size_t>(opts_.n_batch));
    auto slot = cache_.find_slot(static_cast<int64_t>(n));
    if (!slot.ok()) {
      clear();
      return slot.error();
    }
    slot->pos.resize(n);
    slot->seq.resize(n);
    chunk_tokens_.resize(n);
    for (size_t k = 0; k < n; ++k) {
      const BatchToken& e = batch[done + k];
      chunk_tokens_[k] = e.token;
      slot->pos[k] = e.pos;
      slot->seq[k] = e.seq;
    }
    if (Status s = eval_slot(chunk_tokens_, *slot, {}, model::Head::Hidden); !s.ok()) {
      clear();
      return s;
    }
    const std::span<const float> h = forward_->hidden();  // f32 [n, n_embd]
    for (size_t k = 0; k < n; ++k) {
      const BatchToken& e = batch[done + k];
      const auto i = static_cast<size_t>(input_of[e.seq]);
      const size_t len = inputs[i].tokens.size();
      const bool take = per_token || p.pooling == Pooling::Mean ||
                        (p.pooling == Pooling::Cls && e.pos == 0) ||
                        (p.pooling == Pooling::Last && static_cast<size_t>(e.pos) + 1 == len);
      if (!take) continue;
      const float* row = h.data() + k * n_embd;
      const size_t r = per_token ? first_row[i] + static_cast<size_t>(e.pos) : i;
      double* a = acc.data() + r * n_embd;
      for (size_t j = 0; j < n_embd; ++j) a[j] += row[j];
    }
    done += n;
  }
  clear();
  const size_t rows = out.size() / n_embd;
  for (size_t i = 0; i < rows; ++i) {
    double* a = acc.data() + i * n_embd;
    if (p.pooling == Pooling::Mean) {
      const auto len = static_cast<double>(inputs[i].tokens.size());
      for (size_t j = 0; j < n_embd; ++j) a[j] /= len;
    }
    double scale = 1.0;
    if (p.normalize) {
      double sq = 0;
      for (size_t j = 0; j < n_embd; ++j) sq += a[j] * a[j];
      scale = sq > 0 ? 1.0 / std::sqrt(sq) : 0.0;
    }
    for (size_t j = 0; j < n_embd; ++j) out[i * n_embd + j] = static_cast<float>(a[j] * scale);
  }
  return Status::Ok();
}

}  // namespace pi::runtime
