#include "run_conversation.h"

#include <algorithm>
#include <vector>

#include "core/log.h"
#include "tokenizer/tokenizer.h"

namespace pi::cli {

Result<std::vector<int32_t>> shift_context(std::span<const int32_t> history, int64_t n_keep,
                                           int64_t need, int64_t n_ctx) {
  const auto n = static_cast<int64_t>(history.size());
  n_keep = std::clamp<int64_t>(n_keep, 0, n);
  if (n_keep + need > n_ctx) {
    return with_code(err("context overflow: %lld new tokens do not fit a context of %lld after "
                         "keeping %lld (raise -c or lower --keep)",
                         static_cast<long long>(need), static_cast<long long>(n_ctx),
                         static_cast<long long>(n_keep)),
                     ErrorCode::ContextFull);
  }
  const int64_t rest = n - n_keep;
  const int64_t must = std::max<int64_t>(0, n + need - n_ctx);
  const int64_t drop = std::min(rest, std::max(rest / 2, must));
  std::vector<int32_t> kept(history.begin(), history.begin() + n_keep);
  kept.insert(kept.end(), history.begin() + n_keep + drop, history.end());
  return kept;
}

namespace {

// Feeds `tokens` after `hist`, shifting the context first when they do not fit.
Status feed(Session& s, std::vector<int32_t>& hist, std::span<const int32_t> tokens,
            int64_t n_keep, const ConsoleIo& io) {
  const auto need = static_cast<int64_t>(tokens.size());
  if (static_cast<int64_t>(hist.size()) + need > s.n_ctx()) {
    auto kept = shift_context(hist, n_keep, need, s.n_ctx());
    if (!kept.ok()) return kept.error();
    log_info("\n[context shift: %lld tokens kept, %zu dropped]",
             static_cast<long long>(std::min<int64_t>(n_keep, static_cast<int64_t>(hist.size()))),
             hist.size() - kept->size());
    s.reset();
    hist = std::move(*kept);
    PI_TRY(s.prompt(hist));
  }
  const int64_t before = s.n_past();
  Status st = tokens.size() == 1 ? s.advance(tokens[0]) : s.prompt(tokens, io.interrupted);
  const int64_t fed = s.n_past() - before;
  hist.insert(hist.end(), tokens.begin(), tokens.begin() + fed);
  return st;
}

}  // namespace

Status run_conversation(Session& s, const Tokenizer& tok, const ConversationOptions& o,
                        const ConsoleIo& io) {
  std::vector<chat::Message> msgs;
  if (!o.system_prompt.empty()) msgs.push_back({"system", o.system_prompt});
  std::vector<int32_t> hist;  // every token the session holds, in order
  std::string fed_text;       // the rendered conversation up to the last answer
  int64_t n_keep = o.n_keep;
  // The BOS token is always kept: the model never saw text without it.
  const int64_t n_bos = tok.add_bos() && tok.bos() >= 0 ? 1 : 0;
  std::string line;
  while (true) {
    io.clear_interrupt();
    io.print("\n> ");
    if (!io.read_line(line)) break;
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    if (line.empty()) continue;
    msgs.push_back({"user", line});
    auto full = chat::render(o.chat_template, msgs, true);
    if (!full.ok()) return full.error();
    const std::string delta =
        full->compare(0, fed_text.size(), fed_text) == 0 ? full->substr(fed_text.size()) : *full;
    const std::vector<int32_t> turn = tok.encode(delta, hist.empty() && tok.add_bos(), true);
    const size_t before = hist.size();
    if (Status st = feed(s, hist, turn, std::max(n_keep, n_bos), io); !st.ok()) {
      if (st.error().code != ErrorCode::Cancelled) return st;
      // Ctrl-C while reading the turn: forget it and ask again.
      PI_TRY(s.seq_rm(0, static_cast<int32_t>(before)));
      hist.resize(std::min(hist.size(), before));
      msgs.pop_back();
      continue;
    }
    if (n_keep < 0) n_keep = static_cast<int64_t>(hist.size());  // --keep -1: the first turn

    Tokenizer::StreamDecoder dec(tok);
    std::string answer;
    for (int64_t n = 0; o.n_predict < 0 || n < o.n_predict; ++n) {
      if (io.interrupted()) break;
      const int32_t t = s.sample();
      if (!o.ignore_eos && tok.is_eog(t)) break;
      const std::string piece = dec.push(t);
      io.print(piece);
      answer += piece;
      const int32_t one[1] = {t};
      PI_TRY(feed(s, hist, one, std::max(n_keep, n_bos), io));
    }
    const std::string rest = dec.flush();
    io.print(rest);
    answer += rest;
    msgs.push_back({"assistant", answer});
    auto rendered = chat::render(o.chat_template, msgs, false);
    if (!rendered.ok()) return rendered.error();
    fed_text = std::move(*rendered);
  }
  return Status::Ok();
}

}  // namespace pi::cli
