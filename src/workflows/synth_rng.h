// Counter-based random numbers for `powerinfer synth`. Every value is a pure function of
// (seed, what, layer, row, column), so any row can be generated on any thread, in any order,
// and a tensor's transpose can be generated element by element: the output file does not
// depend on the thread count. The mixer is splitmix64's finaliser (Steele, Lea, Flood 2014).
#pragma once

#include <cstdint>

namespace pi::workflows::synth {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A key for the x-th child of `key` (a tensor of a seed, a layer of a tensor, a row of a layer).
constexpr uint64_t derive(uint64_t key, uint64_t x) { return mix64(key + (x + 1) * kGolden); }

// 32 random bits as a float uniform in [-1, 1), exactly representable.
inline float to_pm1(uint32_t bits) {
  return static_cast<float>(static_cast<int32_t>(bits)) * 0x1p-31f;
}

// Element j of the uniform [-1, 1) sequence of a row: each 64-bit hash serves two columns.
inline float uniform_at(uint64_t row_key, int64_t j) {
  uint64_t h = mix64(row_key + (static_cast<uint64_t>(j >> 1) + 1) * kGolden);
  return to_pm1(static_cast<uint32_t>((j & 1) ? (h >> 32) : h));
}

// out[j] = scale * uniform_at(row_key, j) for j in [0, n).
inline void fill_uniform(uint64_t row_key, float scale, float* out, int64_t n) {
  int64_t j = 0;
  for (; j + 1 < n; j += 2) {
    uint64_t h = mix64(row_key + (static_cast<uint64_t>(j >> 1) + 1) * kGolden);
    out[j] = scale * to_pm1(static_cast<uint32_t>(h));
    out[j + 1] = scale * to_pm1(static_cast<uint32_t>(h >> 32));
  }
  if (j < n) out[j] = scale * uniform_at(row_key, j);
}

// Sequential generator for small per-layer draws (permutations).
class SplitMix {
 public:
  explicit SplitMix(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix64(state_ += kGolden); }
  // Uniform integer in [0, n), n > 0 (Lemire's multiply-shift; bias < n / 2^64).
  uint64_t below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
  }

 private:
  uint64_t state_;
};

}  // namespace pi::workflows::synth
