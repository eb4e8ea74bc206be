// Sampling parameters of the public API. A value that disables a stage is noted per field;
// validate_sampling() rejects values that make no sense (negative temperature, top_p outside
// (0, 1], a grammar that does not parse, ...) with a message naming the parameter.
#pragma once

#include <cstdint>
#include <string>

#include "powerinfer/error.h"

namespace pi {

struct SamplingParams {
  float temperature = 0.8f;        // 0: greedy (argmax after penalties)
  int32_t top_k = 40;              // <= 0: whole vocabulary
  float top_p = 0.95f;             // 1: off
  float min_p = 0.05f;             // 0: off; keeps p >= min_p * p_max
  float repeat_penalty = 1.0f;     // 1: off; divides positive logits, multiplies negative ones
  int32_t repeat_last_n = 64;      // penalty window in tokens; 0: off, -1: whole history
  float presence_penalty = 0.0f;   // subtracted once from each token seen in the window
  float frequency_penalty = 0.0f;  // subtracted per occurrence in the window
  uint64_t seed = 0;               // the sampler's RNG seed: same seed, same logits, same tokens
  // GBNF grammar (powerinfer/grammar.h) the generated text must follow; empty: none. Tokens
  // are masked before top-k, so every stage after it sees only tokens the grammar allows.
  std::string grammar;
};

Status validate_sampling(const SamplingParams& p);

}  // namespace pi
