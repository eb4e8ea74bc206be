// Shared helpers for the CPU kernel tests: deterministic data, weights in every type, guarded
// output buffers, ISA iteration, and error bounds derived from the data.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/os.h"
#include "kernels/cpu/kernels.h"
#include "tensor/quant.h"

namespace pi::cpu::test {

constexpr double kU = 5.9604644775390625e-08;  // f32 unit roundoff, 2^-24

inline std::vector<float> gaussian(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& e : v) e = d(rng);
  return v;
}

// Small integers times 2^-2: products and sums of a few thousand are exact in f32.
inline std::vector<float> dyadic(int64_t n, uint32_t seed, int lo = -8, int hi = 8) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& e : v) e = static_cast<float>(d(rng)) * 0.25f;
  return v;
}

// All ISAs this binary and CPU can run; each test runs its body under every one. The ISAs
// of this architecture that the CPU lacks are skipped, which the first call says in one line.
// PI_TEST_ISAS (a comma-separated list of ISA names, e.g. "neon,neon-dot") narrows the set,
// so that a second run on another CPU need not repeat the ISAs a first one tested.
inline std::vector<Isa> isas() {
#if defined(__aarch64__)
  const Isa arch[] = {Isa::Scalar, Isa::Neon, Isa::NeonDot};
#else
  const Isa arch[] = {Isa::Scalar, Isa::Avx2, Isa::Avx512};
#endif
  // PI_TEST_ISAS split at commas; every name must be an ISA of this architecture (a typo
  // must not leave nothing tested).
  std::vector<std::string> only;
  if (const char* env = std::getenv("PI_TEST_ISAS"); env != nullptr) {
    std::string rest = env;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      only.push_back(rest.substr(0, comma));
      rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
      bool known = false;
      for (Isa isa : arch) known |= only.back() == isa_name(isa);
      if (!known) ADD_FAILURE() << "PI_TEST_ISAS names '" << only.back() << "', no ISA of this architecture";
    }
  }
  auto wanted = [&only](Isa isa) {
    return only.empty() || std::find(only.begin(), only.end(), isa_name(isa)) != only.end();
  };
  std::vector<Isa> out;
  std::string skipped;
  for (Isa isa : arch) {
    if (!wanted(isa)) continue;
    if (isa_available(isa)) {
      out.push_back(isa);
    } else {
      skipped.append(skipped.empty() ? "" : ", ").append(isa_name(isa));
    }
  }
  static const bool said = [&] {
    if (!skipped.empty()) std::fprintf(stderr, "[ SKIPPED  ] ISAs this CPU lacks: %s\n", skipped.c_str());
    return true;
  }();
  (void)said;
  return out;
}

inline const std::vector<DType>& matrix_types() {
  static const std::vector<DType> t = {DType::F32,  DType::F16,  DType::BF16,
                                       DType::Q8_0, DType::Q4_0, DType::Q4_1,
                                       DType::Q5_0, DType::Q5_1, DType::Q6_K,
                                       DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K,
                                       DType::MXFP4};
  return t;
}

// The K-quants: 256-element super-blocks.
inline bool k_type(DType t) { return dtype_info(t).block_size == 256; }

// Byte offset of a block's (first) f16 scale d.
inline size_t scale_at(DType t) {
  switch (t) {
    case DType::Q6_K: return 208;
    case DType::Q3_K: return 108;
    case DType::Q2_K: return 80;
    default: return 0;
  }
}

// Bytes [begin, end) of a K-quant super-block that hold quants (not scales).
inline std::pair<size_t, size_t> k_quant_bytes(DType t) {
  switch (t) {
    case DType::Q2_K: return {16, 80};
    case DType::Q3_K: return {0, 96};
    case DType::Q4_K: return {16, 144};
    case DType::Q5_K: return {16, 176};
    default: return {0, 192};  // Q6_K
  }
}

inline bool int_type(DType t) { return dtype_info(t).quantized; }

// A weight matrix in type t stored at a deliberately odd byte offset, with its exact f32
// decoding (what the reference multiplies with).
struct Weights {
  DType type;
  int64_t rows, cols;
  std::vector<uint8_t> storage;
  size_t offset;
  std::vector<float> dequant;  // f32 [rows, cols]
  // Magnitude of each element's terms as kernels compute them: |w| in general; for blocks
  // decoded as d * (q - o) + m, |d q| + |o d| + |m|.
  std::vector<float> mag;
  const void* data() const { return storage.data() + offset; }
  size_t row_bytes() const { return pi::row_bytes(type, cols); }
};

