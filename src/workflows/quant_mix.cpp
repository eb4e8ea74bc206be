#include "workflows/quant_mix.h"

#include <cctype>
#include <cstdlib>

namespace pi::workflows {
namespace {

bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

bool has_suffix(const std::string& name, std::string_view part) {
  return name.ends_with(std::string(part) + ".weight");
}

DType base_of(Mix mix) {
  switch (mix) {
    case Mix::Q2_K: return DType::Q2_K;
    case Mix::Q3_K_M: return DType::Q3_K;
    case Mix::Q4_K_M: return DType::Q4_K;
    case Mix::Q5_K_M: return DType::Q5_K;
    default: return DType::Q6_K;
  }
}

DType fallback(DType t) {
  switch (t) {
    case DType::Q4_K: return DType::Q5_0;
    case DType::Q5_K: return DType::Q5_1;
    case DType::Q6_K: return DType::Q8_0;
    default: return DType::Q4_0;  // Q2_K, Q3_K
  }
}

}  // namespace

std::optional<QuantTarget> parse_quant_target(std::string_view name) {
  std::string s(name);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "q2_k") return QuantTarget{DType::Q2_K, Mix::Q2_K};
  if (s == "q3_k_m" || s == "q3_k") return QuantTarget{DType::Q3_K, Mix::Q3_K_M};
  if (s == "q4_k_m" || s == "q4_k") return QuantTarget{DType::Q4_K, Mix::Q4_K_M};
  if (s == "q5_k_m" || s == "q5_k") return QuantTarget{DType::Q5_K, Mix::Q5_K_M};
  if (s == "q6_k") return QuantTarget{DType::Q6_K, Mix::Q6_K};
  if (s == "mxfp4_moe") return QuantTarget{DType::MXFP4, Mix::Mxfp4Moe};
  auto t = dtype_from_name(s);
  if (!t || !dtype_info(*t).computable || *t == DType::I32) return std::nullopt;
  return QuantTarget{*t, Mix::None};
}

std::string_view mix_name(Mix mix) {
  switch (mix) {
    case Mix::Q2_K: return "q2_k";
    case Mix::Q3_K_M: return "q3_k_m";
    case Mix::Q4_K_M: return "q4_k_m";
    case Mix::Q5_K_M: return "q5_k_m";
    case Mix::Q6_K: return "q6_k";
    case Mix::Mxfp4Moe: return "mxfp4_moe";
    default: return "";
  }
}

uint32_t mix_file_type(Mix mix) {
  switch (mix) {
    case Mix::Q2_K: return 10;
    case Mix::Q3_K_M: return 12;
    case Mix::Q4_K_M: return 15;
    case Mix::Q5_K_M: return 17;
    case Mix::Mxfp4Moe: return 38;
    default: return 18;
  }
}

int layer_of(const std::string& name) {
  if (!name.starts_with("blk.")) return -1;
  char* end = nullptr;
  const long v = std::strtol(name.c_str() + 4, &end, 10);
  if (end == name.c_str() + 4 || *end != '.' || v < 0 || v > 1000000) return -1;
  return static_cast<int>(v);
}

DType mix_type(const std::string& name, int64_t cols, Mix mix, int n_layer, int64_t n_expert) {
  if (mix == Mix::Mxfp4Moe) return name.find("_exps") != std::string::npos ? DType::MXFP4 : DType::Q8_0;
  const DType base = base_of(mix);
  const int i = layer_of(name);
  const int n = n_layer > 0 ? n_layer : 1;
  DType t = base;
  if (name == "output.weight") {
    t = DType::Q6_K;
  } else if (has_suffix(name, "attn_v")) {
    if (mix == Mix::Q2_K) t = DType::Q3_K;
    if (mix == Mix::Q3_K_M) t = i < 2 ? DType::Q5_K : DType::Q4_K;
    if ((mix == Mix::Q4_K_M || mix == Mix::Q5_K_M) && use_more_bits(i, n)) t = DType::Q6_K;
    if (n_expert == 8) t = DType::Q8_0;
  } else if (has_suffix(name, "attn_k")) {
    if (n_expert == 8) t = DType::Q8_0;
  } else if (has_suffix(name, "ffn_down") || has_suffix(name, "ffn_down_t") || has_suffix(name, "ffn_down_exps") ||
             has_suffix(name, "ffn_down_exps_t")) {
    if (mix == Mix::Q2_K) t = DType::Q3_K;
    if (mix == Mix::Q3_K_M) {
      t = i < n / 16 ? DType::Q5_K : use_more_bits(i, n) ? DType::Q4_K : DType::Q3_K;
    }
    if ((mix == Mix::Q4_K_M || mix == Mix::Q5_K_M) && use_more_bits(i, n)) t = DType::Q6_K;
  } else if (has_suffix(name, "attn_output")) {
    if (n_expert == 8) {
      if (mix == Mix::Q2_K || mix == Mix::Q3_K_M || mix == Mix::Q4_K_M) t = DType::Q5_K;
    } else {
      if (mix == Mix::Q2_K) t = DType::Q3_K;
      if (mix == Mix::Q3_K_M) t = DType::Q4_K;
    }
  } else if (has_suffix(name, "attn_qkv")) {
    if (mix == Mix::Q3_K_M) t = DType::Q4_K;
    if (mix == Mix::Q4_K_M) t = DType::Q5_K;
    if (mix == Mix::Q5_K_M) t = DType::Q6_K;
  } else if (i >= 0 && (has_suffix(name, "fc1") || has_suffix(name, "fc2"))) {
    if (base == DType::Q2_K || base == DType::Q3_K) t = DType::Q4_K;
  }
  if (cols % 256 != 0) t = fallback(t);
  return t;
}

}  // namespace pi::workflows
