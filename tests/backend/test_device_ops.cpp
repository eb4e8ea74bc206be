// Every op of backend::Ops on every device this build has (cpu on each ISA, sim) against the
// reference device (the scalar oracle): over the dtypes each op takes, odd sizes and misaligned
// weights, with guard elements around every output (written by nobody) and NaN/Inf parity.
// Tolerances come from the dtype and the inputs' magnitudes (tests/kernels/cpu/test_util.h):
// the dot-product rounding bound plus, for quantized weights on a SIMD ISA, the bound of the
// activations' 8-bit quantization. Everything goes through device memory (alloc, upload,
// download), so the sim device's opaque memory is exercised like a GPU's.
// Built three times: test_backend (fast) runs the host devices and sim; with PI_TEST_CUDA the
// same cases run on the cuda device: test_backend_cuda (gpu, CUDA builds; skips with a message
// when there is no GPU) and test_backend_cuda_emu (fast, every build: the cuda device's code
// under the CPU emulation of src/kernels/cuda/emu.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <tuple>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "backend/host_device.h"
#include "backend/registry.h"
#include "kernels/cpu/test_util.h"
#ifdef PI_TEST_CUDA
#include "backend/cuda/cuda_device.h"
#endif

namespace pi::backend {
namespace {

using cpu::Isa;
using cpu::test::Guarded;
using cpu::test::Weights;
constexpr double kU = cpu::test::kU;
constexpr int64_t kG = Guarded::kGuard;

struct DeviceCase {
  std::string label;
  std::function<std::unique_ptr<Device>()> make;
  Isa isa;
  // Whether the block formats' products use 8-bit activations (the SIMD ISAs, the GPU).
  bool act_quant;
};

std::vector<DeviceCase> devices() {
  std::vector<DeviceCase> out;
#ifdef PI_TEST_CUDA
  out.push_back({"cuda",
                 [] { return std::unique_ptr<Device>(std::move(CudaDevice::create({}).value())); },
                 Isa::Scalar, true});
  return out;
#endif
  for (Isa isa : cpu::test::isas()) {
    out.push_back({"cpu/" + std::string(cpu::isa_name(isa)),
                   [isa] { return std::unique_ptr<Device>(new CpuDevice(2, isa)); }, isa,
                   isa != Isa::Scalar});
  }
  out.push_back({"sim",
                 [] {
                   DeviceOptions o;
                   o.name = "sim";
                   o.n_threads = 2;
                   o.budget = uint64_t{64} << 20;
                   return std::move(make_device(o).value());
                 },
                 cpu::default_isa(), cpu::default_isa() != Isa::Scalar});
  return out;
}

// Fails the test when the device recorded an asynchronous error (the cuda device keeps the
// first failed launch or copy instead of aborting).
void expect_healthy(Device& d) {
#ifdef PI_TEST_CUDA
  if (auto* c = dynamic_cast<CudaDevice*>(&d); c != nullptr) {
    EXPECT_TRUE(c->status().ok()) << c->status().error().message;
  }
#else
  (void)d;
#endif
}

// Host data in device memory, with guard elements of a sentinel pattern on both sides.
class DevBuf {
 public:
  DevBuf(Device& d, const std::vector<float>& v) : d_(d), n_(static_cast<int64_t>(v.size())) {
    buf_ = d.alloc(sizeof(float) * static_cast<size_t>(n_ + 2 * kG), "test buffer").value();
    std::vector<float> host(static_cast<size_t>(n_ + 2 * kG), Guarded::sentinel());
    std::copy(v.begin(), v.end(), host.begin() + kG);
    d.upload(buf_.data(), host.data(), host.size() * sizeof(float));
  }
  float* p() const { return buf_.as<float>() + kG; }
  // The values; fails the test if a guard changed.
  std::vector<float> get() const {
    std::vector<float> host(static_cast<size_t>(n_ + 2 * kG));
    d_.sync_all();
    d_.download(host.data(), buf_.data(), host.size() * sizeof(float));
    for (int64_t i = 0; i < kG; ++i) {
      EXPECT_TRUE(Guarded::same_bits(host[static_cast<size_t>(i)], Guarded::sentinel()));
      EXPECT_TRUE(Guarded::same_bits(host[static_cast<size_t>(kG + n_ + i)], Guarded::sentinel()));
    }
    return std::vector<float>(host.begin() + kG, host.begin() + kG + n_);
  }

 private:
  Device& d_;
  int64_t n_;
  Buffer buf_;
};

// A weight matrix uploaded to a device at a deliberately odd byte offset.
class DevWeights {
 public:
  DevWeights(Device& d, const Weights& w) {
    buf_ = d.alloc(w.storage.size(), "test weights").value();
    d.upload(buf_.data(), w.storage.data(), w.storage.size());
    m_ = Matrix{w.type, buf_.as<std::byte>() + w.offset, w.rows, w.cols, "w"};
  }
  const Matrix& m() const { return m_; }

 private:
  Buffer buf_;
  Matrix m_;
};

std::vector<float> run_on(Device& d, const std::vector<float>& out_init,
                          const std::function<void(Device&, float*)>& op) {
  DevBuf out(d, out_init);
  op(d, out.p());
  std::vector<float> v = out.get();
  expect_healthy(d);
  return v;
}

// Compares got with want elementwise: same bits for non-finite values (NaN parity), else
// |got - want| <= tol[i].
void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  const std::vector<double>& tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    if (!std::isfinite(want[i]) || !std::isfinite(got[i])) {
      const bool ok = (std::isnan(want[i]) && std::isnan(got[i])) || got[i] == want[i];
      if (!ok) ++bad;
      EXPECT_TRUE(ok) << what << " [" << i << "]: got " << got[i] << " want " << want[i];
      continue;
    }
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (d > tol[i]) ++bad;
    EXPECT_LE(d, tol[i]) << what << " [" << i << "]: got " << got[i] << " want " << want[i];
  }
}

// |v| for finite v, else 0 (tolerances of non-finite inputs: parity is checked instead).
double mag(float v) { return std::isfinite(v) ? std::fabs(static_cast<double>(v)) : 0.0; }

class DeviceOps : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef PI_TEST_CUDA
    std::string why;
    if (cuda_device_count(&why) == 0) GTEST_SKIP() << "no CUDA device (" << why << "): gpu test skipped";
