// Implementation of the public API (include/powerinfer/engine.h) over the model layer, the
// runtime Context and Sampler, and the tokenizer.
#include "powerinfer/engine.h"


#include <algorithm>
#include <chrono>
#include <new>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "backend/host_device.h"
#include "core/log.h"
#include "core/mapped_file.h"
#include "grammar/gbnf.h"
#include "grammar/token_filter.h"
#include "model/moe_ffn.h"
#include "model/model.h"
#include "runtime/context.h"
#include "runtime/engine_access.h"
#include "runtime/session_timings.h"
#include "runtime/sampler.h"
#include "tokenizer/tokenizer.h"

namespace pi {
namespace {

using runtime::charge;
using runtime::ms_since;
using runtime::Phase;

// Refuses a context whose KV cache (f16 keys and values, every layer) cannot fit in this
// machine's physical memory, before anything is allocated.
Status check_kv_fits(const model::HParams& hp, int64_t n_ctx) {
  const double bytes = 2.0 * 2.0 * static_cast<double>(hp.n_layer) * static_cast<double>(n_ctx) *
                       static_cast<double>(hp.n_embd_kv());
  const auto ram = static_cast<double>(physical_memory_bytes());
  if (ram > 0 && bytes > ram) {
    return err("context size %lld: its KV cache needs %.1f GiB, more than the %.1f GiB of memory "
               "of this machine",
               static_cast<long long>(n_ctx), bytes / 1073741824.0, ram / 1073741824.0);
  }
  return Status::Ok();
}

// The vocabulary as a grammar sees it: each token's bytes in the text; control, unknown and
// unused tokens add none (a grammar never allows them), end-of-generation tokens are marked.
std::shared_ptr<const grammar::TokenSet> token_set(const Tokenizer& tok) {
  const int32_t n = tok.n_vocab();
  std::vector<std::string> pieces(static_cast<size_t>(n));
  std::vector<bool> eog(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) {
    const Tokenizer::TokenType t = tok.token_type(id);
    eog[static_cast<size_t>(id)] = tok.is_eog(id);
    if (t != Tokenizer::TokenType::Control && t != Tokenizer::TokenType::Unknown &&
        t != Tokenizer::TokenType::Unused)
      pieces[static_cast<size_t>(id)] = tok.token_to_piece(id);
  }
  return std::make_shared<const grammar::TokenSet>(std::move(pieces), std::move(eog));
}

}  // namespace

DType runtime::kv_dtype(KvCacheType t) {
  switch (t) {
    case KvCacheType::Q8_0: return DType::Q8_0;
    case KvCacheType::Q4_0: return DType::Q4_0;
    case KvCacheType::F16: break;
  }
  return DType::F16;
}

Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::load(const std::string& path, const LoadOptions& opts) {
  std::unique_ptr<Engine> e(new Engine());
  const LoadMode mode = opts.load == ModelLoad::Map    ? LoadMode::Map
                        : opts.load == ModelLoad::Read ? LoadMode::Read
                                                       : LoadMode::Auto;
  const DType transposed = opts.repack ? backend::cpu_transposed_layout(DType::Q4_0) : DType::Q4_0;
  model::DenseLayouts dense;
  if (opts.repack) dense.of = backend::cpu_dense_layout;
  auto m = model::Model::load(path, mode, opts.check_tensors, transposed, dense);
  if (!m.ok()) return m.error();
  e->model_ = std::move(*m);
  const gguf::File& f = e->model_->file();
  if (opts.load == ModelLoad::Auto && f.mapping().mode() == LoadMode::Map && f.file_size() > 0) {
    // Say why decoding may be slower than it could be, and how to choose otherwise.
    if (!transparent_huge_pages_on()) {
      log_info("model mapped: transparent huge pages are off here (--no-mmap reads it anyway)");
    } else {
      log_info("model mapped: reading it into huge pages (faster decoding) wants its %.1f GiB and 1 GiB "
               "free, and %.1f GiB is available (--no-mmap reads it anyway)",
               static_cast<double>(f.file_size()) / 1073741824.0,
               static_cast<double>(mem_available_bytes()) / 1073741824.0);
    }
  }
  if (opts.mlock) {
    if (Status s = f.mapping().lock(); !s.ok()) log_warn("%s", s.error().message.c_str());
  }
  if (f.find("tokenizer.ggml.model") != nullptr) {
    auto t = Tokenizer::from_gguf(f);
    if (!t.ok()) return t.error();
    e->tokenizer_ = std::make_unique<Tokenizer>(std::move(*t));
    e->vocabulary_ = std::make_unique<Vocabulary>(*e->tokenizer_);
  }
  const model::HParams& hp = e->model_->hparams();
  ModelInfo& i = e->info_;
  i.path = path;
  i.architecture = hp.arch_name;
  if (const gguf::Value* v = f.find("general.name"); v != nullptr && v->as_string() != nullptr)
    i.name = *v->as_string();
  i.powerinfer = hp.powerinfer;
  i.activation = model::activation_name(hp.act);
  i.n_vocab = hp.n_vocab;
  i.n_ctx_train = hp.n_ctx_train;
  i.n_embd = hp.n_embd;
  i.n_layer = hp.n_layer;
  i.n_ff = hp.n_ff;
  i.n_head = hp.n_head;
  i.n_head_kv = hp.n_head_kv;
  i.file_bytes = f.file_size();
  i.mmap = f.mapping().mode() == LoadMode::Map;
  i.repacked_bytes = e->model_->repacked_in_place_bytes();
  i.huge_page_bytes = f.mapping().huge_page_bytes();
  i.weight_bytes_per_token = e->model_->weight_bytes_per_token();
  if (const gguf::Value* v = f.find("tokenizer.chat_template");
      v != nullptr && v->as_string() != nullptr)
    i.chat_template = *v->as_string();
  return e;
}

Session::~Session() = default;

std::optional<KvCacheType> kv_cache_type_from_name(std::string_view name) {
  if (name == "f16") return KvCacheType::F16;
  if (name == "q8_0") return KvCacheType::Q8_0;
  if (name == "q4_0") return KvCacheType::Q4_0;
  return std::nullopt;
}

const char* kv_cache_type_name(KvCacheType t) {
  switch (t) {
    case KvCacheType::Q8_0: return "q8_0";
    case KvCacheType::Q4_0: return "q4_0";
    case KvCacheType::F16: break;
  }
  return "f16";
}

Result<std::unique_ptr<Session>> Session::create(const Engine& engine, const SessionOptions& o) {
  PI_TRY(validate_sampling(o.sampling));
  runtime::ContextOptions co;
  co.n_ctx = o.n_ctx;
  co.n_batch = o.n_batch;
  co.dense = o.sparse.dense;
  co.sparse_threshold = o.sparse.threshold;
  co.sparse_threshold_env = o.sparse.threshold_env;
  co.check_predictor = o.sparse.check_predictor;
  co.thresholds.sparsity = o.sparse.sparsity;
  co.thresholds.sites = o.sparse.sites;
  co.thresholds.site_levels = o.sparse.site_sparsity;
  co.thresholds.uniform = o.sparse.uniform_sparsity;
  co.all_logits = o.all_logits;
  co.n_seq_max = o.n_seq_max;
  co.kv_types = runtime::KvTypes{runtime::kv_dtype(o.kv_type_k), runtime::kv_dtype(o.kv_type_v)};
  co.swa_full = o.swa_full;
  co.device.name = o.device;
  co.device.budget = o.device_budget;
  co.device.repack = o.repack;
  co.device.dense_repack = o.repack;
  co.vram_budget = o.vram_budget;
  co.stats_path = o.activation_stats;
  co.n_gpu_layers = o.n_gpu_layers;
  co.n_cpu_moe = o.n_cpu_moe;
  co.expert_cache = o.expert_cache;
  co.moe_ram = o.moe_ram;
  co.tensor_overrides = o.tensor_overrides;
  co.gpu_index_path = o.gpu_index;
  co.reset_gpu_index = o.reset_gpu_index;
  co.disable_gpu_index = o.disable_gpu_index;
  co.n_threads = o.n_threads > 0
                     ? o.n_threads
                     : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (co.n_ctx > 0) PI_TRY(check_kv_fits(runtime::EngineAccess::model(engine).hparams(), co.n_ctx));
  Result<std::unique_ptr<runtime::Context>> ctx = err("no context");
  try {
    ctx = runtime::Context::create(runtime::EngineAccess::model(engine), co);
  } catch (const std::bad_alloc&) {
    return err("out of memory creating a session of %lld context tokens, batch %lld",
               static_cast<long long>(co.n_ctx), static_cast<long long>(co.n_batch));
  } catch (const std::length_error&) {
    return err("context size %lld is too large", static_cast<long long>(co.n_ctx));
  } catch (const std::system_error& e) {
    return err("cannot start %d threads: %s", co.n_threads, e.what());
  }
  if (!ctx.ok()) return ctx.error();
  std::unique_ptr<Session> s(new Session());
  s->ctx_ = std::move(*ctx);
  s->tokenizer_ = runtime::EngineAccess::tokenizer(engine);
  std::shared_ptr<const grammar::Rules> rules;
  if (!o.sampling.grammar.empty()) {
    auto r = grammar::parse_gbnf(o.sampling.grammar);
    if (!r.ok()) return r.error();
    rules = std::make_shared<const grammar::Rules>(std::move(*r));
  }
  for (int i = 0; i < o.n_seq_max; ++i) {
    SamplingParams p = o.sampling;
    p.seed = o.sampling.seed + static_cast<uint64_t>(i);
    auto sampler = s->make_sampler(p, rules);
    if (!sampler.ok()) return sampler.error();
    s->samplers_.push_back(std::move(*sampler));
  }
  const auto n_seq = static_cast<size_t>(o.n_seq_max);
  s->seq_timings_.resize(n_seq);
  s->last_sampled_.assign(n_seq, -1);
  s->seq_count_.assign(n_seq, 0);
  return s;
}

Result<std::unique_ptr<runtime::Sampler>> Session::make_sampler(
    const SamplingParams& p, std::shared_ptr<const grammar::Rules> rules) {
  const int64_t n_vocab = ctx_->model().hparams().n_vocab;
  std::unique_ptr<grammar::TokenFilter> filter;
  if (!p.grammar.empty()) {
    if (tokenizer_ == nullptr)
      return with_code(err("a grammar needs the model's vocabulary, and this file has none"),
                       ErrorCode::BadRequest);
    if (!rules) {
      auto r = grammar::parse_gbnf(p.grammar);
      if (!r.ok()) return with_code(r.error(), ErrorCode::BadRequest);
      rules = std::make_shared<const grammar::Rules>(std::move(*r));
    }
    if (!grammar_tokens_) grammar_tokens_ = token_set(*tokenizer_);
    filter = std::make_unique<grammar::TokenFilter>(std::move(rules), grammar_tokens_);
  }
  return std::make_unique<runtime::Sampler>(p, n_vocab, std::move(filter));
}

Status Session::feed(std::span<const int32_t> tokens, std::vector<float>* out,
                     const std::function<bool()>& stop) {
  if (tokens.empty()) return Status::Ok();
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t before = ctx_->n_past();
  Status s = ctx_->decode(tokens, out, stop);
  const int64_t fed = ctx_->n_past() - before;
  const double ms = ms_since(t0);
  charge(timings_, Phase::Prompt, ms, fed);
  charge(seq_timings_[0], Phase::Prompt, ms, fed);
  last_sampled_[0] = -1;
  for (int64_t i = 0; i < fed; ++i) samplers_[0]->accept(tokens[static_cast<size_t>(i)]);
  return s;
}

Status Session::prompt(std::span<const int32_t> tokens, const std::function<bool()>& stop) {
  return feed(tokens, nullptr, stop);
}

Status Session::prompt_logits(std::span<const int32_t> tokens, std::vector<float>& out) {
  if (!ctx_->options().all_logits)
    return err("prompt_logits needs a session created with SessionOptions::all_logits");
  return feed(tokens, &out, {});
}

int32_t Session::sample() { return sample(0, ctx_->logits()); }

int32_t Session::sample(int32_t seq, std::span<const float> logits) {
  const auto t0 = std::chrono::steady_clock::now();
  if (seq < 0 || seq >= n_seq_max()) return -1;
  runtime::Sampler& sampler = *samplers_[static_cast<size_t>(seq)];
  const int32_t t = sampler.sample(logits);
  if (t >= 0) (void)sampler.accept_generated(t);  // sampled under the grammar: it allows t
  const double ms = ms_since(t0);
  charge(timings_, Phase::Sample, ms, 1);
  charge(seq_timings_[static_cast<size_t>(seq)], Phase::Sample, ms, 1);
  last_sampled_[static_cast<size_t>(seq)] = t;
  return t;
}

Status Session::advance(int32_t token) {
  const auto t0 = std::chrono::steady_clock::now();
  const int32_t one[1] = {token};
  PI_TRY(ctx_->decode(one));
  const double ms = ms_since(t0);
  charge(timings_, Phase::Eval, ms, 1);
  timings_.n_eval_passes += 1;
  charge(seq_timings_[0], Phase::Eval, ms, 1);
  last_sampled_[0] = -1;
  samplers_[0]->accept(token);
  return Status::Ok();
}

void Session::ban_tokens(std::vector<int32_t> ids) {
  for (auto& s : samplers_) s->set_banned(ids);
}

void Session::ban_tokens(int32_t seq, std::vector<int32_t> ids) {
  if (seq >= 0 && seq < n_seq_max()) samplers_[static_cast<size_t>(seq)]->set_banned(std::move(ids));
}

Status Session::set_sampling(int32_t seq, const SamplingParams& p,
                             std::span<const int32_t> history) {
  if (seq < 0 || seq >= n_seq_max())
    return with_code(err("sequence %d outside [0, %d)", seq, n_seq_max()), ErrorCode::BadRequest);
  if (Status v = validate_sampling(p); !v.ok()) return with_code(v.error(), ErrorCode::BadRequest);
  auto s = make_sampler(p);
  if (!s.ok()) return s.error();
  for (int32_t t : history) (*s)->accept(t);
  samplers_[static_cast<size_t>(seq)] = std::move(*s);
  return Status::Ok();
}

Status Session::decode(std::span<const BatchToken> batch) {
  const auto t0 = std::chrono::steady_clock::now();
  PI_TRY(ctx_->decode_batch(batch));
  const double ms = ms_since(t0);
  charge(timings_, Phase::Eval, ms, static_cast<int64_t>(batch.size()));
  timings_.n_eval_passes +=
      (static_cast<int64_t>(batch.size()) + ctx_->options().n_batch - 1) / ctx_->options().n_batch;
  for (const BatchToken& e : batch) {
    samplers_[static_cast<size_t>(e.seq)]->accept(e.token);
    seq_count_[static_cast<size_t>(e.seq)] += 1;
  }
  // decode_batch() accepted every sequence id, so the indexing below is in range.
  for (const BatchToken& e : batch) {
    const auto q = static_cast<size_t>(e.seq);
    const int32_t n = seq_count_[q];
    if (n == 0) continue;  // already charged
    // One token, the one sampled last: generation; else prompt tokens.
    const bool generated = n == 1 && e.token == last_sampled_[q];
    charge(seq_timings_[q], generated ? Phase::Eval : Phase::Prompt, ms, n);
    seq_count_[q] = 0;
    last_sampled_[q] = -1;
  }
  return Status::Ok();
}

std::span<const float> Session::batch_logits(size_t i) const { return ctx_->batch_logits(i); }

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::Mean: return "mean";
    case Pooling::Last: return "last";
    case Pooling::Cls: return "cls";
    case Pooling::None: return "none";
  }
  return "mean";
}

