#include "runtime/kv_cache.h"

namespace pi::runtime {

KvCache::KvCache(const model::HParams& hp, int64_t n_ctx)
    : n_ctx_(n_ctx),
      cell_pos_(static_cast<size_t>(n_ctx), -1),
      storage_(static_cast<size_t>(hp.n_layer * 2 * n_ctx * hp.n_embd_kv()), 0) {
  const auto per_tensor = static_cast<size_t>(n_ctx * hp.n_embd_kv());
  view_.n_ctx = n_ctx;
  view_.layers.resize(static_cast<size_t>(hp.n_layer));
  for (size_t il = 0; il < view_.layers.size(); ++il) {
    view_.layers[il].k = storage_.data() + (2 * il) * per_tensor;
    view_.layers[il].v = storage_.data() + (2 * il + 1) * per_tensor;
  }
}

Result<KvSlot> KvCache::find_slot(int64_t n) const {
  if (n < 0) return err("invalid batch size %lld", static_cast<long long>(n));
  if (n > n_free()) {
    return err("context overflow: %lld tokens do not fit (context size %lld, %lld in use)",
               static_cast<long long>(n), static_cast<long long>(n_ctx_),
               static_cast<long long>(n_used_));
  }
  return KvSlot{n_used_, n};
}

Status KvCache::apply(const KvEdit& edit) {
  switch (edit.kind) {
    case KvEdit::Kind::Commit: {
      const KvSlot& s = edit.slot;
      if (s.pos0 != n_used_ || s.n < 0 || s.n > n_free()) {
        return err("KV cache: cannot commit cells [%lld, %lld) with %lld of %lld in use",
                   static_cast<long long>(s.pos0), static_cast<long long>(s.pos0 + s.n),
                   static_cast<long long>(n_used_), static_cast<long long>(n_ctx_));
      }
      for (int64_t c = s.pos0; c < s.pos0 + s.n; ++c)
        cell_pos_[static_cast<size_t>(c)] = static_cast<int32_t>(c);
      n_used_ += s.n;
      return Status::Ok();
    }
    case KvEdit::Kind::Truncate: {
      if (edit.n < 0)
        return err("KV cache: cannot truncate to %lld", static_cast<long long>(edit.n));
      for (int64_t c = edit.n; c < n_used_; ++c) cell_pos_[static_cast<size_t>(c)] = -1;
      if (edit.n < n_used_) n_used_ = edit.n;
      return Status::Ok();
    }
  }
  return err("KV cache: unknown edit");
}

}  // namespace pi::runtime
