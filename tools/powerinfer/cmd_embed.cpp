// `powerinfer embed`: embeddings of texts, llama.cpp `llama-embedding` style. Each input (-p,
// repeated, or one per non-empty line of -f) is tokenized as the server does (BOS when the
// vocabulary adds one, special tokens parsed), evaluated on its own sequence from position 0
// and pooled from the hidden states after the output norm (Session::embed), or, with
// --pooling none, every token's state given as it is; inputs go
// through the model together, as many at once as the context and 64 sequences hold.
// Vectors go to stdout; the model line and timings to stderr.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli_checks.h"
#include "commands.h"
#include "core/log.h"
#include "gen_options.h"
#include "powerinfer/engine.h"
#include "llama_flags.h"
#include "text_file.h"

namespace pi::cli {
namespace {

struct EmbedOptions : ModelFlags {
  std::string model;
  std::vector<std::string> prompts;  // -p, repeated
  std::string prompt_file;           // -f: one input per non-empty line
  int n_threads = 0;
  int64_t n_ctx = 0;
  int64_t n_batch = 512;
  std::string device = "cpu";
  bool dense = false;
  ModelLoad load = ModelLoad::Auto;
  std::string pooling = "mean";
  int normalize = 2;           // --embd-normalize: -1 none, 2 Euclidean
  std::string format = "text";  // --embd-output-format: text | array | json
};

Status validate(const EmbedOptions& o) {
  PI_TRY(check_threads("-t", o.n_threads));
  PI_TRY(check_model_flags(o));
  if (o.n_ctx < 0) return err("-c must be >= 0 (0: the model's, at most 4096; got %lld)", static_cast<long long>(o.n_ctx));
  if (o.n_batch < 1) return err("-b must be >= 1 (got %lld)", static_cast<long long>(o.n_batch));
  if (!o.prompts.empty() && !o.prompt_file.empty()) return err("-p and -f are mutually exclusive");
  if (o.prompts.empty() && o.prompt_file.empty()) return err("no input: pass -p TEXT (repeatable) or -f FILE");
  if (!parse_pooling(o.pooling))
    return err("--pooling must be mean, last, cls or none (got '%s')", o.pooling.c_str());
  if (o.normalize != -1 && o.normalize != 2) {
    return err("--embd-normalize must be -1 (none) or 2 (Euclidean); %d is not supported",
               o.normalize);
  }
  if (o.format != "text" && o.format != "array" && o.format != "json") {
    return err("--embd-output-format must be text, array or json (got '%s')", o.format.c_str());
  }
  return Status::Ok();
}

// The inputs: each -p, or each non-empty line of -f (a trailing '\r' dropped).
Result<std::vector<std::string>> inputs(const EmbedOptions& o) {
  if (o.prompt_file.empty()) return o.prompts;
  auto text = read_text_file(o.prompt_file);
  if (!text.ok()) return text.error();
  std::vector<std::string> lines;
  size_t at = 0;
  while (at <= text->size()) {
    size_t end = text->find('\n', at);
    if (end == std::string::npos) end = text->size();
    std::string line = text->substr(at, end - at);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) lines.push_back(std::move(line));
    at = end + 1;
  }
  if (lines.empty()) return err("%s: no non-empty lines to embed", o.prompt_file.c_str());
  return lines;
}

// `v` holds one row of n_embd floats per input, or with --pooling none one per token.
void print(const EmbedOptions& o, const std::string& model_name, int64_t n_embd,
           const std::vector<float>& v, const std::vector<std::vector<int32_t>>& tokens) {
  const auto d = static_cast<size_t>(n_embd);
  const size_t n = tokens.size();
  const bool per_token = *parse_pooling(o.pooling) == Pooling::None;
  const auto row_count = [&](size_t i) { return per_token ? tokens[i].size() : size_t{1}; };
  if (o.format == "text") {
    size_t r = 0;
    for (size_t i = 0; i < n; ++i) {
      for (size_t k = 0; k < row_count(i); ++k, ++r) {
        if (per_token) {
          std::printf("embedding %zu token %zu:", i, k);
        } else {
          std::printf("embedding %zu:", i);
        }
        for (size_t j = 0; j < d; ++j) std::printf(" %9.6f", static_cast<double>(v[r * d + j]));
        std::printf("\n");
      }
    }
    return;
  }
  using json = nlohmann::json;
  // Per input: its vector, or (none) the array of its tokens' vectors.
  json rows = json::array();
  size_t r = 0;
  for (size_t i = 0; i < n; ++i) {
    json tok = json::array();
    for (size_t k = 0; k < row_count(i); ++k, ++r)
      tok.push_back(std::vector<float>(v.begin() + static_cast<ptrdiff_t>(r * d),
                                       v.begin() + static_cast<ptrdiff_t>((r + 1) * d)));
    rows.push_back(per_token ? std::move(tok) : std::move(tok[0]));
  }
  if (o.format == "array") {
    std::printf("%s\n", rows.dump().c_str());
    return;
  }
  json data = json::array();
  int64_t n_tokens = 0;
  for (size_t i = 0; i < n; ++i) {
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", rows[i]}});
    n_tokens += static_cast<int64_t>(tokens[i].size());
  }
  const json out = {{"object", "list"}, {"data", data}, {"model", model_name},
                    {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}}};
  std::printf("%s\n", out.dump().c_str());
}

