#include "prompt_cache.h"

#include <algorithm>
#include <filesystem>

#include "core/log.h"

namespace pi::cli {

Result<PromptCacheUse> restore_prompt_cache(Session& s, const std::string& path,
                                            std::span<const int32_t> prompt,
                                            const SamplingParams& sampling,
                                            const std::vector<int32_t>& banned) {
  PromptCacheUse u;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    log_info("prompt cache %s does not exist yet", path.c_str());
    return u;
  }
  auto st = s.load_state(0, path);
  if (!st.ok()) return st.error();
  u.found = true;
  const std::vector<int32_t>& cached = st->tokens;
  u.n_cached = static_cast<int64_t>(cached.size());
  const size_t n_match = static_cast<size_t>(
      std::mismatch(cached.begin(), cached.end(), prompt.begin(), prompt.end()).first -
      cached.begin());
  // The whole prompt and nothing else: the session is ready to sample. A prompt that ends
  // inside the cache keeps one token less, evaluated again for its logits.
  if (n_match == cached.size() && n_match == prompt.size()) {
    u.n_keep = static_cast<int64_t>(n_match);
  } else {
    auto kept = s.seq_reuse_prefix(0, prompt);
    if (!kept.ok()) return kept.error();
    u.n_keep = *kept;
    PI_TRY(s.set_sampling(0, sampling, prompt.first(static_cast<size_t>(u.n_keep))));
    s.ban_tokens(0, banned);
  }
  u.save = n_match < prompt.size();
  log_info("prompt cache %s: restored %lld tokens, %zu of them match the prompt's %zu; "
           "evaluating %lld",
           path.c_str(), static_cast<long long>(u.n_cached), n_match, prompt.size(),
           static_cast<long long>(static_cast<int64_t>(prompt.size()) - u.n_keep));
  return u;
}

}  // namespace pi::cli