#endif
  }
  RefDevice ref_;
};

// Bound of |device - ref| for row r of W · x (x: f32 [cols]).
double linear_tol(const Weights& w, bool act_quant, int64_t r, const float* x) {
  const float* mag = w.mag.data() + r * w.cols;
  double t = 2 * cpu::test::dot_bound(mag, x, w.cols);
  if (cpu::test::int_type(w.type) && act_quant) t += cpu::test::act_quant_bound(mag, x, w.cols);
  return t;
}

TEST_F(DeviceOps, LinearFamilyOnEveryTypeAndDevice) {
  for (const DeviceCase& dc : devices()) {
    auto dev = dc.make();
    for (DType t : cpu::test::matrix_types()) {
      const int64_t cols = dtype_info(t).block_size >= 256 ? 256 : 96, rows = 37;
      const Weights w = cpu::test::random_weights(t, rows, cols, 11);
      const DevWeights dw(*dev, w), rw(ref_, w);
      for (int64_t m : {1, 3, 12}) {  // 12: past the GPU's row kernels (its many-token path)
        const std::string what =
            dc.label + " " + std::string(dtype_info(t).name) + " m=" + std::to_string(m);
        const std::vector<float> x = cpu::test::gaussian(m * cols, 5);
        const DevBuf dx(*dev, x), rx(ref_, x);
        const std::vector<float> zero(static_cast<size_t>(m * rows), 0.0f);
        std::vector<double> tol(zero.size());
        for (int64_t i = 0; i < m; ++i)
          for (int64_t r = 0; r < rows; ++r)
            tol[static_cast<size_t>(i * rows + r)] = linear_tol(w, dc.act_quant, r, x.data() + i * cols);
        // linear
        auto got =
            run_on(*dev, zero, [&](Device& d, float* y) { d.ops().linear(dw.m(), dx.p(), m, y); });
        auto want =
            run_on(ref_, zero, [&](Device& d, float* y) { d.ops().linear(rw.m(), rx.p(), m, y); });
        expect_close(got, want, tol, what + " linear");
        // linear3: each part equals linear
        {
          DevBuf a(*dev, zero), b(*dev, zero), c(*dev, zero);
          dev->ops().linear3(dw.m(), dw.m(), dw.m(), dx.p(), m, a.p(), b.p(), c.p());
          expect_close(a.get(), want, tol, what + " linear3 a");
          expect_close(c.get(), want, tol, what + " linear3 c");
        }
        // linear_each (one token each): every part equals this device's linear bit for bit,
        // its own input or one another part reads too.
        if (m == 1) {
          const std::vector<float> x2 = cpu::test::gaussian(cols, 6);
          const DevBuf dx2(*dev, x2);
          auto got2 = run_on(*dev, zero, [&](Device& d, float* y) { d.ops().linear(dw.m(), dx2.p(), 1, y); });
          DevBuf a(*dev, zero), b(*dev, zero), c(*dev, zero);
          const Matrix W = dw.m();
          const LinearPart parts[3] = {{&W, dx.p(), a.p()}, {&W, dx2.p(), b.p()}, {&W, dx.p(), c.p()}};
          dev->ops().linear_each(parts);
          EXPECT_EQ(a.get(), got) << what << " linear_each a";
          EXPECT_EQ(b.get(), got2) << what << " linear_each b";
          EXPECT_EQ(c.get(), got) << what << " linear_each c";
        }
        // linear_rows (per-token CSR lists) and linear_rows_union: listed rows only.
        std::vector<int32_t> idx;
        std::vector<int64_t> off = {0};
        for (int64_t i = 0; i < m; ++i) {
          for (int32_t r = static_cast<int32_t>(i); r < rows; r += 3) idx.push_back(r);
          off.push_back(static_cast<int64_t>(idx.size()));
        }
        const std::vector<float> minus(zero.size(), -3.0f);
        auto gr = run_on(*dev, minus, [&](Device& d, float* y) {
          d.ops().linear_rows(dw.m(), dx.p(), m, idx.data(), off.data(), y);
        });
        auto wr = run_on(ref_, minus, [&](Device& d, float* y) {
          d.ops().linear_rows(rw.m(), rx.p(), m, idx.data(), off.data(), y);
        });
        expect_close(gr, wr, tol, what + " linear_rows");
        const std::vector<int32_t> uni = {0, 5, 6, 36};
        auto gu = run_on(*dev, minus, [&](Device& d, float* y) {
          d.ops().linear_rows_union(dw.m(), dx.p(), m, uni, y);
        });
        auto wu = run_on(ref_, minus, [&](Device& d, float* y) {
          d.ops().linear_rows_union(rw.m(), rx.p(), m, uni, y);
        });
        expect_close(gu, wu, tol, what + " linear_rows_union");
      }
    }
  }
}

