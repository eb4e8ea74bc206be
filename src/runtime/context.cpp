#include "runtime/context.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "core/log.h"
#include "model/moe_ffn.h"
#include "sparse/calibrate.h"

namespace pi::runtime {

int64_t resolve_n_ctx(const model::HParams& hp, int64_t requested) {
  if (requested > 0) return requested;
  return hp.n_ctx_train > 0 ? std::min<int64_t>(hp.n_ctx_train, 4096) : 4096;
}

Context::Context(const model::Model& model, ContextOptions opts,
                 std::unique_ptr<backend::Device> dev, model::PlacedWeights weights,
                 std::vector<KvStorage> kv_storage)
    : model_(model),
      opts_(opts),
      dev_(std::move(dev)),
      weights_(std::move(weights)),
      cache_(model.hparams(), kv_cells(model.hparams(), opts), std::move(kv_storage), opts.kv_types) {
  const auto n_batch = static_cast<size_t>(opts.n_batch);
  const auto n_ctx = static_cast<size_t>(opts.n_ctx);
  lists_.cells.reserve(n_ctx * std::min(static_cast<size_t>(opts.n_seq_max), n_batch));
  lists_.pos.reserve(lists_.cells.capacity());
  lists_.begin.reserve(n_batch);
  lists_.len.reserve(n_batch);
  lists_.scratch.reserve(n_ctx);
  chunk_tokens_.reserve(n_batch);
  chunk_outputs_.reserve(n_batch);
  all_rows_.resize(n_batch);
  for (size_t i = 0; i < n_batch; ++i) all_rows_[i] = static_cast<int32_t>(i);
  batch_logits_.resize(static_cast<size_t>(opts.n_seq_max * model.hparams().n_vocab));
}

namespace {

// Whether a context over `model` runs the SparseFfn (see ContextOptions::dense).
bool wants_sparse(const model::Model& model, const ContextOptions& o) {
  return model.hparams().powerinfer && !o.dense && sparse::has_predictors(model.file());
}

// Whether it runs the threshold steps of a calibrated file.
bool wants_thresholds(const model::Model& model, const ContextOptions& o) {
  return !o.dense && sparse::has_act_sparsity(model.file());
}

std::string mib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / (1 << 20));
  return buf;
}

// A context whose experts are read from the file on demand (ContextOptions::moe_ram): every
// other weight placed as usual, the expert stacks left as views of the mapped file (never read
// through it), and the stream that reads them into the layout placement would have given them.
struct StreamedWeights {
  model::PlacedWeights placed;
  std::unique_ptr<model::ExpertStream> stream;
};

