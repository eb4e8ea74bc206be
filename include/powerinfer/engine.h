// The engine's public API: load a model once (Engine), then run one or more inference
// sessions over it (Session). A session owns a KV cache, a thread pool and a sampler per
// sequence; it feeds prompt tokens in batches and generates one token at a time. A session
// created with n_seq_max > 1 also decodes several sequences at once (batched generation):
//
//   (*session)->prompt(prompt_tokens);                      // sequence 0
//   for (int s = 1; s < n; ++s) (*session)->fork(0, s);     // shares the prompt's cells
//   int32_t t = (*session)->sample(s, (*session)->logits());  // per sequence
//   (*session)->decode(batch);  // {token, seq, pos, logits} entries, one forward pass
//   t = (*session)->sample(s, (*session)->batch_logits(i));  ...
//
//   auto engine = pi::Engine::load("model.gguf");            // Result<unique_ptr<Engine>>
//   auto session = pi::Session::create(**engine, {.n_ctx = 2048, .n_threads = 4});
//   (*session)->prompt((*engine)->vocabulary()->encode("Hello", true, false));
//   int32_t t = (*session)->sample();  (*session)->advance(t);  ...
//
// Embeddings (embedding.h): one pooled vector per input, f32 [n_embd] each, no output head:
//   std::vector<float> e;
//   (*session)->embed(tokens, {.pooling = pi::Pooling::Mean, .normalize = true}, e);
//
// Thread-safety: an Engine is immutable and may be shared by sessions on different threads;
// a Session is driven by one thread at a time. Errors are one-line messages (pi::Error).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "powerinfer/error.h"
#include "powerinfer/batch.h"
#include "powerinfer/embedding.h"
#include "powerinfer/placement.h"
#include "powerinfer/sampling.h"
#include "powerinfer/sparsity.h"
#include "powerinfer/vocabulary.h"

