// The cuda device's own contract (in test_backend_cuda, label gpu: each test skips with a
// message without a GPU, except the one that checks the message a missing GPU gives; in
// test_backend_cuda_emu, on the CPU emulation): the exact memory ledger
// against the driver's free memory after a warm-up, budgets, events across the two streams,
// map as a read-only copy, the staging ring wrapping and its reuse of identical arrays, the
// bandwidth probe, and errors as one line.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_device.h"
#include "backend/host_device.h"
#include "backend/registry.h"
#include "tensor/quant.h"

namespace pi::backend {
namespace {

// Under the CPU emulation (test_backend_cuda_emu) the same checks run on smaller sizes.
#ifdef PI_GPU_EMU
constexpr int64_t kScale = 64;
#else
constexpr int64_t kScale = 1;
#endif

bool have_gpu(std::string* why) { return cuda_device_count(why) > 0; }

// Tests that need a GPU: skipped with the runtime's reason when there is none.
class CudaGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!have_gpu(&why)) GTEST_SKIP() << "no CUDA device (" << why << "): gpu test skipped";
  }
};

std::unique_ptr<CudaDevice> make(uint64_t budget = 0, size_t staging = 0) {
  auto d = CudaDevice::create(CudaOptions{0, budget, staging});
  EXPECT_TRUE(d.ok()) << d.error().message;
  return d.ok() ? std::move(*d) : nullptr;
}

TEST(CudaDevice, WithoutAGpuTheRegistrySaysSoInOneLine) {
  std::string why;
  if (have_gpu(&why))
    GTEST_SKIP() << "a GPU is present: the message of its absence is not testable";
  DeviceOptions o;
  o.name = "cuda";
  auto d = make_device(o);
  ASSERT_FALSE(d.ok());
  const std::string& msg = d.error().message;
  EXPECT_EQ(msg.rfind("cuda: no CUDA device (cudaGetDeviceCount: ", 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  bool listed = false;
  for (const DeviceEntry& e : list_devices()) listed = listed || e.name == "cuda";
  EXPECT_TRUE(listed);
}

// Bytes the driver lost since creation against the ledger: setup's own bytes, the footprints
// of every allocation, and the runtime margin. The numbers are printed for the record.
TEST_F(CudaGpu, LedgerCoversWhatTheDriverReportsAfterWarmUp) {
  auto dev = make();
  ASSERT_NE(dev, nullptr);
  std::vector<Buffer> bufs;
  for (size_t b : {size_t{100}, size_t{4096}, size_t{300} << 10, size_t{1} << 20,
                   (size_t{3} << 20) + 1, size_t{64} << 20, size_t{1000}, size_t{513}})
    bufs.push_back(dev->alloc(b, "ledger test").value());
  // Warm-up: every path that loads modules (row kernels, the many-token cuBLAS path).
  const int64_t rows = 256, cols = 512, m = 12;
  std::vector<float> w(static_cast<size_t>(rows * cols)), x(static_cast<size_t>(m * cols), 0.5f);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (float& v : w) v = nd(rng);
  std::vector<uint8_t> q(row_bytes(DType::Q4_0, cols) * rows);
  for (int64_t r = 0; r < rows; ++r)
    ASSERT_TRUE(quantize_row(DType::Q4_0, w.data() + r * cols,
                             q.data() + r * row_bytes(DType::Q4_0, cols), cols)
                    .ok());
  Buffer W = dev->alloc(q.size(), "w").value(), X = dev->alloc(x.size() * 4, "x").value(),
         Y = dev->alloc(static_cast<size_t>(m * rows) * 4, "y").value();
  dev->upload(W.data(), q.data(), q.size());
  dev->upload(X.data(), x.data(), x.size() * 4);
  const Matrix mw{DType::Q4_0, W.as<std::byte>(), rows, cols, "w"};
  for (int64_t mm : {int64_t{1}, m}) dev->ops().linear(mw, X.as<float>(), mm, Y.as<float>());
  dev->sync_all();
  ASSERT_TRUE(dev->status().ok()) << dev->status().error().message;
  const uint64_t now = dev->driver_free().value();
  const uint64_t drop = dev->free_at_creation() - now;
  const uint64_t ledger = dev->own_bytes() + dev->memory().used;
  std::printf(
      "cuda ledger: driver lost %.2f MiB; own %.2f MiB + allocations %.2f MiB = %.2f MiB; "
      "margin %.0f MiB\n",
      drop / 1048576.0, dev->own_bytes() / 1048576.0, dev->memory().used / 1048576.0,
      ledger / 1048576.0, CudaDevice::kRuntimeMargin / 1048576.0);
  EXPECT_LE(drop, ledger + CudaDevice::kRuntimeMargin);
  EXPECT_LE(dev->memory().peak, dev->memory().budget);
  bufs.clear();
  EXPECT_EQ(dev->memory().used, dev->alloc_footprint(q.size()) +
                                    dev->alloc_footprint(x.size() * 4) +
                                    dev->alloc_footprint(static_cast<size_t>(m * rows) * 4));
}

TEST_F(CudaGpu, BudgetsAreHardAndErrorsAreOneLine) {
  auto tiny = CudaDevice::create(CudaOptions{0, 1 << 20});
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.error().message.find("below the device's own working memory"), std::string::npos)
      << tiny.error().message;
  auto dev = make(uint64_t{512} << 20);
  ASSERT_NE(dev, nullptr);
  EXPECT_LE(dev->memory().budget, uint64_t{512} << 20);
  auto big = dev->alloc(size_t{600} << 20, "too much");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.error().message.find("out of memory allocating too much"), std::string::npos);
  EXPECT_EQ(big.error().message.find('\n'), std::string::npos);
  int host = 0;
  EXPECT_FALSE(dev->wrap_host(&host, sizeof host).ok());
  EXPECT_TRUE(dev->status().ok());
}

