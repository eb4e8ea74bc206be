// The per-element arithmetic of the GPU kernels (src/kernels/cuda/hd_*.h), compiled for the
// CPU and checked against the reference (src/tensor, src/kernels/ref): half conversions bit
// for bit, every weight type's decoding bit for bit, the 8-bit activation quantization and the
// integer block dot products, raw units, the fixed summation orders and the activations. Runs
// without a GPU; what is left unproven until a GPU runs tests/backend's op test is the thread mapping.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cuda/hd_blocks.h"
#include "kernels/cuda/hd_elementwise.h"
#include "kernels/cuda/hd_kv.h"
#include "kernels/cuda/hd_q8.h"
#include "kernels/cuda/hd_raw.h"
#include "kernels/cuda/hd_reduce.h"
#include "kernels/ref/ref.h"
#include "tensor/quant.h"

namespace pi::gpu {
namespace {

constexpr double kU = 5.9604644775390625e-08;  // 2^-24

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<float> gaussian(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& e : v) e = d(rng);
  return v;
}

// The KV store's block writer is the reference quantizer byte for byte, and attention's element
// reads decode as the reference dequantizer, for Q8_0 and Q4_0 (random rows at several scales,
// ties of magnitude, zeros, huge and tiny values, NaN), and f16 rows as the f16 conversion.
TEST(CudaHostMath, KvBlocksQuantizeAndDecodeAsTheReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<std::vector<float>> rows;
  for (float scale : {1.0f, 1e-3f, 300.0f, 1e-30f}) {
    std::vector<float> r(96);
    for (float& x : r) x = nd(rng) * scale;
    rows.push_back(r);
  }
  std::vector<float> special(96, 0.0f);  // a zero block, then ties and extremes, then NaN
  for (int j = 32; j < 64; ++j) special[j] = (j % 2 ? 2.5f : -2.5f) * static_cast<float>(j % 5);
  special[40] = 65000.0f;
  special[70] = std::numeric_limits<float>::quiet_NaN();
  special[71] = -7.0f;
  rows.push_back(special);
  for (auto [kind, t] : {std::pair{kKvQ8_0, DType::Q8_0}, std::pair{kKvQ4_0, DType::Q4_0}}) {
    for (const auto& r : rows) {
      const int64_t n = static_cast<int64_t>(r.size());
      std::vector<uint8_t> want(row_bytes(t, n)), got(want.size());
      ASSERT_TRUE(quantize_row(t, r.data(), want.data(), n).ok());
      for (int64_t b = 0; b < n / kKvBlock; ++b)
        kv_quantize_block(kind, r.data() + b * kKvBlock, got.data() + kv_bytes(kind, b * kKvBlock));
      EXPECT_EQ(got, want) << dtype_name(t);
      EXPECT_EQ(kv_bytes(kind, n), static_cast<int64_t>(want.size()));
      std::vector<float> dec(static_cast<size_t>(n));
      ASSERT_TRUE(dequantize_row(t, want.data(), dec.data(), n).ok());
      for (int64_t d = 0; d < n; ++d) {
        const float e = kv_elem(kind, want.data(), d);
        ASSERT_EQ(std::memcmp(&dec[static_cast<size_t>(d)], &e, 4), 0)
            << dtype_name(t) << " element " << d;
      }
    }
  }
  std::vector<uint16_t> h(64);
  for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_f16(nd(rng));
  for (int64_t d = 0; d < 64; ++d)
    EXPECT_EQ(kv_elem(kKvF16, reinterpret_cast<const uint8_t*>(h.data()), d), f16_to_f32(h[d]));
  EXPECT_EQ(kv_bytes(kKvF16, 64), 128);
}

TEST(CudaHostMath, HalfToFloatIsExactForEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float want = f16_to_f32(static_cast<uint16_t>(h));
    ASSERT_EQ(bits(half_to_float(static_cast<uint16_t>(h))), bits(want)) << std::hex << h;
    ASSERT_EQ(bits(bf16_to_float(static_cast<uint16_t>(h))),
              bits(bf16_to_f32(static_cast<uint16_t>(h))));
  }
}

