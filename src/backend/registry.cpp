#include "backend/registry.h"

#include <cstdlib>

#include "backend/host_device.h"
#ifdef PI_HAS_CUDA
#include "backend/cuda/cuda_device.h"
#endif

namespace pi::backend {

bool is_host_device(const std::string& name) { return name == "cpu" || name == "ref"; }

namespace {

// "sim:copy_us=20,copy_gbps=25,margin_mib=0" -> the sim's options (the base name is "sim").
Status parse_sim_spec(const std::string& spec, SimOptions& s) {
  size_t at = spec.find(':');
  if (at == std::string::npos) return Status::Ok();
  std::string rest = spec.substr(at + 1);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string item = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    const size_t eq = item.find('=');
    char* end = nullptr;
    const std::string key = item.substr(0, eq);
    const double v = eq == std::string::npos ? 0 : std::strtod(item.c_str() + eq + 1, &end);
    if (eq == std::string::npos || end == item.c_str() + eq + 1 || *end != '\0' || !(v >= 0) ||
        v > 1e12)
      return err("device %s: '%s' is not KEY=NUMBER (copy_us, copy_gbps, margin_mib)", spec.c_str(),
                 item.c_str());
    if (key == "copy_us") s.copy_latency_us = v;
    else if (key == "copy_gbps") s.copy_gbps = v;
    else if (key == "margin_mib") s.runtime_margin = static_cast<uint64_t>(v * 1048576.0);
    else
      return err("device %s: unknown option '%s' (copy_us, copy_gbps, margin_mib)", spec.c_str(),
                 key.c_str());
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Device>> make_device(const DeviceOptions& o) {
  if (o.n_threads < 1)
    return err("device %s: thread count must be >= 1 (got %d)", o.name.c_str(), o.n_threads);
  if (!cpu::isa_available(o.isa))
    return err("device %s: kernel ISA %s is not available here", o.name.c_str(),
               std::string(cpu::isa_name(o.isa)).c_str());
  if (o.name == "cpu") return std::unique_ptr<Device>(new CpuDevice(o.n_threads, o.isa, o.budget, o.repack, o.dense_repack));
  if (o.name == "ref") return std::unique_ptr<Device>(new RefDevice(o.budget));
  if (o.name == "sim" || o.name.rfind("sim:", 0) == 0) {
    SimOptions s = o.sim;
    PI_TRY(parse_sim_spec(o.name, s));
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
       "a simulated GPU: own memory behind opaque handles, hard capacity (--vram-budget), "
       "queue threads running the CPU kernels; the hybrid executor's test device. "
       "sim:copy_us=U,copy_gbps=G,margin_mib=M adds a latency and a bandwidth to every "
       "host<->device copy and a runtime margin"}};
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

std::string cpu_isa_name() { return std::string(cpu::isa_name(cpu::default_isa())); }

std::string set_cpu_isa(std::string_view name) { return cpu::set_default_isa(name); }

}  // namespace pi::backend