// A copy on the copy stream, ordered before an op on the compute stream by an event; map
// returns the device's contents and writing to it changes nothing on the device.
TEST_F(CudaGpu, EventsOrderTheStreamsAndMapIsAReadOnlyCopy) {
  auto dev = make();
  ASSERT_NE(dev, nullptr);
  const int64_t n = (int64_t{1} << 22) / kScale;
  std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  std::iota(a.begin(), a.end(), 0.0f);
  std::fill(b.begin(), b.end(), 2.0f);
  Buffer pa = dev->alloc_host(a.size() * 4, "a").value();
  std::memcpy(pa.data(), a.data(), a.size() * 4);
  Buffer A = dev->alloc(a.size() * 4, "A").value(), B = dev->alloc(b.size() * 4, "B").value();
  dev->upload(B.data(), b.data(), b.size() * 4);
  for (int rep = 0; rep < 3; ++rep) {
    dev->copy_in(kCopy, A.data(), pa.data(), a.size() * 4);
    const Event e = dev->record(kCopy);
    dev->wait(kCompute, e);
    dev->ops().add(B.as<float>(), A.as<float>(), n);
    dev->wait(kCompute, Event{});  // a default event is complete
  }
  const auto* host = static_cast<float*>(dev->map(B.data(), b.size() * 4));
  for (int64_t i = 0; i < n; i += 4099)
    ASSERT_EQ(host[i], 2.0f + 3.0f * static_cast<float>(i)) << i;
  static_cast<float*>(dev->map(B.data(), 4))[0] = -1.0f;
  std::vector<float> back(4);
  dev->download(back.data(), B.data(), 16);
  EXPECT_EQ(back[0], 2.0f);
  EXPECT_TRUE(dev->status().ok()) << dev->status().error().message;
}

// Token lists of 40 KB wrap a staging ring of 96 KiB every few calls; contents that change
// every second call under one key must never serve a stale copy (and an unchanged one may be
// served from the ring).
TEST_F(CudaGpu, StagingRingWrapsAndNeverServesStaleArrays) {
  auto dev = make(0, 96 << 10);
  ASSERT_NE(dev, nullptr);
  const int64_t rows = 7, cols = 32, m = 10000;
  std::vector<float> e(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < e.size(); ++i) e[i] = static_cast<float>(i);
  Buffer E = dev->alloc(e.size() * 4, "E").value(),
         X = dev->alloc(static_cast<size_t>(m * cols) * 4, "X").value();
  dev->upload(E.data(), e.data(), e.size() * 4);
  const Matrix me{DType::F32, E.as<std::byte>(), rows, cols, "E"};
  std::vector<int32_t> tok(static_cast<size_t>(m));
  std::vector<float> row(static_cast<size_t>(cols));
  for (int call = 0; call < 9; ++call) {
    for (int64_t i = 0; i < m; ++i)
      tok[static_cast<size_t>(i)] = static_cast<int32_t>((i * 3 + (call / 2)) % rows);
    dev->ops().embed(me, tok.data(), m, X.as<float>());
    tok.assign(tok.size(), -1);  // the op read them before returning
    for (int64_t i : {int64_t{0}, int64_t{1}, m / 2, m - 1}) {
      dev->download(row.data(), X.as<float>() + i * cols, cols * 4);
      const int64_t want = (i * 3 + (call / 2)) % rows;
      ASSERT_EQ(row[0], static_cast<float>(want * cols)) << "call " << call << " token " << i;
    }
  }
  EXPECT_TRUE(dev->status().ok()) << dev->status().error().message;
}

TEST_F(CudaGpu, ProbeMeasuresDeviceMemory) {
  auto dev = make();
  ASSERT_NE(dev, nullptr);
  auto p = dev->probe((size_t{256} << 20) / kScale, 3);
  ASSERT_TRUE(p.ok()) << p.error().message;
  std::printf("cuda probe: copy %.0f GB/s, read %.0f GB/s over %.0f MiB\n", p->copy_gbps,
              p->read_gbps, p->bytes / 1048576.0);
  EXPECT_GT(p->copy_gbps, 0.0);
  EXPECT_GT(p->read_gbps, 0.0);
  EXPECT_EQ(dev->memory().used, 0u);  // the probe's buffers are freed
  CpuDevice cpu(1);
  EXPECT_FALSE(probe_device_memory(cpu, 1 << 20, 1).ok());
}

}  // namespace
}  // namespace pi::backend
