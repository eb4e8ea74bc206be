// Load-time checks of a model file beyond the shapes the architecture loaders verify: facts
// that would otherwise surface as wrong output or a failure when a token first appears.
// Every failure is one line naming the file and the key or tensor at fault.
#pragma once

#include <set>
#include <string>

#include "core/error.h"
#include "gguf/reader.h"
#include "model/hparams.h"

namespace pi::model {

// <arch>.block_count must equal the number of blocks the tensor names describe (blk.N.*: the
// largest N + 1). Called before the architecture loads its tensors.
Status check_block_count(const gguf::File& f, const HParams& hp);

// The vocabulary (tokenizer.ggml.tokens), when present, has one token per row of
// token_embd.weight (hp.n_vocab).
Status check_vocab_size(const gguf::File& f, const HParams& hp);

// The norm epsilon the architecture read must be finite and positive.
Status check_norm_eps(const gguf::File& f, const HParams& hp);

// Logs one warning naming the tensors of the file that neither the architecture loaded
// (`used`) nor the sparse predictors (blk.N.fc1/fc2) read.
void warn_unused_tensors(const gguf::File& f, const std::set<std::string>& used);

// Checks that tensor values are finite (no NaN or Inf). all == false: the 1-D tensors (norms,
// biases) and those of at most kSmallTensor elements, cheap enough for every load. all ==
// true: every tensor, with a progress bar on a terminal.
inline constexpr int64_t kSmallTensor = 65536;
Status check_tensor_values(const gguf::File& f, bool all);

}  // namespace pi::model