namespace pi {

class Tokenizer;
namespace model {
class Model;
}
namespace runtime {
class Context;
class Sampler;
struct EngineAccess;  // the layers inside the library reach the model and tokenizer through it
}  // namespace runtime
namespace grammar {
class TokenSet;
struct Rules;
}  // namespace grammar

struct ModelInfo {
  std::string path;
  std::string architecture;  // general.architecture
  std::string name;          // general.name, may be empty
  bool powerinfer = false;   // PWRI file
  std::string activation;    // FFN activation that runs: silu | relu | gelu
  int64_t n_vocab = 0, n_ctx_train = 0, n_embd = 0, n_layer = 0, n_ff = 0;
  int64_t n_head = 0, n_head_kv = 0;
  uint64_t file_bytes = 0;
  bool mmap = true;              // mapped (true) or read into memory (LoadOptions::load)
  uint64_t repacked_bytes = 0;   // weights converted in place at load to the CPU's layouts (repack)
  uint64_t huge_page_bytes = 0;  // read into memory: bytes the kernel backs with huge pages
  uint64_t weight_bytes_per_token = 0;  // bytes of weights one decode step reads
  std::string chat_template;  // tokenizer.chat_template (Jinja source); empty when absent
};

// How the model file gets into memory. Map: mmap it (instant load, pages shared with the page
// cache and other processes; llama.cpp's default). Read: read it into memory backed by
// transparent huge pages (llama.cpp's --no-mmap): a copy at load (~1 s for 4 GB), faster
// decoding (dense 7B Q4_0 1.27x on an Intel Xeon, fewer TLB misses). Auto: Read when huge
// pages are on and the file and 1 GiB fit in the memory available now, else Map.
enum class ModelLoad { Auto, Map, Read };

struct LoadOptions {
  ModelLoad load = ModelLoad::Auto;
  // Lock the model in RAM (mlock) so it is never paged out; a failure is a warning.
  bool mlock = false;
  // Check every weight for NaN/Inf at load (slow: reads the whole file). The norms and other
  // small tensors are always checked.
  bool check_tensors = false;
  // A file read into memory holds its transposed Q4_0 weights (calibrated and PowerInfer
  // files) in the CPU's layout for them (Q4_0_SPLIT with AVX-512 kernels), converted in place
  // at load: one copy in RAM. Sessions that want the file's layout (repack = false, another
  // device) get a copy of it. The same for the Q4_0, Q8_0 and Q4_K matrices every session reads
  // only through dense products (16 rows side by side: attention, an untied head, the FFN
  // of an ordinary GGUF file). false: hold the file's layout (--no-repack). A mapped file
  // always holds the file's; sessions with repack get a copy.
  bool repack = true;
};

class Engine {
 public:
  // Maps (or reads) the file, loads the architecture's weights and, if the file has a
  // vocabulary (tokenizer.ggml.model), the tokenizer.
  static Result<std::unique_ptr<Engine>> load(const std::string& path,
                                              const LoadOptions& opts = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const ModelInfo& info() const { return info_; }
  // The file's vocabulary; nullptr when it carries none (tokenizer.ggml.model).
  const Vocabulary* vocabulary() const { return vocabulary_.get(); }

 private:
  friend struct runtime::EngineAccess;
  Engine() = default;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Vocabulary> vocabulary_;
  ModelInfo info_;
};

// The type a session's KV cache stores keys or values in (llama.cpp's -ctk/-ctv): f16, or
// blocks of 32 values with one f16 scale, 8-bit (q8_0: about half of f16's bytes) or 4-bit
// (q4_0: about a quarter). The block types need a head size that is a multiple of 32.
enum class KvCacheType { F16, Q8_0, Q4_0 };
// "f16", "q8_0", "q4_0"; nullopt for any other name.
std::optional<KvCacheType> kv_cache_type_from_name(std::string_view name);
const char* kv_cache_type_name(KvCacheType t);

struct SessionOptions {
  int64_t n_ctx = 0;      // KV-cache positions; 0: the model's training context, at most 4096
  int64_t n_batch = 512;  // prompt tokens per forward pass
  int n_threads = 0;      // 0: one per hardware thread
  SamplingParams sampling;
  SparseOptions sparse;  // PowerInfer files: sparse or dense, threshold, predictor check
  bool all_logits = false;  // keep the logits of every fed token (prompt_logits(), perplexity)
  // Sequences the session holds (1..64), ids 0 .. n_seq_max-1. Sequence i samples with seed
  // sampling.seed + i, so a one-sequence session seeded S + i reproduces sequence i.
  int n_seq_max = 1;
  // The types of the cached keys and values (-ctk, -ctv).
  KvCacheType kv_type_k = KvCacheType::F16;
  KvCacheType kv_type_v = KvCacheType::F16;
  // Sliding-window layers (gpt-oss, SmallThinker) keep only what their window may read
  // (n_seq_max x (window - 1) + n_batch cells) unless swa_full (llama.cpp's --swa-full): the
  // whole context there too, so that any sequence may be cut back to any position.
  bool swa_full = false;
  // The device the session runs on: "cpu" (default), "ref" (the scalar reference kernels) or
  // "sim" (the simulated GPU of the tests); `powerinfer devices` lists them. device_budget:
  // bytes the session may allocate there (0: all the device has); everything is counted
  // against it when the session is created.
  std::string device = "cpu";
  uint64_t device_budget = 0;
  // The CPU keeps transposed Q4_0 weights (calibrated and PowerInfer files) in the layout its
  // AVX-512 axpy reads fastest, the same results bit for bit: the engine's own memory when it
  // was loaded with LoadOptions::repack into memory, else a copy made once and shared by the
  // engine's sessions. The CPU also keeps the Q4_0, Q8_0, Q4_K and MXFP4 matrices that only
  // dense products read (every matrix of an ordinary GGUF file, the attention and head of a
  // PowerInfer file, nothing of a calibrated one) as Q4_0_R16 / Q8_0_R16 / Q4_K_R16 /
  // MXFP4_R16 (AVX-512 and AVX2), 16 rows side by side for its GEMM (prompts 2-3x faster;
  // results differ from the file layout's in the last bits), the same way: in place when read
  // into memory, else a copy once per engine.
  // false: both as in the file (--no-repack).
  bool repack = true;
  // ---- Hybrid execution, on a device that is not the host (sim; cuda in CUDA builds) ----
  // The device runs what fits this budget (bytes: weights, KV cache, per-step buffers, the
  // runtime margin; every byte counted before allocation); unset: the device's free memory.
  // The CPU runs the rest. placement() tells what went where.
  std::optional<uint64_t> vram_budget;
  // Activation statistics for the hot/cold split of PowerInfer files (powerinfer profile);
  // empty: MODEL.activations.gguf beside the model when present.
  std::string activation_stats;
  // Whole layers on the device for dense placements (llama.cpp's -ngl; more than the layer
  // count also puts the output head there); -1: as many as the budget holds.
  int n_gpu_layers = -1;
  // Mixtures of experts: the router and experts of the first n_cpu_moe layers stay on the CPU
  // in layers placed on the device (llama.cpp's --n-cpu-moe N; --cpu-moe: INT32_MAX).
  int n_cpu_moe = 0;
  // Mixtures of experts placed by vram_budget: per layer, this many device slots hold recently
  // used experts (an LRU cache) beside the most chosen ones.
  int expert_cache = 0;
  // Mixtures of experts larger than memory, on the CPU (--moe-ram GiB): the weights take this
  // many bytes of RAM, those besides the experts resident and the rest a cache of the recently
  // used experts, read from the file on demand (direct I/O) and ahead of need; the same output
  // as with the whole model in memory. Needs the file mapped (ModelLoad::Map). 0: off.
  uint64_t moe_ram = 0;
  // llama.cpp's -ot/--override-tensor: "REGEX=CPU" each, found in the tensor names; a layer
  // whose FFN matrices a pattern finds keeps its FFN (router and experts) on the CPU.
  std::vector<std::string> tensor_overrides;
  std::string gpu_index;           // the plan's index file; empty: MODEL.generated.gpuidx
  bool reset_gpu_index = false;    // solve the plan again even when the index matches
  bool disable_gpu_index = false;  // keep every FFN neuron on the CPU; no index
};

// One line of a session's memory account (Session::memory()).
struct MemoryLine {
  std::string device;  // "host", or the device's name ("sim", "cuda") for its own memory
  std::string what;    // "model (read into memory)", "KV cache", "step buffers", ...
  uint64_t bytes = 0;
};

// The experts a session with SessionOptions::moe_ram reads from the file, since creation or
// the last reset_sparsity(): how often a layer found the experts its router chose in the
// cache, what was read (on demand, and ahead of need), and how long the forward pass waited.
struct ExpertReads {
  bool on = false;          // the session reads experts on demand
  int64_t slots = 0;        // experts the cache holds
  uint64_t cache_bytes = 0;
  bool direct_io = false;   // read with O_DIRECT (else through the page cache)
  // Each expert a layer asked for was cached since before (a hit), read ahead for this use
  // (read_ahead_used), or read while the layer waited (a miss).
  uint64_t hits = 0, misses = 0;
  uint64_t read_ahead = 0, read_ahead_used = 0;  // read ahead of need, and then used
  uint64_t guessed = 0, guessed_right = 0;  // next-layer guesses (not SmallThinker's, which routes first)
  uint64_t bytes_read = 0;
  double read_s = 0;        // reading (both threads)
  double wait_s = 0;        // the forward pass waiting for experts
};

// Wall-clock time spent in each phase, for llama.cpp-style timing reports.
struct Timings {
  double prompt_ms = 0;
  int64_t n_prompt = 0;  // tokens fed by prompt()
  double eval_ms = 0;
  int64_t n_eval = 0;         // tokens fed by advance() and decode()
  int64_t n_eval_passes = 0;  // forward passes of advance() and decode()
  double sample_ms = 0;
  int64_t n_sample = 0;
};

// Time and tokens of one sequence (Session::seq_timings), e.g. one server request. Each
// decode() call's wall time is charged in full to every sequence with tokens in it (the
// latency that sequence saw), so the sums over sequences exceed Timings::eval_ms. A token
// counts as generated when it is the one sample(seq) last returned and the sequence's only
// entry in the call; every other token counts as prompt.
struct SeqTimings {
  double prompt_ms = 0;
  int64_t n_prompt = 0;  // prompt tokens evaluated (prompt(), and decode() as above)
  double eval_ms = 0;
  int64_t n_eval = 0;  // generated tokens evaluated (advance(), and decode() as above)
  double sample_ms = 0;
  int64_t n_sample = 0;  // tokens sampled for the sequence
};

// A sequence's state as Session::load_state read it from a file.
struct SavedState {
  std::vector<int32_t> tokens;  // the token ids at the sequence's positions 0..n-1
  uint64_t file_bytes = 0;      // the file's size
};

class Session {
 public:
  // Validates the options (sampling values, sizes) and allocates every buffer.
  static Result<std::unique_ptr<Session>> create(const Engine& engine, const SessionOptions& o);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Feeds tokens after those already in the context (a prompt or a user turn) and records
  // them in the sampler's penalty window. Fails before computing anything when they do not
  // fit: "context overflow: ...".
  // `stop`, if given, is asked between batches of n_batch tokens (e.g. a Ctrl-C flag); when it
  // returns true the call fails with "interrupted ...", keeping the batches already fed.
  Status prompt(std::span<const int32_t> tokens, const std::function<bool()>& stop = {});
  // Feeds tokens as prompt() does and appends the logits of every one of them to `out`,
  // f32 [n, n_vocab] row-major. Needs SessionOptions::all_logits (fails before computing
  // anything without it).
  Status prompt_logits(std::span<const int32_t> tokens, std::vector<float>& out);
  // Picks the next token from the logits of the last fed token. Under a grammar
  // (SamplingParams::grammar) the text moves past the token returned (sampling is where the
  // grammar follows the generated text); -1 when the grammar allows no token (e.g. its text
  // is complete and end-of-generation tokens are banned): stop generating.
  int32_t sample();
  // Feeds one generated token.
  Status advance(int32_t token);
  // Sequence seq's grammar text is complete and no token can extend it: the token sample()
  // returned last ends the answer (print it, no need to feed it). false without a grammar.
  bool grammar_done(int32_t seq = 0) const;
  // Tokens sample() never returns (e.g. end-of-generation tokens with --ignore-eos).
  void ban_tokens(std::vector<int32_t> ids);
  // Tokens sequence seq's sampler never returns (replaces that sequence's list only).
  void ban_tokens(int32_t seq, std::vector<int32_t> ids);

