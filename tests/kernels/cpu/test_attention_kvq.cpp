// Attention over a quantized KV cache (Q8_0 / Q4_0 keys and values, llama.cpp's -ctk/-ctv) on
// every ISA against the reference over the same bytes, for causal batches and listed cells:
// bit-identical across thread counts and batch compositions (a token's output does not depend
// on the other tokens of its batch).
#include <cmath>
#include <tuple>

#include "kernels/ref/ref.h"
#include "tensor/quant.h"
#include "test_util.h"

namespace pi::cpu::test {
namespace {

constexpr double kUnit = 5.9604644775390625e-08;  // 2^-24

// A head-major cache [n_kv, n_cells, hd] of keys and values in types kt, vt (the KV cache's
// layout), with the values they decode to, cell-major [n_cells, n_kv, hd] (for the bound).
struct TypedCache {
  std::vector<uint8_t> K, V;
  std::vector<float> kd, vd;
};
TypedCache typed_cache(DType kt, DType vt, int64_t n_cells, int64_t n_kv, int64_t hd,
                       uint32_t seed) {
  const auto kf = gaussian(n_cells * n_kv * hd, seed), vf = gaussian(n_cells * n_kv * hd, seed + 1);
  TypedCache c;
  c.K.resize(row_bytes(kt, n_cells * n_kv * hd));
  c.V.resize(row_bytes(vt, n_cells * n_kv * hd));
  c.kd.resize(kf.size());
  c.vd.resize(vf.size());
  std::vector<float> row(static_cast<size_t>(hd));
  for (int64_t cell = 0; cell < n_cells; ++cell)
    for (int64_t h = 0; h < n_kv; ++h) {
      const int64_t src = (cell * n_kv + h) * hd, dst = (h * n_cells + cell) * hd;
      for (auto [t, f, bytes, dec] : {std::tuple{kt, &kf, &c.K, &c.kd}, std::tuple{vt, &vf, &c.V, &c.vd}}) {
        uint8_t* at = bytes->data() + row_bytes(t, dst);
        EXPECT_TRUE(ref::store_kv_row(t, f->data() + src, hd, at));
        if (t == DType::F16) {
          for (int64_t d = 0; d < hd; ++d) row[d] = f16_to_f32(reinterpret_cast<const uint16_t*>(at)[d]);
        } else {
          EXPECT_TRUE(dequantize_row(t, at, row.data(), hd).ok());
        }
        std::copy(row.begin(), row.end(), dec->begin() + src);
      }
    }
  return c;
}

// Bound for one output element over the decoded values (as CpuAttention's attn_bound): score
// errors E, softmax, and the weighted sum of V, with 2 more roundings per block for the scales.
double attn_bound(const float* q, const std::vector<float>& k, const std::vector<float>& v,
                  int64_t cell_stride, int64_t off, const int32_t* cells, int64_t n, int64_t hd,
                  float scale, int64_t d) {
  std::vector<double> s(static_cast<size_t>(n));
  double e = 0.0, mx = -INFINITY;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t c = cells != nullptr ? cells[t] : t;
    double dot = 0.0, mag = 0.0;
    for (int64_t j = 0; j < hd; ++j) {
      dot += static_cast<double>(q[j]) * k[c * cell_stride + off + j];
      mag += std::fabs(static_cast<double>(q[j]) * k[c * cell_stride + off + j]);
    }
    s[t] = dot * scale;
    e = std::max(e, (static_cast<double>(hd) / 8.0 + 20.0) * kUnit * mag * scale + kUnit * std::fabs(s[t]));
    mx = std::max(mx, s[t]);
  }
  double sum = 0.0, pv = 0.0;
  for (auto& x : s) sum += (x = std::exp(x - mx));
  for (int64_t t = 0; t < n; ++t) {
    const int64_t c = cells != nullptr ? cells[t] : t;
    pv += s[t] / sum * std::fabs(v[c * cell_stride + off + d]);
  }
  return (2 * e + (static_cast<double>(n) / 4.0 + 42.0) * kUnit) * pv + 1e-30;
}

TEST(CpuAttentionKvq, MatchesReferenceOnEveryIsaAndIsBatchInvariant) {
  const std::tuple<DType, DType> types[] = {{DType::Q8_0, DType::Q8_0}, {DType::Q4_0, DType::Q4_0},
                                            {DType::Q8_0, DType::F16}, {DType::F16, DType::Q4_0}};
  for (Isa isa : isas()) {
    const Kernels k(isa);
    for (auto [kt, vt] : types) {
      for (auto [n_head, n_kv, hd] : {std::tuple<int64_t, int64_t, int64_t>{8, 2, 128}, {4, 4, 64}, {3, 1, 32}}) {
        SCOPED_TRACE(::testing::Message() << isa_name(isa) << " " << dtype_name(kt) << "/"
                                          << dtype_name(vt) << " heads " << n_head << "/" << n_kv
                                          << " hd " << hd);
        const int64_t n_cells = 45;
        const TypedCache c = typed_cache(kt, vt, n_cells, n_kv, hd, 40);
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        AttentionDims dims{n_head, n_kv, hd, scale};
        dims.head_stride = n_cells * hd;
        dims.cell_stride = hd;
        dims.k_type = kt;
        dims.v_type = vt;
        // Scattered lists for queries 0..2, then the identity list for two queries (a causal
        // batch at pos0 = 9).
        std::vector<int32_t> cells(33);
        for (int32_t j = 0; j < 33; ++j) cells[j] = (j * 17 + 4) % static_cast<int32_t>(n_cells);
        for (int32_t j = 0; j < 11; ++j) cells.push_back(j);
        const std::vector<int64_t> begin = {0, 0, 0, 33, 33}, len = {33, 1, 20, 10, 11};
        const int64_t n_q = 5, qn = n_head * hd;
        const auto Q = gaussian(n_q * qn, 41, 0.5f);
        const auto* K = reinterpret_cast<const uint16_t*>(c.K.data());
        const auto* V = reinterpret_cast<const uint16_t*>(c.V.data());
        std::vector<std::vector<float>> outs;
        for (int threads : {1, 3}) {
          ThreadPool pool(threads);
          Guarded out(n_q * qn);
          k.attention_cells(pool, dims, Q.data(), n_q, cells.data(), begin.data(), len.data(), K, V,
                            out.data());
          EXPECT_TRUE(out.guards_intact());
          outs.push_back(out.values());
        }
        ASSERT_EQ(0, std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * 4));
        ThreadPool pool(2);
        for (int64_t i = 0; i < n_q; ++i) {
          // Alone in its batch: the same bits.
          std::vector<float> alone(qn), want(qn);
          const int64_t b0 = 0;
          k.attention_cells(pool, dims, Q.data() + i * qn, 1, cells.data() + begin[i], &b0, &len[i],
                            K, V, alone.data());
          EXPECT_EQ(0, std::memcmp(alone.data(), outs[0].data() + i * qn, qn * 4)) << "query " << i;
          const int32_t* list = cells.data() + begin[i];
          ref::attention_cells_typed(Q.data() + i * qn, kt, c.K.data(), vt, c.V.data(), list, len[i],
                                     n_head, n_kv, hd, scale, want.data(), dims.head_stride,
                                     dims.cell_stride);
          for (int64_t h = 0; h < n_head; ++h) {
            const int64_t g = h / (n_head / n_kv);
            for (int64_t d = 0; d < hd; ++d) {
              const double tol = attn_bound(Q.data() + i * qn + h * hd, c.kd, c.vd, n_kv * hd, g * hd,
                                            list, len[i], hd, scale, d);
              ASSERT_NEAR(outs[0][i * qn + h * hd + d], want[h * hd + d], tol)
                  << "query " << i << " head " << h << " dim " << d;
            }
          }
        }
        // The identity lists are a causal batch of two at pos0 = 9, and the first is attention()
        // over 10 cells.
        std::vector<float> batch(2 * qn), single(qn);
        k.attention_batch(pool, dims, Q.data() + 3 * qn, 2, 9, K, V, batch.data());
        EXPECT_EQ(0, std::memcmp(batch.data(), outs[0].data() + 3 * qn, batch.size() * 4));
        k.attention(pool, dims, Q.data() + 3 * qn, K, V, 10, single.data());
        EXPECT_EQ(0, std::memcmp(single.data(), outs[0].data() + 3 * qn, qn * 4));
      }
    }
  }
}