Result<StreamedWeights> place_streamed(const model::Model& model, const ContextOptions& o, backend::Device& dev) {
  const model::HParams& hp = model.hparams();
  const std::string& path = model.file().path();
  if (!hp.is_moe()) return err("%s: --moe-ram reads experts on demand, and this model has none", path.c_str());
  if (model.file().mapping().mode() != LoadMode::Map) {
    return err("%s: --moe-ram needs the file mapped, not read into memory (drop --no-mmap)", path.c_str());
  }
  if (wants_thresholds(model, o)) {
    return err("%s: --moe-ram runs the experts of a file without activation thresholds (this one is "
               "calibrated; --dense runs it)", path.c_str());
  }
  model::ModelWeights rest = model.weights();
  int64_t n_moe_layers = 0;
  for (model::LayerWeights& L : rest.layers) {
    n_moe_layers += L.ffn.gate_exps.present() ? 1 : 0;
    model::each_expert_stack(L.ffn, [](model::Matrix& m) { m = model::Matrix{}; });
  }
  const uint64_t resident = model::weight_bytes(rest);
  if (o.moe_ram <= resident) {
    return err("%s: --moe-ram %.2f GiB: the weights besides the experts take %.2f GiB, all of them resident; "
               "give more", path.c_str(), static_cast<double>(o.moe_ram) / 1073741824.0,
               static_cast<double>(resident) / 1073741824.0);
  }
  // The layout each expert part takes: as place_weights would give the whole stack (a
  // transposed down in the device's layout for it, a stack only dense products read in its
  // dense layout), else the file's.
  std::set<const model::Matrix*> dense;
  model::each_dense_candidate(model.weights(), model.dense_only(), [&](const model::Matrix& m, bool dense_only) {
    if (dense_only) dense.insert(&m);
  });
  std::vector<std::array<DType, model::kExpertParts>> layout(model.weights().layers.size());
  for (size_t il = 0; il < layout.size(); ++il) {
    const auto parts = model::expert_parts(model.weights().layers[il].ffn);
    for (size_t p = 0; p < parts.size(); ++p) {
      const model::Matrix& m = *parts[p];
      const DType t = model::file_layout(m.type);
      DType want = m.type;
      if (p == static_cast<size_t>(model::ExpertPart::DownT)) {
        if (m.present()) want = dev.transposed_layout(t);
      } else if (dense.count(&m) != 0) {
        want = dev.dense_layout(t, m.rows / hp.n_expert);
      }
      layout[il][p] = model::converts(t, want) ? want : m.type;
    }
  }
  auto placed = model::place_weights(dev, rest, &model.layouts(), model.dense_only());
  if (!placed.ok()) return placed.error();
  for (size_t il = 0; il < rest.layers.size(); ++il) {
    const auto to = model::expert_parts(placed->weights.layers[il].ffn);
    const auto from = model::expert_parts(model.weights().layers[il].ffn);
    for (size_t p = 0; p < to.size(); ++p) *to[p] = *from[p];
  }
  // What placement copied came through the mapping: those pages leave this process's memory
  // (the page cache keeps them; what is still read through the mapping comes back).
  model.file().mapping().release_pages();
  const int64_t min_slots = std::max(hp.n_expert + hp.n_expert_used, n_moe_layers * hp.n_expert_used);
  const auto& map = model.file().mapping();
  auto stream = model::ExpertStream::create(path, map.data(), map.size(), hp, model.weights(), layout,
                                            o.moe_ram - resident, min_slots);
  if (!stream.ok()) return stream.error();
  log_info("%s: experts read on demand (--moe-ram %.2f GiB): %.2f GiB of other weights resident, %lld experts "
           "of %.1f MiB cached (%.2f GiB)%s",
           path.c_str(), static_cast<double>(o.moe_ram) / 1073741824.0, static_cast<double>(resident) / 1073741824.0,
           static_cast<long long>((*stream)->slots()), static_cast<double>(model::ExpertStream::slot_bytes(hp, model.weights())) / 1048576.0,
           static_cast<double>((*stream)->cache_bytes()) / 1073741824.0,
           (*stream)->direct_io() ? "" : ", through the page cache");
  return StreamedWeights{std::move(*placed), std::move(*stream)};
}

}  // namespace

Result<std::vector<LedgerLine>> Context::budget_items(const model::Model& model,
                                                     const ContextOptions& o,
                                                     const backend::Device& dev, bool sparse) {
  const model::HParams& hp = model.hparams();
  const auto item = [](const char* what, uint64_t bytes) { return LedgerLine{what, 1, bytes}; };
  std::vector<LedgerLine> items = {
      item("weights", backend::WeightStore::cost(dev, model::weight_bytes(model.weights()))),
      item("KV cache", KvCache::storage_bytes(hp, kv_cells(hp, o), o.kv_types)),
      item("step buffers",
           model::StepBuffers::bytes(hp, o.n_batch,
                                     std::max<int64_t>({o.all_logits ? o.n_batch : 1, o.n_seq_max, 1})))};
  if (sparse) {
    auto preds = sparse::load_predictors(model);
    if (!preds.ok()) return preds.error();
    uint64_t pb = 0;
    int64_t rank = 0;
    for (const auto& p : *preds) {
      pb += p.nbytes();
      rank = std::max(rank, p.rank());
    }
    items.push_back(item("predictors", backend::WeightStore::cost(dev, pb)));
    items.push_back(item("sparse FFN scratch",
                         sparse::SparseFfn::scratch_bytes(hp, o.n_batch, rank, o.check_predictor)));
  } else {
    items.push_back(item("FFN scratch", model::ffn_device_bytes(hp, o.n_batch)));
  }
  if (wants_thresholds(model, o))
    items.push_back(item("threshold scratch", sparse::threshold_scratch_bytes(hp, o.n_batch)));
  return items;
}