int embed(const EmbedOptions& o_in) {
  EmbedOptions o = o_in;
  if (Status s = validate(o); !s.ok()) return fail(s);
  if (o.model.empty()) {
    GenOptions g;
    auto m = resolve_model(g);
    if (!m.ok()) return fail(m.error());
    o.model = *m;
  }
  auto texts = inputs(o);
  if (!texts.ok()) return fail(texts.error());
  const auto t_start = std::chrono::steady_clock::now();
  auto engine = Engine::load(o.model, load_options(o, o.load));
  if (!engine.ok()) return fail(engine.error());
  const Vocabulary* vocab = (*engine)->vocabulary();
  if (vocab == nullptr) {
    return fail(err("%s: the file has no vocabulary (tokenizer.ggml.model), so it cannot embed text",
                    o.model.c_str()));
  }
  std::vector<std::vector<int32_t>> tokens;
  for (size_t i = 0; i < texts->size(); ++i) {
    tokens.push_back(vocab->encode((*texts)[i], vocab->add_bos(), /*parse_special=*/true));
    if (tokens.back().empty()) return fail(err("input %zu is empty and the vocabulary has no BOS token", i));
  }

  SessionOptions so = env_session_options();
  so.n_ctx = o.n_ctx;
  so.n_batch = o.n_batch;
  so.n_threads = o.n_threads;
  so.device = o.device;
  so.sparse.dense = o.dense;
  so.n_seq_max = static_cast<int>(std::min<size_t>(tokens.size(), 64));
  if (Status s = apply_hybrid_flags(o, so); !s.ok()) return fail(s);
  auto session_r = Session::create(**engine, so);
  if (!session_r.ok()) return fail(session_r.error());
  Session& session = **session_r;
  if (Status s = session.embed_fits(tokens); !s.ok()) return fail(s);
  const int64_t n_ctx = session.n_ctx();
  const ModelInfo& info = (*engine)->info();
  log_model_info(o.model, info, session.sparsity().sparse);
  log_info("%zu inputs, pooling %s, %s, context %lld, batch %lld, threads %d", tokens.size(),
           o.pooling.c_str(), o.normalize == 2 ? "normalized (Euclidean)" : "not normalized",
           static_cast<long long>(n_ctx), static_cast<long long>(session.n_batch()),
           session.n_threads());

  const EmbedParams params{*parse_pooling(o.pooling), o.normalize == 2};
  std::vector<float> all;
  if (Status s = session.embed_all(tokens, params, all); !s.ok()) return fail(s);
  print(o, std::filesystem::path(o.model).filename().string(), info.n_embd, all, tokens);
  const Timings& tm = session.timings();
  log_info("embedded %lld tokens in %.2f ms (%.2f tokens per second); total %.2f ms",
           static_cast<long long>(tm.n_prompt), tm.prompt_ms,
           tm.prompt_ms > 0 ? 1e3 * static_cast<double>(tm.n_prompt) / tm.prompt_ms : 0.0,
           1e3 * seconds_since(t_start));
  return 0;
}

}  // namespace

Runner add_embed(CLI::App& app) {
  auto o = std::make_shared<EmbedOptions>();
  o->n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  CLI::App* sub = app.add_subcommand(
      "embed",
      "Embeddings of texts (llama.cpp's llama-embedding): the model's final hidden states after\n"
      "the output norm, pooled over each input's tokens (the output head is not computed).\n"
      "Each input is evaluated on its own, from an empty context. Output formats:\n"
      "  text   one line per input: 'embedding I: v v v ...' (default)\n"
      "  array  [[v, ...], ...]\n"
      "  json   OpenAI's embeddings object {object: list, data: [{object: embedding, index,\n"
      "         embedding}], model, usage}, as `powerinfer serve` answers /v1/embeddings\n"
      "With --pooling none every token's vector is given: text lines 'embedding I token K: ...',\n"
      "and in array and json each input's embedding is the array of its tokens' vectors.\n"
      "Vectors go to stdout, everything else to stderr.");
  sub->add_option("-m,--model", o->model, std::string("Model file (default: ") + kDefaultModel + " if present)");
  sub->add_option("-p,--prompt", o->prompts, "Text to embed; repeat for several inputs")->allow_extra_args(false);
  sub->add_option("-f,--file", o->prompt_file, "File whose non-empty lines are the inputs");
  sub->add_option("--pooling", o->pooling, "How tokens' states become one vector: mean, last, cls (the first token) or none (one vector per token)")
      ->capture_default_str();
  sub->add_option("--embd-normalize", o->normalize, "Normalisation of each vector: -1 none, 2 Euclidean (L2)")
      ->capture_default_str();
  sub->add_option("--embd-output-format", o->format, "text, array or json (see above)")->capture_default_str();
  sub->add_option("-t,--threads", o->n_threads, "Threads (default: one per hardware thread)")->capture_default_str();
  sub->add_option("-c,--ctx-size", o->n_ctx, "KV-cache tokens; the longest input must fit (0: the model's, at most 4096)")
      ->capture_default_str();
  sub->add_option("-b,--batch-size", o->n_batch, "Tokens per forward pass")->capture_default_str();
  add_device_option(sub, o->device);
  sub->add_flag("--dense", o->dense, kDenseHelp);
  add_load_flags(sub, o->load);
  add_model_flags(sub, *o);
  return [o]() -> int { return embed(*o); };
}

}  // namespace pi::cli
