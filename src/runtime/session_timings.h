// The bookkeeping of a Session's timings (Timings, and SeqTimings per sequence): the phases
// it times and the one way a phase is charged, for every Session call that computes.
#pragma once

#include <chrono>
#include <cstdint>

namespace pi::runtime {

inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The phases a session times; Timings and SeqTimings hold a time and a count for each.
enum class Phase { Prompt, Eval, Sample };

template <class T>
void charge(T& t, Phase p, double ms, int64_t n) {
  switch (p) {
    case Phase::Prompt:
      t.prompt_ms += ms;
      t.n_prompt += n;
      break;
    case Phase::Eval:
      t.eval_ms += ms;
      t.n_eval += n;
      break;
    case Phase::Sample:
      t.sample_ms += ms;
      t.n_sample += n;
      break;
  }
}

}  // namespace pi::runtime
