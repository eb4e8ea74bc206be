// `powerinfer quantize IN OUT TYPE`: converts a model's large matrices to another type,
// keeping the magic (PWRI stays PWRI), all metadata and the small tensors.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "cli_checks.h"
#include "commands.h"
#include "core/log.h"
#include "powerinfer/quantize.h"

namespace pi::cli {

Runner add_quantize(CLI::App& app) {
  struct Args {
    QuantizeParams opts;
    std::vector<std::string> overrides;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "quantize",
      "Convert a GGUF/PowerInfer model to F32, F16, BF16, Q8_0, Q5_1, Q5_0, Q4_1, Q4_0, MXFP4, or\n"
      "the mixes Q6_K, Q5_K_M, Q4_K_M, Q3_K_M, Q2_K and MXFP4_MOE (experts MXFP4, the rest\n"
      "Q8_0) (llama.cpp's per-tensor recipes).\n"
      "Norms and 1-D tensors stay as they are; predictors follow TYPE; output.weight gets Q6_K\n"
      "for 4/5-bit targets. Prints the sizes and the round-trip RMSE per output type.");
  sub->add_option("input", a->opts.input, "Input model")->required()->check(CLI::ExistingFile);
  sub->add_option("output", a->opts.output, "Output model")->required();
  sub->add_option("type", a->opts.type,
                  "Target type, e.g. q4_0, or llama.cpp's numeric id (2 = q4_0, 7 = q8_0)")
      ->required();
  sub->add_flag("--allow-requantize", a->opts.allow_requantize,
                "Allow converting tensors that are already quantized");
  sub->add_option("--override", a->overrides,
                  "PATTERN=TYPE: type for tensors whose name matches the glob (repeatable), "
                  "e.g. 'blk.*.ffn_down_t.weight=q8_0'");
  sub->add_option("-t,--threads", a->opts.threads, "Threads");
  return [a]() -> int {
    if (Status s = check_threads("-t", a->opts.threads); !s.ok()) {
      log_error("%s", s.error().message.c_str());
      return 1;
    }
    for (const std::string& o : a->overrides) {
      auto ov = parse_quantize_override(o);
      if (!ov.ok()) {
        log_error("%s", ov.error().message.c_str());
        return 1;
      }
      a->opts.overrides.push_back(std::move(*ov));
    }
    a->opts.progress = true;
    auto rep = quantize_model(a->opts);
    if (!rep.ok()) {
      log_error("%s", rep.error().message.c_str());
      return 1;
    }
    std::printf("quantized %d tensors, copied %d\n", rep->n_quantized, rep->n_copied);
    std::printf("tensor data: %.2f MiB -> %.2f MiB; file: %.2f MiB -> %.2f MiB (%.1f%%)\n",
                static_cast<double>(rep->bytes_in) / 1048576.0,
                static_cast<double>(rep->bytes_out) / 1048576.0,
                static_cast<double>(rep->file_in) / 1048576.0,
                static_cast<double>(rep->file_out) / 1048576.0,
                100.0 * static_cast<double>(rep->file_out) / static_cast<double>(rep->file_in));
    if (!rep->types.empty()) std::printf("%-6s %8s %14s %12s %10s\n", "type", "tensors", "elements", "rmse", "rel. rmse");
    for (const auto& e : rep->types) {
      std::printf("%-6s %8d %14llu %12.4e %9.3f%%\n", e.type.c_str(), e.n_tensors,
                  static_cast<unsigned long long>(e.n_elements), e.rmse, 100.0 * e.relative);
    }
    return 0;
  };
}

}  // namespace pi::cli
