// `powerinfer devices`: the devices this build has (backend/registry.h), each with its
// description and memory, as --device names them.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <thread>

#include "backend/registry.h"
#include "commands.h"

namespace pi::cli {

Runner add_devices(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("devices", "List the devices --device accepts");
  return [sub] {
    (void)sub;
    for (const backend::DeviceEntry& e : backend::list_devices()) {
      backend::DeviceOptions o;
      o.name = e.name;
      o.n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      auto d = backend::make_device(o);
      std::printf("%-5s %s\n", e.name.c_str(), e.summary.c_str());
      if (d.ok()) {
        const backend::MemoryInfo m = (*d)->memory();
        std::printf("      %s; memory %.1f GiB, budget %.1f GiB\n", (*d)->describe().c_str(),
                    static_cast<double>(m.capacity) / (1 << 30),
                    static_cast<double>(m.budget) / (1 << 30));
      } else {
        std::printf("      unavailable: %s\n", d.error().message.c_str());
      }
    }
    return 0;
  };
}

}  // namespace pi::cli
