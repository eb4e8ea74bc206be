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
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>


#include "commands.h"
#include "core/log.h"
#include "core/mapped_file.h"
#include "core/os.h"
#include "gen_options.h"
#include "interrupt.h"
#include "powerinfer/engine.h"
#include "powerinfer/generator.h"
#include "prompt_cache.h"
#include "run_conversation.h"
#include "sparsity_report.h"
#include "powerinfer/vocabulary.h"

namespace pi::cli {
namespace {

struct RunOptions : GenOptions {
  bool interactive = false;
  // -cnv: conversation mode with the chat template (run_conversation.h).
  bool conversation = false;
  std::string system_prompt;  // -sys
  std::string chat_template;  // --chat-template NAME (or Jinja text); empty: the model's
  int64_t n_keep = 0;         // --keep
  std::string reasoning_effort = "medium";  // --reasoning-effort: gpt-oss's system message
  bool hide_reasoning = false;              // --hide-reasoning: print a reply's answer only
  // PowerInfer files: --sparsity-report, --check-predictor (implies the report).
  bool sparsity_report = false;
  bool check_predictor = false;
  // --prompt-cache FILE: restore the prompt's state from FILE and save it there
  // (prompt_cache.h); --prompt-cache-all also saves the generated tokens; --prompt-cache-ro
  // never writes the file.
  std::string prompt_cache;
  bool prompt_cache_all = false;
  bool prompt_cache_ro = false;
};

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

// --moe-ram: how the expert cache did.
void print_expert_reads(const ExpertReads& r) {
  if (!r.on) return;
  const uint64_t asked = r.hits + r.read_ahead_used + r.misses;
  const auto pct = [&](uint64_t n) { return asked > 0 ? 100.0 * static_cast<double>(n) / static_cast<double>(asked) : 0.0; };
  char guesses[64] = "";
  if (r.guessed > 0)
    std::snprintf(guesses, sizeof guesses, "; next-layer guesses %.1f%% right",
                  100.0 * static_cast<double>(r.guessed_right) / static_cast<double>(r.guessed));
  log_info("experts read on demand (%lld cached, %.1f MiB%s): of %llu asked for, %.1f%% cached, %.1f%% read "
           "ahead, %.1f%% read while waiting (%llu read ahead in all%s); %.1f MiB read in %.2f s (%.0f MB/s), "
           "waited %.2f s",
           static_cast<long long>(r.slots), static_cast<double>(r.cache_bytes) / 1048576.0,
           r.direct_io ? ", direct I/O" : "", static_cast<unsigned long long>(asked), pct(r.hits),
           pct(r.read_ahead_used), pct(r.misses), static_cast<unsigned long long>(r.read_ahead), guesses,
           static_cast<double>(r.bytes_read) / 1048576.0, r.read_s,
           r.read_s > 0 ? static_cast<double>(r.bytes_read) / r.read_s / 1e6 : 0.0, r.wait_s);
}

// The session's memory account per device, with a total per device, then this process's
// peak resident memory (llama.cpp prints its buffers; this is the same habit, from the ledger).
void print_memory(const Session& s) {
  const std::vector<MemoryLine> lines = s.memory();
  const auto mib = [](uint64_t b) { return static_cast<double>(b) / 1048576.0; };
  log_info("%-32s %10s", "memory breakdown", "MiB");
  for (size_t i = 0; i < lines.size(); ++i) {
    const MemoryLine& l = lines[i];
    log_info("  %-6s %-24s %10.1f", l.device.c_str(), l.what.c_str(), mib(l.bytes));
    if (i + 1 == lines.size() || lines[i + 1].device != l.device) {
      uint64_t total = 0;
      for (const MemoryLine& k : lines)
        if (k.device == l.device) total += k.bytes;
      log_info("  %-6s %-24s %10.1f", l.device.c_str(), "total", mib(total));
    }
  }
  if (const size_t peak = peak_resident_bytes(); peak > 0)
    log_info("%-17s = %10.1f MiB", "peak resident", mib(peak));
  print_expert_reads(s.expert_reads());
}

enum class Stop { Eog, Limit, ContextFull, Interrupted, GrammarDone };

// Samples, prints and feeds tokens until the answer ends (`p`: -n, --ignore-eos, a harmony
// model's reply tokens), a full context or Ctrl-C.
Result<Stop> generate(Session& s, Generator& gen, const GenerateParams& p, DenseShadow* shadow) {
  gen.begin(p);
  while (true) {
    if (interrupted()) return Stop::Interrupted;
    auto e = gen.sample(s);
    if (!e.ok()) return e.error();
    print_piece(gen.take());
    auto fed_now = gen.feed(s);
    if (!fed_now.ok()) return fed_now.error();
    if (*fed_now && shadow != nullptr) {
      const int32_t t = gen.last_token();
      PI_TRY(shadow->feed(std::span<const int32_t>(&t, 1), s.logits()));
    }
    switch (*e) {
      case GenEnd::None:
        continue;
      case GenEnd::EndToken:
      case GenEnd::StopString:
      case GenEnd::NoToken:
        return Stop::Eog;
      case GenEnd::GrammarDone:
        return Stop::GrammarDone;
      case GenEnd::ContextFull:
        return Stop::ContextFull;
      case GenEnd::Length:
        return Stop::Limit;
    }
  }
}

// Reads one line from stdin. Returns false at end of input or when Ctrl-C interrupts the read.
bool read_line(std::string& line) {
  line.clear();
  char buf[4096];
  while (true) {
    if (std::fgets(buf, sizeof buf, stdin) == nullptr) {
      std::clearerr(stdin);
      return !line.empty() && !interrupted();
    }
    line += buf;
    if (!line.empty() && line.back() == '\n') return true;
  }
}

int run(const RunOptions& o_in) {
  RunOptions o = o_in;
  auto model = resolve_model(o);
  if (!model.ok()) {
    log_error("%s", model.error().message.c_str());
    return 1;
  }
  o.model = *model;
  Status valid = o.n_predict < -1 ? err("-n must be -1 (no limit) or >= 0 (got %lld)",
                                        static_cast<long long>(o.n_predict))
                                  : validate_gen(o);
  const bool constrained = !o.grammar.empty() || !o.grammar_file.empty() ||
                           !o.json_schema.empty() || !o.json_schema_file.empty();
  if (valid.ok() && constrained && (o.conversation || o.interactive))
    valid = err("a grammar or JSON schema constrains one answer: not with -cnv or -i");
  if (!valid.ok()) {
    log_error("%s", valid.error().message.c_str());
    return 1;
  }
  if (!o.prompt_cache.empty() && o.conversation) {
    log_error("--prompt-cache is not supported in conversation mode");
    return 1;
  }
  chat::ReasoningEffort effort{};
  if (!chat::parse_reasoning_effort(o.reasoning_effort, effort)) {
    log_error("--reasoning-effort must be low, medium or high (got '%s')", o.reasoning_effort.c_str());
    return 1;
  }
  if (o.prompt_cache_all && o.interactive) {
    log_error("--prompt-cache-all is not supported in interactive mode");
    return 1;
  }
  if ((o.prompt_cache_all || o.prompt_cache_ro) && o.prompt_cache.empty()) {
    log_error("--prompt-cache-all and --prompt-cache-ro need --prompt-cache FILE");
    return 1;
  }
  auto text = load_prompt(o);
  if (!text.ok()) {
    log_error("%s", text.error().message.c_str());
    return 1;
  }
  const std::string prompt = std::move(*text);
  o.sampling.seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}();