std::optional<Pooling> parse_pooling(std::string_view name) {
  for (Pooling p : {Pooling::Mean, Pooling::Last, Pooling::Cls, Pooling::None})
    if (name == pooling_name(p)) return p;
  return std::nullopt;
}

size_t embed_rows(std::span<const EmbedInput> inputs, Pooling p) {
  if (p != Pooling::None) return inputs.size();
  size_t rows = 0;
  for (const EmbedInput& in : inputs) rows += in.tokens.size();
  return rows;
}

Status Session::embed(std::span<const EmbedInput> inputs, const EmbedParams& p,
                      std::vector<float>& out) {
  const auto t0 = std::chrono::steady_clock::now();
  out.assign(embed_rows(inputs, p.pooling) * static_cast<size_t>(ctx_->model().hparams().n_embd),
             0.0f);
  Status s = ctx_->embed(inputs, p, out);
  // The inputs' sequences hold nothing now (also after most failures): fresh samplers.
  for (const EmbedInput& in : inputs) {
    if (in.seq < 0 || in.seq >= n_seq_max() || ctx_->seq_pos_max(in.seq) >= 0) continue;
    samplers_[static_cast<size_t>(in.seq)]->reset();
    last_sampled_[static_cast<size_t>(in.seq)] = -1;
  }
  if (!s.ok()) {
    out.clear();
    return s;
  }
  const double ms = ms_since(t0);
  int64_t n = 0;
  for (const EmbedInput& in : inputs) {
    const auto k = static_cast<int64_t>(in.tokens.size());
    n += k;
    charge(seq_timings_[static_cast<size_t>(in.seq)], Phase::Prompt, ms, k);
  }
  charge(timings_, Phase::Prompt, ms, n);
  return Status::Ok();
}

