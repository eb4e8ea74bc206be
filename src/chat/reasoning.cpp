#include "chat/reasoning.h"

#include <algorithm>
#include <array>

#include "chat/harmony.h"

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

// Tags that open a harmony header: <|start|> (role first), <|channel|>, and <|message|> (a
// header with no channel). Tags that end a message body: its end tags, and a header opening.
constexpr std::array<std::string_view, 3> kHeaderOpen = {harmony::kStart, harmony::kChannel,
                                                         harmony::kMessage};
constexpr std::array<std::string_view, 5> kBodyStop = {harmony::kEnd, harmony::kReturn,
                                                       harmony::kCall, harmony::kStart,
                                                       harmony::kChannel};
constexpr size_t kMaxHeader = 256;

// The longest suffix of `s` that is a proper prefix of one of `tags`.
template <size_t N>
size_t partial_any(std::string_view s, const std::array<std::string_view, N>& tags) {
  size_t keep = 0;
  for (std::string_view t : tags) keep = std::max(keep, partial_tag(s, t));
  return keep;
}

// Whether `s` is a proper prefix of one of `tags`.
template <size_t N>
bool prefix_of_any(std::string_view s, const std::array<std::string_view, N>& tags) {
  for (std::string_view t : tags)
    if (s.size() < t.size() && t.starts_with(s)) return true;
  return false;
}

// The channel a header names: the word after <|channel|> (up to a space or a tag), or "".
std::string_view channel_of(std::string_view header) {
  const size_t at = header.find(harmony::kChannel);
  if (at == std::string_view::npos) return {};
  std::string_view rest = header.substr(at + harmony::kChannel.size());
  return rest.substr(0, std::min(rest.find(' '), rest.find('<')));
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

namespace pi::chat {

HarmonySplit::Delta HarmonySplit::push(std::string_view piece) {
  Delta d;
  held_ += piece;
  while (!held_.empty()) {
    const std::string_view h = held_;
    switch (state_) {
      case State::Start:
      case State::Between: {
        bool opens = false;
        for (std::string_view t : kHeaderOpen) opens = opens || h.starts_with(t);
        if (opens) {
          state_ = State::Header;
          continue;
        }
        if (prefix_of_any(h, kHeaderOpen)) return d;  // "<|cha": wait
        // Text outside any header (no channel at the start, or stray text between messages).
        state_ = State::Body;
        analysis_ = false;
        continue;
      }
      case State::Header: {
        const size_t at = h.find(harmony::kMessage);
        if (at == std::string_view::npos) {
          if (h.size() <= kMaxHeader) return d;
          d.content += h;  // not a header after all: text
          held_.clear();
          state_ = State::Body;
          analysis_ = false;
          return d;
        }
        analysis_ = channel_of(h.substr(0, at)) == "analysis";
        held_.erase(0, at + harmony::kMessage.size());
        state_ = State::Body;
        continue;
      }
      case State::Body: {
        size_t at = std::string_view::npos;
        std::string_view tag;
        for (std::string_view t : kBodyStop) {
          const size_t i = h.find(t);
          if (i < at) {
            at = i;
            tag = t;
          }
        }
        if (at == std::string_view::npos) {
          const size_t keep = partial_any(h, kBodyStop);
          emit(d, h.substr(0, h.size() - keep));
          held_.erase(0, h.size() - keep);
          return d;
        }
        emit(d, h.substr(0, at));
        const bool header = tag == harmony::kStart || tag == harmony::kChannel;
        held_.erase(0, header ? at : at + tag.size());
        state_ = header ? State::Header : State::Between;
        continue;
      }
    }
  }
  return d;
}

HarmonySplit::Delta HarmonySplit::finish() {
  Delta d;
  if (state_ == State::Body) emit(d, held_);
  else if (state_ != State::Header) d.content = held_;  // a tag's first bytes, as text
  held_.clear();
  return d;
}

SplitKind split_kind(ReasoningFormat format, Template t, std::string_view jinja) {
  if (format == ReasoningFormat::None) return SplitKind::None;
  if (t == Template::Harmony) return SplitKind::Harmony;
  return splits_reasoning(format, jinja) ? SplitKind::Think : SplitKind::None;
}

ReplySplit::Delta ReplySplit::push(std::string_view piece) {
  switch (kind_) {
    case SplitKind::Think: return think_.push(piece);
    case SplitKind::Harmony: return harmony_.push(piece);
    case SplitKind::None: break;
  }
  return Delta{"", std::string(piece)};
}

ReplySplit::Delta ReplySplit::finish() {
  switch (kind_) {
    case SplitKind::Think: return think_.finish();
    case SplitKind::Harmony: return harmony_.finish();
    case SplitKind::None: break;
  }
  return {};
}

}  // namespace pi::chat
