// `powerinfer run -cnv`: conversation mode. The user types from the first turn; each turn is
// rendered with the model's chat template (or --chat-template), only the text it adds is fed,
// and the answer streams until an end-of-generation token, -n tokens or Ctrl-C. When the
// context fills, the first --keep tokens stay and half of the rest is dropped (the kept tokens
// are evaluated again, so the cache holds them at their new positions); the conversation goes
// on instead of stopping.
//
// The session holds the rendered turns and each reply as the model wrote it. For the
// prefix-stable families the next rendering extends that text, so a turn feeds the reply's
// closing and the new message. A harmony (gpt-oss) reply is several messages, and history
// keeps only its final channel: the reply's tokens are dropped (seq_rm) and the turn is fed
// from the prompt that preceded them. Where neither works (a context shift took part of the
// reply) the session starts again from the rendered conversation, the oldest turns left out
// until it fits half the context.
//
// A harmony reply's analysis channel is reasoning: printed between "[Start thinking]" and
// "[End thinking]" lines before the answer (as llama.cpp's CLI prints a reasoning block), dim on a
// terminal, or hidden (--hide-reasoning); only the final channel is the answer kept in history.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_template.h"
#include "powerinfer/engine.h"
#include "powerinfer/vocabulary.h"

namespace pi::cli {

struct ConversationOptions {
  chat::Template chat_template = chat::Template::ChatML;
  // Harmony's reasoning effort (--reasoning-effort) and date; an empty date becomes today's
  // once, for the whole conversation.
  chat::RenderOptions render;
  bool show_reasoning = true;  // --hide-reasoning: false
  bool dim_reasoning = false;  // ANSI faint around the reasoning (stdout is a terminal)
  std::string system_prompt;  // -sys; empty: none
  int64_t n_keep = 0;         // --keep: tokens kept by a context shift (-1: the whole first turn)
  int64_t n_predict = -1;     // tokens per answer (-1: until end of generation)
  bool ignore_eos = false;
};

// The console the conversation talks to (stdin/stdout and the Ctrl-C flag in `run`).
struct ConsoleIo {
  std::function<bool(std::string&)> read_line;  // false: end of input or Ctrl-C at the prompt
  std::function<void(std::string_view)> print;
  std::function<bool()> interrupted;
  std::function<void()> clear_interrupt;
};


// Runs the conversation until end of input. Fails on a turn that cannot fit the context even
// after a shift, and on errors of the session.
Status run_conversation(Session& session, const Vocabulary& tok, const ConversationOptions& o,
                        const ConsoleIo& io);

// The tokens a context shift keeps of `history` so that `need` more fit a context of n_ctx:
// the first n_keep, then the newest, dropping max(half of the rest, what `need` requires) after
// the kept ones. Fails when `need` cannot fit even then.
Result<std::vector<int32_t>> shift_context(std::span<const int32_t> history, int64_t n_keep,
                                           int64_t need, int64_t n_ctx);

}  // namespace pi::cli
