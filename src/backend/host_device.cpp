#include "backend/host_device.h"

#include <cstdio>
#include <cstring>

#include "tensor/quant.h"

namespace pi::backend {

HostDevice::HostDevice(uint64_t budget)
    : mem_(budget != 0 ? budget : (physical_memory() != 0 ? physical_memory() : ~uint64_t{0})) {}

MemoryInfo HostDevice::memory() const {
  const uint64_t phys = physical_memory();
  return MemoryInfo{phys != 0 ? phys : mem_.budget(), mem_.budget(), mem_.used(), mem_.peak()};
}

Result<Buffer> HostDevice::alloc(size_t bytes, const char* what) {
  const std::string dev = name();
  auto p = mem_.alloc(bytes, dev.c_str(), what);
  if (!p.ok()) return p.error();
  return Buffer(this, *p, bytes);
}

void HostDevice::release(void* data, size_t) { mem_.release(data); }

void HostDevice::copy_in(QueueId, void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}

void HostDevice::copy_out(QueueId, void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}

CpuDevice::CpuDevice(int n_threads, cpu::Isa isa, uint64_t budget, bool repack, bool dense_repack)
    : HostDevice(budget), pool_(n_threads), ops_(pool_, isa), repack_(repack), dense_repack_(dense_repack) {}

DType cpu_transposed_layout(DType t) { return cpu::axpy_layout(cpu::default_isa(), t); }

DType cpu_dense_layout(DType t) { return cpu::dot_layout(cpu::default_isa(), t, 16); }

DType CpuDevice::transposed_layout(DType t) const { return repack_ ? cpu::axpy_layout(ops_.isa(), t) : t; }

DType CpuDevice::dense_layout(DType t, int64_t rows) const {
  return dense_repack_ ? cpu::dot_layout(ops_.isa(), t, rows) : t;
}

std::string CpuDevice::describe() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "cpu: %s kernels, %d thread%s, %.1f GiB",
                std::string(cpu::isa_name(ops_.isa())).c_str(), pool_.size(),
                pool_.size() == 1 ? "" : "s", static_cast<double>(memory().budget) / (1 << 30));
  return buf;
}

bool CpuDevice::supports(Op op, DType t) const {
  if (is_r16(t)) return op == Op::Linear;  // dense_layout's: dense products only
  return host_kernels_support(op, t);
}

bool host_kernels_support(Op op, DType t) {
  switch (op) {
    case Op::Embed:
    case Op::Linear:
    case Op::LinearT:
    case Op::LinearRows:
    case Op::LinearTRows:
    case Op::FfnRows:
      return dtype_info(t).computable;
    case Op::Mask:
      return true;
    case Op::StoreKv:
    case Op::Attention:  // f32 activations over a cache of a KV type (op_params.h)
      return t == DType::F32 || kv_type_supported(t);
    default:
      return t == DType::F32;
  }
}

}  // namespace pi::backend
