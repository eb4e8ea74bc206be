// Profiling a model on a text (include/powerinfer/profile.h): a measuring context
// (ContextOptions::profile), chunks from an empty cache, the statistics file.
#include "powerinfer/profile.h"

#include <algorithm>
#include <functional>
#include <thread>

#include "core/log.h"
#include "model/model.h"
#include "model/moe_ffn.h"
#include "runtime/context.h"
#include "sparse/activation_stats.h"
#include "sparse/placement_model.h"
#include "sparse/profile_ffn.h"
#include "text_chunks.h"
#include "tokenizer/tokenizer.h"

namespace pi {
namespace {

Error bad_request(Error e) { return with_code(std::move(e), ErrorCode::BadRequest); }

// The per-layer summary of the statistics (ProfileLayer).
std::vector<ProfileLayer> summarize(const sparse::ActivationStats& s) {
  std::vector<ProfileLayer> out(static_cast<size_t>(s.n_layer()));
  for (int64_t l = 0; l < s.n_layer(); ++l) {
    ProfileLayer& r = out[static_cast<size_t>(l)];
    if (s.has_experts()) {
      const std::vector<double> sh = s.expert_shares(l);
      const auto [lo, hi] = std::minmax_element(sh.begin(), sh.end());
      r.least_chosen = *lo;
      r.most_chosen = *hi;
      r.reuse = s.reuse_rate(l);
      const auto& c = s.counts[static_cast<size_t>(l)];
      if (!c.empty()) {
        // Fired neurons over the neurons of the experts the tokens were routed to.
        const int64_t n_ff_exp = static_cast<int64_t>(c.size()) / s.n_expert;
        double on = 0, routed = 0;
        for (float v : c) on += v;
        for (float v : s.expert_counts[static_cast<size_t>(l)])
          routed += static_cast<double>(v) * static_cast<double>(n_ff_exp);
        r.fired = routed > 0 ? on / routed : 0.0;
      }
      continue;
    }
    std::vector<double> f = s.frequencies(l);
    double sum = 0;
    for (double v : f) sum += v;
    std::sort(f.begin(), f.end(), std::greater<>());
    double top = 0;
    for (size_t i = 0; i < f.size() / 5; ++i) top += f[i];
    r.activity = f.empty() ? 0.0 : sum / static_cast<double>(f.size());
    r.top20_share = sum > 0 ? top / sum : 0.0;
  }
  return out;
}

}  // namespace

Result<ProfileReport> profile_model(const ProfileParams& p, std::string_view text) {
  if (p.n_ctx < 2) return bad_request(err("profile: n_ctx (-c) must be >= 2 (got %lld)", static_cast<long long>(p.n_ctx)));
  if (p.n_batch < 1)
    return bad_request(err("profile: n_batch (-b) must be >= 1 (got %lld)", static_cast<long long>(p.n_batch)));
  if (p.max_tokens < 0) return bad_request(err("profile: max_tokens (--max-tokens) must be >= 0"));
  if (p.n_threads < 0) return bad_request(err("profile: n_threads (-t) must be >= 0 (0: all)"));
  if (p.output.empty()) return bad_request(err("profile: no output file"));
  auto model = model::Model::load(p.model);
  if (!model.ok()) return model.error();
  const model::Model& m = **model;
  auto tok = Tokenizer::from_gguf(m.file());
  if (!tok.ok()) return tok.error();
  auto tokens = workflows::text_tokens(*tok, text, p.max_tokens);
  if (!tokens.ok()) return tokens.error();

  runtime::ContextOptions co;
  co.n_ctx = p.n_ctx;
  co.n_batch = std::min(p.n_batch, p.n_ctx);
  co.n_threads = p.n_threads > 0 ? p.n_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const model::HParams& hp = m.hparams();
  if (p.keep_routes && !hp.is_moe())
    return bad_request(err("%s is not a mixture of experts: it has no routes to keep (--expert-cache)", p.model.c_str()));
  co.dense = !hp.is_moe();
  co.profile = true;
  auto ctx = runtime::Context::create(m, co);
  if (!ctx.ok()) return ctx.error();
  model::MoeFfn* moe = (*ctx)->moe_ffn();
  sparse::ActivationStats moe_stats;
  ProfileReport rep;
  if (hp.is_moe()) {
    if (moe == nullptr) return err("%s: the context runs no mixture-of-experts step", p.model.c_str());
    moe->trace_routes(true);
    moe->count_neurons(true);
    moe_stats.source = "profile";
    moe_stats.n_expert = hp.n_expert;
    moe_stats.n_expert_used = hp.n_expert_used;
    moe_stats.expert_counts.assign(static_cast<size_t>(hp.n_layer), std::vector<float>(static_cast<size_t>(hp.n_expert)));
    moe_stats.expert_reuse.assign(static_cast<size_t>(hp.n_layer), 0.0f);
    if (p.keep_routes) rep.routes.resize(static_cast<size_t>(hp.n_layer));
  }

  log_info("profile: %zu tokens in chunks of %lld, %d threads", tokens->size(),
           static_cast<long long>(p.n_ctx), co.n_threads);
  const auto count = [&](std::span<const int32_t> piece) -> Status {
    if (moe == nullptr) return Status::Ok();
    // Each chunk is one sequence from its first token.
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      const std::vector<int32_t>& ids = moe->routes()[static_cast<size_t>(il)];
      PI_TRY(sparse::count_routes(moe_stats, il, ids));
      if (p.keep_routes) {
        auto& r = rep.routes[static_cast<size_t>(il)];
        r.insert(r.end(), ids.begin(), ids.end());
      }
    }
    moe->clear_routes();
    moe_stats.n_tokens += piece.size();
    return Status::Ok();
  };
  PI_TRY(workflows::run_chunks(**ctx, workflows::text_chunks(*tok, *tokens, p.n_ctx), "profile", p.progress, count));

  sparse::ActivationStats stats;
  if (moe != nullptr) {
    stats = std::move(moe_stats);
    stats.counts = moe->neuron_counts();
    stats.counts.resize(static_cast<size_t>(hp.n_layer));  // empty rows: no neuron counts
  } else {
    stats = (*ctx)->profiler()->stats();
  }
  stats.model_fingerprint = sparse::model_fingerprint(m.file());
  PI_TRY(sparse::write_activation_stats(p.output, stats));
  rep.n_tokens = stats.n_tokens;
  rep.experts = stats.has_experts();
  rep.n_expert = stats.n_expert;
  rep.n_expert_used = stats.n_expert_used;
  rep.layers = summarize(stats);
  if (rep.experts) rep.expert_bytes = sparse::expert_bytes(m.weights().layers[0], hp.n_expert);
  return rep;
}

}  // namespace pi
