// Small ops and attention against pi::ref on every ISA, at odd lengths, with guard bytes,
// non-finite parity and thread-count independence. Bounds come from the f32 rounding of
// each op's formula (u = 2^-24) and the inputs' magnitudes.
#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>

#include "kernels/ref/ref.h"
#include "tensor/quant.h"
#include "test_util.h"

namespace pi::cpu::test {
namespace {

const int64_t kLengths[] = {1, 7, 16, 33, 100, 4096, 4097};

TEST(CpuOps, RmsnormAndLayernorm) {
  ThreadPool pool(2);
  for (Isa isa : isas()) {
    const Kernels k(isa);
    for (int64_t n : kLengths) {
      SCOPED_TRACE(::testing::Message() << isa_name(isa) << " n=" << n);
      const auto x = gaussian(n, 1, 3.0f), w = gaussian(n, 2), b = gaussian(n, 3);
      Guarded y(n), yl(n), ylb(n);
      k.rmsnorm(pool, x.data(), w.data(), n, 1e-5f, y.data());
      k.layernorm(pool, x.data(), w.data(), nullptr, n, 1e-5f, yl.data());
      k.layernorm(pool, x.data(), w.data(), b.data(), n, 1e-5f, ylb.data());
      EXPECT_TRUE(y.guards_intact() && yl.guards_intact() && ylb.guards_intact());
      std::vector<float> want(n), want_l(n), want_lb(n);
      ref::rmsnorm(x.data(), w.data(), n, 1e-5f, want.data());
      ref::layernorm(x.data(), w.data(), nullptr, n, 1e-5f, want_l.data());
      ref::layernorm(x.data(), w.data(), b.data(), n, 1e-5f, want_lb.data());
      double mean_abs = 0.0, mean = 0.0;
      for (float v : x) mean_abs += std::fabs(v) / static_cast<double>(n);
      for (float v : x) mean += v / static_cast<double>(n);
      double var = 0.0;
      for (float v : x) var += (v - mean) * (v - mean) / static_cast<double>(n);
      const double inv_std = 1.0 / std::sqrt(var + 1e-5);
      const double k = static_cast<double>(n) / 8.0 + 20.0;
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_NEAR(y[i], want[i], k * kU * std::fabs(want[i]) + 1e-30) << i;
        // Layernorm: the mean's error (k u mean|x|) is scaled by w inv_std like x - mean.
        const double t = k * kU * (std::fabs(want_l[i]) + std::fabs(w[i]) * inv_std * mean_abs);
        EXPECT_NEAR(yl[i], want_l[i], t + 1e-30) << i;
        EXPECT_NEAR(ylb[i], want_lb[i], t + 2 * kU * std::fabs(b[i]) + 1e-30) << i;
      }
    }
  }
}

TEST(CpuOps, Softmax) {
  ThreadPool pool(1);
  for (Isa isa : isas()) {
    const Kernels k(isa);
    for (int64_t n : kLengths) {
      SCOPED_TRACE(::testing::Message() << isa_name(isa) << " n=" << n);
      const auto x = gaussian(n, 4, 5.0f);
      Guarded y(n);
      std::copy(x.begin(), x.end(), y.data());
      k.softmax(pool, y.data(), n);
      EXPECT_TRUE(y.guards_intact());
      auto want = x;
      ref::softmax(want.data(), n);
      const float mx = *std::max_element(x.begin(), x.end());
      for (int64_t i = 0; i < n; ++i) {
        // exp of an argument rounded by u |x - max|, a polynomial within 4u, a sum of n terms.
        const double k = std::fabs(x[i] - mx) + static_cast<double>(n) / 8.0 + 24.0;
        EXPECT_NEAR(y[i], want[i], k * kU * want[i] + 1e-38) << i;
      }
    }
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      std::vector<float> y = gaussian(40, 5), want;
      y[17] = bad;
      want = y;
      k.softmax(pool, y.data(), 40);
      ref::softmax(want.data(), 40);
      for (int i = 0; i < 40; ++i) EXPECT_EQ(std::isnan(y[i]), std::isnan(want[i])) << i << " " << bad;
    }
  }
}