Status Context::check_budget(const model::Model& model, const ContextOptions& o,
                             const backend::Device& dev, bool sparse) {
  auto items = budget_items(model, o, dev, sparse);
  if (!items.ok()) return items.error();
  uint64_t total = 0;
  for (const LedgerLine& it : *items) total += it.bytes;
  const uint64_t free = dev.memory().free();
  if (total <= free) return Status::Ok();
  std::string parts;
  for (const LedgerLine& it : *items) {
    if (it.bytes == 0) continue;
    parts += (parts.empty() ? "" : ", ") + it.what + " " + mib(it.bytes);
  }
  return err("%s: the model does not fit device %s: it needs %s (%s), the budget leaves %s of %s",
             model.file().path().c_str(), dev.name().c_str(), mib(total).c_str(), parts.c_str(),
             mib(free).c_str(), mib(dev.memory().budget).c_str());
}

Result<std::unique_ptr<Context>> Context::create(const model::Model& model, ContextOptions opts) {
  if (opts.n_ctx < 0)
    return err("context size must be >= 0 (got %lld)", static_cast<long long>(opts.n_ctx));
  if (opts.n_batch < 1)
    return err("batch size must be >= 1 (got %lld)", static_cast<long long>(opts.n_batch));
  if (opts.n_threads < 1) return err("thread count must be >= 1 (got %d)", opts.n_threads);
  if (opts.n_seq_max < 1 || opts.n_seq_max > kMaxSeqs) {
    return err("the number of sequences must be 1..%d (got %d)", kMaxSeqs, opts.n_seq_max);
  }
  opts.n_ctx = resolve_n_ctx(model.hparams(), opts.n_ctx);
  if (const int64_t n_pos = model.hparams().n_pos; n_pos > 0 && opts.n_ctx > n_pos) {
    return err("%s: a context of %lld tokens is longer than the %lld positions the model learned "
               "(position_embd); use a context of at most %lld",
               model.file().path().c_str(), static_cast<long long>(opts.n_ctx),
               static_cast<long long>(n_pos), static_cast<long long>(n_pos));
  }
  opts.n_batch = std::min(opts.n_batch, opts.n_ctx);
  opts.device.n_threads = opts.n_threads;
  // A VRAM budget is the device's budget (the sim's capacity); host devices have none.
  if (opts.vram_budget && !backend::is_host_device(opts.device.name))
    opts.device.budget = *opts.vram_budget;
  PI_TRY(check_kv_types(model.hparams(), opts.kv_types));
  auto dev = backend::make_device(opts.device);
  if (!dev.ok()) return dev.error();
  for (DType t : {opts.kv_types.k, opts.kv_types.v}) {
    if (!(*dev)->supports(backend::Op::Attention, t) || !(*dev)->supports(backend::Op::StoreKv, t))
      return err("device %s does not support a %s KV cache (-ctk/-ctv); use f16",
                 (*dev)->name().c_str(), std::string(dtype_name(t)).c_str());
  }
  const sparse::ThresholdOptions& th = opts.thresholds;
  if ((th.sparsity || th.sites || th.site_levels || th.uniform) && !opts.dense &&
      !sparse::has_act_sparsity(model.file())) {
    return err("%s: --sparsity, --sparsity-sites and --sparsity-alloc need a file calibrated by "
               "`powerinfer calibrate` (this one has no %s)",
               model.file().path().c_str(), sparse::kMethodKey);
  }
  if (!(*dev)->host_addressable()) {
    if (opts.profile || opts.calibrator != nullptr)
      return err("profiling and calibration run on the CPU, not on --device %s", (*dev)->name().c_str());
    if (opts.moe_ram > 0) {
      return err("--moe-ram reads experts for the CPU; with --device %s place them by --vram-budget",
                 (*dev)->name().c_str());
    }
    return create_hybrid(model, opts, std::move(*dev));
  }
  const bool sparse = wants_sparse(model, opts);
  if (model.hparams().powerinfer && !opts.dense && !sparse) {
    log_warn("%s: PowerInfer file without predictors (blk.N.fc1/fc2): running dense",
             model.file().path().c_str());
  }
  PI_TRY(check_budget(model, opts, **dev, sparse));
  // Model::dense_only is what Model::load converted in place, so no context needs a copy.
  std::unique_ptr<model::ExpertStream> stream;
  std::optional<model::PlacedWeights> weights;
  if (opts.moe_ram > 0) {
    auto sw = place_streamed(model, opts, **dev);
    if (!sw.ok()) return sw.error();
    weights.emplace(std::move(sw->placed));
    stream = std::move(sw->stream);
  } else {
    auto w = model::place_weights(**dev, model.weights(), &model.layouts(), model.dense_only());
    if (!w.ok()) return w.error();
    weights.emplace(std::move(*w));
  }
  auto kv = (*dev)->alloc(KvCache::storage_bytes(model.hparams(), kv_cells(model.hparams(), opts), opts.kv_types),
                          "KV cache");
  if (!kv.ok()) return kv.error();
  std::vector<KvStorage> storage;
  storage.push_back(KvStorage{std::move(*kv), 0, model.hparams().n_layer});
  std::unique_ptr<Context> ctx(
      new Context(model, opts, std::move(*dev), std::move(*weights), std::move(storage)));
  ctx->stream_ = std::move(stream);
  PI_TRY(ctx->build_forward());
  // The host's account: what check_budget counted, less what costs nothing here (weights and
  // predictors are the model's own memory on a host device).
  auto items = budget_items(model, ctx->opts_, *ctx->dev_, sparse);
  if (!items.ok()) return items.error();
  for (LedgerLine& l : *items)
    if (l.bytes > 0) ctx->host_memory_.push_back(std::move(l));
  if (ctx->stream_) ctx->host_memory_.push_back(LedgerLine{"expert cache (--moe-ram)", 1, ctx->stream_->cache_bytes()});
  return ctx;
}

