#include "bench_machine.h"


#include <cstdio>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "bench_build_info.h"  // generated: PI_BUILD_COMMIT, PI_BUILD_COMPILER, ...
#include "core/os.h"
#include "kernels/cpu/kernels.h"

namespace pi::cli {
namespace {

// The value of the first "key : value" line of a /proc file whose key is `key`.
std::string proc_field(const char* path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string k = line.substr(0, colon);
    while (!k.empty() && (k.back() == ' ' || k.back() == '\t')) k.pop_back();
    if (k != key) continue;
    size_t b = colon + 1;
    while (b < line.size() && line[b] == ' ') ++b;
    return line.substr(b);
  }
  return {};
}

}  // namespace

MachineInfo read_machine_info() {
  MachineInfo m;
  m.cpu_model = proc_field("/proc/cpuinfo", "model name");
  if (m.cpu_model.empty()) m.cpu_model = "unknown";
  {
    std::set<std::string> have;
    std::istringstream flags(proc_field("/proc/cpuinfo", "flags"));
    for (std::string f; flags >> f;) have.insert(f);
    for (const char* want :
         {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16"}) {
      if (have.count(want) == 0) continue;
      if (!m.cpu_flags.empty()) m.cpu_flags += ' ';
      m.cpu_flags += want;
    }
  }
  m.logical_cpus = static_cast<int>(std::thread::hardware_concurrency());
  const std::string mem = proc_field("/proc/meminfo", "MemTotal");  // "24576000 kB"
  if (!mem.empty()) m.mem_gib = std::strtod(mem.c_str(), nullptr) / (1024.0 * 1024.0);
  m.os = os::system_name();
  m.kernel_isa = std::string(cpu::isa_name(cpu::default_isa()));
  const os::UtcTime t = os::utc_time(static_cast<int64_t>(std::time(nullptr)));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02d %02d:%02d:%02d UTC", t.year, t.month, t.day, t.hour, t.minute,
                t.second);
  m.date_utc = buf;
  return m;
}

BuildInfo read_build_info() {
  BuildInfo b;
  b.version = PI_BUILD_VERSION;
  b.commit = PI_BUILD_COMMIT;
  b.compiler = PI_BUILD_COMPILER;
  b.build_type = PI_BUILD_TYPE;
  b.flags = PI_BUILD_FLAGS;
  return b;
}

LoadAverage read_load_average() {
  LoadAverage l;
  if (std::FILE* f = std::fopen("/proc/loadavg", "r"); f != nullptr) {
    if (std::fscanf(f, "%lf %lf %lf", &l.m1, &l.m5, &l.m15) != 3) l = LoadAverage{};
    std::fclose(f);
  }
  return l;
}

}  // namespace pi::cli