TEST(CpuOps, Activations) {
  for (Isa isa : isas()) {
    const Kernels k(isa);
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{33}, int64_t{4097}, int64_t{100003}}) {
      SCOPED_TRACE(::testing::Message() << isa_name(isa) << " n=" << n);
      auto x = gaussian(n, 6, 4.0f);
      const float specials[] = {0.0f, -0.0f, 90.0f, -90.0f, 1e30f, -1e30f,
                                std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::quiet_NaN()};
      for (size_t i = 0; i < std::size(specials) && i < x.size(); ++i) x[i * 3 % x.size()] = specials[i];
      using Fn = void (Kernels::*)(ThreadPool&, const float*, float*, int64_t) const;
      using RefFn = void (*)(const float*, float*, int64_t);
      struct Op {
        const char* name;
        Fn fn;
        RefFn ref_fn;
        double rel;   // bound in units of u relative to |y|, per unit of |exp argument|
        double base;  // bound in units of u relative to |y|
      };
      const Op ops[] = {{"silu", &Kernels::silu, ref::silu, 1.0, 12.0},
                        {"gelu", &Kernels::gelu, ref::gelu, 4.0, 16.0},
                        {"relu", &Kernels::relu, ref::relu, 0.0, 0.0},
                        {"relu_squared", &Kernels::relu_squared, ref::relu_squared, 0.0, 0.0}};
      for (const Op& op : ops) {
        SCOPED_TRACE(op.name);
        std::vector<std::vector<float>> outs;
        for (int threads : {1, 2, 3}) {
          ThreadPool pool(threads);
          Guarded y(n);
          (k.*op.fn)(pool, x.data(), y.data(), n);
          EXPECT_TRUE(y.guards_intact());
          outs.push_back(y.values());
        }
        EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[1].data(), n * 4));
        EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[2].data(), n * 4));
        std::vector<float> want(n);
        op.ref_fn(x.data(), want.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          const float got = outs[0][i];
          if (!std::isfinite(want[i])) {
            EXPECT_TRUE(Guarded::same_bits(got, want[i]) || (std::isnan(got) && std::isnan(want[i])))
                << "x=" << x[i] << " got " << got << " want " << want[i];
            continue;
          }
          // The exp argument (|x| for silu, |2 sqrt(2/pi) (x + 0.044715 x^3)| for gelu) carries
          // a relative rounding error that exp turns into an error proportional to it.
          const double xd = x[i];
          const double arg = op.fn == &Kernels::gelu ? std::fabs(1.5957691216057308 * (xd + 0.044715 * xd * xd * xd))
                                           : std::fabs(xd);
          double tol = (op.rel * std::min(arg, 200.0) + op.base) * kU * std::fabs(want[i]) + 1e-37;
          // The reference's 0.5 x (1 + tanh) cancels for x << 0: it is only good to a few
          // double ulps of |x| there (the kernels' x * sigmoid form does not cancel).
          if (op.fn == &Kernels::gelu) tol += 4.0 * std::fabs(xd) * 2.220446049250313e-16;
          EXPECT_NEAR(got, want[i], tol) << "x=" << x[i];
        }
      }
    }
  }
}

