// A model's reasoning apart from its answer: Qwen3 and DeepSeek-R1 write their thoughts between
// <think> and </think> before the answer; gpt-oss writes them on the analysis channel of the
// harmony format (harmony.h). The server returns them as `reasoning_content` and the rest as
// `content`, as llama.cpp's server does. Text arrives in pieces (tokens); a tag split across
// pieces is held back until it is decided, so no piece of a tag ever reaches either side.
#pragma once

#include <string>
#include <string_view>

#include "chat/chat_template.h"

namespace pi::chat {

// How the server treats <think> blocks (--reasoning-format, and a request's
// "reasoning_format"): None leaves them in `content`; DeepSeek splits them out; Auto is
// DeepSeek for a model whose chat template mentions <think>, else None.
enum class ReasoningFormat { None, DeepSeek, Auto };
// "none", "deepseek", "auto"; nullopt-like failure is reported by the caller.
bool parse_reasoning_format(std::string_view s, ReasoningFormat& out);
// Whether `format` splits for a model whose Jinja chat template is `jinja`.
bool splits_reasoning(ReasoningFormat format, std::string_view jinja);

class ReasoningSplit {
 public:
  struct Delta {
    std::string reasoning, content;
    bool empty() const { return reasoning.empty() && content.empty(); }
    Delta operator+(const Delta& o) const { return {reasoning + o.reasoning, content + o.content}; }
  };
  // `open`: the prompt already opened the block (it ends with "<think>", as DeepSeek-R1's
  // template does), so the output starts inside it.
  explicit ReasoningSplit(bool open = false) : state_(open ? State::Thinking : State::Start) {}
  // The next piece of output, split. Whitespace before <think> and right after </think> is
  // dropped; a <think> anywhere but at the start is answer text.
  Delta push(std::string_view piece);
  // Whatever is still held back (an unfinished tag is text of the side it was on).
  Delta finish();

 private:
  enum class State { Start, Thinking, Answer, AfterThink };
  void emit(Delta& d, State s, std::string_view text);
  State state_;
  std::string held_;  // text not yet assigned: a possible tag prefix, or leading whitespace
};

// The harmony reply split: the text of every message on the analysis channel is reasoning,
// that of every other message (final, and commentary: preambles, and tool calls, which this
// engine does not parse) is content, as llama.cpp's gpt-oss parser does. Message headers
// (<|start|>assistant<|channel|>final<|message|>, anything up to <|message|>) and message ends
// (<|end|>, <|return|>, <|call|>) reach neither side. A reply that starts with a plain text
// instead of a header (a model that skips the analysis, or writes no channel at all) is
// content; a header opening inside a message (<|start|> or <|channel|> without <|end|> first)
// ends that message. A header longer than 256 bytes is taken for text (content).
class HarmonySplit {
 public:
  using Delta = ReasoningSplit::Delta;
  Delta push(std::string_view piece);
  // Whatever is held back: an unfinished header is dropped, a partial end tag at the end of a
  // message is text of its side.
  Delta finish();

 private:
  enum class State { Start, Header, Body, Between };
  void emit(Delta& d, std::string_view text) const { (analysis_ ? d.reasoning : d.content) += text; }
  State state_ = State::Start;
  bool analysis_ = false;  // Body: the message is on the analysis channel
  // Start/Between: text that may begin a header; Header: the header so far; Body: a possible
  // end or header tag at the end of what arrived.
  std::string held_;
};

// Which split a chat reply gets: harmony's channels for Template::Harmony unless `format` is
// None (then the reply is content as the model wrote it, headers included); <think> blocks
// where splits_reasoning(format, jinja); else none.
enum class SplitKind { None, Think, Harmony };
SplitKind split_kind(ReasoningFormat format, Template t, std::string_view jinja);

// One reply's split of the chosen kind (None: everything is content).
class ReplySplit {
 public:
  using Delta = ReasoningSplit::Delta;
  // `open`: Think only, the prompt opened the <think> block (ReasoningSplit).
  explicit ReplySplit(SplitKind kind, bool open = false) : kind_(kind), think_(open) {}
  Delta push(std::string_view piece);
  Delta finish();

 private:
  SplitKind kind_;
  ReasoningSplit think_;
  HarmonySplit harmony_;
};

}  // namespace pi::chat