TEST(CudaHostMath, FloatToHalfMatchesTheCachesConversion) {
  std::mt19937 rng(7);
  std::vector<uint32_t> cases = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00001u,
                                 0x7f800001u, 0xffa5a5a5u, 0x477fe000u, 0x477ff000u, 0x477fefffu,
                                 0x33000000u, 0x33000001u, 0x387fc000u, 0x38800000u, 0x00000001u};
  for (int i = 0; i < 2000000; ++i) cases.push_back(rng());
  for (uint32_t u : cases) {
    float f;
    std::memcpy(&f, &u, 4);
    ASSERT_EQ(float_to_half(f), f32_to_f16(f)) << std::hex << u;
  }
}

const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0,  DType::Q4_1,
                        DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::MXFP4, DType::Q2_K,
                        DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};

template <DType T>
void decode(const uint8_t* row, int64_t n, float* y) {
  decode_row<T>(row, n, y);
}

// decode_row for a runtime type.
void decode_any(DType t, const uint8_t* row, int64_t n, float* y) {
  switch (t) {
    case DType::F32:
      return decode<DType::F32>(row, n, y);
    case DType::F16:
      return decode<DType::F16>(row, n, y);
    case DType::BF16:
      return decode<DType::BF16>(row, n, y);
    case DType::Q4_0:
      return decode<DType::Q4_0>(row, n, y);
    case DType::Q4_1:
      return decode<DType::Q4_1>(row, n, y);
    case DType::Q5_0:
      return decode<DType::Q5_0>(row, n, y);
    case DType::Q5_1:
      return decode<DType::Q5_1>(row, n, y);
    case DType::Q8_0:
      return decode<DType::Q8_0>(row, n, y);
    case DType::MXFP4:
      return decode<DType::MXFP4>(row, n, y);
    case DType::Q2_K:
      return decode<DType::Q2_K>(row, n, y);
    case DType::Q3_K:
      return decode<DType::Q3_K>(row, n, y);
    case DType::Q4_K:
      return decode<DType::Q4_K>(row, n, y);
    case DType::Q5_K:
      return decode<DType::Q5_K>(row, n, y);
    case DType::Q6_K:
      return decode<DType::Q6_K>(row, n, y);
    default:
      FAIL() << "no decoder";
  }
}

TEST(CudaHostMath, EveryWeightTypeDecodesBitForBitAsTheReference) {
  for (DType t : kTypes) {
    ASSERT_TRUE(decodable(t));
    const int64_t n = dtype_info(t).block_size >= 256 ? 768 : (dtype_info(t).quantized ? 96 : 83);
    for (uint32_t seed : {1u, 2u, 3u}) {
      std::vector<float> x = gaussian(n, seed, seed == 3 ? 1e-3f : 0.7f);
      if (seed == 2) x[5] = 60000.0f;  // a large block scale
      std::vector<uint8_t> q(row_bytes(t, n) + 2);
      ASSERT_TRUE(quantize_row(t, x.data(), q.data(), n).ok());
      std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n), -1.0f);
      ASSERT_TRUE(dequantize_row(t, q.data(), want.data(), n).ok());
      decode_any(t, q.data(), n, got.data());
      for (int64_t j = 0; j < n; ++j)
        ASSERT_EQ(bits(got[static_cast<size_t>(j)]), bits(want[static_cast<size_t>(j)]))
            << dtype_name(t) << " element " << j << " seed " << seed;
    }
  }
}

