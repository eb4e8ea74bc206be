#include "powerinfer/stop_text.h"

#include <algorithm>

namespace pi {

StopText::StopText(std::vector<std::string> stops) {
  for (std::string& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
  for (const std::string& s : stops_) longest_ = std::max(longest_, s.size());
}

bool StopText::append(std::string_view piece) {
  if (stopped_) return true;
  const size_t before = text_.size();
  text_.append(piece);
  if (stops_.empty()) return false;
  // A stop string found now ends in the new piece: it starts at most longest_ - 1 bytes before
  // it (and not in text already shown, which never holds the start of one).
  const size_t from = std::min(before >= longest_ ? before - longest_ + 1 : 0, taken_);
  size_t best = std::string::npos;
  const std::string* word = nullptr;
  for (const std::string& w : stops_) {
    const size_t at = text_.find(w, from);
    if (at != std::string::npos && at < best) {
      best = at;
      word = &w;
    }
  }
  if (word == nullptr) return false;
  text_.resize(best);
  stop_word_ = *word;
  stopped_ = true;
  return true;
}

size_t StopText::held_back() const {
  if (stopped_) return 0;
  size_t held = 0;
  for (const std::string& s : stops_) {
    for (size_t k = std::min(s.size() - 1, text_.size() - taken_); k > held; --k) {
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
        held = k;
        break;
      }
    }
  }
  return held;
}

std::string StopText::take() {
  const size_t upto = text_.size() - held_back();
  if (upto <= taken_) return {};
  std::string out = text_.substr(taken_, upto - taken_);
  taken_ = upto;
  return out;
}

std::string StopText::take_rest() {
  std::string out = text_.substr(std::min(taken_, text_.size()));
  taken_ = text_.size();
  return out;
}

}  // namespace pi
