#include "run_conversation.h"

#include <algorithm>
#include <vector>

#include "chat/harmony.h"
#include "chat/reasoning.h"
#include "core/log.h"
#include "powerinfer/generator.h"
#include "powerinfer/vocabulary.h"

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

// Feeds `tokens` after `hist`, shifting the context first when they do not fit (counted in
// `shifts`).
Status feed(Session& s, std::vector<int32_t>& hist, std::span<const int32_t> tokens,
            int64_t n_keep, const ConsoleIo& io, int& shifts) {
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
    ++shifts;
  }
  const int64_t before = s.n_past();
  Status st = tokens.size() == 1 ? s.advance(tokens[0]) : s.prompt(tokens, io.interrupted);
  const int64_t fed = s.n_past() - before;
  hist.insert(hist.end(), tokens.begin(), tokens.begin() + fed);
  return st;
}

// Prints a reply's split: reasoning between "[Start thinking]" and "[End thinking]" (dim on
// a terminal; nothing when hidden), then the answer.
class ReplyPrinter {
 public:
  ReplyPrinter(const ConversationOptions& o, const ConsoleIo& io) : o_(o), io_(io) {}
  void print(const chat::ReplySplit::Delta& d) {
    if (!d.reasoning.empty() && o_.show_reasoning) {
      if (!thinking_) io_.print(o_.dim_reasoning ? "\x1b[2m[Start thinking]\n" : "[Start thinking]\n");
      thinking_ = true;
      io_.print(d.reasoning);
    }
    if (!d.content.empty()) {
      close();
      io_.print(d.content);
    }
  }
  void close() {
    if (thinking_) io_.print(o_.dim_reasoning ? "\n[End thinking]\x1b[0m\n\n" : "\n[End thinking]\n\n");
    thinking_ = false;
  }

 private:
  const ConversationOptions& o_;
  const ConsoleIo& io_;
  bool thinking_ = false;
};

// The tokens of the rendered conversation from the start, without the oldest user/assistant
// turns (the system message stays) while it takes more than half of n_ctx; those turns are
// removed from `msgs`.
Result<std::vector<int32_t>> rebuild(std::vector<chat::Message>& msgs, const Vocabulary& tok,
                                     const ConversationOptions& o, const chat::RenderOptions& ro,
                                     int64_t n_ctx, std::string& text) {
  const size_t first = !msgs.empty() && msgs[0].role == "system" ? 1 : 0;
  while (true) {
    auto full = chat::render(o.chat_template, msgs, true, ro);
    if (!full.ok()) return full.error();
    std::vector<int32_t> tokens = tok.encode(*full, tok.add_bos(), true);
    if (static_cast<int64_t>(tokens.size()) <= n_ctx / 2 || msgs.size() < first + 3) {
      text = std::move(*full);
      return tokens;
    }
    msgs.erase(msgs.begin() + static_cast<std::ptrdiff_t>(first),
               msgs.begin() + static_cast<std::ptrdiff_t>(first + 2));
  }
}

}  // namespace

