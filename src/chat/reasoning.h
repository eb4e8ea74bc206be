// A model's reasoning apart from its answer: Qwen3 and DeepSeek-R1 write their thoughts between
// <think> and </think> before the answer. The server returns them as `reasoning_content` and the
// rest as `content`, as llama.cpp's server does with --reasoning-format deepseek. Text arrives
// in pieces (tokens); a tag split across pieces is held back until it is decided, so no piece
// of a tag ever reaches either side.
#pragma once

#include <string>
#include <string_view>

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

}  // namespace pi::chat