TEST_F(DeviceOps, TransposedProductsOnEveryTypeAndDevice) {
  for (const DeviceCase& dc : devices()) {
    auto dev = dc.make();
    for (DType t : cpu::test::matrix_types()) {
     // m = 10: past the GPU's two-stage kernels (its many-token path).
     for (int64_t m : {2, 10}) {
      const int64_t cols = dtype_info(t).block_size >= 256 ? 256 : 64, rows = 41;
      const Weights w = cpu::test::random_weights(t, rows, cols, 3);
      const DevWeights dw(*dev, w), rw(ref_, w);
      std::vector<float> a = cpu::test::gaussian(m * rows, 9);
      for (size_t k = 0; k < a.size(); k += 4) a[k] = 0.0f;  // sparse activations
      const DevBuf da(*dev, a), ra(ref_, a);
      std::vector<int32_t> rows_all(static_cast<size_t>(rows));
      std::iota(rows_all.begin(), rows_all.end(), 0);
      std::vector<int32_t> idx = {1, 2, 3, 10, 11, 40, 0, 7, 8, 39};
      std::vector<int64_t> off = {0, 6, 10};
      for (int64_t i = 2; i < m; ++i) {  // more tokens: every (i % 4 + 1)-th row
        for (int32_t r = static_cast<int32_t>(i % 3); r < rows; r += static_cast<int32_t>(i % 4 + 1))
          idx.push_back(r);
        off.push_back(static_cast<int64_t>(idx.size()));
      }
      std::vector<double> tol(static_cast<size_t>(m * cols));
      for (int64_t i = 0; i < m; ++i)
        for (int64_t c = 0; c < cols; ++c) {
          double s = 0;
          for (int64_t r = 0; r < rows; ++r)
            s += std::fabs(static_cast<double>(a[static_cast<size_t>(i * rows + r)]) *
                           w.mag[static_cast<size_t>(r * cols + c)]);
          // Q4_0 on the CPU rounds coefficients to 8 bits per row group (q4_groups.h).
          tol[static_cast<size_t>(i * cols + c)] =
              (rows / 4.0 + 24) * kU * s + cpu::test::q4_axpy_rounding(w, rows_all, a.data() + i * rows, c) + 1e-30;
        }
      const std::vector<float> init(tol.size(), 5.0f);
      const std::string what = dc.label + " " + std::string(dtype_info(t).name) + " m=" + std::to_string(m);
      auto g1 = run_on(*dev, init, [&](Device& d, float* y) {
        d.ops().linear_t(dw.m(), da.p(), m, rows_all, y);
      });
      auto w1 = run_on(ref_, init, [&](Device& d, float* y) {
        d.ops().linear_t(rw.m(), ra.p(), m, rows_all, y);
      });
      expect_close(g1, w1, tol, what + " linear_t");
      auto g2 = run_on(*dev, init, [&](Device& d, float* y) {
        d.ops().linear_t_rows(dw.m(), da.p(), m, idx.data(), off.data(), y);
      });
      auto w2 = run_on(ref_, init, [&](Device& d, float* y) {
        d.ops().linear_t_rows(rw.m(), ra.p(), m, idx.data(), off.data(), y);
      });
      expect_close(g2, w2, tol, what + " linear_t_rows");
      // A list that is not all the rows, in order (the GPU gathers its rows).
      const std::vector<int32_t> some = {0, 3, 4, 9, 20, 21, 22, 40};
      auto g3 = run_on(*dev, init, [&](Device& d, float* y) { d.ops().linear_t(dw.m(), da.p(), m, some, y); });
      auto w3 = run_on(ref_, init, [&](Device& d, float* y) { d.ops().linear_t(rw.m(), ra.p(), m, some, y); });
      expect_close(g3, w3, tol, what + " linear_t (some rows)");
     }
    }
  }
}

TEST_F(DeviceOps, EmbedNormRopeAndElementwise) {
  for (const DeviceCase& dc : devices()) {
    auto dev = dc.make();
    const int64_t m = 3, n = 80;
    std::vector<float> x = cpu::test::gaussian(m * n, 21);
    x[5] = std::numeric_limits<float>::quiet_NaN();
    x[n + 9] = std::numeric_limits<float>::infinity();
    const DevBuf dx(*dev, x), rx(ref_, x);
    const std::vector<float> wv = cpu::test::gaussian(n, 4), bv = cpu::test::gaussian(n, 6);
    const DevBuf dw(*dev, wv), rw(ref_, wv), db(*dev, bv), rb(ref_, bv);
    const std::vector<float> zero(static_cast<size_t>(m * n), 0.0f);
    std::vector<double> tol(zero.size());
    for (size_t i = 0; i < tol.size(); ++i)
      tol[i] = 64 * kU * (1 + 4 * std::fabs(wv[i % n]) + std::fabs(bv[i % n]));
    for (NormKind k : {NormKind::RMS, NormKind::Layer}) {
      const NormParams p{k, 1e-5f};
      auto g = run_on(*dev, zero, [&](Device& d, float* y) {
        d.ops().norm(p, dx.p(), {dw.p(), n}, {db.p(), n}, m, n, y);
      });
      auto w = run_on(ref_, zero, [&](Device& d, float* y) {
        d.ops().norm(p, rx.p(), {rw.p(), n}, {rb.p(), n}, m, n, y);
      });
      // Rows with a NaN or Inf are NaN everywhere on both (parity); finite rows agree.
      expect_close(g, w, tol, dc.label + (k == NormKind::RMS ? " rmsnorm" : " layernorm"));
    }
    // Elementwise: NaN and Inf propagate the same way; silu/gelu within a few ulps.
    for (Activation act : {Activation::ReLU, Activation::SiLU, Activation::GELU}) {
      std::vector<double> et(x.size());
      for (size_t i = 0; i < x.size(); ++i) et[i] = 32 * kU * (mag(x[i]) + 1) * (1 + mag(x[i]));
      auto g = run_on(*dev, x, [&](Device& d, float* y) { d.ops().activate(act, y, m * n); });
      auto w = run_on(ref_, x, [&](Device& d, float* y) { d.ops().activate(act, y, m * n); });
      expect_close(g, w, et, dc.label + " activate");
    }
    for (FfnKind kind : {FfnKind::Gated, FfnKind::GatedBoth, FfnKind::Plain, FfnKind::SwigluOai}) {
      const bool oai = kind == FfnKind::SwigluOai;
      std::vector<float> u = cpu::test::gaussian(m * n, 8), g0 = x;
      if (oai) {  // gpt-oss's unit: inputs past both clamps (gate above 7, up beyond +-7)
        for (float& v : u) v *= 4.0f;
        for (float& v : g0) v *= 4.0f;
      }
      DevBuf gu(*dev, u), ru(ref_, u);
      std::vector<double> et(x.size());
      for (size_t i = 0; i < x.size(); ++i) et[i] = 4 * kU * (mag(x[i]) * mag(u[i]) + mag(u[i]));
      if (oai)  // an exp of up to 1.702 |gate| inside, as silu's
        for (size_t i = 0; i < x.size(); ++i) et[i] = 32 * kU * (mag(g0[i]) + 1) * (1 + 2 * mag(g0[i])) * (mag(u[i]) + 1);
      auto g = run_on(*dev, g0, [&](Device& d, float* G) {
        d.ops().ffn_combine(kind, Activation::ReLU, G, gu.p(), m, n);
      });
      auto w = run_on(ref_, g0, [&](Device& d, float* G) {
        d.ops().ffn_combine(kind, Activation::ReLU, G, ru.p(), m, n);
      });
      expect_close(g, w, et, dc.label + " ffn_combine");
    }
    {
      std::vector<double> exact(x.size(), 0.0);
      auto g = run_on(*dev, x, [&](Device& d, float* y) { d.ops().add(y, dw.p(), n); });
      auto w = run_on(ref_, x, [&](Device& d, float* y) { d.ops().add(y, rw.p(), n); });
      expect_close(g, w, exact, dc.label + " add");
      auto gc = run_on(*dev, zero, [&](Device& d, float* y) {
        d.ops().copy_rows(dx.p() + 1, n, y, n, m, n - 2);
      });
      auto wc = run_on(ref_, zero, [&](Device& d, float* y) {
        d.ops().copy_rows(rx.p() + 1, n, y, n, m, n - 2);
      });
      expect_close(gc, wc, exact, dc.label + " copy_rows");
    }
    // Embedding rows of every type: a plain dequantize, exact.
    for (DType t : cpu::test::matrix_types()) {
      const int64_t cols = dtype_info(t).block_size >= 256 ? 256 : 64;
      const Weights e = cpu::test::random_weights(t, 7, cols, 2);
      const DevWeights de(*dev, e), re(ref_, e);
      const int32_t tok[3] = {6, 0, 3};
      const std::vector<float> init(static_cast<size_t>(3 * cols), 0.0f);
      auto g = run_on(*dev, init, [&](Device& d, float* y) { d.ops().embed(de.m(), tok, 3, y); });
      auto w = run_on(ref_, init, [&](Device& d, float* y) { d.ops().embed(re.m(), tok, 3, y); });
      expect_close(g, w, std::vector<double>(init.size(), 0.0), dc.label + " embed");
    }
    // RoPE, both pair layouts, at scattered positions; plain, and YaRN (factor 8 over 4096
    // positions: with 6 pairs of base 1e4, pair 0 unscaled, 1-4 blended, 5 interpolated).
    for (RopeKind rk : {RopeKind::Normal, RopeKind::NeoX}) {
      for (bool yarn : {false, true}) {
        RopeParams p{16, 12, 10000.0f, 1.0f, rk};
        if (yarn) {
          p.freq_scale = 0.125f;
          p.yarn = RopeYarn{1.0f, 1.0f, 32.0f, 1.0f, 4096};
        }
        const int32_t pos[3] = {0, 1000, 7};
        std::vector<float> q = cpu::test::gaussian(m * 5 * 16, 3);
        std::vector<double> rt(q.size(), 16 * kU * 4 * (yarn ? 1.25 : 1.0));  // |mscale| 1.21
        auto g = run_on(*dev, q, [&](Device& d, float* y) { d.ops().rope(p, y, m, 5, pos); });
        auto w = run_on(ref_, q, [&](Device& d, float* y) { d.ops().rope(p, y, m, 5, pos); });
        expect_close(g, w, rt, dc.label + (yarn ? " rope yarn" : " rope"));
        if (yarn) {
          // Not the linear rotation: token 1's pair 0 (position 1000) keeps its unscaled angle.
          RopeParams lin = p;
          lin.yarn = {};
          auto l = run_on(ref_, q, [&](Device& d, float* y) { d.ops().rope(lin, y, m, 5, pos); });
          EXPECT_GT(std::fabs(l[80] - w[80]), 1e-3) << dc.label;
          // The ramp's ends unrounded (gpt-oss): the same on the device, and not the rounded.
          RopeParams exact = p;
          exact.yarn.truncate = false;
          auto ge = run_on(*dev, q, [&](Device& d, float* y) { d.ops().rope(exact, y, m, 5, pos); });
          auto we = run_on(ref_, q, [&](Device& d, float* y) { d.ops().rope(exact, y, m, 5, pos); });
          expect_close(ge, we, rt, dc.label + " rope yarn unrounded");
          double differ = 0;
          for (size_t k = 0; k < we.size(); ++k) differ = std::max(differ, static_cast<double>(std::fabs(we[k] - w[k])));
          EXPECT_GT(differ, 1e-3) << dc.label;
        }
      }
    }
  }
}