  // From here on Ctrl-C only sets a flag; generation checks it between tokens.
  install_sigint_flag();
  const auto t_start = std::chrono::steady_clock::now();
  auto engine = Engine::load(o.model, load_options(o, o.load));
  if (!engine.ok()) {
    log_error("%s", engine.error().message.c_str());
    return 1;
  }
  const Vocabulary* tok = (*engine)->vocabulary();
  if (tok == nullptr) {
    log_error("%s: the file has no vocabulary (tokenizer.ggml.model), so it cannot run text",
              o.model.c_str());
    return 1;
  }
  auto so_r = session_options(o, o.sampling.seed);
  if (!so_r.ok()) {
    log_error("%s", so_r.error().message.c_str());
    return 1;
  }
  SessionOptions so = *so_r;
  so.sparse.check_predictor = o.check_predictor;
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
  log_model_info(o.model, info, session.sparsity().sparse);
  log_info("weights read per token: %.2f MiB",
           static_cast<double>(info.weight_bytes_per_token) / 1048576.0);
  log_info("context %lld (KV cache: keys %s, values %s), batch %lld, threads %d, seed %llu",
           static_cast<long long>(session.n_ctx()), kv_cache_type_name(so.kv_type_k),
           kv_cache_type_name(so.kv_type_v), static_cast<long long>(session.n_batch()),
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

  const std::vector<int32_t> banned = o.ignore_eos ? tok->eog_tokens() : std::vector<int32_t>{};
  if (o.ignore_eos) session.ban_tokens(banned);

  if (o.conversation) {
    auto tmpl = chat::resolve_template(o.chat_template, info.chat_template);
    if (!tmpl.ok()) {
      log_error("%s", tmpl.error().message.c_str());
      return 1;
    }
    log_info("conversation mode: chat template %s, keep %lld", chat::template_name(*tmpl),
             static_cast<long long>(o.n_keep));
    ConversationOptions co;
    co.chat_template = *tmpl;
    co.system_prompt = !o.system_prompt.empty() ? o.system_prompt : prompt;
    co.n_keep = o.n_keep;
    co.n_predict = o.n_predict;
    co.ignore_eos = o.ignore_eos;
    co.render.reasoning_effort = effort;
    co.show_reasoning = !o.hide_reasoning;
    co.dim_reasoning = os::stdout_is_terminal();
    ConsoleIo io;
    io.read_line = read_line;
    io.print = [](std::string_view s) { print_piece(std::string(s)); };
    io.interrupted = [] { return interrupted(); };
    io.clear_interrupt = [] { clear_interrupt(); };
    Status st = run_conversation(session, *tok, co, io);
    std::fputc('\n', stdout);
    const double total_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start)
            .count();
    print_timings(load_ms, session.timings(), total_ms);
    print_memory(session);
    if (!st.ok()) {
      log_error("%s", st.error().message.c_str());
      return 1;
    }
    return 0;
  }

