// `powerinfer devices`: the devices this build has (backend/registry.h), each with its
// description and memory, as --device names them. `--probe` measures the bandwidth of one
// device's own memory (a device-to-device copy and a read kernel; the host's is `powerinfer
// bench --probe`).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "backend/registry.h"
#include "commands.h"
#include "core/log.h"

namespace pi::cli {
namespace {

struct DevicesOptions {
  bool probe = false;
  std::string device = "cuda";
  int64_t probe_mib = 1024;
  int probe_passes = 5;
  bool json = false;
};

int probe(const DevicesOptions& o) {
  if (o.probe_mib < 1 || o.probe_mib > (int64_t{1} << 20)) {
    log_error("--probe-mib: %lld is out of range [1, 1048576]", static_cast<long long>(o.probe_mib));
    return 1;
  }
  if (o.probe_passes < 1 || o.probe_passes > 1000) {
    log_error("--probe-passes: %d is out of range [1, 1000]", o.probe_passes);
    return 1;
  }
  backend::DeviceOptions d;
  d.name = o.device;
  auto dev = backend::make_device(d);
  if (!dev.ok()) {
    log_error("%s", dev.error().message.c_str());
    return 1;
  }
  auto p = backend::probe_device_memory(**dev, static_cast<size_t>(o.probe_mib) << 20, o.probe_passes);
  if (!p.ok()) {
    log_error("%s", p.error().message.c_str());
    return 1;
  }
  if (o.json) {
    std::printf(
        "{\"device\": \"%s\", \"describe\": \"%s\", \"bytes\": %llu, \"passes\": %d, "
        "\"copy_gbps\": %.1f, \"read_gbps\": %.1f}\n",
        o.device.c_str(), (*dev)->describe().c_str(), static_cast<unsigned long long>(p->bytes),
        o.probe_passes, p->copy_gbps, p->read_gbps);
  } else {
    std::printf("%s\n", (*dev)->describe().c_str());
    std::printf("device memory: copy %.0f GB/s (bytes read + written), read %.0f GB/s; %.0f MiB, "
                "median of %d passes\n",
                p->copy_gbps, p->read_gbps, static_cast<double>(p->bytes) / 1048576.0,
                o.probe_passes);
  }
  return 0;
}

}  // namespace

Runner add_devices(CLI::App& app) {
  auto o = std::make_shared<DevicesOptions>();
  CLI::App* sub = app.add_subcommand("devices", "List the devices --device accepts");
  sub->add_flag("--probe", o->probe,
                "Measure the bandwidth of one device's own memory (--device) instead of listing");
  sub->add_option("--device", o->device, "The device --probe measures")->capture_default_str();
  sub->add_option("--probe-mib", o->probe_mib, "Size of the probe's buffers, MiB")
      ->capture_default_str();
  sub->add_option("--probe-passes", o->probe_passes, "Timed passes (the median is reported)")
      ->capture_default_str();
  sub->add_flag("--json", o->json, "With --probe: one JSON object");
  return [o] {
    if (o->probe) return probe(*o);
    for (const backend::DeviceEntry& e : backend::list_devices()) {
      backend::DeviceOptions d;
      d.name = e.name;
      d.n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      auto dev = backend::make_device(d);
      std::printf("%-5s %s\n", e.name.c_str(), e.summary.c_str());
      if (dev.ok()) {
        const backend::MemoryInfo m = (*dev)->memory();
        std::printf("      %s; memory %.1f GiB, budget %.1f GiB\n", (*dev)->describe().c_str(),
                    static_cast<double>(m.capacity) / (1 << 30),
                    static_cast<double>(m.budget) / (1 << 30));
      } else {
        std::printf("      unavailable: %s\n", dev.error().message.c_str());
      }
    }
    return 0;
  };
}

}  // namespace pi::cli