// The bias broadcast over rows, exact, at sizes on both sides of the CPU device's inline
// threshold (one row per task above it); NaN and Inf in Y propagate per element.
TEST_F(DeviceOps, AddBiasOverRows) {
  for (const DeviceCase& dc : devices()) {
    auto dev = dc.make();
    for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 5}, {3, 80}, {70, 1000}}) {
      std::vector<float> y = cpu::test::gaussian(m * n, 31);
      y[static_cast<size_t>(n / 2)] = std::numeric_limits<float>::quiet_NaN();
      y.back() = -std::numeric_limits<float>::infinity();
      const std::vector<float> b = cpu::test::gaussian(n, 32);
      const DevBuf db(*dev, b), rb(ref_, b);
      auto g = run_on(*dev, y, [&](Device& d, float* out) {
        d.ops().add_bias(out, {db.p(), n}, m, n);
      });
      auto w = run_on(ref_, y, [&](Device& d, float* out) {
        d.ops().add_bias(out, {rb.p(), n}, m, n);
      });
      const std::vector<double> exact(y.size(), 0.0);
      const std::string what =
          dc.label + " add_bias " + std::to_string(m) + "x" + std::to_string(n);
      expect_close(g, w, exact, what);
      std::vector<float> want(y);
      for (size_t i = 0; i < want.size(); ++i) want[i] += b[i % static_cast<size_t>(n)];
      expect_close(w, want, exact, what + " (ref vs y + b)");
    }
  }
}

