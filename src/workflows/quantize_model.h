// Model quantization: reads a GGUF/PowerInfer file and writes a copy whose large matrices
// are converted to another type. Streams tensor by tensor, row block by row block, so a
// 7B file needs O(rows-per-chunk) memory, not the file size.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "workflows/quant_mix.h"
#include "tensor/dtype.h"

namespace pi::workflows {

struct QuantizeOptions {
  std::string input, output;
  DType target = DType::Q4_0;
  // A K-quant mix (quant_mix.h) decides each matrix's type instead of `target` (its base).
  Mix mix = Mix::None;
  bool allow_requantize = false;
  // Ordered (glob pattern, type) overrides matched against tensor names; first match wins.
  std::vector<std::pair<std::string, DType>> overrides;
  int threads = 2;
  bool progress = false;  // a progress bar on stderr
};

// Round-trip error of the converted tensors of one output type: sum (x - x')^2 and sum x^2
// over their elements, x the source values and x' what the written blocks decode to.
struct TypeError {
  DType type = DType::F32;
  int n_tensors = 0;
  uint64_t n_elements = 0;
  double sq_err = 0.0, sq_x = 0.0;
  double rmse() const { return n_elements > 0 ? std::sqrt(sq_err / static_cast<double>(n_elements)) : 0.0; }
  double relative() const { return sq_x > 0.0 ? std::sqrt(sq_err / sq_x) : 0.0; }
};

struct QuantizeReport {
  uint64_t bytes_in = 0, bytes_out = 0;  // tensor data bytes
  uint64_t file_in = 0, file_out = 0;    // whole files
  int n_quantized = 0, n_copied = 0;
  std::vector<TypeError> errors;         // per output type of the converted tensors
};

// The type a tensor gets for a given target (before overrides). Rules:
// - tensors that are not 2-D "*.weight" matrices (norms, biases, gpu index) keep their type;
// - predictor matrices (blk.N.fc1/fc2) get the target type;
// - output.weight gets Q6_K for 4- and 5-bit targets when its rows allow (else Q8_0);
// - a model of exactly 8 experts (n_expert: Mixtral) keeps attn_k and attn_v at Q8_0 under a
//   block-quantized target, as llama.cpp does;
// - everything else gets the target; a row length the target's block cannot divide falls
//   back to F16 (and is reported).
DType choose_type(const std::string& name, int rank, int64_t cols, DType source, DType target,
                  int64_t n_expert = 0);

Result<QuantizeReport> quantize_model(const QuantizeOptions& opts);

// llama.cpp's general.file_type value for a target type ("mostly Q4_0" = 2, ...).
uint32_t file_type_for(DType target);

// Glob match with '*' and '?'.
bool glob_match(const std::string& pattern, const std::string& text);

}  // namespace pi::workflows
