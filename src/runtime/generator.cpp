#include "powerinfer/generator.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "powerinfer/engine.h"

namespace pi {

namespace {

bool contains(const std::vector<int32_t>& ids, int32_t t) {
  return std::find(ids.begin(), ids.end(), t) != ids.end();
}

// The id of control token `text`: -1 unless it is one token whose text is exactly `text`.
int32_t control_token(const Vocabulary& v, std::string_view text) {
  const std::vector<int32_t> ids = v.encode(text, /*add_bos=*/false, /*parse_special=*/true);
  return ids.size() == 1 && v.piece(ids[0]) == text ? ids[0] : -1;
}

std::vector<int32_t> control_tokens(const Vocabulary& v, std::span<const std::string_view> texts) {
  std::vector<int32_t> out;
  for (std::string_view t : texts)
    if (const int32_t id = control_token(v, t); id >= 0) out.push_back(id);
  return out;
}

}  // namespace

ReplyIds reply_ids(const Vocabulary& v, std::span<const std::string_view> shown,
                   std::span<const std::string_view> not_end, std::span<const std::string_view> end) {
  ReplyIds r;
  if (shown.empty() && not_end.empty() && end.empty()) return r;
  r.shown = control_tokens(v, shown);
  const std::vector<int32_t> keep = control_tokens(v, not_end);
  for (int32_t id : v.eog_tokens())
    if (!contains(keep, id)) r.end.push_back(id);
  for (int32_t id : control_tokens(v, end))
    if (!contains(r.end, id)) r.end.push_back(id);
  return r;
}

const char* gen_end_name(GenEnd e) {
  switch (e) {
    case GenEnd::None:
      return "none";
    case GenEnd::EndToken:
      return "end token";
    case GenEnd::StopString:
      return "stop string";
    case GenEnd::GrammarDone:
      return "grammar done";
    case GenEnd::ContextFull:
      return "context full";
    case GenEnd::Length:
      return "length";
    case GenEnd::NoToken:
      return "no token";
  }
  return "?";
}

Generator::Generator(const Vocabulary& v) : vocab_(&v), dec_(v) {}

std::string Generator::context(std::span<const int32_t> ids) {
  std::string text;
  for (int32_t t : ids) text += dec_.push(t);
  return text;
}

void Generator::begin(GenerateParams p) {
  p_ = std::move(p);
  out_ = StopText(p_.stop);
  probs_.clear();
  end_ = GenEnd::None;
  n_tokens_ = 0;
  last_ = -1;
  last_fed_ = false;
}

bool Generator::ends(int32_t t) const {
  return p_.end_tokens.empty() ? vocab_->is_eog(t) : contains(p_.end_tokens, t);
}

GenEnd Generator::accept(int32_t t, std::span<const float> logits, bool grammar_done,
                         bool context_full) {
  if (end_ != GenEnd::None) return end_;
  last_ = t;
  last_fed_ = false;
  if (t < 0) return end_ = GenEnd::NoToken;
  if (p_.max_tokens == 0) return end_ = GenEnd::Length;
  if (!p_.ignore_eos && ends(t)) return end_ = GenEnd::EndToken;
  n_tokens_ += 1;
  // A shown control token's text follows what the decoder holds (a byte-level vocabulary's
  // flush only completes the text; harmony's vocabularies are such).
  const std::string piece =
      contains(p_.shown_tokens, t) ? dec_.flush() + vocab_->piece(t) : dec_.push(t);
  if (p_.top_logprobs >= 0) add_probs(t, logits);
  if (out_.append(piece)) return end_ = GenEnd::StopString;
  if (grammar_done) return end_ = GenEnd::GrammarDone;
  if (context_full) return end_ = GenEnd::ContextFull;
  if (p_.max_tokens > 0 && n_tokens_ >= p_.max_tokens) return end_ = GenEnd::Length;
  return GenEnd::None;
}

Result<GenEnd> Generator::sample(Session& s) {
  if (end_ != GenEnd::None) return end_;
  if (p_.max_tokens == 0) return end_ = GenEnd::Length;  // nothing to sample
  const std::span<const float> logits =
      p_.top_logprobs >= 0 ? s.logits() : std::span<const float>{};
  const int32_t t = s.sample();
  const GenEnd e = accept(t, logits, t >= 0 && s.grammar_done(), s.n_past() >= s.n_ctx());
  if (e == GenEnd::NoToken) return Error{kGrammarAllowsNoToken, ErrorCode::BadRequest};
  return e;
}

Result<bool> Generator::feed(Session& s) {
  const bool wanted = last_ >= 0 && !last_fed_ && n_tokens_ > 0 &&
                      (end_ == GenEnd::None || end_ == GenEnd::Length);
  if (!wanted) return false;
  PI_TRY(s.advance(last_));
  last_fed_ = true;
  return true;
}

std::string Generator::take() { return out_.take(); }

std::string Generator::finish() {
  std::string held = dec_.flush();
  if (!out_.stopped()) (void)out_.append(held);
  return out_.take_rest();
}

std::vector<TokenProb> Generator::take_probs() {
  std::vector<TokenProb> out;
  out.swap(probs_);
  return out;
}

void Generator::add_probs(int32_t t, std::span<const float> logits) {
  TokenProb p{t, vocab_->piece(t), 0.0f, {}};
  if (logits.empty() || static_cast<size_t>(t) >= logits.size()) {
    probs_.push_back(std::move(p));
    return;
  }
  // log-softmax of the raw logits.
  float mx = -INFINITY;
  for (float l : logits) mx = std::max(mx, l);
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - mx));
  const float lse = mx + static_cast<float>(std::log(sum));
  p.logprob = logits[static_cast<size_t>(t)] - lse;
  const auto k = static_cast<size_t>(
      std::min<int64_t>(p_.top_logprobs, static_cast<int64_t>(logits.size())));
  if (k > 0) {
    std::vector<int32_t> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
                      [&](int32_t a, int32_t b) {
                        const float la = logits[static_cast<size_t>(a)];
                        const float lb = logits[static_cast<size_t>(b)];
                        return la > lb || (la == lb && a < b);
                      });
    for (size_t i = 0; i < k; ++i)
      p.top.push_back({ids[i], vocab_->piece(ids[i]), logits[static_cast<size_t>(ids[i])] - lse});
  }
  probs_.push_back(std::move(p));
}

}  // namespace pi