// The MoE FFN's gather and weighted sum: the same bits on every device (each product and sum
// rounded once, from 0, in the listed order), at sizes on both sides of the CPU device's inline
// threshold; repeated source rows, NaN and Inf in X propagate; a gather copies exactly.
TEST_F(DeviceOps, CombineRowsGathersAndSumsExactly) {
  for (const DeviceCase& dc : devices()) {
    auto dev = dc.make();
    for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 2, 5}, {3, 1, 80}, {40, 4, 1000}}) {
      const int64_t n_src = m * k + 3;
      std::vector<float> x = cpu::test::gaussian(n_src * n, 41);
      x[static_cast<size_t>(n + 2)] = std::numeric_limits<float>::quiet_NaN();
      x[static_cast<size_t>(2 * n)] = std::numeric_limits<float>::infinity();
      x[static_cast<size_t>(3)] = -0.0f;
      std::vector<int32_t> rows(static_cast<size_t>(m * k));
      std::vector<float> w(rows.size());
      for (size_t s = 0; s < rows.size(); ++s) {
        rows[s] = static_cast<int32_t>((s * 7 + 2) % static_cast<size_t>(n_src));
        w[s] = 0.25f + 0.5f * static_cast<float>(s % 3) - 0.1f * static_cast<float>(s % 5);
      }
      rows[0] = rows.size() > 1 ? rows[1] : rows[0];  // a source row used twice
      const DevBuf dx(*dev, x), rx(ref_, x);
      const std::vector<float> init(static_cast<size_t>(m * n), -7.0f);
      const std::vector<double> exact(init.size(), 0.0);
      const std::string what = dc.label + " combine_rows " + std::to_string(m) + "x" +
                               std::to_string(k) + "x" + std::to_string(n);
      auto g = run_on(*dev, init, [&](Device& d, float* y) {
        d.ops().combine_rows(dx.p(), n, rows.data(), w.data(), m, k, y);
      });
      auto r = run_on(ref_, init, [&](Device& d, float* y) {
        d.ops().combine_rows(rx.p(), n, rows.data(), w.data(), m, k, y);
      });
      expect_close(g, r, exact, what);
      // The reference is the plain rounded sum.
      std::vector<float> want(init.size(), 0.0f);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < k; ++j)
          for (int64_t c = 0; c < n; ++c) {
            const size_t s = static_cast<size_t>(i * k + j);
            const volatile float p = w[s] * x[static_cast<size_t>(rows[s] * n + c)];  // not fused
            want[static_cast<size_t>(i * n + c)] = want[static_cast<size_t>(i * n + c)] + p;
          }
      expect_close(r, want, exact, what + " (ref vs the rounded sum)");
      // A gather: the first m sources of the list, bit for bit (-0 stays -0).
      auto gg = run_on(*dev, init, [&](Device& d, float* y) {
        d.ops().combine_rows(dx.p(), n, rows.data(), nullptr, m, 1, y);
      });
      for (int64_t i = 0; i < m; ++i)
        for (int64_t c = 0; c < n; ++c)
          ASSERT_TRUE(Guarded::same_bits(gg[static_cast<size_t>(i * n + c)],
                                         x[static_cast<size_t>(rows[static_cast<size_t>(i)] * n + c)]))
              << what << " gather [" << i << ", " << c << "]";
    }
  }
}

TEST_F(DeviceOps, KvStoreAndAttentionOverCellLists) {
  for (const DeviceCase& dc : devices()) {
    auto dev = dc.make();
    const AttnParams p{4, 2, 16, 0.25f};
    const int64_t n_ctx = 12, m = 3, kv_elems = p.n_head_kv * n_ctx * p.head_dim;
    // Head-major layout, as the KV cache stores it.
    auto make_kv = [&](Device& d, std::vector<Buffer>& keep) {
      keep.push_back(d.alloc(kv_elems * 2 * sizeof(uint16_t), "kv").value());
      auto* base = keep.back().as<uint16_t>();
      return KvLayer{base, base + kv_elems, n_ctx * p.head_dim, p.head_dim};
    };
    std::vector<Buffer> dkeep, rkeep;
    const KvLayer dkv = make_kv(*dev, dkeep), rkv = make_kv(ref_, rkeep);
    // Fill every cell through store_kv (cells 0..11 in two batches), then attend.
    for (int32_t c0 : {0, 6}) {
      const std::vector<float> K = cpu::test::gaussian(6 * p.n_embd_kv(), 30 + c0);
      const std::vector<float> V = cpu::test::gaussian(6 * p.n_embd_kv(), 40 + c0);
      const DevBuf dK(*dev, K), dV(*dev, V), rK(ref_, K), rV(ref_, V);
      std::vector<int32_t> cells(6);
      std::iota(cells.begin(), cells.end(), c0);
      dev->ops().store_kv(p, dK.p(), dV.p(), 6, dkv, cells.data());
      ref_.ops().store_kv(p, rK.p(), rV.p(), 6, rkv, cells.data());
    }
    std::vector<uint16_t> dk(static_cast<size_t>(2 * kv_elems)), rk(dk.size());
    dev->sync_all();
    dev->download(dk.data(), dkv.k, dk.size() * 2);
    ref_.download(rk.data(), rkv.k, rk.size() * 2);
    EXPECT_EQ(dk, rk) << dc.label << " store_kv";
    const std::vector<float> Q = cpu::test::gaussian(m * p.n_embd_q(), 50);
    const DevBuf dQ(*dev, Q), rQ(ref_, Q);
    const std::vector<int32_t> pos = {3, 11, 5}, cell = {3, 11, 5};
    const std::vector<int64_t> len = {4, 12, 3}, begin = {0, 0, 12};
    std::vector<int32_t> lists(12);
    std::iota(lists.begin(), lists.end(), 0);
    lists.insert(lists.end(), {9, 2, 5});  // token 2 attends a scattered list
    const std::vector<float> zero(Q.size(), 0.0f);
    std::vector<double> tol(Q.size(), 64 * kU * 4);
    for (bool with_lists : {false, true}) {
      // Without lists: token i attends cells 0 .. len[i] - 1.
      std::vector<int64_t> l = len;
      if (!with_lists) l = {4, 12, 6};
      const KvBatch b{pos.data(), cell.data(), with_lists ? lists.data() : nullptr,
                      with_lists ? begin.data() : nullptr, l.data()};
      auto g = run_on(*dev, zero,
                      [&](Device& d, float* y) { d.ops().attention(p, dQ.p(), m, dkv, b, y); });
      auto w = run_on(ref_, zero,
                      [&](Device& d, float* y) { d.ops().attention(p, rQ.p(), m, rkv, b, y); });
      expect_close(g, w, tol, dc.label + (with_lists ? " attention (lists)" : " attention"));
    }
  }
}