Status Session::embed(std::span<const int32_t> tokens, const EmbedParams& p,
                      std::vector<float>& out) {
  const EmbedInput one[1] = {{0, tokens}};
  return embed(one, p, out);
}

Status Session::embed_fits(std::span<const std::vector<int32_t>> inputs) const {
  const auto n_ctx = static_cast<size_t>(this->n_ctx());
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].size() > n_ctx)
      return with_code(err("input %zu is %zu tokens; the context holds %zu (n_ctx, -c)", i, inputs[i].size(), n_ctx),
                       ErrorCode::BadRequest);
  return Status::Ok();
}

Status Session::embed_all(std::span<const std::vector<int32_t>> inputs, const EmbedParams& p,
                          std::vector<float>& out) {
  PI_TRY(embed_fits(inputs));
  const auto n_ctx = static_cast<size_t>(this->n_ctx());
  out.clear();
  std::vector<EmbedInput> group;
  std::vector<float> rows;
  for (size_t i = 0; i < inputs.size();) {
    group.clear();
    size_t used = 0;
    while (i < inputs.size() && static_cast<int>(group.size()) < n_seq_max() &&
           (group.empty() || used + inputs[i].size() <= n_ctx)) {
      group.push_back({static_cast<int32_t>(group.size()), inputs[i]});
      used += inputs[i].size();
      ++i;
    }
    PI_TRY(embed(group, p, rows));
    out.insert(out.end(), rows.begin(), rows.end());
  }
  return Status::Ok();
}

