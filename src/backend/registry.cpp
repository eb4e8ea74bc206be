#include "backend/registry.h"

#include "backend/host_device.h"
#ifdef PI_HAS_CUDA
#include "backend/cuda/cuda_device.h"
#endif

namespace pi::backend {

Result<std::unique_ptr<Device>> make_device(const DeviceOptions& o) {
  if (o.n_threads < 1)
    return err("device %s: thread count must be >= 1 (got %d)", o.name.c_str(), o.n_threads);
  if (!cpu::isa_available(o.isa))
    return err("device %s: kernel ISA %s is not available here", o.name.c_str(),
               std::string(cpu::isa_name(o.isa)).c_str());
  if (o.name == "cpu") return std::unique_ptr<Device>(new CpuDevice(o.n_threads, o.isa, o.budget));
  if (o.name == "ref") return std::unique_ptr<Device>(new RefDevice(o.budget));
  if (o.name == "sim") {
    SimOptions s = o.sim;
    if (o.budget != 0) s.capacity = o.budget;
    auto d = SimDevice::create(s, o.n_threads, o.isa);
    if (!d.ok()) return d.error();
    return std::unique_ptr<Device>(std::move(*d));
  }
#ifdef PI_HAS_CUDA
  if (o.name == "cuda") {
    auto d = CudaDevice::create(CudaOptions{o.gpu_index, o.budget});
    if (!d.ok()) return d.error();
    return std::unique_ptr<Device>(std::move(*d));
  }
#endif
  std::string known;
  for (const DeviceEntry& e : list_devices()) known += (known.empty() ? "" : ", ") + e.name;
  return err("unknown device '%s' (this build has: %s; see powerinfer devices)", o.name.c_str(),
             known.c_str());
}

std::vector<DeviceEntry> list_devices() {
  std::vector<DeviceEntry> out = {
      {"cpu", "the host CPU: SIMD kernels (" + std::string(cpu::isa_name(cpu::default_isa())) +
                  ") over a thread pool (default)"},
      {"ref", "the scalar reference kernels on one thread: the oracle of the op tests (slow)"},
      {"sim",
       "a simulated GPU for tests: own memory behind opaque handles, hard capacity "
       "(--vram-budget), queue threads running the CPU kernels"}};
#ifdef PI_HAS_CUDA
  out.push_back({"cuda", "an NVIDIA GPU through CUDA: its own memory (--vram-budget), two streams, "
                         "the kernels of src/kernels/cuda"});
#endif
  return out;
}

Result<DeviceBandwidth> probe_device_memory(Device& d, size_t bytes, int passes) {
#ifdef PI_HAS_CUDA
  if (auto* c = dynamic_cast<CudaDevice*>(&d); c != nullptr) {
    auto p = c->probe(bytes, passes);
    if (!p.ok()) return p.error();
    return DeviceBandwidth{p->bytes, p->copy_gbps, p->read_gbps};
  }
#endif
  return err("device %s has no probe of its own memory (its memory is the host's or simulated; "
             "powerinfer bench --probe measures the host)",
             d.name().c_str());
}

}  // namespace pi::backend
