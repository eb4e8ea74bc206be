// Writes a calibrated ("sparse-ready") model file: a copy of a GGUF file with the thresholds of
// act_sparsity.h in its metadata and the projections whose input a calibrated site thresholds
// stored transposed, so that a skipped input channel skips one contiguous row:
//
//   attn_in  -> attn_q_t, attn_k_t, attn_v_t     attn_out -> attn_output_t
//   ffn_in   -> ffn_gate_t                        ffn_gate -> ffn_down_t
//
// Each projection is stored once (the transposed copy replaces the original), so the file is
// the size of its source. A transposed matrix keeps its type when its new rows fit the type's
// blocks (else F16, reported); a quantized one is dequantized and quantized again along the
// other axis, which adds that type's rounding once more: calibrate F16/F32 files and quantize
// the result for the best quality. Streams tensor by tensor (one matrix in memory at a time).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/reader.h"
#include "sparse/act_sparsity.h"

namespace pi::workflows {

struct CalibratedFileReport {
  int n_transposed = 0;
  std::vector<std::string> fallbacks;  // transposed tensors written F16 (rows not block-aligned)
  uint64_t file_in = 0, file_out = 0;
};

// The tensor name a site stores transposed for layer `il`'s projection `name` ("attn_q"...);
// true when `tensor` ("blk.N.attn_q.weight") is one the sites in `sites` transpose.
bool transposed_by(const std::string& tensor, sparse::SiteSet sites);

// Writes `in` with calibration `c` (and its allocation, if any) to `out` (via out.part, renamed
// at the end). `in` may be a calibrated file: its transposed tensors are copied as they are
// and its act_sparsity keys replaced by c's.
Result<CalibratedFileReport> write_calibrated(const gguf::File& in,
                                              const sparse::ActSparsityCalibration& c,
                                              const std::string& out, int threads, bool progress);

}  // namespace pi::workflows
