// include/powerinfer/cpu.h over the host kernels' default ISA (backend/registry.h).
#include "powerinfer/cpu.h"

#include "backend/registry.h"

namespace pi {

std::string cpu_isa() { return backend::cpu_isa_name(); }

std::string set_cpu_isa(std::string_view name) { return backend::set_cpu_isa(name); }

}  // namespace pi