Status Context::build_forward() {
  const model::ForwardOptions fo{opts_.n_batch, opts_.all_logits, opts_.n_seq_max};
  std::unique_ptr<model::FfnStep> ffn;
  std::unique_ptr<model::ProjStep> proj;
  if (opts_.calibrator != nullptr) {
    auto cf = sparse::CalibratingFfn::create(model_, weights(), *dev_, opts_.n_batch, *opts_.calibrator);
    if (!cf.ok()) return cf.error();
    ffn = std::move(*cf);
    proj = std::make_unique<sparse::CalibratingProj>(model_.hparams(), *dev_, *opts_.calibrator);
  } else if (opts_.profile && !model_.hparams().is_moe()) {
    auto pf = sparse::ProfilingFfn::create(model_, weights(), *dev_, opts_.n_batch);
    if (!pf.ok()) return pf.error();
    profiler_ = pf->get();
    ffn = std::move(*pf);
  } else if (wants_sparse(model_, opts_)) {
    auto thr = sparse::resolve_threshold(model_.file(), opts_.sparse_threshold,
                                         opts_.sparse_threshold_env.empty() ? nullptr : opts_.sparse_threshold_env.c_str());
    if (!thr.ok()) return thr.error();
    auto sf = sparse::SparseFfn::create(model_, weights(), *dev_, opts_.n_batch,
                                        sparse::SparseConfig{thr->value, opts_.check_predictor});
    if (!sf.ok()) return sf.error();
    threshold_ = *thr;
    sparse_ = sf->get();
    ffn = std::move(*sf);
  }
  if (ffn == nullptr && wants_thresholds(model_, opts_)) {
    auto steps =
        sparse::make_threshold_steps(model_, weights(), *dev_, opts_.n_batch, opts_.thresholds);
    if (!steps.ok()) return steps.error();
    threshold_ffn_ = steps->ffn.get();
    threshold_proj_ = steps->proj.get();
    site_thresholds_ = std::move(steps->thresholds);
    ffn = std::move(steps->ffn);
    proj = std::move(steps->proj);
  }
  if (ffn == nullptr && model_.hparams().is_moe()) {
    auto moe = model::MoeFfn::create(model_, weights(), *dev_, opts_.n_batch, opts_.dense);
    if (!moe.ok()) return moe.error();
    moe_ = moe->get();
    moe_all_ = {moe_};
    if (stream_) moe_->set_expert_stream(stream_.get());
    ffn = std::move(*moe);
  }
  auto f = model::Forward::create(model_, weights(), *dev_, fo, std::move(ffn));
  if (!f.ok()) return f.error();
  forward_ = std::move(*f);
  if (proj) forward_->set_proj(std::move(proj));
  return Status::Ok();
}