Status Session::fork(int32_t src, int32_t dst) {
  if (src == dst) return err("cannot fork sequence %d into itself", src);
  if (dst >= 0 && dst < n_seq_max() && ctx_->seq_pos_max(dst) >= 0) {
    return err("cannot fork into sequence %d: it holds positions (remove them first)", dst);
  }
  PI_TRY(ctx_->seq_cp(src, dst, 0, runtime::kPosEnd));
  runtime::Sampler& d = *samplers_[static_cast<size_t>(dst)];
  d.reset();
  d.copy_window(*samplers_[static_cast<size_t>(src)]);
  return Status::Ok();
}

Status Session::seq_rm(int32_t seq, int32_t p0, int32_t p1) {
  PI_TRY(ctx_->seq_rm(seq, p0, p1));
  for (int32_t s = 0; s < n_seq_max(); ++s) {
    if ((seq < 0 || s == seq) && ctx_->seq_pos_max(s) < 0) samplers_[static_cast<size_t>(s)]->reset();
  }
  return Status::Ok();
}

Status Session::seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1) {
  return ctx_->seq_cp(src, dst, p0, p1);
}

int32_t Session::seq_pos_max(int32_t seq) const { return ctx_->seq_pos_max(seq); }

std::vector<int32_t> Session::seq_tokens(int32_t seq) const {
  return seq >= 0 && seq < n_seq_max() ? ctx_->seq_tokens(seq) : std::vector<int32_t>{};
}

