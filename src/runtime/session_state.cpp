// Session::save_state and load_state (include/powerinfer/engine.h) over runtime/kv_state.h:
// the file format there, the cache's cells through Context::restore_seq.
#include <chrono>

#include "powerinfer/engine.h"
#include "runtime/context.h"
#include "runtime/kv_state.h"
#include "runtime/session_timings.h"
#include "runtime/sampler.h"

namespace pi {

Result<uint64_t> Session::save_state(int32_t seq, const std::string& path,
                                     std::span<const int32_t> tokens) {
  if (seq < 0 || seq >= n_seq_max()) {
    return with_code(err("%s: sequence id %d outside [0, %d)", path.c_str(), seq, n_seq_max()),
                     ErrorCode::BadRequest);
  }
  return runtime::write_seq_state(path, runtime::kv_fingerprint(ctx_->model(), ctx_->cache().types()), ctx_->cache(),
                                  seq, tokens);
}

Result<SavedState> Session::load_state(int32_t seq, const std::string& path) {
  if (seq < 0 || seq >= n_seq_max()) {
    return with_code(err("%s: sequence id %d outside [0, %d)", path.c_str(), seq, n_seq_max()),
                     ErrorCode::BadRequest);
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto file = runtime::SeqStateFile::open(path, runtime::kv_fingerprint(ctx_->model(), ctx_->cache().types()));
  if (!file.ok()) return file.error();
  PI_TRY(ctx_->restore_seq(seq, *file));
  const double ms = runtime::ms_since(t0);
  // The restore is charged as prompt work: its one evaluated token and the time it took, the
  // model's fingerprint and the file's reading included.
  runtime::charge(timings_, runtime::Phase::Prompt, ms, 1);
  const auto q = static_cast<size_t>(seq);
  runtime::charge(seq_timings_[q], runtime::Phase::Prompt, ms, 1);
  last_sampled_[q] = -1;
  runtime::Sampler& s = *samplers_[q];
  s.reset();
  for (int32_t t : file->tokens()) s.accept(t);
  return SavedState{file->tokens(), file->file_bytes()};
}

}  // namespace pi