Status Context::check_seq(SeqId s) const {
  if (s < 0 || s >= opts_.n_seq_max) {
    return err("sequence id %d outside [0, %d) (the context holds %d sequences)", s,
               opts_.n_seq_max, opts_.n_seq_max);
  }
  return Status::Ok();
}

Status Context::eval_slot(std::span<const int32_t> tokens, KvSlot& slot,
                          std::span<const int32_t> outputs, model::Head head) {
  const int64_t m = slot.size();
  // The contiguous path: one sequence's next positions in the cells equal to them, after the
  // sequence's cells [0, pos0); and logit rows the contiguous path produces.
  const SeqId s = slot.seq[0];
  const int32_t pos0 = slot.pos[0];
  bool contiguous = true;
  for (int64_t i = 0; i < m && contiguous; ++i) {
    const auto k = static_cast<size_t>(i);
    contiguous = slot.seq[k] == s && slot.pos[k] == pos0 + i && slot.cells[k] == pos0 + i;
  }
  const bool rows_fit =
      head == model::Head::Hidden ||
      (opts_.all_logits ? static_cast<int64_t>(outputs.size()) == m
                        : outputs.empty() || (outputs.size() == 1 && outputs[0] == m - 1));
  // Sliding-window layers with a window store read and write window cells (KvCache).
  const bool window = cache_.cells().bounded();
  if (window) PI_TRY(cache_.plan_window(slot));
  if (contiguous && rows_fit && !window && cache_.holds_prefix(s, pos0)) {
    PI_TRY(forward_->eval(tokens, pos0, cache_.view(), head));
  } else {
    cache_.attention_lists(slot, lists_);
    model::KvBatch b{slot.pos.data(), slot.cells.data(), lists_.cells.data(),
                     lists_.begin.data(), lists_.len.data(), lists_.pos.data()};
    if (window) {
      PI_TRY(cache_.window_lists(slot, lists_, model_.hparams().n_swa, window_cells_));
      b.window_cell = slot.window.data();
      b.window_attn_cells = window_cells_.data();
    }
    PI_TRY(forward_->eval_batch(tokens, b, cache_.view(), outputs, head));
  }
  // An expert that could not be read computed as zeros: the step fails, nothing committed.
  if (stream_) {
    if (std::string why = stream_->failure(); !why.empty()) return err("%s", why.c_str());
  }
  slot.token.assign(tokens.begin(), tokens.end());  // the cells' tokens: seq_tokens() reads them
  return cache_.apply(KvEdit::commit(slot));
}

