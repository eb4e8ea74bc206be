// `powerinfer run`: text generation with a GGUF or PowerInfer model, llama.cpp `main` style.
// The prompt is fed in batches of -b tokens, then tokens are sampled one at a time and printed
// as they are produced. -i/--chat keeps the KV cache across user turns. Ctrl-C stops
// generation (in interactive mode: the current turn; at the input prompt: the program) and
// the timings are printed. Generated text goes to stdout; everything else to stderr.
#include <CLI/CLI.hpp>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>

#include "commands.h"
#include "core/log.h"
#include "powerinfer/engine.h"
#include "sparsity_report.h"
#include "tokenizer/tokenizer.h"

namespace pi::cli {
namespace {

constexpr const char* kDefaultModel = "models/kjv-relu/kjv-relu.pwri.gguf";

// Set by the SIGINT handler, read and cleared by the generation loop. The handler does
// nothing else.
volatile std::sig_atomic_t g_interrupted = 0;

extern "C" void on_sigint(int) { g_interrupted = 1; }

// Installs the handler without SA_RESTART, so a blocking read of the next user turn returns
// (EINTR) when Ctrl-C is pressed.
void install_sigint_handler() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
}

struct RunOptions {
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
  bool escape = false;
  bool interactive = false;
  bool no_display_prompt = false;
  bool warmup = true;
  // PowerInfer files (see SparseOptions): --dense, --sparse-threshold, --sparsity-report,
  // --check-predictor (implies the report).
  bool dense = false;
  std::string sparse_threshold;  // empty: not given
  bool sparsity_report = false;
  bool check_predictor = false;
};

// Processes the escapes \n \t \r \a \b \f \v \\ \' \" \? \0 and \xHH; other sequences stay.
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

// Checks flag values that CLI11's type conversion lets through. Messages name the flag.
Status validate(const RunOptions& o) {
  if (o.n_predict < -1)
    return err("-n must be -1 (no limit) or >= 0 (got %lld)", static_cast<long long>(o.n_predict));
  if (o.n_threads < 1) return err("-t must be >= 1 (got %d)", o.n_threads);
  if (o.n_ctx < 0)
    return err("-c must be >= 0 (0: the model's context length; got %lld)",
               static_cast<long long>(o.n_ctx));
  if (o.n_batch < 1) return err("-b must be >= 1 (got %lld)", static_cast<long long>(o.n_batch));
  if (!o.prompt.empty() && !o.prompt_file.empty()) return err("-p and -f are mutually exclusive");
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

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return err("%s: cannot read prompt file: %s", path.c_str(), std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void print_piece(const std::string& s) {
  if (s.empty()) return;
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

void print_timings(double load_ms, const Timings& t, double total_ms) {
  auto line = [](const char* what, double ms, int64_t n, const char* unit) {
    if (n > 0) {
      log_info("%-17s = %10.2f ms / %5lld %-6s (%8.2f ms per token, %9.2f tokens per second)", what,
               ms, static_cast<long long>(n), unit, ms / static_cast<double>(n),
               ms > 0 ? 1e3 * static_cast<double>(n) / ms : 0.0);
    } else {
      log_info("%-17s = %10.2f ms / %5d %-6s", what, ms, 0, unit);
    }
  };
  log_info("%s", "");
  log_info("%-17s = %10.2f ms", "load time", load_ms);
  line("sample time", t.sample_ms, t.n_sample, "runs");
  line("prompt eval time", t.prompt_ms, t.n_prompt, "tokens");
  line("eval time", t.eval_ms, t.n_eval, "runs");
  log_info("%-17s = %10.2f ms / %5lld tokens", "total time", total_ms,
           static_cast<long long>(t.n_prompt + t.n_eval));
}

enum class Stop { Eog, Limit, ContextFull, Interrupted };

// Samples, prints and feeds tokens until end of generation, `limit` tokens (-1: none), a
// full context or Ctrl-C.
Result<Stop> generate(Session& s, const Tokenizer& tok, Tokenizer::StreamDecoder& dec,
                      int64_t limit, bool ignore_eos, DenseShadow* shadow) {
  for (int64_t n = 0; limit < 0 || n < limit; ++n) {
    if (g_interrupted) return Stop::Interrupted;
    const int32_t t = s.sample();
    if (!ignore_eos && tok.is_eog(t)) return Stop::Eog;
    print_piece(dec.push(t));
    if (s.n_past() >= s.n_ctx()) return Stop::ContextFull;
    PI_TRY(s.advance(t));
    if (shadow != nullptr) PI_TRY(shadow->feed(std::span<const int32_t>(&t, 1), s.logits()));
  }
  return Stop::Limit;
}

// Reads one line from stdin. Returns false at end of input or when Ctrl-C interrupts the read.
bool read_line(std::string& line) {
  line.clear();
  char buf[4096];
  while (true) {
    if (std::fgets(buf, sizeof buf, stdin) == nullptr) {
      std::clearerr(stdin);
      return !line.empty() && !g_interrupted;
    }
    line += buf;
    if (!line.empty() && line.back() == '\n') return true;
  }
}

int run(const RunOptions& o_in) {
  RunOptions o = o_in;
  if (o.model.empty()) {
    if (!std::filesystem::exists(kDefaultModel)) {
      log_error("no model given: pass -m FILE (the bundled %s was not found)", kDefaultModel);
      return 1;
    }
    o.model = kDefaultModel;
  }
  if (Status s = validate(o); !s.ok()) {
    log_error("%s", s.error().message.c_str());
    return 1;
  }
  std::string prompt = o.prompt;
  if (!o.prompt_file.empty()) {
    auto text = read_file(o.prompt_file);
    if (!text.ok()) {
      log_error("%s", text.error().message.c_str());
      return 1;
    }
    prompt = std::move(*text);
  }
  if (o.escape) prompt = unescape(prompt);
  o.sampling.seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}();

  // From here on Ctrl-C only sets a flag; generation checks it between tokens.
  install_sigint_handler();
  const auto t_start = std::chrono::steady_clock::now();
  auto engine = Engine::load(o.model);
  if (!engine.ok()) {
    log_error("%s", engine.error().message.c_str());
    return 1;
  }
  const Tokenizer* tok = (*engine)->tokenizer();
  if (tok == nullptr) {
    log_error("%s: the file has no vocabulary (tokenizer.ggml.model), so it cannot run text",
              o.model.c_str());
    return 1;
  }
  SessionOptions so;
  so.n_ctx = o.n_ctx;
  so.n_batch = o.n_batch;
  so.n_threads = o.n_threads;
  so.sampling = o.sampling;
  so.sparse.dense = o.dense;
  so.sparse.check_predictor = o.check_predictor;
  if (!o.sparse_threshold.empty()) {
    char* end = nullptr;
    const float v = std::strtof(o.sparse_threshold.c_str(), &end);
    if (end == o.sparse_threshold.c_str() || *end != '\0' || std::isnan(v)) {
      log_error("--sparse-threshold: '%s' is not a number", o.sparse_threshold.c_str());
      return 1;
    }
    so.sparse.threshold = v;
  }
  auto session_r = Session::create(**engine, so);
  if (!session_r.ok()) {
    log_error("%s", session_r.error().message.c_str());
    return 1;
  }
  Session& session = **session_r;
  std::unique_ptr<DenseShadow> shadow;
  if (o.check_predictor && session.sparsity().sparse) {
    auto sh = DenseShadow::create(**engine, so);
    if (!sh.ok()) {
      log_error("%s", sh.error().message.c_str());
      return 1;
    }
    shadow = std::move(*sh);
  }
  if (o.warmup) {
    if (Status s = session.warmup(tok->bos() >= 0 ? tok->bos() : 0); !s.ok()) {
      log_error("%s", s.error().message.c_str());
      return 1;
    }
  }
  const double load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count();

  const ModelInfo& info = (*engine)->info();
  log_info("model: %s (%s%s, %lld layers, n_embd %lld, n_vocab %lld, FFN %s)", o.model.c_str(),
           info.architecture.c_str(), !info.powerinfer                 ? ""
           : session.sparsity().sparse ? ", PowerInfer file run sparse"
                                       : ", PowerInfer file run dense",
           static_cast<long long>(info.n_layer), static_cast<long long>(info.n_embd),
           static_cast<long long>(info.n_vocab), info.activation.c_str());
  log_info("weights read per token: %.2f MiB",
           static_cast<double>(info.weight_bytes_per_token) / 1048576.0);
  log_info("context %lld, batch %lld, threads %d, seed %llu",
           static_cast<long long>(session.n_ctx()), static_cast<long long>(session.n_batch()),
           session.n_threads(), static_cast<unsigned long long>(o.sampling.seed));
  if (info.n_ctx_train > 0 && session.n_ctx() > info.n_ctx_train) {
    log_warn("context %lld exceeds the model's training context %lld: quality may degrade",
             static_cast<long long>(session.n_ctx()), static_cast<long long>(info.n_ctx_train));
  }
  const SamplingParams& sp = o.sampling;
  log_info(
      "sampling: temp %.3f, top-k %d, top-p %.3f, min-p %.3f, repeat-penalty %.3f (last %d), "
      "presence %.3f, frequency %.3f",
      static_cast<double>(sp.temperature), sp.top_k, static_cast<double>(sp.top_p),
      static_cast<double>(sp.min_p), static_cast<double>(sp.repeat_penalty), sp.repeat_last_n,
      static_cast<double>(sp.presence_penalty), static_cast<double>(sp.frequency_penalty));

  if (o.ignore_eos) {
    std::vector<int32_t> eog;
    for (int32_t id = 0; id < tok->n_vocab(); ++id)
      if (tok->is_eog(id)) eog.push_back(id);
    session.ban_tokens(std::move(eog));
  }

  // An interactive session without a prompt starts with the user's first line.
  std::vector<int32_t> tokens;
  if (!(o.interactive && prompt.empty()))
    tokens = tok->encode(prompt, tok->add_bos(), /*parse_special=*/true);
  if (tokens.empty() && !o.interactive) {
    log_error("the prompt is empty and the vocabulary has no BOS token: pass -p TEXT");
    return 1;
  }
  if (static_cast<int64_t>(tokens.size()) > session.n_ctx()) {
    log_error("context overflow: the prompt is %zu tokens but the context holds %lld (raise -c)",
              tokens.size(), static_cast<long long>(session.n_ctx()));
    return 1;
  }

  Tokenizer::StreamDecoder dec(*tok);
  std::string shown;
  for (int32_t t : tokens) shown += dec.push(t);
  if (!o.no_display_prompt) print_piece(shown);

  auto finish = [&](int code) {
    print_piece(dec.flush());
    std::fputc('\n', stdout);
    std::fflush(stdout);
    const double total_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start)
            .count();
    print_timings(load_ms, session.timings(), total_ms);
    if (o.sparsity_report || o.check_predictor)
      print_sparsity_report(session.sparsity(), info, shadow.get());
    return code;
  };

  const auto interrupted = [] { return g_interrupted != 0; };
  if (Status s = session.prompt(tokens, interrupted); !s.ok()) {
    if (g_interrupted) {
      log_info("\n[interrupted while reading the prompt]");
      return finish(130);
    }
    log_error("%s", s.error().message.c_str());
    return finish(1);
  }
  if (shadow != nullptr) {
    if (Status s = shadow->feed(tokens, session.logits()); !s.ok()) {
      log_error("%s", s.error().message.c_str());
      return finish(1);
    }
  }
  if (!o.interactive) {
    auto stop = generate(session, *tok, dec, o.n_predict, o.ignore_eos, shadow.get());
    if (!stop.ok()) {
      log_error("%s", stop.error().message.c_str());
      return finish(1);
    }
    if (*stop == Stop::ContextFull)
      log_info("\n[context full: %lld tokens]", static_cast<long long>(session.n_ctx()));
    if (*stop == Stop::Interrupted) log_info("\n[interrupted]");
    return finish(*stop == Stop::Interrupted ? 130 : 0);
  }

  // Interactive: answer the prompt (if any), then alternate user turns and answers.
  bool first_turn = tokens.empty();
  if (!tokens.empty()) {
    auto stop = generate(session, *tok, dec, o.n_predict, o.ignore_eos, shadow.get());
    if (!stop.ok()) {
      log_error("%s", stop.error().message.c_str());
      return finish(1);
    }
    if (*stop == Stop::ContextFull) return finish(0);
  }
  std::string line;
  while (true) {
    g_interrupted = 0;
    print_piece(dec.flush());
    print_piece("\n> ");
    if (!read_line(line)) break;
    if (line != "\n") {
      std::vector<int32_t> turn = tok->encode(line, first_turn && tok->add_bos(), true);
      first_turn = false;
      if (session.n_past() + static_cast<int64_t>(turn.size()) > session.n_ctx()) {
        log_error("context overflow: this turn is %zu tokens, %lld of %lld are free", turn.size(),
                  static_cast<long long>(session.n_ctx() - session.n_past()),
                  static_cast<long long>(session.n_ctx()));
        return finish(1);
      }
      for (int32_t t : turn) (void)dec.push(t);  // the user's text is already on screen
      if (Status s = session.prompt(turn, interrupted); !s.ok()) {
        if (g_interrupted) continue;  // the turn was cut short: back to the input prompt
        log_error("%s", s.error().message.c_str());
        return finish(1);
      }
      if (shadow != nullptr) {
        if (Status s = shadow->feed(turn, session.logits()); !s.ok()) {
          log_error("%s", s.error().message.c_str());
          return finish(1);
        }
      }
    }
    auto stop = generate(session, *tok, dec, o.n_predict, o.ignore_eos, shadow.get());
    if (!stop.ok()) {
      log_error("%s", stop.error().message.c_str());
      return finish(1);
    }
    if (*stop == Stop::ContextFull) {
      log_info("\n[context full: %lld tokens]", static_cast<long long>(session.n_ctx()));
      break;
    }
  }
  return finish(0);
}

}  // namespace

Runner add_run(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  o->n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  CLI::App* sub = app.add_subcommand(
      "run",
      "Generate text with a GGUF or PowerInfer model (PowerInfer files run sparse unless\n"
      "--dense). Prints the prompt and the continuation as it is produced, then timings.\n"
      "Ctrl-C stops (exit code 130).");
  sub->add_option("-m,--model", o->model,
                  std::string("Model file (default: ") + kDefaultModel + " if present)");
  sub->add_option("-p,--prompt", o->prompt, "Prompt text");
  sub->add_option("-f,--file", o->prompt_file, "Read the prompt from a file");
  sub->add_option("-n,--n-predict", o->n_predict,
                  "Tokens to generate (-1: until end of text or a full context)")
      ->capture_default_str();
  sub->add_option("-t,--threads", o->n_threads, "Threads")->capture_default_str();
  sub->add_option("-c,--ctx-size", o->n_ctx,
                  "Context size in tokens (0: the model's, at most 4096)")
      ->capture_default_str();
  sub->add_option("-b,--batch-size", o->n_batch, "Prompt tokens per forward pass")
      ->capture_default_str();
  sub->add_option("--temp", o->sampling.temperature, "Temperature (0: greedy)")
      ->capture_default_str();
  sub->add_option("--top-k", o->sampling.top_k, "Top-k (<= 0: off)")->capture_default_str();
  sub->add_option("--top-p", o->sampling.top_p, "Top-p, in (0, 1] (1: off)")->capture_default_str();
  sub->add_option("--min-p", o->sampling.min_p, "Min-p, in [0, 1] (0: off)")->capture_default_str();
  sub->add_option("--repeat-penalty", o->sampling.repeat_penalty, "Repetition penalty (1: off)")
      ->capture_default_str();
  sub->add_option("--repeat-last-n", o->sampling.repeat_last_n,
                  "Penalty window (0: off, -1: whole context)")
      ->capture_default_str();
  sub->add_option("--presence-penalty", o->sampling.presence_penalty, "Presence penalty (0: off)")
      ->capture_default_str();
  sub->add_option("--frequency-penalty", o->sampling.frequency_penalty,
                  "Frequency penalty (0: off)")
      ->capture_default_str();
  sub->add_option("-s,--seed", o->seed, "RNG seed (-1: random)")->capture_default_str();
  sub->add_flag("--ignore-eos", o->ignore_eos,
                "Never stop at end-of-text tokens (they are not sampled)");
  sub->add_flag("-e,--escape", o->escape, "Process escapes (\\n, \\t, \\xHH, ...) in the prompt");
  sub->add_flag(
      "-i,--interactive,--chat", o->interactive,
      "Interactive: after each answer, read a line from stdin; the context is kept across turns");
  sub->add_flag("--no-display-prompt", o->no_display_prompt, "Print only the generated text");
  sub->add_flag(
      "!--no-warmup", o->warmup,
      "Skip the warm-up pass (one token, then forgotten) that maps the weights before timing; "
      "its cost is part of the load time");
  sub->add_flag("--dense", o->dense,
                "PowerInfer files: compute every FFN neuron (still ReLU) instead of the "
                "predicted ones");
  sub->add_option("--sparse-threshold", o->sparse_threshold,
                  "Predictor threshold: neuron active iff logit >= T (default: the environment "
                  "variable LLAMA_SPARSE_PRED_THRESHOLD, else the file's "
                  "powerinfer.sparse_threshold, else 0; this flag wins). Negative values as "
                  "--sparse-threshold=-inf");
  sub->add_flag("--sparsity-report", o->sparsity_report,
                "After the run, print per layer the predicted active fraction of FFN neurons and "
                "the weight bytes read per token");
  sub->add_flag("--check-predictor", o->check_predictor,
                "Also compute the dense FFN per layer (recall, precision, FFN output deviation) "
                "and a dense run fed the same tokens (final-logit deviation); implies "
                "--sparsity-report. Slow");
  return [o]() -> int { return run(*o); };
}

}  // namespace pi::cli