// gpt-oss's gated unit against the reference on every ISA: both clamps (gate above 7, up
// beyond +-7), the exp's range, infinities and NaN in either input; the same bits for any
// thread count.
TEST(CpuOps, SwigluOaiMatchesReference) {
  const int64_t n = 1003;
  std::vector<float> g = gaussian(n, 41), u = gaussian(n, 42);
  for (int64_t i = 0; i < n; ++i) {
    g[i] *= 6.0f;  // past the limit 7 and deep into the sigmoid's tails
    u[i] *= 6.0f;
  }
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float special[][2] = {{inf, 1.0f}, {-inf, 1.0f}, {1.0f, inf}, {1.0f, -inf}, {nan, 1.0f}, {1.0f, nan}, {7.5f, 9.0f},
                              {-300.0f, 2.0f}, {0.0f, -7.5f}};
  for (size_t s = 0; s < std::size(special); ++s) {
    g[s] = special[s][0];
    u[s] = special[s][1];
  }
  std::vector<float> want(n);
  ref::swiglu_oai(g.data(), u.data(), want.data(), n);
  EXPECT_EQ(want[6], static_cast<float>(7.0 / (1.0 + std::exp(-1.702 * 7.0)) * 8.0));  // both clamped
  for (Isa isa : isas()) {
    SCOPED_TRACE(isa_name(isa));
    const Kernels k(isa);
    std::vector<std::vector<float>> outs;
    for (int threads : {1, 3}) {
      ThreadPool pool(threads);
      Guarded y(n);
      k.swiglu_oai(pool, g.data(), u.data(), y.data(), n);
      EXPECT_TRUE(y.guards_intact());
      outs.push_back(y.values());
    }
    EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[1].data(), n * 4));
    for (int64_t i = 0; i < n; ++i) {
      const float got = outs[0][i];
      if (!std::isfinite(want[i])) {
        EXPECT_TRUE(Guarded::same_bits(got, want[i]) || (std::isnan(got) && std::isnan(want[i])))
            << "g=" << g[i] << " u=" << u[i] << " got " << got << " want " << want[i];
        continue;
      }
      const double arg = 1.702 * std::min(std::fabs(static_cast<double>(g[i])), 200.0);
      EXPECT_NEAR(got, want[i], (arg + 16.0) * kU * std::fabs(want[i]) + 1e-37) << "g=" << g[i] << " u=" << u[i];
    }
  }
}

TEST(CpuOps, AddMulExact) {
  for (Isa isa : isas()) {
    const Kernels k(isa);
    for (int64_t n : {int64_t{1}, int64_t{31}, int64_t{100003}}) {
      ThreadPool pool(3);
      const auto a = gaussian(n, 7), b = gaussian(n, 8);
      Guarded ya(n), ym(n);
      k.add(pool, a.data(), b.data(), ya.data(), n);
      k.mul(pool, a.data(), b.data(), ym.data(), n);
      EXPECT_TRUE(ya.guards_intact() && ym.guards_intact());
      std::vector<float> wa(n), wm(n);
      ref::add(a.data(), b.data(), wa.data(), n);
      ref::mul(a.data(), b.data(), wm.data(), n);
      EXPECT_EQ(ya.values(), wa);
      EXPECT_EQ(ym.values(), wm);
    }
  }
}

// The KV cache's f32 -> f16 store: bit patterns identical to the scalar conversion for normal,
// subnormal, overflowing, halfway (ties to even) and non-finite inputs.
TEST(CpuOps, ToF16MatchesScalarConversion) {
  std::vector<float> x = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 65520.0f, 1e6f, -1e6f, 6e-8f, 3e-8f,
                          1e-5f, -7e-6f, INFINITY, -INFINITY, NAN, -NAN,
                          1.0f + 1.0f / 2048.0f,                 // halfway, rounds down to even
                          1.0f + 3.0f / 2048.0f,                 // halfway, rounds up to even
                          std::bit_cast<float>(0x7f812345u)};    // NaN with a payload
  const auto g = gaussian(5000, 17);
  for (size_t i = 0; i < g.size(); ++i) x.push_back(g[i] * std::pow(10.0f, static_cast<float>(i % 13) - 8.0f));
  for (Isa isa : isas()) {
    const Kernels k(isa);
    ThreadPool pool(2);
    for (int64_t n : {int64_t{1}, int64_t{19}, static_cast<int64_t>(x.size())}) {
      std::vector<uint16_t> y(static_cast<size_t>(n) + 1, 0xabcd);
      k.to_f16(pool, x.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(y[i], f32_to_f16(x[i])) << isa_name(isa) << " element " << i << " = " << x[i];
      EXPECT_EQ(y[n], 0xabcd) << "wrote past the end";
    }
  }
}