  // ---- Several sequences (n_seq_max > 1); the calls above work on sequence 0 ----
  // Evaluates tokens of any sequences in one forward pass (more than n_batch: several) and
  // records each in its sequence's penalty window. Fails without changing anything for bad
  // sequence ids, token ids or positions (each must be above what its sequence holds), more
  // than n_seq_max entries asking for logits, or a full context ("context overflow").
  Status decode(std::span<const BatchToken> batch);
  // Logits of entry i of the last decode(), f32 [n_vocab]; empty unless it asked for them.
  std::span<const float> batch_logits(size_t i) const;
  // Picks a token for sequence seq from `logits` with that sequence's sampler (its seed and
  // penalty window). Does not record it: decode() does. -1 when seq is outside
  // [0, n_seq_max).
  int32_t sample(int32_t seq, std::span<const float> logits);
  // Gives sequence seq a fresh sampler with `p` (validated; its RNG seeded with p.seed exactly,
  // not p.seed + seq; its grammar, if any, at the start of its text) whose penalty window holds
  // `history`, the tokens the sequence already holds (e.g. a cached prompt prefix). A sequence so set samples as a one-sequence session
  // seeded p.seed that was fed `history` with prompt(). Its banned tokens are cleared.
  Status set_sampling(int32_t seq, const SamplingParams& p, std::span<const int32_t> history = {});
  // Sequence dst (holding nothing) becomes a copy of src: it shares src's cached positions
  // (no data copied) and takes its penalty window; its RNG restarts from its own seed.
  Status fork(int32_t src, int32_t dst);
  // Sequence seq (-1: all) forgets positions [p0, p1) (p1 = -1: to the end); its sampler is
  // reset when it holds nothing afterwards. Cutting a sequence back to p0 > 0 fails (nothing
  // changed) where seq_can_truncate(seq, p0) is false.
  Status seq_rm(int32_t seq, int32_t p0, int32_t p1 = -1);
  // Whether sequence seq can be cut back to positions [0, p0) and go on from p0: always,
  // except with sliding-window layers kept bounded (not swa_full), whose window before p0 may
  // be gone; then evaluate it again from position 0 (seq_rm(seq, 0)).
  bool seq_can_truncate(int32_t seq, int32_t p0) const;
  // Sequence dst also holds src's positions [p0, p1) (p1 = -1: to the end), sharing cells.
  Status seq_cp(int32_t src, int32_t dst, int32_t p0 = 0, int32_t p1 = -1);
  // Highest position sequence seq holds; -1 when none.
  int32_t seq_pos_max(int32_t seq) const;
  // The token ids sequence seq holds at positions 0, 1, ... (fed, restored, forked or copied
  // into it), up to its first missing position; empty for a seq outside [0, n_seq_max).
  std::vector<int32_t> seq_tokens(int32_t seq) const;
  // Prefix reuse (a server slot, a prompt cache): sequence seq keeps the longest prefix of
  // what it holds that `prompt` starts with, at most prompt.size() - 1 tokens so that the
  // last one is evaluated again for its logits (none where sliding-window layers can no
  // longer be cut back there: seq_can_truncate), and forgets the rest (seq_rm). Returns the
  // tokens kept: feed prompt[kept...] at positions kept... next. The sampler is left as
  // seq_rm leaves it; give it the kept tokens with set_sampling.
  Result<int64_t> seq_reuse_prefix(int32_t seq, std::span<const int32_t> prompt);

