// `run --prompt-cache FILE` (llama.cpp's flag): a sequence state file (docs/FORMATS.md) holding
// an earlier run's prompt. Restoring it keeps the longest common prefix of its tokens and the
// new prompt, so only the rest is evaluated; the output is what a cold run prints.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "powerinfer/engine.h"

namespace pi::cli {

struct PromptCacheUse {
  int64_t n_keep = 0;     // prompt tokens the session holds after the restore (0: cold)
  int64_t n_cached = 0;   // tokens the file held
  bool found = false;     // the file existed
  // Whether the prompt should be saved after it is evaluated: the file was missing or did not
  // hold the whole prompt (llama.cpp saves only then).
  bool save = true;
};

// Restores `path` into sequence 0 of `s` (which holds nothing) if it exists and keeps the
// longest common prefix with `prompt`: the session then holds prompt[0, n_keep), with the
// logits of its last token when n_keep == prompt.size(), and sequence 0's sampler is as if a
// fresh session had been fed prompt[0, n_keep) (`sampling`, `banned` banned). A file that
// exists but cannot be restored (another model, truncated, too long for the context) is an
// error, as in llama.cpp.
Result<PromptCacheUse> restore_prompt_cache(Session& s, const std::string& path,
                                            std::span<const int32_t> prompt,
                                            const SamplingParams& sampling,
                                            const std::vector<int32_t>& banned);

}  // namespace pi::cli