// A unit loaded raw and decoded element by element (what the transposed kernels hold in
// registers for several rows) is decode_unit, bit for bit.
template <DType T>
void check_raw_unit() {
  constexpr int E = Unit<T>::kElems;
  const int64_t n = Unit<T>::kSuper ? 512 : 128;
  const std::vector<float> x = gaussian(n, 17, 0.4f);
  std::vector<uint8_t> q(row_bytes(T, n));
  ASSERT_TRUE(quantize_row(T, x.data(), q.data(), n).ok());
  for (int64_t u = 0; u < n / E; ++u) {
    float want[E];
    decode_unit<T>(q.data(), u, want);
    const RawUnit<T> r = load_raw<T>(q.data(), u);
    for (int j = 0; j < E; ++j)
      ASSERT_EQ(bits(raw_value<T>(r, j)), bits(want[j])) << dtype_name(T) << " unit " << u << " " << j;
  }
}

TEST(CudaHostMath, RawUnitsDecodeAsUnits) {
  check_raw_unit<DType::F32>();
  check_raw_unit<DType::F16>();
  check_raw_unit<DType::BF16>();
  check_raw_unit<DType::Q4_0>();
  check_raw_unit<DType::Q4_1>();
  check_raw_unit<DType::Q5_0>();
  check_raw_unit<DType::Q5_1>();
  check_raw_unit<DType::Q8_0>();
  check_raw_unit<DType::MXFP4>();
  check_raw_unit<DType::Q2_K>();
  check_raw_unit<DType::Q6_K>();
}

// MXFP4 at every exponent with every code in both nibbles (block e: byte j is e + 16 j, so
// every byte value sits at every position of some block), its row at an odd address: the
// block scale is pi::e8m0_half, and decode_row, the raw unit and the integer path's code
// values (times the scale) are pi::dequantize_row bit for bit, the Infs of e 255 included.
TEST(CudaHostMath, Mxfp4DecodesEveryExponentAndCodeBitForBit) {
  constexpr int kBlocks = 256, n = 32 * kBlocks;
  std::vector<uint8_t> buf(1 + kBlocks * 17);
  uint8_t* row = buf.data() + 1;
  for (int e = 0; e < kBlocks; ++e) {
    ASSERT_EQ(bits(gpu::e8m0_half(static_cast<uint8_t>(e))),
              bits(pi::e8m0_half(static_cast<uint8_t>(e))))
        << e;
    row[17 * e] = static_cast<uint8_t>(e);
    for (int j = 0; j < 16; ++j) row[17 * e + 1 + j] = static_cast<uint8_t>(e + 16 * j);
  }
  std::vector<float> want(n), got(n, -1.0f);
  ASSERT_TRUE(dequantize_row(DType::MXFP4, row, want.data(), n).ok());
  EXPECT_TRUE(std::isinf(want[32 * 255 + 24]));  // e 255, byte 8's high nibble 7: 12 * 2^127
  decode_row<DType::MXFP4>(row, n, got.data());
  for (int b = 0; b < kBlocks; ++b) {
    const RawUnit<DType::MXFP4> r = load_raw<DType::MXFP4>(row, b);
    for (int j = 0; j < 32; ++j) {
      const auto i = static_cast<size_t>(32 * b + j);
      ASSERT_EQ(bits(got[i]), bits(want[i])) << "decode_row e " << b << " element " << j;
      ASSERT_EQ(bits(raw_value<DType::MXFP4>(r, j)), bits(want[i])) << "raw e " << b << " " << j;
      const auto code = static_cast<int8_t>(static_cast<uint32_t>(r.w.q[j / 4]) >> (8 * (j % 4)));
      ASSERT_EQ(bits(static_cast<float>(code) * r.w.d), bits(want[i]))
          << "wblock e " << b << " " << j;
    }
  }
}

