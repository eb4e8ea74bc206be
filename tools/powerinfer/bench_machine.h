// `powerinfer bench`: what the results were measured on (CPU, memory, kernel ISA, load) and
// with which build (compiler, flags, git commit), for the report header.
#pragma once

#include <string>

namespace pi::cli {

struct MachineInfo {
  std::string cpu_model;   // "model name" of /proc/cpuinfo ("unknown" elsewhere)
  std::string cpu_flags;   // the SIMD flags of interest found in /proc/cpuinfo
  int logical_cpus = 0;    // std::thread::hardware_concurrency
  double mem_gib = 0;      // MemTotal of /proc/meminfo
  std::string os;          // uname: sysname release machine
  std::string kernel_isa;  // the ISA the pi::cpu kernels picked (PI_KERNELS_ISA honoured)
  std::string date_utc;    // when the run started, "YYYY-MM-DD HH:MM:SS UTC"
};

struct BuildInfo {
  std::string version;     // powerinfer version
  std::string commit;      // git commit (12 hex digits, "-dirty" suffix), or "unknown"
  std::string compiler;    // CMake compiler id and version
  std::string build_type;  // CMAKE_BUILD_TYPE
  std::string flags;       // CMAKE_CXX_FLAGS + per-config flags + directory compile options
};

MachineInfo read_machine_info();
BuildInfo read_build_info();

// The 1-, 5- and 15-minute load averages (/proc/loadavg; -1 each where unavailable).
struct LoadAverage {
  double m1 = -1, m5 = -1, m15 = -1;
};
LoadAverage read_load_average();

}  // namespace pi::cli