TEST(CpuOps, Rope) {
  ThreadPool pool(2);
  for (Isa isa : isas()) {
    const Kernels k(isa);
    for (auto mode : {RopeMode::Normal, RopeMode::NeoX}) {
      for (int64_t n_rot : {int64_t{64}, int64_t{128}, int64_t{34}}) {
        for (int64_t pos : {int64_t{0}, int64_t{1}, int64_t{4095}}) {
          SCOPED_TRACE(::testing::Message() << isa_name(isa) << " neox=" << (mode == RopeMode::NeoX)
                                            << " n_rot=" << n_rot << " pos=" << pos);
          const int64_t heads = 5, hd = 128;
          const auto x = gaussian(heads * hd, 9);
          Guarded y(heads * hd);
          std::copy(x.begin(), x.end(), y.data());
          k.rope(pool, y.data(), heads, hd, n_rot, pos, 10000.0f, 1.0f, mode);
          EXPECT_TRUE(y.guards_intact());
          auto want = x;
          ref::rope(want.data(), heads, hd, n_rot, pos, 10000.0f, 1.0f,
                    mode == RopeMode::NeoX ? ref::RopeMode::NeoX : ref::RopeMode::Normal);
          for (int64_t h = 0; h < heads; ++h) {
            for (int64_t i = 0; i < hd; ++i) {
              // Each output is a*c -/+ b*s of its pair: cos/sin rounded once, two products and a
              // sum: within 4u (|a| + |b|).
              const int64_t j = h * hd + i;
              double pair = std::fabs(x[j]);
              if (i < n_rot) {
                const int64_t partner = mode == RopeMode::Normal ? (i ^ 1) : (i < n_rot / 2 ? i + n_rot / 2 : i - n_rot / 2);
                pair += std::fabs(x[h * hd + partner]);
              }
              EXPECT_NEAR(y[j], want[j], 4 * kU * pair + 1e-30) << j;
            }
          }
        }
      }
    }
  }
}

// Bound for one attention head: score errors E (dot of head_dim terms), softmax (n terms)
// and the weighted sum of V: (2E + (n/4 + 40) u) sum_t p_t |v_t|.
double attn_bound(const float* q, const std::vector<float>& k, const std::vector<float>& v,
                  int64_t cell_stride, int64_t off, int64_t n, int64_t hd, float scale, int64_t d) {
  std::vector<double> s(static_cast<size_t>(n));
  double e = 0.0, mx = -INFINITY;
  for (int64_t t = 0; t < n; ++t) {
    double dot = 0.0, mag = 0.0;
    for (int64_t j = 0; j < hd; ++j) {
      dot += static_cast<double>(q[j]) * k[t * cell_stride + off + j];
      mag += std::fabs(static_cast<double>(q[j]) * k[t * cell_stride + off + j]);
    }
    s[t] = dot * scale;
    e = std::max(e, (static_cast<double>(hd) / 8.0 + 18.0) * kU * mag * scale + kU * std::fabs(s[t]));
    mx = std::max(mx, s[t]);
  }
  double sum = 0.0, pv = 0.0;
  for (auto& v2 : s) sum += (v2 = std::exp(v2 - mx));
  for (int64_t t = 0; t < n; ++t) pv += s[t] / sum * std::fabs(v[t * cell_stride + off + d]);
  return (2 * e + (static_cast<double>(n) / 4.0 + 40.0) * kU) * pv + 1e-30;
}