Status run_conversation(Session& s, const Vocabulary& tok, const ConversationOptions& o,
                        const ConsoleIo& io) {
  std::vector<chat::Message> msgs;
  if (!o.system_prompt.empty()) msgs.push_back({"system", o.system_prompt});
  chat::RenderOptions ro = o.render;
  if (ro.current_date.empty()) ro.current_date = chat::local_date();
  const Vocabulary& vocab = tok;
  GenerateParams gp;  // the chat format's reply tokens: harmony's headers shown, <|end|> no end
  gp.max_tokens = o.n_predict;
  gp.ignore_eos = o.ignore_eos;
  const chat::ReplyTokens rt = chat::reply_tokens(o.chat_template);
  ReplyIds ids = reply_ids(vocab, rt.shown, rt.not_end, rt.end);
  gp.shown_tokens = std::move(ids.shown);
  gp.end_tokens = std::move(ids.end);
  const chat::SplitKind kind =
      o.chat_template == chat::Template::Harmony ? chat::SplitKind::Harmony : chat::SplitKind::None;
  std::vector<int32_t> hist;  // every token the session holds, in order
  std::string fed_text;       // the text they stand for: rendered turns and replies as written
  size_t reply_bytes = 0;     // of fed_text, the last reply's
  size_t reply_tokens = 0;    // of hist, the last reply's
  bool reply_whole = false;   // no context shift since the last reply began
  int shifts = 0;
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
    auto full = chat::render(o.chat_template, msgs, true, ro);
    if (!full.ok()) return full.error();
    std::vector<int32_t> turn;
    std::string held, next;  // the text the session holds before and after `turn` is fed
    bool rebuilt = false;
    const std::string_view before_reply = std::string_view(fed_text).substr(0, fed_text.size() - reply_bytes);
    if (full->starts_with(fed_text)) {
      held = fed_text;
    } else if (reply_whole && full->starts_with(before_reply) &&
               s.seq_can_truncate(0, static_cast<int32_t>(hist.size() - reply_tokens))) {
      // The reply is not in the rendering (harmony): drop its tokens, feed from before it
      // (unless sliding-window layers no longer hold the window there: rebuilt below).
      const size_t keep = hist.size() - reply_tokens;
      PI_TRY(s.seq_rm(0, static_cast<int32_t>(keep)));
      hist.resize(keep);
      held = before_reply;
    } else {
      s.reset();
      hist.clear();
      auto tokens = rebuild(msgs, tok, o, ro, s.n_ctx(), *full);
      if (!tokens.ok()) return tokens.error();
      turn = std::move(*tokens);
      rebuilt = true;
    }
    next = std::move(*full);
    if (!rebuilt) turn = tok.encode(next.substr(held.size()), hist.empty() && tok.add_bos(), true);
    reply_bytes = reply_tokens = 0;
    const size_t before = hist.size();
    if (Status st = feed(s, hist, turn, std::max(n_keep, n_bos), io, shifts); !st.ok()) {
      if (st.error().code != ErrorCode::Cancelled) return st;
      // Ctrl-C while reading the turn: forget it and ask again.
      if (!s.seq_can_truncate(0, static_cast<int32_t>(before))) {
        // The window before the turn is gone (sliding-window layers): start over from the
        // messages on the next turn.
        s.reset();
        hist.clear();
        msgs.pop_back();
        fed_text.clear();
        continue;
      }
      PI_TRY(s.seq_rm(0, static_cast<int32_t>(before)));
      hist.resize(std::min(hist.size(), before));
      msgs.pop_back();
      fed_text = std::move(held);
      continue;
    }
    fed_text = std::move(next);
    if (n_keep < 0) n_keep = static_cast<int64_t>(hist.size());  // --keep -1: the first turn

    Generator gen(vocab);
    gen.begin(gp);
    chat::ReplySplit split(kind);
    ReplyPrinter printer(o, io);
    std::string raw, answer;  // the reply as written; its answer (harmony: the final channel)
    auto take = [&](const std::string& piece, bool last) {
      raw += piece;
      const chat::ReplySplit::Delta d = last ? split.push(piece) + split.finish() : split.push(piece);
      printer.print(d);
      answer += d.content;
    };
    const int shifts_before = shifts;
    while (gp.max_tokens != 0 && !io.interrupted()) {
      const int32_t t = s.sample();
      const GenEnd e = gen.accept(t, {}, t >= 0 && s.grammar_done(), /*context_full=*/false);
      take(gen.take(), false);
      if (e == GenEnd::None || e == GenEnd::Length) {  // a full context shifts in feed()
        const int32_t one[1] = {t};
        PI_TRY(feed(s, hist, one, std::max(n_keep, n_bos), io, shifts));
        ++reply_tokens;
      }
      if (e != GenEnd::None) break;
    }
    take(gen.finish(), true);
    printer.close();
    fed_text += raw;
    reply_bytes = raw.size();
    reply_whole = shifts == shifts_before;
    msgs.push_back({"assistant", answer});
  }
  return Status::Ok();
}

}  // namespace pi::cli
