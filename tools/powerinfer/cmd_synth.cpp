// `powerinfer synth`: writes a model of a real shape with random weights whose ReLU
// activations are sparse with a power-law distribution of neuron frequencies, and (for
// PowerInfer files) predictors that predict them. See docs/SYNTH.md.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>

#include "cli_checks.h"
#include "commands.h"
#include "core/log.h"
#include "powerinfer/synth.h"

namespace pi::cli {

Runner add_synth(CLI::App& app) {
  auto o = std::make_shared<SynthParams>();
  CLI::App* sub = app.add_subcommand(
      "synth",
      "Write a synthetic model (real shapes, random weights) for speed work: sparse ReLU\n"
      "activations with a power-law neuron frequency distribution and working predictors.");
  sub->add_option("-o,--output", o->output, "Output model file")->required();
  sub->add_option("--preset", o->preset,
                  "Shapes: tiny, llama2-7b, llama2-13b, bamboo-7b, falcon-40b, and the "
                  "mixture-of-experts tiny-moe, qwen3-30b-a3b, mixtral-8x7b, smallthinker-21b-a3b, "
                  "smallthinker-4b-a0.6b, gpt-oss-20b, gpt-oss-120b (experts MXFP4; --type q8_0 for "
                  "the rest, as the released files)")
      ->capture_default_str();
  sub->add_option("--arch", o->arch, "Override the architecture: llama, bamboo, falcon, qwen3moe, smallthinker, gpt-oss");
  sub->add_option("--experts", o->experts,
                  "Mixture of experts: experts per layer (qwen3moe, or llama as Mixtral); SwiGLU experts");
  sub->add_option("--experts-used", o->experts_used, "Experts each token routes to (top-k)");
  sub->add_option("--expert-ff", o->expert_ff, "An expert's FFN width");
  sub->add_option("--head-dim", o->head_dim,
                  "Attention head width when not embd / heads (qwen3moe, smallthinker, gpt-oss)");
  sub->add_flag("--transpose-down", o->transpose_down,
                "smallthinker: store the experts' down projections transposed (ffn_down_exps_t), so "
                "zero gates skip whole rows");
  sub->add_option("--swa", o->swa,
                  "Sliding window: smallthinker's layers 1-3, 5-7, ..., gpt-oss's even layers (0: none; "
                  "default: the preset's)");
  sub->add_option("--layers", o->layers, "Number of blocks");
  sub->add_option("--embd", o->embd, "Embedding width (multiple of 32)");
  sub->add_option("--ff", o->ff, "FFN width (neurons per layer)");
  sub->add_option("--heads", o->heads, "Attention heads");
  sub->add_option("--kv-heads", o->kv_heads, "Key/value heads");
  sub->add_option("--vocab", o->vocab, "Vocabulary size (>= 259)");
  sub->add_option("--ctx", o->ctx, "Training context length recorded in the file");
  sub->add_option("--type", o->type,
                  "Type of the 2-D weights: f32, f16, q8_0, q4_0 (norms stay f32)")
      ->capture_default_str();
  sub->add_flag("--pwri", o->pwri,
                "Write a PowerInfer file (PWRI magic, ffn_down_t, fc1/fc2 predictors)");
  sub->add_option("--act", o->act,
                  "FFN activation: relu, or silu (llama: an ordinary SwiGLU model whose hidden "
                  "states are heavy-tailed, for `powerinfer calibrate`)")
      ->capture_default_str();
  sub->add_option("--activity", o->activity, "Mean fraction of neurons firing per token")
      ->capture_default_str();
  sub->add_option("--hot-fraction", o->hot_fraction, "Fraction of neurons that are 'hot'")
      ->capture_default_str();
  sub->add_option("--hot-share", o->hot_share, "Share of activations the hot neurons carry")
      ->capture_default_str();
  sub->add_option("--predictor-rank", o->predictor_rank,
                  "Rows of fc1 (default n_embd/4 rounded down to 32, at least 64)");
  sub->add_option("--noise", o->noise,
                  "Gate noise the predictor cannot see, relative to the part it can")
      ->capture_default_str();
  sub->add_option("--margin", o->margin,
                  "Predictor threshold below 0, in standard deviations of the logit")
      ->capture_default_str();
  sub->add_option("--activation-dir", o->activation_dir,
                  "Also write DIR/activation_N.npy and DIR/activation_stats.gguf: each neuron's expected firing frequency");
  sub->add_option("--seed", o->seed, "Random seed")->capture_default_str();
  sub->add_option("-t,--threads", o->threads, "Threads (0: all)");
  sub->add_flag(
      "--no-progress", [o](int64_t) { o->progress = false; }, "No progress bar");
  return [o]() -> int {
    if (Status s = check_threads("-t", o->threads, 0); !s.ok()) {
      log_error("%s", s.error().message.c_str());
      return 1;
    }
    auto start = std::chrono::steady_clock::now();
    auto rep = synthesize(*o);
    if (!rep.ok()) {
      log_error("%s", rep.error().message.c_str());
      return 1;
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("wrote %s: %s %s, %d tensors, %.2f MiB in %.1f s\n", o->output.c_str(),
                rep->powerinfer ? "PowerInfer" : "GGUF", rep->name.c_str(), rep->n_tensors,
                static_cast<double>(rep->file_bytes) / 1048576.0, secs);
    if (rep->n_expert > 0) {
      std::printf("experts: %lld per layer, %lld per token, %s of width %lld (random routing)\n",
                  static_cast<long long>(rep->n_expert), static_cast<long long>(rep->n_expert_used),
                  rep->reglu_experts ? "ReGLU" : "SwiGLU", static_cast<long long>(rep->n_ff_exp));
      if (rep->reglu_experts)
        std::printf("expert neurons: activity %.4f, top %.0f%% carry %.0f%% (power law exponent %.4f)\n",
                    rep->expected_activity, 100 * rep->hot_fraction, 100 * rep->hot_share, rep->alpha);
    } else {
      std::printf("activity %.4f, top %.0f%% of neurons carry %.0f%% (power law exponent %.4f)\n",
                  rep->expected_activity, 100 * rep->hot_fraction, 100 * rep->hot_share, rep->alpha);
    }
    if (rep->powerinfer) {
      std::printf("predictor rank %lld, threshold %.6g\n", static_cast<long long>(rep->predictor_rank),
                  rep->threshold);
    }
    if (rep->n_activation_files > 0) {
      std::printf("wrote %d activation files and %s to %s\n", rep->n_activation_files,
                  rep->stats_file.c_str(), rep->activation_dir.c_str());
    }
    return 0;
  };
}

}  // namespace pi::cli
