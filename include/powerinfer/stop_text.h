// Generated text cut at stop strings (the server's "stop", Python's stop=, llama.cpp's
// antiprompts): append each new piece of text; the text ends before the first stop string
// that occurs, and what may still become one is held back from what is shown.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace pi {

class StopText {
 public:
  // Empty strings among `stops` are ignored; no stops: nothing is held back.
  explicit StopText(std::vector<std::string> stops = {});

  // Appends a piece (whole UTF-8 characters). True when a stop string occurs now: text() is
  // cut before it, stop_word() names it, and later appends are ignored.
  bool append(std::string_view piece);
  // The text not taken yet that cannot become part of a stop string, and moves past it.
  std::string take();
  // At the end of generation: all the text not taken yet, the held-back bytes too.
  std::string take_rest();

  const std::string& text() const { return text_; }
  // The stop string that ended the text; empty when none did.
  const std::string& stop_word() const { return stop_word_; }
  bool stopped() const { return stopped_; }

 private:
  // The longest k < |s| such that text_ ends with the first k bytes of a stop string s.
  size_t held_back() const;

  std::vector<std::string> stops_;
  size_t longest_ = 0;
  std::string text_;
  size_t taken_ = 0;
  std::string stop_word_;
  bool stopped_ = false;
};

}  // namespace pi
