// The simulated GPU's own contract: a hard capacity that fails like a GPU out-of-memory,
// poisoned new memory, handles the host cannot dereference, in-order queues with events,
// copy counters and the race checker.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "backend/ops.h"
#include "backend/registry.h"
#include "backend/sim/sim_device.h"

namespace pi::backend {
namespace {

std::unique_ptr<SimDevice> sim(uint64_t capacity = 1 << 20, SimOptions o = {}) {
  o.capacity = capacity;
  auto d = SimDevice::create(o, 2, cpu::default_isa());
  EXPECT_TRUE(d.ok()) << d.error().message;
  return std::move(*d);
}

TEST(SimDevice, CapacityIsHardAndNamesTheRequest) {
  auto d = sim(4096);
  auto a = d->alloc(3000, "first");
  ASSERT_TRUE(a.ok());
  auto b = d->alloc(2000, "second buffer");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find("out of memory allocating second buffer"), std::string::npos)
      << b.error().message;
  EXPECT_NE(b.error().message.find("2000 bytes requested"), std::string::npos);
  EXPECT_NE(b.error().message.find("of 4096 bytes free"), std::string::npos);
  EXPECT_EQ(d->memory().used, 3072u);  // 256-byte granules
  *a = Buffer();                       // freed
  EXPECT_EQ(d->memory().used, 0u);
  EXPECT_EQ(d->memory().peak, 3072u);
  EXPECT_TRUE(d->alloc(4096, "all of it").ok());  // free blocks coalesce
}

TEST(SimDevice, NewMemoryIsPoisonedAndRoundTrips) {
  auto d = sim();
  auto buf = d->alloc(64 * sizeof(float), "x").value();
  std::vector<float> out(64, 1.0f);
  d->download(out.data(), buf.data(), 64 * sizeof(float));
  for (float v : out) EXPECT_TRUE(std::isnan(v));
  std::vector<float> in(64);
  std::iota(in.begin(), in.end(), 0.0f);
  d->upload(buf.data(), in.data(), 64 * sizeof(float));
  d->download(out.data(), buf.data(), 64 * sizeof(float));
  EXPECT_EQ(in, out);
  const SimCounters c = d->counters();
  EXPECT_EQ(c.bytes_in, 256u);
  EXPECT_EQ(c.bytes_out, 512u);
  EXPECT_EQ(c.copies_in, 1u);
  EXPECT_EQ(c.copies_out, 2u);
}

TEST(SimDevice, HostCannotDereferenceDeviceAddresses) {
  auto d = sim();
  auto buf = d->alloc(64, "x").value();
  EXPECT_FALSE(d->host_addressable());
  EXPECT_DEATH({ (void)*static_cast<volatile char*>(buf.data()); }, "");
  // map() is the sanctioned view: after a sync, the host sees the device's bytes.
  const char src[4] = {1, 2, 3, 4};
  d->upload(buf.data(), src, 4);
  EXPECT_EQ(std::memcmp(d->map(buf.data(), 4), src, 4), 0);
  EXPECT_FALSE(d->wrap_host(src, 4).ok());
}

TEST(SimDevice, OpsRunInQueueOrderAndMatchTheCpu) {
  auto d = sim();
  auto y = d->alloc(1000 * sizeof(float), "y").value();
  auto x = d->alloc(1000 * sizeof(float), "x").value();
  std::vector<float> one(1000, 1.0f);
  d->upload(y.data(), one.data(), 4000);
  d->upload(x.data(), one.data(), 4000);
  for (int i = 0; i < 50; ++i) d->ops().add(y.as<float>(), x.as<float>(), 1000);  // queued
  // map() syncs every queue: the 50 adds have run, in order.
  const float* mapped = static_cast<const float*>(d->map(y.data(), 4000));
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(mapped[i], 51.0f);
  EXPECT_EQ(d->counters().ops, 50u);
  EXPECT_TRUE(d->hazards().empty());
}

TEST(SimDevice, AnEventOrdersTheQueuesAndSilencesTheChecker) {
  auto d = sim();
  auto y = d->alloc(4096 * sizeof(float), "y").value();
  auto x = d->alloc(4096 * sizeof(float), "x").value();
  std::vector<float> v(4096, 2.0f), out(4096);
  d->upload(y.data(), v.data(), v.size() * 4);
  // Copy in on the copy queue, then compute waits for it by event, then copy out waits for the
  // compute by event: no hazards, and the result is the ordered one.
  d->copy_in(kCopy, x.data(), v.data(), v.size() * 4);
  d->wait(kCompute, d->record(kCopy));
  d->ops().add(y.as<float>(), x.as<float>(), 4096);
  d->wait(kCopy, d->record(kCompute));
  d->copy_out(kCopy, out.data(), y.data(), out.size() * 4);
  d->sync(kCopy);
  for (float f : out) ASSERT_EQ(f, 4.0f);
  EXPECT_TRUE(d->hazards().empty()) << d->hazards().front();
}

// Tests named Hazard* race on purpose (the checker must see it): the ThreadSanitizer stage of
// .ci/run leaves them out.
TEST(SimDevice, HazardComputeReadingACopyInFlight) {
  auto d = sim();
  auto y = d->alloc(256, "y").value();
  auto x = d->alloc(256, "staging x").value();
  std::vector<float> v(64, 1.0f);
  d->upload(y.data(), v.data(), 256);
  d->copy_in(kCopy, x.data(), v.data(), 256);  // no event recorded
  d->ops().add(y.as<float>(), x.as<float>(), 64);
  d->sync_all();
  ASSERT_EQ(d->hazards().size(), 1u);
  EXPECT_NE(d->hazards()[0].find(
                "add on queue compute reads buffer 'staging x' while queue copy writes it"),
            std::string::npos)
      << d->hazards()[0];
}

TEST(SimDevice, BudgetOptionAndRegistry) {
  DeviceOptions o;
  o.name = "sim";
  o.budget = 1 << 16;
  auto d = make_device(o);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ((*d)->memory().budget, 1u << 16);
  o.name = "gpu9";
  auto bad = make_device(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("unknown device 'gpu9'"), std::string::npos);
  EXPECT_NE(bad.error().message.find("cpu, ref, sim"), std::string::npos);
}

TEST(SimDevice, PinnedHostMemoryIsHostMemory) {
  auto d = sim();
  auto p = d->alloc_host(1024, "staging").value();
  std::memset(p.data(), 7, 1024);  // host-addressable
  EXPECT_EQ(d->pinned_bytes(), 1024u);
  EXPECT_EQ(d->memory().used, 0u);
}

}  // namespace
}  // namespace pi::backend