Result<int64_t> Session::seq_reuse_prefix(int32_t seq, std::span<const int32_t> prompt) {
  if (seq < 0 || seq >= n_seq_max())
    return with_code(err("sequence id %d outside [0, %d)", seq, n_seq_max()), ErrorCode::BadRequest);
  const std::vector<int32_t> held = ctx_->seq_tokens(seq);
  size_t n = static_cast<size_t>(std::mismatch(held.begin(), held.end(), prompt.begin(), prompt.end()).first -
                                 held.begin());
  // At least the last prompt token is evaluated: its logits give the next token.
  n = prompt.empty() ? 0 : std::min(n, prompt.size() - 1);
  const auto p0 = static_cast<int32_t>(n);
  const bool cut = ctx_->seq_pos_max(seq) >= p0;
  // Sliding-window layers kept bounded (no swa_full) can go on from a kept prefix only while
  // the window before its end is still held: else from scratch.
  if (n > 0 && cut && !ctx_->can_truncate(seq, p0)) n = 0;
  if (cut) PI_TRY(seq_rm(seq, static_cast<int32_t>(n)));
  return static_cast<int64_t>(n);
}

bool Session::seq_can_truncate(int32_t seq, int32_t p0) const {
  return seq >= 0 && seq < n_seq_max() ? ctx_->can_truncate(seq, p0) : false;
}