// The reference over a quantized cache is the f16 reference over the decoded values (exact
// decoding), and a Q8_0 cache stays close to f16 attention.
TEST(RefAttentionKvq, DecodesExactlyAndQ8StaysCloseToF16) {
  const int64_t n_head = 4, n_kv = 2, hd = 64, n_cells = 30;
  const TypedCache q8 = typed_cache(DType::Q8_0, DType::Q8_0, n_cells, n_kv, hd, 50);
  const TypedCache f16 = typed_cache(DType::F16, DType::F16, n_cells, n_kv, hd, 50);
  const auto Q = gaussian(n_head * hd, 52, 0.5f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> a(n_head * hd), b(a.size());
  ref::attention_cells_typed(Q.data(), DType::Q8_0, q8.K.data(), DType::Q8_0, q8.V.data(), nullptr,
                             n_cells, n_head, n_kv, hd, scale, a.data(), n_cells * hd, hd);
  ref::attention_cells_typed(Q.data(), DType::F16, f16.K.data(), DType::F16, f16.V.data(), nullptr,
                             n_cells, n_head, n_kv, hd, scale, b.data(), n_cells * hd, hd);
  double err = 0.0, mag = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::fabs(static_cast<double>(a[i]) - b[i]));
    mag = std::max(mag, std::fabs(static_cast<double>(b[i])));
  }
  EXPECT_LT(err, 0.02 * mag);
  // head_dim not a multiple of 32: NaN, not a wrong answer.
  std::vector<float> bad(3 * 40);
  std::vector<uint8_t> kb(4096), vb(4096);
  ref::attention_cells_typed(Q.data(), DType::Q8_0, kb.data(), DType::Q8_0, vb.data(), nullptr, 1,
                             3, 1, 40, scale, bad.data());
  EXPECT_TRUE(std::isnan(bad[0]));
}

}  // namespace
}  // namespace pi::cpu::test
