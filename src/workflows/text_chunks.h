// The evaluation of a text the measuring workflows share (profile, calibrate and its
// allocation search): the text's tokens (no BOS added, special tokens read as text), at most
// max_tokens of them, in chunks of n_ctx tokens (the last may be shorter), the first token of
// each replaced by BOS when the vocabulary adds one, each chunk run from an empty cache.
// (Perplexity scores whole chunks only, as llama.cpp does, and keeps its own split.)
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace pi {
class Tokenizer;
namespace runtime {
class Context;
}
}  // namespace pi

namespace pi::workflows {

// The tokens of `text`, cut after max_tokens (0: all); a BadRequest "the text has no tokens"
// when there are none.
Result<std::vector<int32_t>> text_tokens(const Tokenizer& tok, std::string_view text, int64_t max_tokens);

// `tokens` in chunks of n_ctx, BOS in front of each when the vocabulary adds one.
std::vector<std::vector<int32_t>> text_chunks(const Tokenizer& tok, std::span<const int32_t> tokens,
                                              int64_t n_ctx);

// Runs each chunk through `ctx` from an empty cache, then `after(chunk)` when given; a bar
// named `label` on stderr counts the tokens when `progress`.
Status run_chunks(runtime::Context& ctx, const std::vector<std::vector<int32_t>>& chunks, const char* label,
                  bool progress, const std::function<Status(std::span<const int32_t>)>& after = {});

}  // namespace pi::workflows