bool Session::grammar_done(int32_t seq) const {
  return seq >= 0 && seq < n_seq_max() && samplers_[static_cast<size_t>(seq)]->grammar_done();
}
int Session::n_seq_max() const { return ctx_->options().n_seq_max; }

std::span<const float> Session::logits() const { return ctx_->logits(); }
int64_t Session::n_past() const { return ctx_->n_past(); }
int64_t Session::n_ctx() const { return ctx_->n_ctx(); }
int Session::n_threads() const { return ctx_->options().n_threads; }
int64_t Session::n_batch() const { return ctx_->options().n_batch; }

SeqTimings Session::seq_timings(int32_t seq) const {
  if (seq < 0 || seq >= n_seq_max()) return {};
  return seq_timings_[static_cast<size_t>(seq)];
}

void Session::reset_seq_timings(int32_t seq) {
  if (seq >= 0 && seq < n_seq_max()) seq_timings_[static_cast<size_t>(seq)] = {};
}

void Session::reset() {
  (void)ctx_->truncate(0);
  for (auto& s : samplers_) s->reset();
}

Status Session::warmup(int32_t token) {
  const int32_t one[1] = {token};
  PI_TRY(ctx_->decode(one));
  reset();
  reset_sparsity();
  return Status::Ok();
}

namespace {

// The counters of the sites a calibrated file runs thresholded.
void add_site_reports(const runtime::Context& ctx, SparsityReport& r) {
  const sparse::SiteThresholds& thr = ctx.site_thresholds();
  r.thresholded = true;
  r.act_sparsity = thr.sparsity;
  r.allocated = thr.allocated;
  const sparse::SiteBytes bytes = sparse::site_bytes(ctx.model());
  r.projection_bytes = bytes.total;
  for (sparse::Site s : sparse::kAllSites) {
    if (!thr.on(s)) continue;
    const auto i = static_cast<size_t>(s);
    const bool proj = s == sparse::Site::AttnIn || s == sparse::Site::AttnOut;
    const sparse::SiteStats& st = proj ? ctx.threshold_proj()->stats() : ctx.threshold_ffn()->stats();
    SiteSparsity site;
    site.site = sparse::site_name(s);
    site.thresholds = thr.per_layer[i];
    site.levels = thr.levels[i];
    site.weight_bytes = bytes.per_layer[i];
    site.tokens = st[i].empty() ? 0 : st[i][0].tokens;
    for (const sparse::SiteLayerStats& l : st[i]) {
      site.entries.push_back(l.entries);
      site.kept.push_back(l.kept);
      site.bytes.push_back(l.bytes);
      site.seconds.push_back(l.seconds);
    }
    r.sites.push_back(std::move(site));
  }
}

}  // namespace