// Random keys and values stored as f16 (K, V) and the f32 values they round to (kd, vd).
struct F16Cache {
  std::vector<uint16_t> K, V;
  std::vector<float> kd, vd;
};
F16Cache f16_cache(int64_t n, uint32_t seed_k, uint32_t seed_v) {
  const auto kf = gaussian(n, seed_k), vf = gaussian(n, seed_v);
  F16Cache c{std::vector<uint16_t>(kf.size()), std::vector<uint16_t>(vf.size()),
             std::vector<float>(kf.size()), std::vector<float>(vf.size())};
  for (size_t i = 0; i < kf.size(); ++i) {
    c.K[i] = f32_to_f16(kf[i]);
    c.V[i] = f32_to_f16(vf[i]);
    c.kd[i] = f16_to_f32(c.K[i]);
    c.vd[i] = f16_to_f32(c.V[i]);
  }
  return c;
}

TEST(CpuAttention, SingleAndBatchedMatchReference) {
  for (Isa isa : isas()) {
    const Kernels k(isa);
    for (auto [n_head, n_kv, hd] : {std::tuple<int64_t, int64_t, int64_t>{4, 4, 64},
                                    {8, 2, 128}, {3, 1, 40}}) {
      const int64_t pos0 = 37, n_q = 5, n_cells = pos0 + n_q;
      SCOPED_TRACE(::testing::Message() << isa_name(isa) << " heads " << n_head << "/" << n_kv << " hd " << hd);
      const auto [K, V, kd, vd] = f16_cache(n_cells * n_kv * hd, 10, 11);
      const auto Q = gaussian(n_q * n_head * hd, 12, 0.5f);
      const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
      const AttentionDims dims{n_head, n_kv, hd, scale};
      std::vector<std::vector<float>> outs;
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        Guarded out(n_q * n_head * hd), single(n_head * hd);
        k.attention_batch(pool, dims, Q.data(), n_q, pos0, K.data(), V.data(), out.data());
        k.attention(pool, dims, Q.data(), K.data(), V.data(), pos0 + 1, single.data());
        EXPECT_TRUE(out.guards_intact() && single.guards_intact());
        // The first query of the batch sees exactly the cells the single query sees.
        const auto o = out.values(), s1 = single.values();
        EXPECT_EQ(0, std::memcmp(o.data(), s1.data(), s1.size() * 4));
        outs.push_back(o);
      }
      EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * 4));
      EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[2].data(), outs[0].size() * 4));
      for (int64_t i = 0; i < n_q; ++i) {
        std::vector<float> want(n_head * hd);
        ref::attention(Q.data() + i * n_head * hd, K.data(), V.data(), pos0 + i + 1, n_head, n_kv, hd, scale,
                       want.data());
        for (int64_t h = 0; h < n_head; ++h) {
          const int64_t g = h / (n_head / n_kv);
          for (int64_t d = 0; d < hd; ++d) {
            const double tol = attn_bound(Q.data() + (i * n_head + h) * hd, kd, vd, n_kv * hd, g * hd,
                                          pos0 + i + 1, hd, scale, d);
            ASSERT_NEAR(outs[0][(i * n_head + h) * hd + d], want[h * hd + d], tol)
                << "query " << i << " head " << h << " dim " << d;
          }
        }
      }
    }
  }
}

