#include "gen_options.h"

#include "powerinfer/grammar.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "cli_checks.h"
#include "llama_flags.h"
#include "core/log.h"
#include "powerinfer/grammar.h"
#include "sparse/act_sparsity.h"

namespace pi::cli {

void add_gen_flags(CLI::App* sub, GenOptions& o, const std::string& n_help) {
  sub->add_option("-m,--model", o.model,
                  std::string("Model file (default: ") + kDefaultModel + " if present)");
  sub->add_option("-p,--prompt", o.prompt, "Prompt text");
  sub->add_option("-f,--file", o.prompt_file, "Read the prompt from a file");
  sub->add_option("-n,--n-predict", o.n_predict, n_help)->capture_default_str();
  sub->add_option("-t,--threads", o.n_threads, "Threads")->capture_default_str();
  sub->add_option("-b,--batch-size", o.n_batch, "Prompt tokens per forward pass")
      ->capture_default_str();
  sub->add_option("--temp", o.sampling.temperature, "Temperature (0: greedy)")
      ->capture_default_str();
  sub->add_option("--top-k", o.sampling.top_k, "Top-k (<= 0: off)")->capture_default_str();
  sub->add_option("--top-p", o.sampling.top_p, "Top-p, in (0, 1] (1: off)")->capture_default_str();
  sub->add_option("--min-p", o.sampling.min_p, "Min-p, in [0, 1] (0: off)")->capture_default_str();
  sub->add_option("--repeat-penalty", o.sampling.repeat_penalty, "Repetition penalty (1: off)")
      ->capture_default_str();
  sub->add_option("--repeat-last-n", o.sampling.repeat_last_n,
                  "Penalty window (0: off, -1: whole context)")
      ->capture_default_str();
  sub->add_option("--presence-penalty", o.sampling.presence_penalty, "Presence penalty (0: off)")
      ->capture_default_str();
  sub->add_option("--frequency-penalty", o.sampling.frequency_penalty,
                  "Frequency penalty (0: off)")
      ->capture_default_str();
  sub->add_option("-s,--seed", o.seed, "RNG seed (-1: random)")->capture_default_str();
  sub->add_flag("--ignore-eos", o.ignore_eos,
                "Never stop at end-of-text tokens (they are not sampled)");
  sub->add_flag("-e,--escape,!--no-escape", o.escape,
                "Process escapes (\\n, \\t, \\xHH, ...) in the prompt (on by default, as in "
                "llama.cpp; --no-escape: off)");
  sub->add_flag("--no-display-prompt", o.no_display_prompt, "Print only the generated text");
  sub->add_option("--grammar", o.grammar,
                  "Constrain the output to a GBNF grammar (llama.cpp's format; examples in "
                  "grammars/); generation stops when the text is complete");
  sub->add_option("--grammar-file", o.grammar_file, "Read the GBNF grammar from a file");
  sub->add_option("-j,--json-schema", o.json_schema,
                  "Constrain the output to JSON this JSON Schema accepts (e.g. '{}' for any "
                  "JSON value)");
  sub->add_option("--json-schema-file", o.json_schema_file, "Read the JSON Schema from a file");
  sub->add_flag(
      "!--no-warmup", o.warmup,
      "Skip the warm-up pass (one token, then forgotten) that maps the weights before timing; "
      "its cost is part of the load time");
  add_load_flags(sub, o.load);
  add_device_option(sub, o.device);
  sub->add_flag("--dense", o.dense, kDenseHelp);
  sub->add_option("--sparse-threshold", o.sparse_threshold,
                  "Predictor threshold: neuron active iff logit >= T (default: the environment "
                  "variable LLAMA_SPARSE_PRED_THRESHOLD, else the file's "
                  "powerinfer.sparse_threshold, else 0; this flag wins). Negative values as "
                  "--sparse-threshold=-inf");
  add_act_sparsity_flags(sub, o.act);
  add_model_flags(sub, o);
}

void add_act_sparsity_flags(CLI::App* sub, ActSparsityFlags& f) {
  sub->add_option("--sparsity", f.sparsity,
                  "Calibrated files (powerinfer calibrate): the sparsity to run at, 0 to the "
                  "file's last level: model-wide (the share of the layers' weight bytes left "
                  "unread) through the file's allocation when it has one, else the share of "
                  "activations zeroed at every site; SITE=LEVEL items set single sites, e.g. "
                  "0.4,ffn_in=0.3 (default: the file's target; --dense: none)");
  sub->add_option("--sparsity-alloc", f.alloc,
                  "Calibrated files: file (the file's per-site allocation, when it has one; "
                  "default) or uniform (every site at --sparsity)");
  sub->add_option("--sparsity-sites", f.sites,
                  "Calibrated files: the sites to sparsify, comma-separated from attn_in, "
                  "attn_out, ffn_in, ffn_gate (default: every calibrated site)");
}

Status apply_act_sparsity(const ActSparsityFlags& f, SparseOptions& so) {
  if (!f.sparsity.empty()) {
    sparse::LevelRequest r;
    PI_TRY(sparse::parse_level_request(f.sparsity, "--sparsity", r));
    if (r.sparsity) so.sparsity = *r.sparsity;
    if (const std::string sites = sparse::site_levels_string(r.site); !sites.empty())
      so.site_sparsity = sites;
  }
  if (f.alloc == "uniform") {
    so.uniform_sparsity = true;
  } else if (!f.alloc.empty() && f.alloc != "file") {
    return err("--sparsity-alloc '%s': file or uniform", f.alloc.c_str());
  }
  if (!f.sites.empty()) so.sites = f.sites;
  return Status::Ok();
}

void add_device_option(CLI::App* sub, std::string& device) {
  sub->add_option("--device", device,
                  "Device to run on: cpu (default), ref (scalar reference kernels, slow) or sim "
                  "(the simulated GPU the tests use); `powerinfer devices` lists them")
      ->capture_default_str();
}

Status validate_gen(const GenOptions& o) {
  PI_TRY(check_threads("-t", o.n_threads));
  PI_TRY(check_model_flags(o));
  if (o.n_ctx < 0)
    return err("-c must be >= 0 (0: the default size; got %lld)", static_cast<long long>(o.n_ctx));
  if (o.n_batch < 1) return err("-b must be >= 1 (got %lld)", static_cast<long long>(o.n_batch));
  if (!o.prompt.empty() && !o.prompt_file.empty()) return err("-p and -f are mutually exclusive");
  // A bad grammar or schema fails here, before a model is loaded.
  if (auto g = load_grammar(o); !g.ok()) return g.error();
  const SamplingParams& s = o.sampling;
  if (!(s.temperature >= 0.0f))
    return err("--temp must be >= 0 (got %g)", static_cast<double>(s.temperature));
  if (!(s.top_p > 0.0f && s.top_p <= 1.0f))
    return err("--top-p must be in (0, 1] (got %g)", static_cast<double>(s.top_p));
  if (!(s.min_p >= 0.0f && s.min_p <= 1.0f))
    return err("--min-p must be in [0, 1] (got %g)", static_cast<double>(s.min_p));
  if (!(s.repeat_penalty > 0.0f))
    return err("--repeat-penalty must be > 0 (got %g)", static_cast<double>(s.repeat_penalty));
  if (s.repeat_last_n < -1) return err("--repeat-last-n must be >= -1 (got %d)", s.repeat_last_n);
  return validate_sampling(s);
}

Result<std::string> resolve_model(const GenOptions& o) {
  if (!o.model.empty()) return o.model;
  if (!std::filesystem::exists(kDefaultModel)) {
    return err("no model given: pass -m FILE (the bundled %s was not found)", kDefaultModel);
  }
  return std::string(kDefaultModel);
}

std::string unescape(const std::string& s) {
  static constexpr std::string_view kFrom = "ntrabfv\\'\"?0";
  static constexpr std::string_view kTo{"\n\t\r\a\b\f\v\\'\"?\0", 12};
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    if (const size_t k = kFrom.find(c); k != std::string_view::npos) {
      out += kTo[k];
    } else if (c == 'x' && i + 1 < s.size() &&
               std::isxdigit(static_cast<unsigned char>(s[i + 1]))) {
      size_t n = 1;
      if (i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 2]))) n = 2;
      out += static_cast<char>(std::stoi(s.substr(i + 1, n), nullptr, 16));
      i += n;
    } else {
      out += '\\';
      out += c;
    }
  }
  return out;
}

