#include "chat/reasoning.h"

namespace pi::chat {
namespace {

constexpr std::string_view kOpen = "<think>", kClose = "</think>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// Length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

}  // namespace

bool parse_reasoning_format(std::string_view s, ReasoningFormat& out) {
  if (s == "none") out = ReasoningFormat::None;
  else if (s == "deepseek") out = ReasoningFormat::DeepSeek;
  else if (s == "auto") out = ReasoningFormat::Auto;
  else return false;
  return true;
}

bool splits_reasoning(ReasoningFormat format, std::string_view jinja) {
  if (format == ReasoningFormat::Auto) return jinja.find(kOpen) != std::string_view::npos;
  return format == ReasoningFormat::DeepSeek;
}

void ReasoningSplit::emit(Delta& d, State s, std::string_view text) {
  (s == State::Thinking ? d.reasoning : d.content) += text;
}

ReasoningSplit::Delta ReasoningSplit::push(std::string_view piece) {
  Delta d;
  held_ += piece;
  while (!held_.empty()) {
    std::string_view h = held_;
    if (state_ == State::Start || state_ == State::AfterThink) {
      size_t i = 0;
      while (i < h.size() && is_space(h[i])) ++i;
      if (i == h.size()) return d;  // only whitespace so far: undecided
      if (state_ == State::AfterThink) {
        held_.erase(0, i);
        state_ = State::Answer;
        continue;
      }
      std::string_view rest = h.substr(i);
      if (rest.substr(0, std::min(rest.size(), kOpen.size())) != kOpen.substr(0, std::min(rest.size(), kOpen.size()))) {
        state_ = State::Answer;  // no block: everything, leading whitespace included, is answer
        continue;
      }
      if (rest.size() < kOpen.size()) return d;  // a prefix of <think>: wait
      held_.erase(0, i + kOpen.size());
      state_ = State::Thinking;
      continue;
    }
    if (state_ == State::Answer) {
      emit(d, state_, h);
      held_.clear();
      return d;
    }
    // Thinking: up to </think>, holding back a possible partial tag at the end.
    const size_t at = h.find(kClose);
    if (at != std::string_view::npos) {
      emit(d, state_, h.substr(0, at));
      held_.erase(0, at + kClose.size());
      state_ = State::AfterThink;
      continue;
    }
    const size_t keep = partial_tag(h, kClose);
    emit(d, state_, h.substr(0, h.size() - keep));
    held_.erase(0, h.size() - keep);
    return d;
  }
  return d;
}

ReasoningSplit::Delta ReasoningSplit::finish() {
  Delta d;
  // Leading whitespace alone (Start, AfterThink) is dropped with nothing after it.
  if (state_ == State::Thinking || state_ == State::Answer) emit(d, state_, held_);
  else if (state_ == State::Start) d.content = held_.find_first_not_of(" \n\r\t") == std::string::npos ? "" : held_;
  held_.clear();
  return d;
}

}  // namespace pi::chat