// The head-major layout (AttentionDims strides; what the KV cache uses) gives the same bits as
// the cell-major one for single, batched and listed queries.
TEST(CpuAttention, HeadMajorLayoutGivesTheSameBits) {
  for (Isa isa : isas()) {
    const Kernels k(isa);
    for (auto [n_head, n_kv, hd] : {std::tuple<int64_t, int64_t, int64_t>{8, 2, 128}, {4, 4, 64}, {3, 1, 40}}) {
      SCOPED_TRACE(::testing::Message() << isa_name(isa) << " heads " << n_head << "/" << n_kv << " hd " << hd);
      const int64_t pos0 = 29, n_q = 3, n_cells = 40;  // 8 spare cells hold garbage
      const auto [K, V, kd, vd] = f16_cache(n_cells * n_kv * hd, 30, 31);
      std::vector<uint16_t> KH(K.size()), VH(V.size());
      for (int64_t c = 0; c < n_cells; ++c)
        for (int64_t h = 0; h < n_kv; ++h)
          for (int64_t d = 0; d < hd; ++d) {
            KH[(h * n_cells + c) * hd + d] = K[(c * n_kv + h) * hd + d];
            VH[(h * n_cells + c) * hd + d] = V[(c * n_kv + h) * hd + d];
          }
      const auto Q = gaussian(n_q * n_head * hd, 32, 0.5f);
      const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
      const AttentionDims cell_major{n_head, n_kv, hd, scale};
      AttentionDims head_major = cell_major;
      head_major.head_stride = n_cells * hd;
      head_major.cell_stride = hd;
      const std::vector<int32_t> cells = {5, 0, 17, 3, 31, 30, 2, 9};
      const std::vector<int64_t> begin = {0, 2, 0}, len = {8, 6, 1};
      ThreadPool pool(2);
      std::vector<float> a(n_q * n_head * hd), b(a.size()), c1(n_head * hd), c2(c1.size()), l1(a.size()), l2(a.size());
      k.attention_batch(pool, cell_major, Q.data(), n_q, pos0, K.data(), V.data(), a.data());
      k.attention_batch(pool, head_major, Q.data(), n_q, pos0, KH.data(), VH.data(), b.data());
      k.attention(pool, cell_major, Q.data(), K.data(), V.data(), n_cells, c1.data());
      k.attention(pool, head_major, Q.data(), KH.data(), VH.data(), n_cells, c2.data());
      k.attention_cells(pool, cell_major, Q.data(), n_q, cells.data(), begin.data(), len.data(), K.data(), V.data(), l1.data());
      k.attention_cells(pool, head_major, Q.data(), n_q, cells.data(), begin.data(), len.data(), KH.data(), VH.data(), l2.data());
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
      EXPECT_EQ(0, std::memcmp(c1.data(), c2.data(), c1.size() * 4));
      EXPECT_EQ(0, std::memcmp(l1.data(), l2.data(), l1.size() * 4));
      EXPECT_NE(0, std::memcmp(a.data(), l1.data(), a.size() * 4));  // the lists differ from the prefixes
    }
  }
}