  // ---- Saved state: prompt caches and server slots (file format: docs/FORMATS.md) ----
  // Writes sequence seq to `path` (through a temporary file and a rename): a fingerprint of
  // the model, `tokens` (the ids at its positions 0..n-1, e.g. seq_tokens(seq)) and the K and
  // V rows of its cells. The sequence must hold exactly positions 0..tokens.size()-1. Returns
  // the bytes written.
  Result<uint64_t> save_state(int32_t seq, const std::string& path,
                              std::span<const int32_t> tokens);
  // Restores a saved sequence into sequence seq, which must hold nothing: the rows of the
  // file's tokens [0, n-1) go into free cells (through the device's copies wherever the cache
  // lives) and the last token is evaluated, so the session is as if it had fed the tokens
  // with prompt()/decode(): logits() and batch_logits(0) are the last token's, and the
  // sequence's sampler restarts from its seed with the tokens in its penalty window. Fails
  // with one line naming the file, changing nothing, for: a sequence id out of range or
  // holding positions, a missing file, a bad magic or version, a file of another model (the
  // field that differs: architecture, n_layer, n_head_kv, head_dim, n_embd, n_vocab, KV type,
  // model hash), a truncated or oversized file, more tokens than the context or its free
  // cells hold.
  Result<SavedState> load_state(int32_t seq, const std::string& path);
  int n_seq_max() const;

