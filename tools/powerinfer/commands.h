// Subcommands of the `powerinfer` CLI. Each registers its flags on a CLI11 subcommand and
// returns a callback that runs it and yields the process exit code.
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace pi::cli {

using Runner = std::function<int()>;

Runner add_inspect(CLI::App& app);
Runner add_run(CLI::App& app);
Runner add_quantize(CLI::App& app);
Runner add_synth(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_perplexity(CLI::App& app);
Runner add_batched(CLI::App& app);
Runner add_batched_bench(CLI::App& app);
Runner add_devices(CLI::App& app);
Runner add_profile(CLI::App& app);
Runner add_calibrate(CLI::App& app);
Runner add_plan(CLI::App& app);
Runner add_embed(CLI::App& app);
Runner add_serve(CLI::App& app);

}  // namespace pi::cli
