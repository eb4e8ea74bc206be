// The devices this build has, by name, and how to make one.
//   cpu  the SIMD kernels on the host (default)
//   ref  the scalar reference kernels (the oracle; slow)
//   sim  a simulated GPU: its own memory behind opaque handles, a hard capacity, queue threads
//        that run the CPU kernels (the test device for everything the GPU path does)
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/device.h"
#include "backend/sim/sim_device.h"
#include "kernels/cpu/kernels.h"

namespace pi::backend {

struct DeviceOptions {
  std::string name = "cpu";
  int n_threads = 1;                  // cpu and sim: threads of the kernels
  cpu::Isa isa = cpu::default_isa();  // cpu and sim
  uint64_t budget = 0;                // bytes the device may allocate; 0: all it has
  SimOptions sim;                     // sim only
};

// Whether the device of this name computes in host memory (cpu, ref): no hybrid split there.
bool is_host_device(const std::string& name);

// Fails for an unknown name (listing the known ones) or bad options.
Result<std::unique_ptr<Device>> make_device(const DeviceOptions& o);

struct DeviceEntry {
  std::string name;
  std::string summary;
};
// Every device this build can make, with a one-line summary.
std::vector<DeviceEntry> list_devices();

}  // namespace pi::backend