// Q8_0 / Q4_0 keys and values (llama.cpp's -ctk/-ctv): store_kv writes the reference's blocks
// byte for byte, and attention over them (contiguous and listed cells) matches the reference
// over the same bytes, on every device (the cuda device's kernels too: hd_kv.h).
TEST_F(DeviceOps, QuantizedKvStoreAndAttention) {
  for (const DeviceCase& dc : devices()) {
    auto dev = dc.make();
    for (DType t : {DType::Q8_0, DType::Q4_0})  // every device stores these
      EXPECT_TRUE(dev->supports(Op::Attention, t) && dev->supports(Op::StoreKv, t)) << dc.label;
    EXPECT_FALSE(dev->supports(Op::Attention, DType::Q5_1)) << dc.label;
    for (auto [kt, vt] : {std::pair{DType::Q8_0, DType::Q8_0}, std::pair{DType::Q4_0, DType::Q4_0},
                          std::pair{DType::Q8_0, DType::F16}}) {
      if (!dev->supports(Op::Attention, kt) || !dev->supports(Op::Attention, vt) ||
          !dev->supports(Op::StoreKv, kt) || !dev->supports(Op::StoreKv, vt))
        continue;
      const std::string what = dc.label + " " + std::string(dtype_name(kt)) + "/" +
                               std::string(dtype_name(vt));
      const AttnParams p{4, 2, 64, 0.125f};
      const int64_t n_ctx = 12, m = 3, kv_elems = p.n_head_kv * n_ctx * p.head_dim;
      const size_t kb = row_bytes(kt, kv_elems), vb = row_bytes(vt, kv_elems);
      auto make_kv = [&](Device& d, std::vector<Buffer>& keep) {
        keep.push_back(d.alloc(kb, "k").value());
        keep.push_back(d.alloc(vb, "v").value());
        KvLayer kv{keep[keep.size() - 2].as<uint16_t>(), keep.back().as<uint16_t>(),
                   n_ctx * p.head_dim, p.head_dim};
        kv.k_type = kt;
        kv.v_type = vt;
        return kv;
      };
      std::vector<Buffer> dkeep, rkeep;
      const KvLayer dkv = make_kv(*dev, dkeep), rkv = make_kv(ref_, rkeep);
      for (int32_t c0 : {0, 6}) {
        const std::vector<float> K = cpu::test::gaussian(6 * p.n_embd_kv(), 130 + c0);
        const std::vector<float> V = cpu::test::gaussian(6 * p.n_embd_kv(), 140 + c0);
        const DevBuf dK(*dev, K), dV(*dev, V), rK(ref_, K), rV(ref_, V);
        std::vector<int32_t> cells(6);
        std::iota(cells.begin(), cells.end(), c0);
        dev->ops().store_kv(p, dK.p(), dV.p(), 6, dkv, cells.data());
        ref_.ops().store_kv(p, rK.p(), rV.p(), 6, rkv, cells.data());
      }
      for (auto [dp, rp, n] : {std::tuple{dkv.k, rkv.k, kb}, std::tuple{dkv.v, rkv.v, vb}}) {
        std::vector<uint8_t> d(n), r(n);
        dev->sync_all();
        dev->download(d.data(), dp, n);
        ref_.download(r.data(), rp, n);
        EXPECT_EQ(d, r) << what << " store_kv";
      }
      const std::vector<float> Q = cpu::test::gaussian(m * p.n_embd_q(), 150);
      const DevBuf dQ(*dev, Q), rQ(ref_, Q);
      const std::vector<int32_t> pos = {3, 11, 5}, cell = {3, 11, 5};
      const std::vector<int64_t> len = {4, 12, 3}, begin = {0, 0, 12};
      std::vector<int32_t> lists(12);
      std::iota(lists.begin(), lists.end(), 0);
      lists.insert(lists.end(), {9, 2, 5});
      const std::vector<float> zero(Q.size(), 0.0f);
      std::vector<double> tol(Q.size(), (p.head_dim + 64) * kU * 8);
      for (bool with_lists : {false, true}) {
        std::vector<int64_t> l = len;
        if (!with_lists) l = {4, 12, 6};
        const KvBatch b{pos.data(), cell.data(), with_lists ? lists.data() : nullptr,
                        with_lists ? begin.data() : nullptr, l.data()};
        auto g = run_on(*dev, zero,
                        [&](Device& d, float* y) { d.ops().attention(p, dQ.p(), m, dkv, b, y); });
        auto w = run_on(ref_, zero,
                        [&](Device& d, float* y) { d.ops().attention(p, rQ.p(), m, rkv, b, y); });
        expect_close(g, w, tol, what + (with_lists ? " attention (lists)" : " attention"));
      }
    }
  }
}