Result<std::string> load_prompt(const GenOptions& o) {
  std::string prompt = o.prompt;
  if (!o.prompt_file.empty()) {
    std::error_code ec;
    if (std::filesystem::is_directory(o.prompt_file, ec))
      return err("%s: -f names a directory, not a prompt file", o.prompt_file.c_str());
    std::ifstream in(o.prompt_file, std::ios::binary);
    if (!in) {
      return err("%s: cannot read prompt file: %s", o.prompt_file.c_str(), std::strerror(errno));
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    prompt = ss.str();
  }
  return o.escape ? unescape(prompt) : prompt;
}

namespace {

Result<std::string> read_text(const std::string& flag, const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return err("%s %s: a directory, not a file", flag.c_str(), path.c_str());
  std::ifstream in(path, std::ios::binary);
  if (!in) return err("%s %s: cannot read: %s", flag.c_str(), path.c_str(), std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Result<std::string> load_grammar(const GenOptions& o) {
  const int given = !o.grammar.empty() + !o.grammar_file.empty() + !o.json_schema.empty() +
                    !o.json_schema_file.empty();
  if (given > 1)
    return err("give one of --grammar, --grammar-file, --json-schema, --json-schema-file");
  std::string where, gbnf;
  if (!o.grammar.empty()) {
    where = "--grammar", gbnf = o.grammar;
  } else if (!o.grammar_file.empty()) {
    auto t = read_text("--grammar-file", o.grammar_file);
    if (!t.ok()) return t.error();
    where = "--grammar-file " + o.grammar_file, gbnf = *t;
  } else if (!o.json_schema.empty() || !o.json_schema_file.empty()) {
    std::string schema = o.json_schema;
    where = "--json-schema";
    if (!o.json_schema_file.empty()) {
      auto t = read_text("--json-schema-file", o.json_schema_file);
      if (!t.ok()) return t.error();
      schema = *t, where = "--json-schema-file " + o.json_schema_file;
    }
    auto g = json_schema_to_grammar(schema);
    if (!g.ok()) return err("%s: %s", where.c_str(), g.error().message.c_str());
    return *g;
  } else {
    return std::string();
  }
  if (Status s = check_grammar(gbnf); !s.ok())
    return err("%s: %s", where.c_str(), s.error().message.c_str());
  return gbnf;
}

Result<SessionOptions> session_options(const GenOptions& o, uint64_t seed) {
  SessionOptions so = env_session_options();
  so.n_ctx = o.n_ctx;
  so.n_batch = o.n_batch;
  so.n_threads = o.n_threads;
  so.device = o.device;
  so.sampling = o.sampling;
  so.sampling.seed = seed;
  auto grammar = load_grammar(o);
  if (!grammar.ok()) return grammar.error();
  so.sampling.grammar = std::move(*grammar);
  so.sparse.dense = o.dense;
  if (!o.sparse_threshold.empty()) {
    char* end = nullptr;
    const float v = std::strtof(o.sparse_threshold.c_str(), &end);
    if (end == o.sparse_threshold.c_str() || *end != '\0' || std::isnan(v)) {
      return err("--sparse-threshold: '%s' is not a number", o.sparse_threshold.c_str());
    }
    so.sparse.threshold = v;
  }
  PI_TRY(apply_hybrid_flags(o, so));
  PI_TRY(apply_act_sparsity(o.act, so.sparse));
  return so;
}

void log_model_info(const std::string& path, const ModelInfo& info, bool sparse) {
  log_info("model: %s (%s%s, %lld layers, n_embd %lld, n_vocab %lld, FFN %s)", path.c_str(),
           info.architecture.c_str(), !info.powerinfer ? ""
                                      : sparse         ? ", PowerInfer file run sparse"
                                                       : ", PowerInfer file run dense",
           static_cast<long long>(info.n_layer), static_cast<long long>(info.n_embd),
           static_cast<long long>(info.n_vocab), info.activation.c_str());
  if (!info.mmap) {
    log_info("model read into memory: %.0f of %.0f MiB in huge pages (--mmap maps it instead)",
             static_cast<double>(info.huge_page_bytes) / 1048576.0,
             static_cast<double>(info.file_bytes) / 1048576.0);
  }
}

}  // namespace pi::cli