  // A harmony model (gpt-oss) writes several messages: their headers are shown and <|end|>
  // between them does not stop the text (as llama.cpp's raw completion).
  GenerateParams gp;
  gp.max_tokens = o.n_predict;
  gp.ignore_eos = o.ignore_eos;
  if (auto t = chat::resolve_template(o.chat_template, info.chat_template); t.ok() && *t == chat::Template::Harmony) {
    const chat::ReplyTokens rt = chat::reply_tokens(*t);
    ReplyIds ids = reply_ids(*(*engine)->vocabulary(), rt.shown, rt.not_end, rt.end);
    gp.shown_tokens = std::move(ids.shown);
    gp.end_tokens = std::move(ids.end);
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

  Generator gen(*(*engine)->vocabulary());
  const std::string shown = gen.context(tokens);
  if (!o.no_display_prompt) print_piece(shown);

  auto finish = [&](int code) {
    print_piece(gen.finish());
    std::fputc('\n', stdout);
    std::fflush(stdout);
    const double total_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start)
            .count();
    print_timings(load_ms, session.timings(), total_ms);
    print_memory(session);
    if (o.sparsity_report || o.check_predictor)
      print_sparsity_report(session.sparsity(), info, shadow.get());
    return code;
  };

  // --prompt-cache: the session may already hold a prefix of the prompt.
  PromptCacheUse cache;
  if (!o.prompt_cache.empty() && !tokens.empty()) {
    auto c = restore_prompt_cache(session, o.prompt_cache, tokens, so.sampling, banned);
    if (!c.ok()) {
      log_error("%s", c.error().message.c_str());
      return finish(1);
    }
    cache = *c;
  }
  const auto stop_requested = [] { return interrupted(); };
  const std::span<const int32_t> rest =
      std::span<const int32_t>(tokens).subspan(static_cast<size_t>(cache.n_keep));
  if (Status s = session.prompt(rest, stop_requested); !s.ok()) {
    if (interrupted()) {
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
  // As llama.cpp: the prompt is saved once it is evaluated, unless the file held it already.
  const bool write_cache = !o.prompt_cache.empty() && !o.prompt_cache_ro && !tokens.empty();
  if (write_cache && cache.save && !o.prompt_cache_all) {
    auto w = session.save_state(0, o.prompt_cache, tokens);
    if (!w.ok()) {
      log_error("%s", w.error().message.c_str());
      return finish(1);
    }
    log_info("prompt cache %s: saved %zu tokens (%.1f MiB)", o.prompt_cache.c_str(),
             tokens.size(), static_cast<double>(*w) / 1048576.0);
  }
  if (!o.interactive) {
    auto stop = generate(session, gen, gp, shadow.get());
    if (!stop.ok()) {
      log_error("%s", stop.error().message.c_str());
      return finish(1);
    }
    if (write_cache && o.prompt_cache_all) {
      const std::vector<int32_t> fed = session.seq_tokens(0);  // the prompt and the answer fed
      auto w = session.save_state(0, o.prompt_cache, fed);
      if (!w.ok()) {
        log_error("%s", w.error().message.c_str());
        return finish(1);
      }
      log_info("prompt cache %s: saved %zu tokens (%.1f MiB)", o.prompt_cache.c_str(),
               fed.size(), static_cast<double>(*w) / 1048576.0);
    }
    if (*stop == Stop::ContextFull)
      log_info("\n[context full: %lld tokens]", static_cast<long long>(session.n_ctx()));
    if (*stop == Stop::Interrupted) log_info("\n[interrupted]");
    return finish(*stop == Stop::Interrupted ? 130 : 0);
  }

  // Interactive: answer the prompt (if any), then alternate user turns and answers.
  bool first_turn = tokens.empty();
  if (!tokens.empty()) {
    auto stop = generate(session, gen, gp, shadow.get());
    if (!stop.ok()) {
      log_error("%s", stop.error().message.c_str());
      return finish(1);
    }
    if (*stop == Stop::ContextFull) return finish(0);
  }
  std::string line;
  while (true) {
    clear_interrupt();
    print_piece(gen.finish());
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
      (void)gen.context(turn);  // the user's text is already on screen
      if (Status s = session.prompt(turn, stop_requested); !s.ok()) {
        if (interrupted()) continue;  // the turn was cut short: back to the input prompt
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
    auto stop = generate(session, gen, gp, shadow.get());
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
  add_gen_flags(sub, *o, "Tokens to generate (-1: until end of text or a full context)");
  sub->add_option("-c,--ctx-size", o->n_ctx,
                  "Context size in tokens (0: the model's, at most 4096)")
      ->capture_default_str();
  sub->add_flag(
      "-i,--interactive,--chat", o->interactive,
      "Interactive: after each answer, read a line from stdin; the context is kept across turns");
  sub->add_flag("--cnv,--conversation", o->conversation,
                "Conversation mode: the user types from the first turn, turns are rendered with "
                "the chat template, and a full context drops old turns (keeping --keep tokens)");
  sub->add_option("--sys,--system-prompt", o->system_prompt,
                  "Conversation mode: the system message (default: -p, if given)");
  sub->add_option("--chat-template", o->chat_template,
                  "Conversation mode: the chat template, by name (" + chat::template_names() +
                      ") or as Jinja text to recognise; default: the model's "
                      "tokenizer.chat_template");
  sub->add_option("--keep", o->n_keep,
                  "Conversation mode: tokens kept from the start when the context fills (-1: the "
                  "whole first turn; the BOS token is always kept)")
      ->capture_default_str();
  sub->add_option("--reasoning-effort", o->reasoning_effort,
                  "Conversation mode, gpt-oss (harmony) template: the reasoning effort in the "
                  "system message, low, medium or high")
      ->capture_default_str();
  sub->add_flag("--hide-reasoning", o->hide_reasoning,
                "Conversation mode, gpt-oss (harmony) template: print only the answer (the final "
                "channel), not the reasoning (the analysis channel, by default printed between "
                "[Start thinking] and [End thinking], dim on a terminal)");
  sub->add_option("--prompt-cache", o->prompt_cache,
                  "File to cache the prompt's state in: when it exists and matches the model, "
                  "the longest common prefix of its tokens and the prompt is restored instead of "
                  "evaluated; the prompt is saved there after it is evaluated");
  sub->add_flag("--prompt-cache-all", o->prompt_cache_all,
                "With --prompt-cache: also save the generated tokens (not in interactive mode)");
  sub->add_flag("--prompt-cache-ro", o->prompt_cache_ro,
                "With --prompt-cache: read the file, never write it");
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