inline Weights make_weights(DType t, int64_t rows, int64_t cols, const std::vector<float>& src,
                            size_t offset = 3) {
  Weights w{t, rows, cols, {}, offset, std::vector<float>(static_cast<size_t>(rows * cols)), {}};
  const size_t rb = pi::row_bytes(t, cols);
  w.storage.assign(rb * static_cast<size_t>(rows) + offset + 64, 0xa5);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* dst = w.storage.data() + offset + r * rb;
    EXPECT_TRUE(quantize_row(t, src.data() + r * cols, dst, cols).ok());
    EXPECT_TRUE(dequantize_row(t, dst, w.dequant.data() + r * cols, cols).ok());
  }
  // Kernels may compute a block value d * (q - o) + m as d * q, -o * d and m separately, and
  // the AVX-512 axpy decodes 4/5-bit quants as 1 + q / 2^bits, adding a term 2^bits * d.
  w.mag.resize(w.dequant.size());
  if (k_type(t)) {
    // K-quants: kernels compute d s q and the constant term c (the value at quant bytes 0:
    // -dmin m, or -offset d s) separately; |w - c| + |c| per element.
    const auto [qb, qe] = k_quant_bytes(t);
    std::vector<uint8_t> blk(pi::row_bytes(t, 256));
    float c[256];
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < cols / 256; ++b) {
        std::memcpy(blk.data(), w.storage.data() + offset + r * rb + b * blk.size(), blk.size());
        std::memset(blk.data() + qb, 0, qe - qb);
        EXPECT_TRUE(dequantize_row(t, blk.data(), c, 256).ok());
        for (int j = 0; j < 256; ++j) {
          const size_t i = static_cast<size_t>(r * cols + b * 256 + j);
          w.mag[i] = std::fabs(w.dequant[i] - c[j]) + std::fabs(c[j]);
        }
      }
    }
    return w;
  }
  if (t == DType::MXFP4) {
    // Codes are summed as (value + 12) and -12 x the activation sum.
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const size_t i = static_cast<size_t>(r * cols + c);
        const float d = e8m0_half(w.storage[offset + r * rb + (c / 32) * 17]);
        w.mag[i] = std::fabs(w.dequant[i]) + 12.0f * d;
      }
    return w;
  }
  const bool with_min = t == DType::Q4_1 || t == DType::Q5_1;
  const float o = t == DType::Q4_0 ? 8.0f : t == DType::Q5_0 ? 16.0f : 0.0f;
  const float bias = t == DType::Q4_0 || t == DType::Q4_1   ? 16.0f
                     : t == DType::Q5_0 || t == DType::Q5_1 ? 32.0f
                                                            : 0.0f;
  const size_t bb = pi::row_bytes(t, 32);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      float d = 0.0f, m = 0.0f;
      if (with_min || o != 0.0f) {
        uint16_t h[2];
        std::memcpy(h, w.storage.data() + offset + r * rb + (c / 32) * bb, 4);
        d = f16_to_f32(h[0]);
        if (with_min) m = f16_to_f32(h[1]);
      }
      w.mag[i] = std::fabs(w.dequant[i] - m + o * d) + std::fabs(o * d) + std::fabs(m) + std::fabs(bias * d);
    }
  }
  return w;
}

// Bound on how far a Q4_0 axpy is from the exact one at column c through its coefficient
// rounding (src/kernels/cpu/q4_groups.h): each a_r d_rb is rounded to a multiple of 1/127 of
// the largest such product of its group, whose rows lie in one 16-row window, so each term is
// off by at most 8 * amax_window / 254. rows: the rows added (those with a[r] == 0 skipped).
// 0 for the other types.
inline double q4_axpy_rounding(const Weights& w, const std::vector<int32_t>& rows, const float* a, int64_t c) {
  if (w.type != DType::Q4_0) return 0.0;
  constexpr int kWindow = 16;  // kQ4Window
  std::vector<std::pair<int, double>> windows(static_cast<size_t>(w.rows / kWindow + 1));  // rows, amax
  for (int32_t r : rows) {
    if (a[r] == 0.0f) continue;
    const uint8_t* blk = w.storage.data() + w.offset + r * w.row_bytes() + (c / 32) * 18;
    uint16_t h;
    std::memcpy(&h, blk, 2);
    auto& [n, amax] = windows[static_cast<size_t>(r / kWindow)];
    ++n;
    amax = std::max(amax, std::fabs(static_cast<double>(a[r]) * f16_to_f32(h)));
  }
  double err = 0.0;
  for (const auto& [n, amax] : windows) err += n * 8.0 * amax / 254.0 * 1.001;
  return err;
}

inline Weights random_weights(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  return make_weights(t, rows, cols, gaussian(rows * cols, seed, 0.5f));
}