// Lists long enough that the GPU splits them over cells (chunks of 256, combined in order):
// a contiguous list and a scattered one, against the reference; twice on the device, equal
// bits (no order depends on timing).
TEST_F(DeviceOps, AttentionOverLongListsIsSplitAndDeterministic) {
  for (const DeviceCase& dc : devices()) {
    auto dev = dc.make();
    const AttnParams p{4, 2, 64, 0.125f};
    const int64_t n_ctx = 700, kv_elems = p.n_head_kv * n_ctx * p.head_dim;
    const auto make_kv = [&](Device& d, std::vector<Buffer>& keep, const std::vector<float>& K,
                             const std::vector<float>& V) {
      keep.push_back(d.alloc(kv_elems * 2 * sizeof(uint16_t), "kv").value());
      auto* base = keep.back().as<uint16_t>();
      const KvLayer kv{base, base + kv_elems, n_ctx * p.head_dim, p.head_dim};
      const DevBuf dK(d, K), dV(d, V);
      std::vector<int32_t> cells(static_cast<size_t>(n_ctx));
      std::iota(cells.begin(), cells.end(), 0);
      d.ops().store_kv(p, dK.p(), dV.p(), n_ctx, kv, cells.data());
      d.sync_all();
      return kv;
    };
    const std::vector<float> K = cpu::test::gaussian(n_ctx * p.n_embd_kv(), 71);
    const std::vector<float> V = cpu::test::gaussian(n_ctx * p.n_embd_kv(), 72);
    std::vector<Buffer> dkeep, rkeep;
    const KvLayer dkv = make_kv(*dev, dkeep, K, V), rkv = make_kv(ref_, rkeep, K, V);
    const int64_t m = 2;
    const std::vector<float> Q = cpu::test::gaussian(m * p.n_embd_q(), 73);
    const DevBuf dQ(*dev, Q), rQ(ref_, Q);
    std::vector<int32_t> lists(static_cast<size_t>(n_ctx));
    std::iota(lists.begin(), lists.end(), 0);
    for (int32_t c = 5; c < n_ctx; c += 7) lists.push_back(c);  // token 1: every 7th cell
    const std::vector<int32_t> pos = {699, 699}, cell = {699, 698};
    const std::vector<int64_t> begin = {0, n_ctx}, len = {n_ctx, static_cast<int64_t>(lists.size()) - n_ctx};
    const std::vector<float> zero(Q.size(), 0.0f);
    const std::vector<double> tol(Q.size(), (n_ctx / 4.0 + 64) * kU * 4);
    // Attention sinks (gpt-oss): one logit per head, from one that takes most of the mass to
    // one that takes none.
    const std::vector<float> sinks = {0.5f, -1.0f, 6.0f, -30.0f};
    const DevBuf dS(*dev, sinks), rS(ref_, sinks);
    for (bool with_lists : {false, true}) {
      std::vector<int64_t> l = len;
      if (!with_lists) l = {n_ctx, 300};
      const KvBatch b{pos.data(), cell.data(), with_lists ? lists.data() : nullptr,
                      with_lists ? begin.data() : nullptr, l.data()};
      std::vector<float> plain;
      for (bool with_sinks : {false, true}) {
        const auto op = [&](const DevBuf& q, const KvLayer& kv, const DevBuf& s) {
          AttnParams ps = p;
          if (with_sinks) ps.sinks = s.p();
          return [&, ps, qp = q.p(), kv](Device& d, float* y) { d.ops().attention(ps, qp, m, kv, b, y); };
        };
        auto g = run_on(*dev, zero, op(dQ, dkv, dS));
        auto g2 = run_on(*dev, zero, op(dQ, dkv, dS));
        auto w = run_on(ref_, zero, op(rQ, rkv, rS));
        const std::string what = dc.label + (with_lists ? " long attention (lists)" : " long attention") +
                                 (with_sinks ? " with sinks" : "");
        expect_close(g, w, tol, what);
        EXPECT_EQ(std::memcmp(g.data(), g2.data(), g.size() * sizeof(float)), 0) << what << ": not deterministic";
        if (!with_sinks) {
          plain = w;
          continue;
        }
        // A sink only rescales its head: out = out_without * L / (L + exp(sink)), one factor per
        // (token, head), below 1, ~1 for the sink of -30.
        for (int64_t i = 0; i < m; ++i)
          for (int64_t h = 0; h < p.n_head; ++h) {
            const size_t at = static_cast<size_t>((i * p.n_head + h) * p.head_dim);
            const double f = w[at] / plain[at];
            if (h == 3) {
              EXPECT_NEAR(f, 1.0, 1e-6) << what;
            } else {
              EXPECT_LT(f, 1.0) << what << " head " << h;
            }
            for (int64_t d = 1; d < p.head_dim; ++d)
              EXPECT_NEAR(w[at + d], plain[at + d] * f, 1e-5 * std::fabs(plain[at + d]) + 1e-7) << what << " head " << h;
          }
      }
    }
  }
}

// Host bytes in device memory, and back.
template <typename T>
Buffer upload_vec(Device& d, const std::vector<T>& v) {
  Buffer b = d.alloc(std::max<size_t>(v.size(), 1) * sizeof(T), "test array").value();
  if (!v.empty()) d.upload(b.data(), v.data(), v.size() * sizeof(T));
  return b;
}
template <typename T>
std::vector<T> download_vec(Device& d, const Buffer& b, size_t n) {
  std::vector<T> v(n);
  d.sync_all();
  if (n > 0) d.download(v.data(), b.data(), n * sizeof(T));
  return v;
}

TEST_F(DeviceOps, ThresholdMaskAndCompactRowsOnEveryDevice) {
  for (const DeviceCase& dc : devices()) {
    auto dev = dc.make();
    for (int64_t n : {1, 31, 32, 33, 70}) {
      const int64_t m = 3, words = mask_words(n);
      std::vector<float> x = cpu::test::gaussian(m * n, 60 + static_cast<uint32_t>(n));
      x[0] = 0.25f;  // exactly at the threshold: flagged (>=)
      const float thr = 0.25f;
      std::vector<uint32_t> want(static_cast<size_t>(m * words), 0);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
          if (x[static_cast<size_t>(i * n + j)] >= thr)
            want[static_cast<size_t>(i * words + j / 32)] |= 1u << (j % 32);
      const DevBuf dx(*dev, x);
      Buffer bits = dev->alloc(want.size() * 4, "bits").value();
      dev->ops().threshold_mask(dx.p(), m, n, thr, bits.as<uint32_t>());
      EXPECT_EQ(download_vec<uint32_t>(*dev, bits, want.size()), want) << dc.label << " n=" << n;
      // The flagged entries among every third id (and the last), as local positions.
      std::vector<int32_t> ids;
      for (int32_t j = 0; j < n; j += 3) ids.push_back(j);
      if (ids.back() != n - 1) ids.push_back(static_cast<int32_t>(n - 1));
      std::vector<int32_t> wi;
      std::vector<int64_t> wo = {0};
      for (int64_t i = 0; i < m; ++i) {
        for (size_t k = 0; k < ids.size(); ++k)
          if (x[static_cast<size_t>(i * n + ids[k])] >= thr) wi.push_back(static_cast<int32_t>(k));
        wo.push_back(static_cast<int64_t>(wi.size()));
      }
      Buffer did = upload_vec(*dev, ids);
      Buffer idx = dev->alloc(m * ids.size() * 4, "idx").value();
      Buffer off = dev->alloc((m + 1) * 8, "offsets").value();
      dev->ops().compact_rows(bits.as<uint32_t>(), m, n, did.as<int32_t>(),
                              static_cast<int64_t>(ids.size()), idx.as<int32_t>(),
                              off.as<int64_t>());
      const auto got_off = download_vec<int64_t>(*dev, off, static_cast<size_t>(m + 1));
      EXPECT_EQ(got_off, wo) << dc.label << " n=" << n;
      EXPECT_EQ(download_vec<int32_t>(*dev, idx, wi.size()), wi) << dc.label << " n=" << n;
    }
  }
}