Status Context::decode(std::span<const int32_t> tokens, std::vector<float>* all,
                       const std::function<bool()>& stop) {
  // Check the whole request first so that an overflow leaves the cache as it was.
  auto whole = cache_.find_slot(static_cast<int64_t>(tokens.size()));
  if (!whole.ok()) return whole.error();
  const int64_t past = n_past();
  for (size_t done = 0; done < tokens.size();) {
    if (stop && stop()) {
      return with_code(err("interrupted after %zu of %zu tokens", done, tokens.size()),
                       ErrorCode::Cancelled);
    }
    const size_t n = std::min(tokens.size() - done, static_cast<size_t>(opts_.n_batch));
    auto slot = cache_.find_slot(static_cast<int64_t>(n));
    if (!slot.ok()) return slot.error();
    slot->assign_sequential(0, static_cast<int32_t>(past + static_cast<int64_t>(done)));
    const int32_t last[1] = {static_cast<int32_t>(n - 1)};
    const std::span<const int32_t> rows =
        opts_.all_logits ? std::span<const int32_t>(all_rows_.data(), n)
                         : std::span<const int32_t>(last, 1);
    PI_TRY(eval_slot(tokens.subspan(done, n), *slot, rows));
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

Status Context::decode_batch(std::span<const BatchToken> batch) {
  const model::HParams& hp = model_.hparams();
  if (batch.empty()) return err("empty batch");
  int32_t last[kMaxSeqs];
  for (SeqId s = 0; s < kMaxSeqs; ++s) last[s] = cache_.seq_pos_max(s);
  int64_t n_out = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const BatchToken& e = batch[i];
    PI_TRY(check_seq(e.seq));
    if (e.token < 0 || e.token >= hp.n_vocab) {
      return err("batch entry %zu: token id %d outside the vocabulary [0, %lld)", i, e.token,
                 static_cast<long long>(hp.n_vocab));
    }
    if (e.pos <= last[e.seq]) {
      return err("batch entry %zu: position %d of sequence %d must be above %d", i, e.pos, e.seq,
                 last[e.seq]);
    }
    last[e.seq] = e.pos;
    n_out += e.logits ? 1 : 0;
  }
  if (n_out > opts_.n_seq_max) {
    return err("%lld batch entries ask for logits, at most %d (the number of sequences)",
               static_cast<long long>(n_out), opts_.n_seq_max);
  }
  auto whole = cache_.find_slot(static_cast<int64_t>(batch.size()));
  if (!whole.ok()) return whole.error();

  batch_row_.assign(batch.size(), -1);
  const auto n_vocab = static_cast<size_t>(hp.n_vocab);
  int32_t row = 0;
  for (size_t done = 0; done < batch.size();) {
    const size_t n = std::min(batch.size() - done, static_cast<size_t>(opts_.n_batch));
    auto slot = cache_.find_slot(static_cast<int64_t>(n));
    if (!slot.ok()) return slot.error();
    slot->pos.resize(n);
    slot->seq.resize(n);
    chunk_tokens_.resize(n);
    chunk_outputs_.clear();
    for (size_t k = 0; k < n; ++k) {
      const BatchToken& e = batch[done + k];
      chunk_tokens_[k] = e.token;
      slot->pos[k] = e.pos;
      slot->seq[k] = e.seq;
      if (e.logits) chunk_outputs_.push_back(static_cast<int32_t>(k));
    }
    PI_TRY(eval_slot(chunk_tokens_, *slot, chunk_outputs_));
    const auto l = forward_->logits();
    for (size_t j = 0; j < chunk_outputs_.size(); ++j, ++row) {
      std::copy(l.begin() + static_cast<ptrdiff_t>(j * n_vocab),
                l.begin() + static_cast<ptrdiff_t>((j + 1) * n_vocab),
                batch_logits_.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(row) * n_vocab));
      batch_row_[done + static_cast<size_t>(chunk_outputs_[j])] = row;
    }
    done += n;
  }
  return Status::Ok();
}