TEST(CudaHostMath, ActivationQuantizationIsTheCpusRule) {
  std::vector<float> x = gaussian(32 * 40, 9, 2.0f);
  for (int j = 0; j < 32; ++j) x[static_cast<size_t>(32 + j)] = 0.0f;  // all-zero block
  x[64 + 3] = 0.5f * 3.0f / 127.0f;                                    // ties round to even
  for (int b = 0; b < 40; ++b) {
    const float* xb = x.data() + 32 * b;
    int8_t q[32];
    const Q8Scale s = quantize_q8_block(xb, q);
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
    EXPECT_EQ(bits(s.d), bits(amax / 127.0f));
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < 32; ++j) {
      EXPECT_EQ(q[j], static_cast<int8_t>(std::nearbyint(xb[j] * id))) << b << " " << j;
      sum += q[j];
    }
    EXPECT_EQ(s.s, sum);
  }
  float nan_block[32] = {};
  nan_block[7] = std::numeric_limits<float>::quiet_NaN();
  int8_t q[32];
  EXPECT_TRUE(std::isnan(quantize_q8_block(nan_block, q).d));
}

// The integer block dot of each format against the dot of the decoded weights with the
// quantized activations, in double: equal up to the few roundings of the scaling.
template <DType T>
void check_q8_dot() {
  const int64_t n = 32 * 24;
  std::vector<float> w = gaussian(n, 11, 0.3f), x = gaussian(n, 12);
  std::vector<uint8_t> q(row_bytes(T, n));
  ASSERT_TRUE(quantize_row(T, w.data(), q.data(), n).ok());
  std::vector<float> wd(static_cast<size_t>(n));
  ASSERT_TRUE(dequantize_row(T, q.data(), wd.data(), n).ok());
  for (int64_t b = 0; b < n / 32; ++b) {
    alignas(4) int8_t aq[32];
    const Q8Scale s = quantize_q8_block(x.data() + 32 * b, aq);
    int32_t a[8];
    std::memcpy(a, aq, 32);
    const float got = dot_q8<T>(load_wblock<T>(q.data(), b), a, s);
    double want = 0, mag = 0;
    for (int j = 0; j < 32; ++j) {
      const double term = static_cast<double>(wd[static_cast<size_t>(32 * b + j)]) * s.d * aq[j];
      want += term;
      mag += std::fabs(term);
    }
    // Terms d q a and m a (or the offset's 8 d a) are each bounded by mag-like sums.
    double offs = 0;
    for (int j = 0; j < 32; ++j) offs += std::fabs(static_cast<double>(s.d) * aq[j]);
    const uint8_t* blk = q.data() + b * Unit<T>::kBlockBytes;
    const double scale = std::fabs(static_cast<double>(
        T == DType::MXFP4 ? gpu::e8m0_half(blk[0]) : half_to_float(load_u16(blk))));
    const double tol = 8 * kU * (mag + 32 * scale * offs) + 1e-30;
    EXPECT_NEAR(got, want, tol) << dtype_name(T) << " block " << b;
  }
}

TEST(CudaHostMath, IntegerBlockDotsOfEveryFormat) {
  check_q8_dot<DType::Q4_0>();
  check_q8_dot<DType::Q4_1>();
  check_q8_dot<DType::Q5_0>();
  check_q8_dot<DType::Q5_1>();
  check_q8_dot<DType::Q8_0>();
  check_q8_dot<DType::MXFP4>();
  EXPECT_TRUE(q8_path(DType::Q4_0) && q8_path(DType::Q8_0) && q8_path(DType::MXFP4) &&
              !q8_path(DType::Q6_K) && !q8_path(DType::F16));
}

TEST(CudaHostMath, Dp4aIsTheSignedByteDotProduct) {
  std::mt19937 rng(3);
  for (int i = 0; i < 10000; ++i) {
    const auto a = static_cast<int>(rng()), b = static_cast<int>(rng()),
               c = static_cast<int>(rng() % 100000);
    int want = c;
    for (int k = 0; k < 4; ++k)
      want += static_cast<int8_t>(a >> (8 * k)) * static_cast<int8_t>(b >> (8 * k));
    ASSERT_EQ(dp4a(a, b, c), want);
  }
}

