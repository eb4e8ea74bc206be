// The tests' main: GoogleTest's, after the one switch a test run takes from the environment,
// PI_KERNELS_ISA=scalar|avx2|... (the CPU kernels of a lower ISA: scripts/test-sanitize.sh
// runs the suite once per ISA), as the CLI, the C API and Python take it.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/cpu/kernels.h"

int main(int argc, char** argv) {
  if (const char* isa = std::getenv("PI_KERNELS_ISA"); isa != nullptr && *isa != '\0') {
    if (const std::string why = pi::cpu::set_default_isa(isa); !why.empty()) std::fprintf(stderr, "PI_KERNELS_ISA=%s\n", why.c_str());
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