  // ---- Embeddings (embedding.h) ----
  // Evaluates each input as its own sequence from position 0, all of them together in
  // forward passes of up to n_batch tokens that stop at the output norm (the output head is
  // not computed), and replaces `out` with the pooled vectors, one row per input:
  // f32 [inputs.size(), n_embd] row-major; with Pooling::None one row per token, input after
  // input: f32 [total tokens, n_embd]. Results do not depend on how inputs are grouped
  // into calls or on the thread count. The inputs' sequences start empty (whatever they held
  // is removed, their samplers reset) and are left empty; other sequences are untouched.
  // Fails, changing nothing, for no inputs, an empty input, a bad or repeated sequence id or
  // a bad token id; inputs that do not fit the cells the other sequences leave free fail with
  // "context overflow" (their sequences emptied). Afterwards logits() is empty until tokens
  // are fed again.
  Status embed(std::span<const EmbedInput> inputs, const EmbedParams& p, std::vector<float>& out);
  // One input on sequence 0: `out` = f32 [n_embd] (None: [tokens.size(), n_embd]).
  Status embed(std::span<const int32_t> tokens, const EmbedParams& p, std::vector<float>& out);
  // Any number of inputs, in order, in groups of up to n_seq_max() whose tokens fit the context
  // together (sequences 0, 1, ...: what they held is removed); `out` as embed() gives for all of
  // them at once. An input longer than the context fails before anything runs, naming it
  // (ErrorCode::BadRequest). The one grouping the CLI's embed and Python's use.
  Status embed_all(std::span<const std::vector<int32_t>> inputs, const EmbedParams& p, std::vector<float>& out);
  // embed_all's check before it runs: every input fits the context.
  Status embed_fits(std::span<const std::vector<int32_t>> inputs) const;

