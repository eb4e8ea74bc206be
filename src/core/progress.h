// A terminal progress bar for long work (conversion, quantization, synthesis). Draws to
// stderr only when stderr is a terminal, at most ~10 times a second; silent otherwise.
// Not thread-safe: call update() from one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace pi {

class ProgressBar {
 public:
  ProgressBar(std::string label, uint64_t total);
  ~ProgressBar();
  void update(uint64_t done);
  void finish();

 private:
  void draw(uint64_t done);
  std::string label_;
  uint64_t total_;
  bool enabled_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace pi
