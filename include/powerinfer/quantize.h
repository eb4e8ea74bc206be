// Quantizing a model file: the library's `powerinfer quantize` (also the C API's
// pi_model_quantize and Python's powerinfer.quantize). Reads a GGUF or PowerInfer file and
// writes a copy whose large matrices are converted, keeping the magic (PWRI stays PWRI), all
// metadata and the small tensors; streams tensor by tensor, row block by row block, so memory
// stays flat for any file size.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "powerinfer/error.h"

namespace pi {

struct QuantizeParams {
  std::string input, output;  // output must not be the input file
  // A type (f32, f16, bf16, q8_0, q5_1, q5_0, q4_1, q4_0, mxfp4), a mix following llama.cpp's
  // per-tensor recipes (q6_k, q5_k_m, q4_k_m, q3_k_m, q2_k, mxfp4_moe; "q4_k" for q4_k_m, ...),
  // in any case, or llama.cpp's numeric file-type id ("2" = q4_0, "15" = q4_k_m).
  std::string type = "q4_0";
  // Tensors already quantized are refused unless allowed (quality drops against F16/F32).
  bool allow_requantize = false;
  // (glob over tensor names, type name), first match wins: "blk.*.ffn_down_t.weight=q8_0".
  std::vector<std::pair<std::string, std::string>> overrides;
  int threads = 2;
  bool progress = false;  // a progress bar on stderr (when it is a terminal)
};

// Round-trip error of the converted tensors of one output type: x the source values, x' what
// the written blocks decode to.
struct QuantizeTypeStats {
  std::string type;
  int n_tensors = 0;
  uint64_t n_elements = 0;
  double rmse = 0;      // sqrt(sum (x - x')^2 / n)
  double relative = 0;  // sqrt(sum (x - x')^2 / sum x^2)
};

struct QuantizeReport {
  uint64_t bytes_in = 0, bytes_out = 0;  // tensor data
  uint64_t file_in = 0, file_out = 0;    // whole files
  int n_quantized = 0, n_copied = 0;
  std::vector<QuantizeTypeStats> types;  // per output type of the converted tensors
};

// Fails with a one-line message naming the file, tensor, type or override at fault (an
// unknown type, a bad override, output == input, a tensor already quantized, ...), writing
// nothing usable.
Result<QuantizeReport> quantize_model(const QuantizeParams& p);

// "PATTERN=TYPE" as the CLI's --override takes it: the pair, or an error naming the text.
Result<std::pair<std::string, std::string>> parse_quantize_override(const std::string& text);

}  // namespace pi
