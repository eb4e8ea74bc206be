// The devices this build has, by name, and how to make one.
//   cpu  the SIMD kernels on the host (default)
//   ref  the scalar reference kernels (the oracle; slow)
//   sim  a simulated GPU: its own memory behind opaque handles, a hard capacity, queue threads
//        that run the CPU kernels (the test device for everything the GPU path does)
//   cuda an NVIDIA GPU (builds with -DPI_CUDA=ON; backend/cuda/cuda_device.h)
#pragma once

#include <memory>
#include <string>
#include <string_view>
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
  bool repack = true;                 // cpu: transposed Q4_0 as Q4_0_SPLIT where faster (--no-repack)
  // cpu: Q4_0 / Q8_0 / Q4_K matrices only the dense products read in their R16 layouts where
  // faster (cpu::dot_layout; --no-repack).
  // Unlike `repack`, this changes results in the last bits (another order of sums).
  bool dense_repack = true;
  SimOptions sim;                     // sim only
  int gpu_index = 0;                  // cuda: which GPU
};

// The ISA host kernels start from (cpu::default_isa), by name, and a front end's choice of
// another (cpu::set_default_isa: "" when done, else why the best one stays).
std::string cpu_isa_name();
std::string set_cpu_isa(std::string_view name);

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

// Bandwidth of a device's own memory: a device-to-device copy (bytes read plus written per
// second) and a read kernel (bytes read per second), medians of `passes` runs over buffers of
// `bytes`. Devices whose memory is the host's have none (powerinfer bench --probe measures
// the host); an error says so.
struct DeviceBandwidth {
  uint64_t bytes = 0;
  double copy_gbps = 0;
  double read_gbps = 0;
};
Result<DeviceBandwidth> probe_device_memory(Device& d, size_t bytes, int passes);

}  // namespace pi::backend
