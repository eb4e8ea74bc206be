// Flags shared by the generating subcommands (`run`, `batched`): model, prompt, sizes,
// sampling, sparse execution. Each subcommand registers them with add_gen_flags() and adds its
// own; validate_gen() checks the values CLI11's type conversion lets through, with messages
// naming the flag.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "llama_flags.h"
#include "powerinfer/engine.h"

namespace pi::cli {

inline constexpr const char* kDefaultModel = "models/kjv-relu/kjv-relu.pwri.gguf";

// --sparsity S and --sparsity-sites LIST: calibrated files (`powerinfer calibrate`).
struct ActSparsityFlags {
  std::string sparsity;  // "0.4", "ffn_in=0.3,attn_out=0.6" or both; empty: the file's target
  std::string alloc;     // "file" (default) or "uniform"
  std::string sites;     // empty: every calibrated site
};
void add_act_sparsity_flags(CLI::App* sub, ActSparsityFlags& f);
// Checks the values (levels in [0, 1), known sites) and copies them into `so`.
Status apply_act_sparsity(const ActSparsityFlags& f, SparseOptions& so);

struct GenOptions : ModelFlags {
  std::string model;
  std::string prompt;
  std::string prompt_file;
  int64_t n_predict = -1;
  int n_threads = 0;
  int64_t n_ctx = 0;
  int64_t n_batch = 512;
  SamplingParams sampling;
  int64_t seed = -1;
  bool ignore_eos = false;
  bool escape = true;  // -e is on by default, as in llama.cpp; --no-escape clears it
  bool no_display_prompt = false;
  bool warmup = true;
  ModelLoad load = ModelLoad::Auto;  // --mmap, --no-mmap
  std::string device = "cpu";  // --device: cpu | ref | sim (powerinfer devices)
  // PowerInfer files (see SparseOptions): --dense, --sparse-threshold.
  bool dense = false;
  std::string sparse_threshold;  // empty: not given
  ActSparsityFlags act;          // calibrated files: --sparsity, --sparsity-sites
  // Constrained output (at most one): --grammar, --grammar-file, -j/--json-schema,
  // --json-schema-file.
  std::string grammar, grammar_file, json_schema, json_schema_file;
};

// Logs the model line of run and batched (path, architecture, sparse or dense, sizes) and,
// when the model was read into memory, how much of it landed in huge pages.
void log_model_info(const std::string& path, const ModelInfo& info, bool sparse);

// Registers -m -p -f -n -t -b, the sampling flags, -s --ignore-eos -e/--no-escape
// --no-display-prompt --no-warmup --mmap/--no-mmap --dense --sparse-threshold and the model flags
// (llama_flags.h) on `sub`. `n_help` describes -n; -c (whose default
// differs) is the caller's.
void add_gen_flags(CLI::App* sub, GenOptions& o, const std::string& n_help);

// Checks the values (-t >= 1, -c >= 0, sampling ranges, -p with -f, ...). -n is the caller's.
// --device NAME into `device` (every subcommand that runs a model).
void add_device_option(CLI::App* sub, std::string& device);

Status validate_gen(const GenOptions& o);

// The model path: -m, else the bundled model when present.
Result<std::string> resolve_model(const GenOptions& o);

// The prompt text: -p or the contents of -f, escapes processed with -e.
Result<std::string> load_prompt(const GenOptions& o);

// Processes the escapes \n \t \r \a \b \f \v \\ \' \" \? \0 and \xHH; other sequences stay.
std::string unescape(const std::string& s);

// The GBNF grammar the constrained-output flags ask for ("" for none): the text, a file's
// contents or a JSON Schema converted; errors name the flag (and file).
Result<std::string> load_grammar(const GenOptions& o);

// Session options from the flags (threads, sizes, sampling with the resolved seed and the
// grammar, sparse).
Result<SessionOptions> session_options(const GenOptions& o, uint64_t seed);

}  // namespace pi::cli