SparsityReport Session::sparsity() const {
  SparsityReport r;
  if (ctx_->threshold_ffn() != nullptr) add_site_reports(*ctx_, r);
  const model::Model& m = ctx_->model();
  const std::vector<model::MoeFfn*>& moes = ctx_->moe_ffns();
  if (!moes.empty() && moes.front()->sparse_experts()) {
    // ReGLU experts: each token's chosen experts computed only where their gates fire (each
    // lane's step counts the layers it ran).
    r.sparse = true;
    r.threshold_source = "ReGLU experts";
    for (const model::LayerWeights& L : m.weights().layers) {
      model::each_layer_matrix(L, [&](const model::LayerTensor& t, const model::Matrix& w) {
        if (t.group == model::Group::Ffn) r.ffn_bytes_dense += model::token_bytes(m.hparams(), t, w);
      });
    }
    for (size_t il = 0; il < m.weights().layers.size(); ++il) {
      LayerSparsity l;
      l.n_ff = m.hparams().n_expert_used * m.hparams().n_ff_exp;
      for (const model::MoeFfn* moe : moes) {
        const model::MoeFfn::LayerStats& s = moe->stats()[il];
        l.tokens += s.tokens;
        l.predicted += s.rows_computed;
        l.computed += s.rows_computed;
        l.bytes += s.bytes;
      }
      r.layers.push_back(l);
    }
    return r;
  }
  const sparse::SparseFfn* ffn = ctx_->sparse_ffn();
  if (ffn == nullptr) return r;
  r.sparse = true;
  r.checked = ffn->config().check_predictor;
  r.threshold = ctx_->sparse_threshold().value;
  r.threshold_source = sparse::threshold_source_name(ctx_->sparse_threshold().source);
  for (const model::LayerWeights& L : m.weights().layers) {
    model::each_layer_matrix(L, [&](const model::LayerTensor& t, const model::Matrix& w) {
      if (t.group == model::Group::Ffn) r.ffn_bytes_dense += model::token_bytes(m.hparams(), t, w);
    });
  }
  for (const sparse::LayerStats& s : ffn->stats()) {
    LayerSparsity l;
    l.tokens = s.tokens;
    l.n_ff = m.hparams().n_ff;
    l.predicted = s.predicted;
    l.computed = s.computed;
    l.bytes = s.bytes;
    for (int p = 0; p < 4; ++p) l.batch_paths[p] = s.path_calls[p];
    l.predict_s = s.predict_s;
    l.rows_s = s.rows_s;
    l.down_s = s.down_s;
    l.truly_active = s.truly_active;
    l.caught = s.caught;
    l.max_abs_dev = s.max_abs_dev;
    l.max_abs_dense = s.max_abs_dense;
    r.layers.push_back(l);
  }
  return r;
}

PlacementInfo Session::placement() const {
  PlacementInfo p;
  const runtime::HybridSetup* h = ctx_->hybrid();
  if (h == nullptr) return p;
  const model::HParams& hp = ctx_->model().hparams();
  p.hybrid = true;
  p.device = ctx_->device().name();
  p.origin = h->origin;
  p.stats = h->stats_path;
  p.budget = h->budget;
  p.device_bytes = h->ledger.total();
  p.n_layer = hp.n_layer;
  p.layers_on_device = h->plan.n_dense_layers;
  p.head_on_device = h->plan.head_on_device;
  p.hot_neurons = h->plan.n_device_neurons();
  p.experts = h->experts;
  p.n_neurons = h->split ? hp.n_layer * hp.n_ff : h->experts ? hp.n_layer * hp.n_expert : 0;
  p.mass_covered = h->plan.mass_covered();
  if (const model::HybridMoeFfn* split = ctx_->hybrid_moe(); split != nullptr) {
    for (const model::MoeSplitCounters& c : split->counters()) {
      p.expert_pairs_device += c.device_places;
      p.expert_pairs_cpu += c.host_places;
      p.expert_uploads += c.uploads;
      p.expert_upload_bytes += c.upload_bytes;
    }
  }
  p.cpu_bytes_per_token = h->plan.cpu_bytes_per_token;
  p.device_bytes_per_token = h->plan.cpu_bytes_all_cpu - h->plan.cpu_bytes_per_token;
  p.head_bytes = h->head_bytes;
  for (size_t l = 0; l < h->layer_bytes.size(); ++l) {
    const runtime::HybridSetup::LayerBytes& b = h->layer_bytes[l];
    p.layers.push_back({h->plan.layers[l].dense_on_device, b.dense, b.kv_per_cell, b.hot, b.cold,
                        static_cast<int64_t>(h->plan.layers[l].device_neurons.size())});
  }
  for (const runtime::LedgerLine& l : h->ledger.lines()) p.memory.push_back({l.what, l.count, l.bytes});
  if (h->ledger.margin() > 0) p.memory.push_back({"runtime margin", 0, h->ledger.margin()});
  const backend::DeviceActivity t = ctx_->device().activity();
  p.bytes_to_device = t.bytes_in;
  p.bytes_from_device = t.bytes_out;
  p.copies_to_device = t.copies_in;
  p.copies_from_device = t.copies_out;
  p.device_ops = t.ops;
  return p;
}

