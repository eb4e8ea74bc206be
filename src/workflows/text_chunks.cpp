#include "text_chunks.h"

#include <algorithm>
#include <optional>

#include "core/progress.h"
#include "runtime/context.h"
#include "tokenizer/tokenizer.h"

namespace pi::workflows {

Result<std::vector<int32_t>> text_tokens(const Tokenizer& tok, std::string_view text, int64_t max_tokens) {
  std::vector<int32_t> tokens = tok.encode(text, false, /*parse_special=*/false);
  if (max_tokens > 0 && static_cast<int64_t>(tokens.size()) > max_tokens)
    tokens.resize(static_cast<size_t>(max_tokens));
  if (tokens.empty()) return with_code(err("the text has no tokens"), ErrorCode::BadRequest);
  return tokens;
}

std::vector<std::vector<int32_t>> text_chunks(const Tokenizer& tok, std::span<const int32_t> tokens,
                                              int64_t n_ctx) {
  const bool bos = tok.add_bos() && tok.bos() >= 0;
  const auto chunk = static_cast<size_t>(n_ctx);
  std::vector<std::vector<int32_t>> out;
  for (size_t at = 0; at < tokens.size(); at += chunk) {
    const auto piece = tokens.subspan(at, std::min(chunk, tokens.size() - at));
    out.emplace_back(piece.begin(), piece.end());
    if (bos) out.back()[0] = tok.bos();
  }
  return out;
}

Status run_chunks(runtime::Context& ctx, const std::vector<std::vector<int32_t>>& chunks, const char* label,
                  bool progress, const std::function<Status(std::span<const int32_t>)>& after) {
  uint64_t total = 0;
  for (const auto& c : chunks) total += c.size();
  std::optional<ProgressBar> bar;
  if (progress) bar.emplace(label, total);
  uint64_t done = 0;
  for (const std::vector<int32_t>& piece : chunks) {
    PI_TRY(ctx.truncate(0));
    PI_TRY(ctx.decode(piece));
    if (after) PI_TRY(after(piece));
    done += piece.size();
    if (bar) bar->update(done);
  }
  if (bar) bar->finish();
  return Status::Ok();
}

}  // namespace pi::workflows
