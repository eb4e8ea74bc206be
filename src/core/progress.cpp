#include "core/progress.h"

#include <cstdio>

#include "core/os.h"

namespace pi {

ProgressBar::ProgressBar(std::string label, uint64_t total)
    : label_(std::move(label)), total_(total), enabled_(os::stderr_is_terminal()) {
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(uint64_t done) {
  if (!enabled_ || finished_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(100) && done < total_) return;
  last_draw_ = now;
  draw(done);
}

void ProgressBar::draw(uint64_t done) {
  const int width = 30;
  double frac = total_ > 0 ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
  if (frac > 1.0) frac = 1.0;
  int filled = static_cast<int>(frac * width);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(width - filled), '.');
  std::fprintf(stderr, "\r%s [%s] %5.1f%% %6.1fs", label_.c_str(), bar.c_str(), frac * 100.0, secs);
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (!enabled_ || finished_) return;
  draw(total_);
  std::fputc('\n', stderr);
  finished_ = true;
}

}  // namespace pi
