// Internal: the portable leaf kernels (scalar_matrix.cpp). Every ISA table may delegate the
// weight types it does not vectorise to these; they read raw f32 activations (DotTask::x).
#pragma once

#include "kernels/cpu/dispatch.h"

namespace pi::cpu::detail {

void scalar_dot(const DotTask& task);
void scalar_axpy(const AxpyTask& task);

}  // namespace pi::cpu::detail