// Listed cells (multi-sequence batches): against the reference over the same list; bit-equal
// to attention() over the listed cells gathered into a contiguous cache (the order of the list
// is all that matters, not where the cells lie); the identity list equals attention_batch.
TEST(CpuAttention, ListedCellsMatchReferenceAndContiguousBits) {
  for (Isa isa : isas()) {
    const Kernels k(isa);
    const int64_t n_head = 8, n_kv = 2, hd = 40, n_cells = 61, cell = n_kv * hd;
    SCOPED_TRACE(::testing::Message() << isa_name(isa));
    const auto [K, V, kd, vd] = f16_cache(n_cells * cell, 20, 21);
    // A scattered list of 37 cells; queries attend prefixes of 37, 1 and 20 of it, then the
    // identity list (0..n-1) for two queries, like a contiguous causal batch at pos0 = 9.
    std::vector<int32_t> cells(37);
    for (int32_t k = 0; k < 37; ++k) cells[k] = (k * 23 + 5) % static_cast<int32_t>(n_cells);
    const int64_t list0 = 37;
    for (int32_t c = 0; c < 11; ++c) cells.push_back(c);
    const std::vector<int64_t> begin = {0, 0, 0, list0, list0};
    const std::vector<int64_t> len = {37, 1, 20, 10, 11};
    const int64_t n_q = static_cast<int64_t>(len.size());
    const auto Q = gaussian(n_q * n_head * hd, 22, 0.5f);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const AttentionDims dims{n_head, n_kv, hd, scale};
    std::vector<std::vector<float>> outs;
    for (int threads : {1, 3}) {
      ThreadPool pool(threads);
      Guarded out(n_q * n_head * hd);
      k.attention_cells(pool, dims, Q.data(), n_q, cells.data(), begin.data(), len.data(), K.data(),
                      V.data(), out.data());
      EXPECT_TRUE(out.guards_intact());
      outs.push_back(out.values());
    }
    EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * 4));
    ThreadPool pool(2);
    for (int64_t i = 0; i < n_q; ++i) {
      const int32_t* list = cells.data() + begin[i];
      // The same cells gathered contiguously, in list order.
      std::vector<uint16_t> gk, gv;
      std::vector<float> gkd, gvd;
      for (int64_t t = 0; t < len[i]; ++t) {
        const int64_t c = list[t];
        gk.insert(gk.end(), K.begin() + c * cell, K.begin() + (c + 1) * cell);
        gv.insert(gv.end(), V.begin() + c * cell, V.begin() + (c + 1) * cell);
        gkd.insert(gkd.end(), kd.begin() + c * cell, kd.begin() + (c + 1) * cell);
        gvd.insert(gvd.end(), vd.begin() + c * cell, vd.begin() + (c + 1) * cell);
      }
      std::vector<float> contiguous(n_head * hd), want(n_head * hd);
      k.attention(pool, dims, Q.data() + i * n_head * hd, gk.data(), gv.data(), len[i],
                contiguous.data());
      EXPECT_EQ(0, std::memcmp(contiguous.data(), outs[0].data() + i * n_head * hd,
                               contiguous.size() * 4))
          << "query " << i;
      ref::attention_cells(Q.data() + i * n_head * hd, K.data(), V.data(), list, len[i], n_head,
                           n_kv, hd, scale, want.data());
      for (int64_t h = 0; h < n_head; ++h) {
        const int64_t g = h / (n_head / n_kv);
        for (int64_t d = 0; d < hd; ++d) {
          const double tol = attn_bound(Q.data() + (i * n_head + h) * hd, gkd, gvd, cell, g * hd,
                                        len[i], hd, scale, d);
          ASSERT_NEAR(outs[0][(i * n_head + h) * hd + d], want[h * hd + d], tol)
              << "query " << i << " head " << h << " dim " << d;
        }
      }
    }
    // The identity lists of queries 3 and 4 are a causal batch of two at pos0 = 9.
    std::vector<float> batch(2 * n_head * hd);
    k.attention_batch(pool, dims, Q.data() + 3 * n_head * hd, 2, 9, K.data(), V.data(), batch.data());
    EXPECT_EQ(0, std::memcmp(batch.data(), outs[0].data() + 3 * n_head * hd, batch.size() * 4));
  }
}

TEST(CpuAttention, NaNInQueryPoisonsOnlyItsHead) {
  ThreadPool pool(2);
  for (Isa isa : isas()) {
    const Kernels k(isa);
    const int64_t n_head = 2, hd = 32, n = 9;
    std::vector<uint16_t> K(n * n_head * hd), V(n * n_head * hd);
    const auto kf = gaussian(static_cast<int64_t>(K.size()), 13);
    for (size_t i = 0; i < K.size(); ++i) K[i] = V[i] = f32_to_f16(kf[i]);
    auto q = gaussian(n_head * hd, 14);
    q[3] = std::numeric_limits<float>::quiet_NaN();  // head 0
    std::vector<float> out(n_head * hd), want(n_head * hd);
    k.attention(pool, {n_head, n_head, hd, 0.2f}, q.data(), K.data(), V.data(), n, out.data());
    ref::attention(q.data(), K.data(), V.data(), n, n_head, n_head, hd, 0.2f, want.data());
    for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(std::isnan(out[i]), std::isnan(want[i])) << i;
  }
}

}  // namespace
}  // namespace pi::cpu::test