// ffn_rows on every device and weight type against the reference device, for the three FFN
// kinds, with lists that skip rows, list nothing for one token, and meet gates <= 0.
TEST_F(DeviceOps, FfnRowsOnEveryTypeAndDevice) {
  for (const DeviceCase& dc : devices()) {
    auto dev = dc.make();
    for (DType t : cpu::test::matrix_types()) {
      const int64_t cols = dtype_info(t).block_size >= 256 ? 256 : 64, rows = 45, m = 3;
      const Weights g = cpu::test::random_weights(t, rows, cols, 21);
      const Weights u = cpu::test::random_weights(t, rows, cols, 22);
      const Weights d = cpu::test::random_weights(t, rows, cols, 23);
      const DevWeights dg(*dev, g), du(*dev, u), dd(*dev, d), rg(ref_, g), ru(ref_, u),
          rd(ref_, d);
      const std::vector<float> x = cpu::test::gaussian(m * cols, 24);
      std::vector<int32_t> idx;
      std::vector<int64_t> off = {0};
      for (int64_t i = 0; i < m; ++i) {
        if (i != 1)  // token 1 lists nothing
          for (int32_t r = static_cast<int32_t>(i); r < rows; r += 2) idx.push_back(r);
        off.push_back(static_cast<int64_t>(idx.size()));
      }
      // Tolerance per output column: every listed neuron's a bounded with the dot products'
      // error bounds (a gate near zero may be kept on one device and dropped on the other).
      const auto tolerance = [&](FfnKind kind) {
        std::vector<double> tol(static_cast<size_t>(m * cols), 0.0);
        for (int64_t i = 0; i < m; ++i) {
          const float* xi = x.data() + i * cols;
          for (int64_t k = off[static_cast<size_t>(i)]; k < off[static_cast<size_t>(i) + 1]; ++k) {
            const int64_t r = idx[static_cast<size_t>(k)];
            double gv = 0, uv = 0;
            for (int64_t c = 0; c < cols; ++c) {
              gv += static_cast<double>(g.dequant[static_cast<size_t>(r * cols + c)]) * xi[c];
              uv += static_cast<double>(u.dequant[static_cast<size_t>(r * cols + c)]) * xi[c];
            }
            const double tg = linear_tol(g, dc.act_quant, r, xi), tu = linear_tol(u, dc.act_quant, r, xi);
            double a = std::fabs(uv) + tu, da = tu;
            if (kind != FfnKind::Plain) {
              a *= std::fabs(gv) + tg;
              da = tg * (std::fabs(uv) + tu) + tu * (std::fabs(gv) + tg) + 4 * kU * a;
            }
            for (int64_t c = 0; c < cols; ++c) {
              const double dm = d.mag[static_cast<size_t>(r * cols + c)];
              tol[static_cast<size_t>(i * cols + c)] += da * dm + (rows / 4.0 + 24) * kU * a * dm;
            }
          }
        }
        return tol;
      };
      for (FfnKind kind : {FfnKind::Gated, FfnKind::GatedBoth, FfnKind::Plain}) {
        const std::string what = dc.label + " " + std::string(dtype_info(t).name) + " kind " +
                                 std::to_string(static_cast<int>(kind));
        const auto run = [&](Device& dv, const DevWeights& G, const DevWeights& U,
                             const DevWeights& D) {
          const FfnRows w{kind == FfnKind::Plain ? Matrix{} : G.m(), U.m(), D.m()};
          Buffer bi = upload_vec(dv, idx), bo = upload_vec(dv, off);
          Buffer work = dv.alloc(dv.ops().ffn_rows_work_bytes(m, rows, cols), "work").value();
          const DevBuf dx(dv, x);
          return run_on(dv, std::vector<float>(static_cast<size_t>(m * cols), 7.0f),
                        [&](Device& dev2, float* y) {
                          dev2.ops().ffn_rows(kind, w, dx.p(), m, bi.as<int32_t>(),
                                              bo.as<int64_t>(), work.data(), y);
                        });
        };
        // The definition, in double over the dequantized weights (independent of the host
        // algorithm the cpu, ref and sim devices share).
        std::vector<float> want(static_cast<size_t>(m * cols), 0.0f);
        for (int64_t i = 0; i < m; ++i) {
          std::vector<double> y(static_cast<size_t>(cols), 0.0);
          for (int64_t k = off[static_cast<size_t>(i)]; k < off[static_cast<size_t>(i) + 1]; ++k) {
            const auto r = static_cast<size_t>(idx[static_cast<size_t>(k)]);
            double gv = 0, uv = 0;
            for (int64_t c = 0; c < cols; ++c) {
              const auto at = r * static_cast<size_t>(cols) + static_cast<size_t>(c);
              gv += static_cast<double>(g.dequant[at]) * x[static_cast<size_t>(i * cols + c)];
              uv += static_cast<double>(u.dequant[at]) * x[static_cast<size_t>(i * cols + c)];
            }
            const double a = kind == FfnKind::Plain       ? std::max(uv, 0.0)
                             : kind == FfnKind::GatedBoth ? std::max(gv, 0.0) * std::max(uv, 0.0)
                                                          : std::max(gv, 0.0) * uv;
            for (int64_t c = 0; c < cols; ++c)
              y[static_cast<size_t>(c)] += a * d.dequant[r * static_cast<size_t>(cols) + static_cast<size_t>(c)];
          }
          for (int64_t c = 0; c < cols; ++c)
            want[static_cast<size_t>(i * cols + c)] = static_cast<float>(y[static_cast<size_t>(c)]);
        }
        const std::vector<double> tol = tolerance(kind);
        expect_close(run(ref_, rg, ru, rd), want, tol, what + " ffn_rows (ref)");
        const auto got = run(*dev, dg, du, dd);
        expect_close(got, want, tol, what + " ffn_rows");
        for (int64_t c = 0; c < cols; ++c)  // the empty list gives zeros
          EXPECT_EQ(got[static_cast<size_t>(cols + c)], 0.0f) << what;
      }
    }
  }
}

TEST_F(DeviceOps, SupportsAndMemoryInfo) {
  for (const DeviceCase& dc : devices()) {
    auto dev = dc.make();
    EXPECT_TRUE(dev->supports(Op::Linear, DType::Q4_0)) << dc.label;
    EXPECT_FALSE(dev->supports(Op::Norm, DType::Q4_0)) << dc.label;
    const MemoryInfo before = dev->memory();
    {
      auto b = dev->alloc(1 << 20, "one MiB").value();
      EXPECT_GE(dev->memory().used, before.used + (1u << 20)) << dc.label;
    }
    EXPECT_EQ(dev->memory().used, before.used) << dc.label;
    EXPECT_LE(dev->memory().budget, dev->memory().capacity) << dc.label;
  }
}

}  // namespace
}  // namespace pi::backend