  std::span<const float> logits() const;  // f32 [n_vocab] of the last fed token
  int64_t n_past() const;                 // tokens in the context
  int64_t n_ctx() const;
  int n_threads() const;
  int64_t n_batch() const;
  // Forgets the context of every sequence and the samplers' windows, reseeds the samplers;
  // timings are kept.
  void reset();
  // Runs one token through the model and forgets it, so that every weight page is mapped and
  // every buffer touched before timed work (the first pass over a memory-mapped model pays
  // for page faults). Leaves the session empty and the timings untouched.
  Status warmup(int32_t token);
  const Timings& timings() const { return timings_; }
  // Sequence seq's timings since creation or its last reset_seq_timings(); zeros for a seq
  // outside [0, n_seq_max). Not cleared by reset() or seq_rm(): a caller that reuses a
  // sequence for new work (a server slot) resets them when the work starts.
  SeqTimings seq_timings(int32_t seq) const;
  void reset_seq_timings(int32_t seq);
  // Sparse execution: whether it is on, the threshold, and per-layer counters since creation or
  // the last reset_sparsity() (warmup() resets them too).
  SparsityReport sparsity() const;
  void reset_sparsity();
  // Hybrid sessions: the plan, the device memory ledger and the host <-> device traffic.
  PlacementInfo placement() const;
  // Where this session's memory is, line by line: on the host the model (the file read into
  // memory or mapped, and copies of its transposed weights in another layout, shared with the
  // engine's other sessions), then what the session allocated (KV cache, step buffers,
  // scratch); on a hybrid session's device its ledger (weights, KV cache, buffers, margin).
  std::vector<MemoryLine> memory() const;
  // Experts read from the file on demand (SessionOptions::moe_ram); on = false otherwise.
  ExpertReads expert_reads() const;

 private:
  Session() = default;
  // A sampler for `p`; `rules`, when given, is p.grammar already parsed.
  Result<std::unique_ptr<runtime::Sampler>> make_sampler(
      const SamplingParams& p, std::shared_ptr<const grammar::Rules> rules = {});
  // prompt() and prompt_logits(): feeds sequence 0 (logits of every token to *out when given).
  Status feed(std::span<const int32_t> tokens, std::vector<float>* out, const std::function<bool()>& stop);
  std::unique_ptr<runtime::Context> ctx_;
  const Tokenizer* tokenizer_ = nullptr;  // the engine's; nullptr when the file has none
  std::shared_ptr<const grammar::TokenSet> grammar_tokens_;  // built for the first grammar
  std::vector<std::unique_ptr<runtime::Sampler>> samplers_;  // one per sequence
  Timings timings_;
  std::vector<SeqTimings> seq_timings_;  // one per sequence
  std::vector<int32_t> last_sampled_;    // per sequence: sample()'s last answer, -1 after use
  std::vector<int32_t> seq_count_;       // decode() scratch: entries per sequence
};

}  // namespace pi
