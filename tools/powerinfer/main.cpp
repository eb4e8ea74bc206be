// The `powerinfer` command-line program: one binary, one subcommand per tool.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "commands.h"
#include "core/log.h"
#include "llama_flags.h"
#include "powerinfer/cpu.h"

int main(int argc, char** argv) {
  // PI_KERNELS_ISA=scalar|avx2|...: the CPU kernels of a lower ISA (tests, benchmarks).
  if (const char* isa = std::getenv("PI_KERNELS_ISA"); isa != nullptr && *isa != '\0') {
    if (const std::string why = pi::set_cpu_isa(isa); !why.empty()) std::fprintf(stderr, "PI_KERNELS_ISA=%s\n", why.c_str());
  }
  CLI::App app{"powerinfer: fast local LLM inference that exploits activation sparsity"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "powerinfer 0.1.0");
  bool verbose = false, quiet = false;
  app.add_flag("-v,--verbose", verbose, "Log debug messages");
  app.add_flag("-q,--quiet", quiet, "Log only errors (also --log-disable, anywhere)");

  std::map<std::string, pi::cli::Runner> runners;
  runners["inspect"] = pi::cli::add_inspect(app);
  runners["run"] = pi::cli::add_run(app);
  runners["quantize"] = pi::cli::add_quantize(app);
  runners["synth"] = pi::cli::add_synth(app);
  runners["bench"] = pi::cli::add_bench(app);
  runners["perplexity"] = pi::cli::add_perplexity(app);
  runners["batched"] = pi::cli::add_batched(app);
  runners["batched-bench"] = pi::cli::add_batched_bench(app);
  runners["devices"] = pi::cli::add_devices(app);
  runners["profile"] = pi::cli::add_profile(app);
  runners["calibrate"] = pi::cli::add_calibrate(app);
  runners["plan"] = pi::cli::add_plan(app);
  runners["embed"] = pi::cli::add_embed(app);
#ifdef PI_HAVE_SERVER
  runners["serve"] = pi::cli::add_serve(app);
#else
  // A build without the server (-DPI_SERVER=OFF) says so instead of "not expected: serve".
  CLI::App* serve = app.add_subcommand("serve", "(not in this build: configured with -DPI_SERVER=OFF)");
  serve->allow_extras();
  serve->prefix_command();
  runners["serve"] = [] {
    std::fprintf(stderr, "error: this powerinfer was built without the server (-DPI_SERVER=OFF)\n");
    return 1;
  };
#endif

  bool log_disable = false;
  auto normalized = pi::cli::normalize_args(std::vector<std::string>(argv, argv + argc),
                                            &log_disable);
  if (!normalized.ok()) {
    pi::log_error("%s", normalized.error().message.c_str());
    return 1;
  }
  try {
    std::vector<std::string>& args = *normalized;
    std::vector<char*> ptrs;
    for (std::string& a : args) ptrs.push_back(a.data());
    app.parse(static_cast<int>(ptrs.size()), ptrs.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (verbose) pi::set_log_level(pi::LogLevel::Debug);
  if (quiet || log_disable) pi::set_log_level(pi::LogLevel::Error);
  // The subcommands return errors as values; an exception reaching here is a bug, reported
  // as one line rather than an abort.
  try {
    for (CLI::App* sub : app.get_subcommands()) {
      auto it = runners.find(sub->get_name());
      if (it != runners.end()) return it->second();
    }
  } catch (const std::exception& e) {
    pi::log_error("powerinfer: internal error: %s", e.what());
  } catch (...) {
    pi::log_error("powerinfer: internal error (unknown exception)");
  }
  return 1;
}