TEST(CudaHostMath, SegmentsCoverEveryListInOrder) {
  for (int64_t n = 0; n < 5000; n += (n < 300 ? 1 : 37)) {
    const int S = segments(n);
    ASSERT_EQ(S == 0, n == 0);
    ASSERT_LE(S, kMaxSegments);
    int64_t at = 0;
    for (int s = 0; s < S; ++s) {
      const int64_t b = seg_begin(n, S, s), e = seg_begin(n, S, s + 1);
      ASSERT_EQ(b, at);
      ASSERT_GT(e, b) << "empty segment, n=" << n;
      ASSERT_LE(e - b, n < kSegRows * kMaxSegments ? kSegRows : ceil_div(n, kMaxSegments));
      at = e;
    }
    ASSERT_EQ(at, n);
  }
}

// The down projection's two stages replayed on the CPU: segment partial sums in list order,
// then the segments in order; within the bound of a sum of n terms.
TEST(CudaHostMath, TwoStageSumIsDeterministicAndAccurate) {
  for (int64_t n : {1, 31, 32, 33, 700, 2047, 2048, 2049, 11008}) {
    const std::vector<float> a = gaussian(n, 5), w = gaussian(n, 6);
    const int S = segments(n);
    std::vector<float> partial(static_cast<size_t>(S));
    for (int s = 0; s < S; ++s) {
      float acc = 0.0f;
      for (int64_t k = seg_begin(n, S, s); k < seg_begin(n, S, s + 1); ++k)
        acc = std::fma(a[static_cast<size_t>(k)], w[static_cast<size_t>(k)], acc);
      partial[static_cast<size_t>(s)] = acc;
    }
    const float got = combine_segments(partial.data(), S, 1);
    double want = 0, mag = 0;
    for (int64_t k = 0; k < n; ++k) {
      want += static_cast<double>(a[static_cast<size_t>(k)]) * w[static_cast<size_t>(k)];
      mag += std::fabs(static_cast<double>(a[static_cast<size_t>(k)]) * w[static_cast<size_t>(k)]);
    }
    EXPECT_NEAR(got, want, (ceil_div(n, S) + S + 1) * kU * mag) << n;
  }
}

TEST(CudaHostMath, ButterflyLeavesTheSumInEveryLane) {
  std::vector<float> v = gaussian(32, 4);
  double want = 0, mag = 0;
  for (float e : v) want += e, mag += std::fabs(e);
  std::vector<float> lanes = v;
  const float got = butterfly_sum32(lanes.data());
  for (float l : lanes) EXPECT_EQ(bits(l), bits(got));
  EXPECT_NEAR(got, want, 6 * kU * mag);
}

TEST(CudaHostMath, ActivationsMatchTheReference) {
  std::vector<float> x = gaussian(4000, 8, 6.0f);
  const float inf = std::numeric_limits<float>::infinity();
  x.insert(x.end(), {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), 88.0f, -88.0f,
                     1e-30f, -200.0f});
  std::vector<float> want(x.size());
  for (int act : {kSiLU, kReLU, kGELU}) {
    if (act == kSiLU) ref::silu(x.data(), want.data(), static_cast<int64_t>(x.size()));
    if (act == kReLU) ref::relu(x.data(), want.data(), static_cast<int64_t>(x.size()));
    if (act == kGELU) ref::gelu(x.data(), want.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      const float got = activate(act, x[i]);
      if (std::isnan(want[i]) || std::isinf(want[i])) {
        EXPECT_TRUE((std::isnan(got) && std::isnan(want[i])) || got == want[i])
            << act << " " << x[i];
        continue;
      }
      const double m = std::fabs(x[i]);
      EXPECT_NEAR(got, want[i], 16 * kU * (m + 1) * (1 + m)) << act << " x=" << x[i];
    }
  }
}

}  // namespace
}  // namespace pi::gpu