std::span<const float> Context::batch_logits(size_t i) const {
  if (i >= batch_row_.size() || batch_row_[i] < 0) return {};
  const auto n_vocab = static_cast<size_t>(model_.hparams().n_vocab);
  return {batch_logits_.data() + static_cast<size_t>(batch_row_[i]) * n_vocab, n_vocab};
}

Status Context::seq_rm(SeqId seq, int32_t p0, int32_t p1) {
  if (seq != kAllSeqs) PI_TRY(check_seq(seq));
  if (p1 == kPosEnd) {
    for (SeqId s = 0; s < kMaxSeqs; ++s) {
      if ((seq == kAllSeqs || s == seq) && !can_truncate(s, p0)) {
        return with_code(err("sequence %d cannot be cut back to position %d: its sliding-window layers no longer "
                             "hold the positions before it (cut back to 0, or use --swa-full)",
                             s, p0),
                         ErrorCode::BadRequest);
      }
    }
  }
  return cache_.apply(KvEdit::remove(seq, p0, p1));
}

bool Context::can_truncate(SeqId seq, int32_t p0) const {
  return cache_.can_truncate(seq, p0, model_.hparams().n_swa);
}

Status Context::seq_cp(SeqId src, SeqId dst, int32_t p0, int32_t p1) {
  PI_TRY(check_seq(src));
  PI_TRY(check_seq(dst));
  return cache_.apply(KvEdit::copy(src, dst, p0, p1));
}

Status Context::restore_seq(SeqId s, SeqStateFile& file) {
  const char* path = file.path().c_str();
  if (s < 0 || s >= opts_.n_seq_max) {
    return with_code(err("%s: sequence id %d outside [0, %d)", path, s, opts_.n_seq_max),
                     ErrorCode::BadRequest);
  }
  if (cache_.seq_pos_max(s) >= 0) {
    return with_code(err("%s: sequence %d holds positions (remove them before restoring)", path, s),
                     ErrorCode::BadRequest);
  }
  const std::vector<int32_t>& tokens = file.tokens();
  const auto n = static_cast<int64_t>(tokens.size());
  if (n > cache_.n_ctx()) {
    return with_code(err("%s: %lld saved tokens do not fit a context of %lld", path,
                         static_cast<long long>(n), static_cast<long long>(cache_.n_ctx())),
                     ErrorCode::ContextFull);
  }
  if (n > cache_.n_free()) {
    return with_code(err("%s: %lld saved tokens do not fit the %lld free cells (context %lld)",
                         path, static_cast<long long>(n), static_cast<long long>(cache_.n_free()),
                         static_cast<long long>(cache_.n_ctx())),
                     ErrorCode::ContextFull);
  }
  auto slot = cache_.find_slot(n - 1);
  if (!slot.ok()) return slot.error();
  slot->assign_sequential(s, 0);
  slot->token.assign(tokens.begin(), tokens.end() - 1);
  PI_TRY(cache_.plan_window(*slot, /*attended=*/false));
  PI_TRY(file.read_cells(cache_, *slot));
  PI_TRY(cache_.apply(KvEdit::commit(*slot)));
  const BatchToken last{tokens.back(), s, static_cast<int32_t>(n - 1), true};
  if (Status st = decode_batch(std::span<const BatchToken>(&last, 1)); !st.ok()) {
    (void)cache_.apply(KvEdit::remove(s, 0, kPosEnd));
    return st;
  }
  return Status::Ok();
}

}  // namespace pi::runtime