// An f32 buffer with guard elements on both sides filled with a sentinel bit pattern.
class Guarded {
 public:
  static constexpr int64_t kGuard = 16;
  explicit Guarded(int64_t n, float fill = 0.0f)
      : buf_(static_cast<size_t>(n + 2 * kGuard), sentinel()), n_(n) {
    for (int64_t i = 0; i < n; ++i) buf_[static_cast<size_t>(kGuard + i)] = fill;
  }
  float* data() { return buf_.data() + kGuard; }
  const float* data() const { return buf_.data() + kGuard; }
  float operator[](int64_t i) const { return buf_[static_cast<size_t>(kGuard + i)]; }
  int64_t size() const { return n_; }
  bool guards_intact() const {
    for (int64_t i = 0; i < kGuard; ++i) {
      if (!same_bits(buf_[static_cast<size_t>(i)], sentinel())) return false;
      if (!same_bits(buf_[static_cast<size_t>(kGuard + n_ + i)], sentinel())) return false;
    }
    return true;
  }
  static float sentinel() {
    float f;
    const uint32_t bits = 0x7fbadbadu;  // a signalling-NaN pattern no kernel produces
    std::memcpy(&f, &bits, 4);
    return f;
  }
  static bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }
  std::vector<float> values() const {
    return std::vector<float>(buf_.begin() + kGuard, buf_.begin() + kGuard + n_);
  }

 private:
  std::vector<float> buf_;
  int64_t n_;
};

// `bytes` writable bytes that end where an inaccessible page begins (as a tensor at the end of
// a mapped file): a read past them faults, in any build.
class GuardedBytes {
 public:
  explicit GuardedBytes(size_t bytes) {
    const size_t page = pi::os::page_size();
    const size_t span = (bytes + page - 1) / page * page;
    size_ = span + page;
    map_ = pi::os::map_anonymous(size_, /*accessible=*/true, /*overcommit=*/false);
    if (map_ == nullptr || !pi::os::protect(static_cast<uint8_t*>(map_) + span, page, pi::os::Access::None)) return;
    data_ = static_cast<uint8_t*>(map_) + span - bytes;
  }
  ~GuardedBytes() {
    if (map_ != nullptr) pi::os::unmap(map_, size_);
  }
  GuardedBytes(const GuardedBytes&) = delete;
  GuardedBytes& operator=(const GuardedBytes&) = delete;
  bool ok() const { return data_ != nullptr; }
  uint8_t* data() const { return data_; }

 private:
  void* map_ = nullptr;
  size_t size_ = 0;
  uint8_t* data_ = nullptr;
};

// Elements per activation scale of the integer path for weight type t on `isa`: 32 (the
// 8-bit blocks of the 32-element formats), 256 (the K-quants, Q6_K included: one scale per
// super-block), or 0 when the kernel multiplies with x itself (float types, the scalar ISA).
inline int64_t act_block(DType t, Isa isa) {
  if (!int_type(t) || isa == Isa::Scalar) return 0;
  return k_type(t) ? 256 : 32;
}

// The activation a kernel on `isa` multiplies with for weight type t: the integer paths
// quantize each block of act_block elements to int8 with scale amax/127 (round to nearest
// even), exactly as emulated here; the f32 paths use x itself.
inline std::vector<float> effective_x(DType t, Isa isa, const float* x, int64_t cols) {
  std::vector<float> out(x, x + cols);
  const int64_t bs = act_block(t, isa);
  if (bs == 0) return out;
  for (int64_t b = 0; b < cols / bs; ++b) {
    float amax = 0.0f;
    for (int64_t j = 0; j < bs; ++j) amax = std::fmax(amax, std::fabs(x[bs * b + j]));
    const float d = amax / 127.0f;
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int64_t j = 0; j < bs; ++j) {
      const float q = std::nearbyint(x[bs * b + j] * id);
      out[static_cast<size_t>(bs * b + j)] = d * q;
    }
  }
  return out;
}

// Rounding bound for a dot product of n terms accumulated in f32 by any of the kernels
// (at least 8 independent partial sums, a final tree of at most 4 levels, and up to three
// roundings per block term): (n / 8 + 16) u sum |w_j x_j| (+ u for the reference's own
// final rounding), plus a subnormal floor. w: the weights' term magnitudes (Weights::mag).
inline double dot_bound(const float* w, const float* x, int64_t n) {
  double s = 0.0;
  for (int64_t j = 0; j < n; ++j) s += std::fabs(static_cast<double>(w[j]) * x[j]);
  return (static_cast<double>(n) / 8.0 + 17.0) * kU * s + 1e-30;
}

// Worst-case effect of the activation quantization on W[r,:] . x: each element moves by at
// most half a step dx_b = amax_b / 127 (plus rounding of the scale), so the product moves by
// at most sum over blocks of (dx_b / 2) * sum_{j in b} |w_j|. bs: act_block (32 or 256).
inline double act_quant_bound(const float* w, const float* x, int64_t n, int64_t bs = 32) {
  double s = 0.0;
  for (int64_t b = 0; b < n / bs; ++b) {
    double amax = 0.0, sw = 0.0;
    for (int64_t j = 0; j < bs; ++j) {
      amax = std::fmax(amax, std::fabs(x[bs * b + j]));
      sw += std::fabs(w[bs * b + j]);
    }
    s += (amax / 127.0) * (0.5 + 1e-3) * sw;
  }
  return s;
}

}  // namespace pi::cpu::test