std::vector<MemoryLine> Session::memory() const {
  std::vector<MemoryLine> out;
  const model::Model& m = ctx_->model();
  const MappedFile& f = m.file().mapping();
  const uint64_t copies = m.layouts().bytes();
  if (const model::ExpertStream* s = ctx_->expert_stream(); s != nullptr) {
    // The experts are not in memory but in the expert cache (host_memory's line), and the
    // pages placement read to copy matrices were released.
    uint64_t experts = 0;
    for (const model::LayerWeights& L : m.weights().layers)
      model::each_expert_stack(L.ffn, [&](const model::Matrix& x) { experts += x.nbytes(); });
    // Of the rest, what placement copied into the CPU's layouts is counted once, as copies.
    const uint64_t rest = f.size() - std::min<uint64_t>(f.size(), experts);
    out.push_back({"host", "model besides experts", rest - std::min(rest, copies)});
  } else {
    out.push_back({"host", f.mode() == LoadMode::Map ? "model (mapped)" : "model (read into memory)", f.size()});
  }
  if (copies > 0) out.push_back({"host", "model (layout copies)", copies});
  for (const runtime::LedgerLine& l : ctx_->host_memory()) out.push_back({"host", l.what, l.bytes});
  if (const runtime::HybridSetup* h = ctx_->hybrid(); h != nullptr) {
    const std::string dev = ctx_->device().name();
    for (const runtime::LedgerLine& l : h->ledger.lines()) out.push_back({dev, l.what, l.bytes});
    if (h->ledger.margin() > 0) out.push_back({dev, "runtime margin", h->ledger.margin()});
  }
  return out;
}

ExpertReads Session::expert_reads() const {
  ExpertReads r;
  const model::ExpertStream* s = ctx_->expert_stream();
  if (s == nullptr) return r;
  const model::ExpertStreamStats st = s->stats();
  r.on = true;
  r.slots = s->slots();
  r.cache_bytes = s->cache_bytes();
  r.direct_io = s->direct_io();
  r.hits = st.hits;
  r.misses = st.misses;
  r.read_ahead = st.prefetched;
  r.read_ahead_used = st.prefetch_used;
  r.guessed = st.predicted;
  r.guessed_right = st.predicted_right;
  r.bytes_read = st.bytes_read;
  r.read_s = st.read_s;
  r.wait_s = st.wait_s;
  return r;
}

void Session::reset_sparsity() {
  if (model::ExpertStream* s = ctx_->expert_stream(); s != nullptr) s->reset_stats();
  if (sparse::SparseFfn* ffn = ctx_->sparse_ffn(); ffn != nullptr) ffn->reset_stats();
  for (model::MoeFfn* moe : ctx_->moe_ffns()) moe->reset_stats();
  if (ctx_->threshold_ffn() != nullptr) ctx_->threshold_ffn()->reset_stats();
  if (ctx_->threshold_proj() != nullptr) ctx_->threshold_proj()->reset_stats();
}

}  // namespace pi
