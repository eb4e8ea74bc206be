#include "runtime/context.h"

#include <algorithm>
#include <cstdlib>

#include "core/log.h"

namespace pi::runtime {

int64_t resolve_n_ctx(const model::HParams& hp, int64_t requested) {
  if (requested > 0) return requested;
  return hp.n_ctx_train > 0 ? std::min<int64_t>(hp.n_ctx_train, 4096) : 4096;
}

Context::Context(const model::Model& model, ContextOptions opts)
    : model_(model),
      opts_(opts),
      pool_(opts.n_threads),
      ops_(pool_),
      cache_(model.hparams(), opts.n_ctx),
      forward_(std::make_unique<model::Forward>(
          model, ops_, model::ForwardOptions{opts.n_batch, opts.all_logits})) {}

Result<std::unique_ptr<Context>> Context::create(const model::Model& model, ContextOptions opts) {
  if (opts.n_ctx < 0)
    return err("context size must be >= 0 (got %lld)", static_cast<long long>(opts.n_ctx));
  if (opts.n_batch < 1)
    return err("batch size must be >= 1 (got %lld)", static_cast<long long>(opts.n_batch));
  if (opts.n_threads < 1) return err("thread count must be >= 1 (got %d)", opts.n_threads);
  opts.n_ctx = resolve_n_ctx(model.hparams(), opts.n_ctx);
  opts.n_batch = std::min(opts.n_batch, opts.n_ctx);
  std::unique_ptr<Context> ctx(new Context(model, opts));
  PI_TRY(ctx->install_ffn());
  return ctx;
}

Status Context::install_ffn() {
  if (!model_.hparams().powerinfer || opts_.dense) return Status::Ok();
  if (!sparse::has_predictors(model_.file())) {
    log_warn("%s: PowerInfer file without predictors (blk.N.fc1/fc2): running dense",
             model_.file().path().c_str());
    return Status::Ok();
  }
  auto thr = sparse::resolve_threshold(model_.file(), opts_.sparse_threshold,
                                       std::getenv(sparse::kThresholdEnv));
  if (!thr.ok()) return thr.error();
  auto ffn = sparse::SparseFfn::create(model_, ops_, opts_.n_batch,
                                       sparse::SparseConfig{thr->value, opts_.check_predictor});
  if (!ffn.ok()) return ffn.error();
  threshold_ = *thr;
  sparse_ = ffn->get();
  forward_->set_ffn(std::move(*ffn));
  return Status::Ok();
}

Status Context::decode(std::span<const int32_t> tokens, std::vector<float>* all,
                       const std::function<bool()>& stop) {
  // Check the whole request first so that an overflow leaves the cache as it was.
  auto whole = cache_.find_slot(static_cast<int64_t>(tokens.size()));
  if (!whole.ok()) return whole.error();
  for (size_t done = 0; done < tokens.size();) {
    if (stop && stop()) {
      return err("interrupted after %zu of %zu tokens", done, tokens.size());
    }
    const size_t n = std::min(tokens.size() - done, static_cast<size_t>(opts_.n_batch));
    auto slot = cache_.find_slot(static_cast<int64_t>(n));
    if (!slot.ok()) return slot.error();
    PI_TRY(forward_->eval(tokens.subspan(done, n), slot->pos0, cache_.view()));
    PI_TRY(cache_.apply(KvEdit::commit(*slot)));
    if (all != nullptr && opts_.all_logits) {
      auto l = forward_->logits();
      all->insert(all->end(), l.begin(), l.end());
    }
    done += n;
  }
  return Status::Ok();
}

std::span<const float> Context::logits() const {
  auto l = forward_->logits();
  const auto n_vocab = static_cast<size_t>(model_.hparams().n_vocab);
  return l.size() >= n_vocab ? l.subspan(l.size() - n_vocab) : l;
}

}  // namespace pi::runtime
