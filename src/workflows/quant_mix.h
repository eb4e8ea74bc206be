// Mixes for `powerinfer quantize`: which tensor gets which type, following llama.cpp's
// documented per-tensor recipes (llama_tensor_get_type) for the file types Q2_K, Q3_K_M,
// Q4_K_M, Q5_K_M, Q6_K and MXFP4_MOE.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tensor/dtype.h"

namespace pi::workflows {

enum class Mix { None, Q2_K, Q3_K_M, Q4_K_M, Q5_K_M, Q6_K, Mxfp4Moe };

// A quantize target: a plain type (mix None: every large matrix gets `base`) or a mix whose
// most common type is `base`.
struct QuantTarget {
  DType base = DType::Q4_0;
  Mix mix = Mix::None;
};

// "q4_k_m" (alias "q4_k"), "q5_k_m" ("q5_k"), "q3_k_m" ("q3_k"), "q6_k", "q2_k", "mxfp4_moe",
// or any computable type name ("q4_0", "mxfp4", "f16", ...); case-insensitive. nullopt when
// unknown.
std::optional<QuantTarget> parse_quant_target(std::string_view name);
std::string_view mix_name(Mix mix);
// llama.cpp's general.file_type of the mix (Q2_K 10, Q3_K_M 12, Q4_K_M 15, Q5_K_M 17, Q6_K 18,
// MXFP4_MOE 38).
uint32_t mix_file_type(Mix mix);

// The layer of a "blk.N.*" tensor name, or -1.
int layer_of(const std::string& name);

// The type of a large matrix under a mix (mix != None). n_layer: the model's block count.
// Rules (llama.cpp's, with use_more_bits(i) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2):
// - output.weight: Q6_K;
// - attn_v: Q2_K -> Q3_K; Q3_K_M -> Q5_K in layers 0-1, else Q4_K; Q4_K_M/Q5_K_M -> Q6_K where
//   use_more_bits;
// - ffn_down (and PowerInfer's ffn_down_t): Q2_K -> Q3_K; Q3_K_M -> Q5_K in the first n/16
//   layers, Q4_K where use_more_bits, else Q3_K; Q4_K_M/Q5_K_M -> Q6_K where use_more_bits;
// - attn_output: Q2_K -> Q3_K, Q3_K_M -> Q4_K; falcon's fused attn_qkv: Q3_K_M -> Q4_K,
//   Q4_K_M -> Q5_K, Q5_K_M -> Q6_K;
// - predictors (blk.N.fc1/fc2): the base type, but at least Q4_K (this engine's choice: the
//   original's recipe is not published, and 2-3 bit predictors mispredict);
// - everything else: the base type.
// A row length that is not a multiple of 256 falls back as llama.cpp does: Q4_K -> Q5_0,
// Q5_K -> Q5_1, Q6_K -> Q8_0, and Q2_K/Q3_K -> Q4_0 (llama.cpp now uses IQ4_NL there, which
// this engine does not compute).
// - MXFP4_MOE: the expert stacks (ffn_*_exps) MXFP4, every other matrix Q8_0 (as gpt-oss
//   ships: its experts in MXFP4, the rest at 8 bits or more); no 256-column fallback.
// - models of exactly 8 experts (Mixtral; n_expert): attn_k and attn_v Q8_0, attn_output Q5_K
//   for Q2_K, Q3_K_M and Q4_K_M (llama.cpp: "bumping this to Q8_0 trades just ~128MB").
DType mix_type(const std::string& name, int64_t cols, Mix mix, int n_layer, int64_t n_expert = 0);

}  // namespace pi::workflows
