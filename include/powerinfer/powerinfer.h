/* The engine's C API: libpowerinfer (shared or static), for applications and for bindings in
 * other languages. Plain C99: opaque handles, fixed-size integer types, no C++ types and no
 * exceptions cross it.
 *
 *   pi_engine* e = NULL;
 *   if (pi_engine_load("model.gguf", NULL, &e) != PI_OK) {
 *     fprintf(stderr, "%s\n", pi_engine_error(e));   // e is set even when the load failed
 *     pi_engine_free(e);
 *     return 1;
 *   }
 *   pi_session_options so = pi_session_options_default();
 *   so.sampling.temperature = 0;                      // greedy
 *   pi_session* s = NULL;
 *   if (pi_session_create(e, &so, &s) != PI_OK) ...   // pi_session_error(s)
 *   int32_t toks[512];
 *   int32_t n = pi_tokenize(e, "Hello", -1, true, false, toks, 512);
 *   pi_session_prompt(s, toks, n);
 *   for (int i = 0; i < 32; ++i) {
 *     int32_t t = pi_session_sample(s);
 *     if (pi_token_is_eog(e, t)) break;
 *     ... pi_token_piece(e, t, buf, sizeof buf) ...
 *     pi_session_advance(s, t);
 *   }
 *   pi_session_free(s);
 *   pi_engine_free(e);
 *
 * Errors. Every call that can fail returns a pi_status; PI_OK is 0. The one-line message of the
 * last failure is kept per handle: pi_engine_error() for calls on an engine (and its load),
 * pi_session_error() for calls on a session. It stays valid until the next failing call on that
 * handle or its free. A NULL handle or output pointer gives PI_ERR_INVALID_ARGUMENT.
 *
 * Thread-safety. An engine is immutable once loaded: the calls that take a `const pi_engine*`
 * (tokenizer, chat template, model info) may run on any number of threads at once, and so may
 * pi_session_create() on the same engine. A session is driven by one thread at a time: its
 * calls must not overlap with each other (different sessions run in parallel). Free a session
 * before its engine. pi_version() and the *_default() calls are safe anywhere.
 *
 * Sizes. Functions that write text or tokens into a caller's buffer return the length they
 * need; when that exceeds the capacity given they write nothing useful and the caller retries
 * with a larger buffer (text is not NUL-terminated unless room is left for it: the returned
 * length never counts a terminator). A negative return is an error (see the function).
 */
#ifndef POWERINFER_POWERINFER_H
#define POWERINFER_POWERINFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define PI_API __attribute__((visibility("default")))
#else
#define PI_API
#endif

/* ---- Version and status ---------------------------------------------------------------- */

/* "MAJOR.MINOR.PATCH" of the library (the C++ engine's project version). */
PI_API const char* pi_version(void);

typedef enum pi_status {
  PI_OK = 0,
  PI_ERR_INVALID_ARGUMENT = 1, /* a NULL handle, a bad option or token id, a bad sequence */
  PI_ERR_LOAD = 2,             /* the model file is missing, corrupt or unsupported */
  PI_ERR_CONTEXT_FULL = 3,     /* the tokens do not fit the session's context */
  PI_ERR_OUT_OF_MEMORY = 4,    /* host or device memory (or the VRAM budget) is short */
  PI_ERR_INTERNAL = 5          /* anything else; the message says what */
} pi_status;

/* A static English name of a status ("ok", "invalid_argument", ...; "unknown" for any other
 * value). Takes an int so that any value is safe to pass. */
PI_API const char* pi_status_name(int status);

/* ---- Logging ----------------------------------------------------------------------------- */

typedef enum pi_log_level {
  PI_LOG_DEBUG = 0,
  PI_LOG_INFO = 1, /* loading, placement, what a session allocated */
  PI_LOG_WARN = 2,
  PI_LOG_ERROR = 3,
  PI_LOG_NONE = 4  /* as a threshold: nothing */
} pi_log_level;

/* Receives one diagnostic: a pi_log_level and UTF-8 text without prefix or final newline (a
 * line; a table, such as the device memory ledger, has several), valid during the call. Called from whichever thread logged, possibly from several at once. */
typedef void (*pi_log_callback)(int32_t level, const char* message, void* user);

/* Sends the library's diagnostics (by default printed on stderr as "warning: ...") to
 * `callback` with `user`; NULL: stderr again. Process-wide, like llama.cpp's llama_log_set.
 * A callback replaced while another thread logs may still receive that message: keep `user`
 * valid. */
PI_API void pi_log_set(pi_log_callback callback, void* user);
/* Drops diagnostics below `level` (a pi_log_level; default PI_LOG_INFO). Process-wide. */
PI_API void pi_log_set_level(int32_t level);

/* ---- Engine: a model loaded once --------------------------------------------------------- */

typedef struct pi_engine pi_engine;

typedef enum pi_load_mode {
  PI_LOAD_AUTO = 0, /* read into huge pages when the file and 1 GiB fit in memory, else map */
  PI_LOAD_MAP = 1,  /* mmap: instant, pages shared with other processes (--mmap) */
  PI_LOAD_READ = 2  /* read into memory backed by huge pages: faster decoding (--no-mmap) */
} pi_load_mode;

typedef struct pi_load_options {
  int32_t mode;       /* a pi_load_mode (fixed-size here; other values are refused) */
  bool mlock;         /* lock the model in RAM; a failure is a warning */
  bool check_tensors; /* check every weight for NaN/Inf at load (reads the whole file) */
  bool repack;        /* Q4_0/Q8_0 weights in the CPU's layouts (default true; --no-repack) */
} pi_load_options;

PI_API pi_load_options pi_load_options_default(void);

/* Loads a GGUF or PowerInfer file. `opts` NULL: the defaults. *out is set to an engine handle
 * whenever memory allows, also on failure, so that pi_engine_error() tells why; free it either
 * way. Thread-safe (separate engines). The first load (or pi_model_profile) reads the
 * environment's PI_KERNELS_ISA (scalar, avx2, avx512, neon, neon-dot): CPU kernels of a lower
 * ISA than the best, for tests and benchmarks, as the CLI and the Python package do. */
PI_API pi_status pi_engine_load(const char* path, const pi_load_options* opts, pi_engine** out);
/* The message of the engine's last failure ("" when none). */
PI_API const char* pi_engine_error(const pi_engine* engine);
/* Frees the engine (NULL is a no-op). Every session made from it must be freed first. */
PI_API void pi_engine_free(pi_engine* engine);

typedef struct pi_model_info {
  const char* architecture; /* general.architecture; valid while the engine lives */
  const char* name;         /* general.name, "" when absent */
  bool powerinfer;          /* a PowerInfer (PWRI) file */
  bool mapped;              /* mapped (true) or read into memory */
  int64_t n_vocab, n_ctx_train, n_embd, n_layer, n_ff, n_head, n_head_kv;
  uint64_t file_bytes;
  uint64_t weight_bytes_per_token; /* bytes of weights one dense decode step reads */
} pi_model_info;

/* Fills *info. Fails only for NULL arguments. */
PI_API pi_status pi_engine_info(const pi_engine* engine, pi_model_info* info);

/* ---- Vocabulary (the engine must carry one: tokenizer.ggml.model) ------------------------ */

/* Number of tokens of the vocabulary; 0 when the file has none. */
PI_API int32_t pi_n_vocab(const pi_engine* engine);
/* BOS / EOS ids, -1 when absent. */
PI_API int32_t pi_token_bos(const pi_engine* engine);
PI_API int32_t pi_token_eos(const pi_engine* engine);
/* Whether generation should stop at this token (EOS and end-of-turn markers). */
PI_API bool pi_token_is_eog(const pi_engine* engine, int32_t token);
/* Whether the vocabulary wants BOS before a prompt (what `powerinfer run` does). */
PI_API bool pi_add_bos(const pi_engine* engine);

/* UTF-8 text (len bytes; len < 0: NUL-terminated) to token ids, written to tokens[0..cap).
 * add_bos: prepend BOS when the vocabulary has one; parse_special: control tokens written in
 * the text ("<|im_end|>") become their ids. Returns the number of tokens (more than cap: none
 * usable, retry with that capacity), or -1 when the engine has no vocabulary or an argument
 * is NULL. */
PI_API int32_t pi_tokenize(const pi_engine* engine, const char* text, int32_t len, bool add_bos,
                           bool parse_special, int32_t* tokens, int32_t cap);
/* Token ids back to UTF-8 bytes (skip_special: drop control tokens); out-of-range ids give
 * U+FFFD. Returns the bytes needed; writes min(needed, cap) bytes and, when cap > needed, a
 * NUL. -1 when the engine has no vocabulary or an argument is NULL. */
PI_API int32_t pi_detokenize(const pi_engine* engine, const int32_t* tokens, int32_t n,
                             bool skip_special, char* text, int32_t cap);
/* The bytes of one token (a piece may be an incomplete UTF-8 sequence: concatenate pieces, or
 * use pi_detokenize, before showing text). Same return convention as pi_detokenize. */
PI_API int32_t pi_token_piece(const pi_engine* engine, int32_t token, char* text, int32_t cap);

/* ---- Chat templates ---------------------------------------------------------------------- */

typedef struct pi_chat_message {
  const char* role;    /* "system", "user" or "assistant" */
  const char* content; /* UTF-8, NUL-terminated */
} pi_chat_message;

/* Renders messages with a chat template into prompt text (to tokenize with parse_special).
 * `tmpl`: a template name ("chatml", "llama2", "llama3", "mistral", "zephyr", "gemma", "phi3",
 * "vicuna", "alpaca", "deepseek", "gpt-oss" (harmony; alias "harmony")) or Jinja text to
 * recognise; NULL or "": the model's own
 * (tokenizer.chat_template). add_assistant: end with the opening of an assistant turn.
 * Returns the bytes needed as pi_detokenize does; -1 on failure (unknown template, bad role),
 * with the message in pi_engine_error(). Not thread-safe with other failing calls on the same
 * engine (the message slot is the engine's). */
PI_API int32_t pi_chat_apply_template(pi_engine* engine, const char* tmpl,
                                      const pi_chat_message* messages, size_t n_messages,
                                      bool add_assistant, char* text, int32_t cap);

/* ---- Sessions: a KV cache, samplers and a thread pool over an engine --------------------- */

typedef struct pi_session pi_session;

typedef struct pi_sampling {
  float temperature;       /* 0: greedy (argmax after penalties); default 0.8 */
  int32_t top_k;           /* <= 0: whole vocabulary; default 40 */
  float top_p;             /* 1: off; default 0.95 */
  float min_p;             /* 0: off; default 0.05 */
  float repeat_penalty;    /* 1: off */
  int32_t repeat_last_n;   /* penalty window; 0: off, -1: whole history; default 64 */
  float presence_penalty;  /* 0: off */
  float frequency_penalty; /* 0: off */
  uint64_t seed;           /* sequence i samples with seed + i */
  /* GBNF grammar the generated text must follow (llama.cpp's format; see
   * pi_json_schema_to_grammar); NULL or "": none. Copied when the sampler is made. Under a
   * grammar, sampling moves it past the token returned, -1 means no token is allowed, and
   * pi_session_grammar_done() says when the text is complete. */
  const char* grammar;
} pi_sampling;

PI_API pi_sampling pi_sampling_default(void);

/* The types the KV cache stores keys and values in (llama.cpp's -ctk/-ctv): Q8_0 takes about
 * half the bytes of F16, Q4_0 about a quarter; both need the model's head_dim to be a multiple
 * of 32. Attention reads the quantized blocks directly. */
typedef enum pi_kv_type {
  PI_KV_F16 = 0,
  PI_KV_Q8_0 = 1,
  PI_KV_Q4_0 = 2
} pi_kv_type;

typedef struct pi_session_options {
  int64_t n_ctx;   /* KV positions; 0: the model's training context, at most 4096 */
  int64_t n_batch; /* prompt tokens per forward pass; default 512 */
  int32_t n_threads; /* 0: one per hardware thread */
  int32_t n_seq_max; /* sequences (1..64), ids 0 .. n_seq_max - 1 */
  pi_sampling sampling;
  bool dense;       /* PowerInfer files: compute every FFN neuron (no predictors) */
  float sparse_threshold; /* predictor threshold; NaN: the file's or the default */
  bool repack;      /* CPU: Q4_0/Q8_0 weights in its layouts (default true) */
  /* The device: "cpu" (default), "ref", "sim", "cuda" in CUDA builds. A device that is not
   * the host runs hybrid: what fits vram_budget there, the rest on the CPU. */
  const char* device;
  uint64_t device_budget; /* bytes the session may allocate on the device; 0: all it has */
  int64_t vram_budget;    /* hybrid: bytes for the device's part; < 0: its free memory */
  int32_t n_gpu_layers;   /* hybrid, dense placements: whole layers on the device; -1: fit */
  const char* gpu_index;  /* hybrid: the plan's index file; NULL: MODEL.generated.gpuidx */
  const char* activation_stats; /* hybrid: activation statistics; NULL: beside the model */
  int32_t type_k; /* pi_kv_type of the cached keys; default PI_KV_F16 */
  int32_t type_v; /* pi_kv_type of the cached values; default PI_KV_F16 */
  /* Mixtures of experts. n_cpu_moe: hybrid, the first N layers' experts stay on the CPU
   * (llama.cpp's --n-cpu-moe; INT32_MAX: --cpu-moe). expert_cache: hybrid, device slots per
   * layer for recently used experts. moe_ram: on the CPU, a model larger than memory keeps its
   * weights in this many bytes, experts read from the file on demand (--moe-ram; the engine
   * loaded with PI_LOAD_MAP); 0: off. */
  int32_t n_cpu_moe;
  int32_t expert_cache;
  uint64_t moe_ram;
  bool swa_full; /* sliding-window layers keep the whole context (--swa-full) */
} pi_session_options;

PI_API pi_session_options pi_session_options_default(void);

/* Creates a session on the engine (every buffer allocated now). *out is set whenever memory
 * allows, also on failure (pi_session_error() tells why); free it either way. Thread-safe
 * with other creations on the same engine. */
PI_API pi_status pi_session_create(const pi_engine* engine, const pi_session_options* opts,
                                   pi_session** out);
PI_API const char* pi_session_error(const pi_session* session);
PI_API void pi_session_free(pi_session* session);

/* Feeds tokens to sequence 0 after those it holds (a prompt, a user turn). */
PI_API pi_status pi_session_prompt(pi_session* session, const int32_t* tokens, size_t n);
/* Picks sequence 0's next token from the logits of its last fed token (its sampler: settings,
 * penalty window, RNG). Returns -1 for a NULL session. */
PI_API int32_t pi_session_sample(pi_session* session);
/* Feeds one generated token to sequence 0. */
PI_API pi_status pi_session_advance(pi_session* session, int32_t token);
/* The logits of the last token fed to sequence 0, f32 [n_vocab]; valid until the next call
 * that feeds tokens. NULL for a NULL session. */
PI_API const float* pi_session_logits(const pi_session* session);

/* ---- The generation loop (the one the CLI, the server and Python use) ---------------------
 * Samples, shows and feeds sequence 0's tokens until the answer ends: an end-of-generation
 * token (not shown), a stop string (the text ends before it; text that may begin one is held
 * back until it is clear), a grammar's complete text, max_tokens, a full context, or the
 * callback asking to stop. Text comes in whole UTF-8 characters; control tokens add none. */
typedef enum pi_gen_end {
  PI_GEN_END_TOKEN = 1,    /* an end-of-generation token */
  PI_GEN_STOP_STRING = 2,  /* one of the stop strings */
  PI_GEN_GRAMMAR_DONE = 3, /* the grammar's text is complete */
  PI_GEN_CONTEXT_FULL = 4, /* the context holds no more tokens */
  PI_GEN_LENGTH = 5,       /* max_tokens */
  PI_GEN_CALLER = 6        /* the callback returned false */
} pi_gen_end;

typedef struct pi_generate_params {
  int32_t max_tokens;       /* tokens in the answer; -1: no limit */
  const char* const* stop;  /* n_stop stop strings (NUL-terminated; empty ones ignored) */
  size_t n_stop;
  bool ignore_eos;          /* end-of-generation tokens do not end the answer */
  /* The tokens sequence 0 holds before the answer (or their last few), so that the answer's
   * first piece keeps a leading space a tokenizer drops at the start of a text; may be NULL. */
  const int32_t* context;
  size_t n_context;
} pi_generate_params;

PI_API pi_generate_params pi_generate_params_default(void);

/* Called with each piece of the answer's text (text[0..n), not NUL-terminated) as it becomes
 * ready; return false to end the answer there. */
typedef bool (*pi_text_callback)(const char* text, size_t n, void* user);

/* Generates sequence 0's answer after what the session holds (tokens are fed as they are
 * shown, so the session holds the answer afterwards and a next turn can follow). Sets *end
 * (may be NULL) to why it ended. Fails (pi_session_error) when feeding fails or the grammar
 * allows no token. */
PI_API pi_status pi_session_generate(pi_session* session, const pi_generate_params* params,
                                     pi_text_callback on_text, void* user, pi_gen_end* end);

typedef struct pi_batch_token {
  int32_t token;
  int32_t seq;  /* sequence id, 0 .. n_seq_max - 1 */
  int32_t pos;  /* position in its sequence, above every position it holds */
  bool logits;  /* keep this entry's logits (pi_session_batch_logits) */
} pi_batch_token;

/* Evaluates tokens of any sequences in one forward pass (split into n_batch passes when
 * longer). Fails without changing anything for bad ids or positions or a full context. */
PI_API pi_status pi_session_decode(pi_session* session, const pi_batch_token* batch, size_t n);
/* Logits of entry i of the last pi_session_decode() that asked for them, f32 [n_vocab];
 * NULL otherwise. */
PI_API const float* pi_session_batch_logits(const pi_session* session, size_t i);
/* Picks a token for sequence seq from `logits` (n_vocab floats) with that sequence's sampler.
 * Does not record it: pi_session_decode does. -1 for a bad sequence or NULL arguments. */
PI_API int32_t pi_session_sample_seq(pi_session* session, int32_t seq, const float* logits);
/* Gives sequence seq a fresh sampler with `p` (its RNG seeded with p->seed exactly). */
PI_API pi_status pi_session_set_sampling(pi_session* session, int32_t seq, const pi_sampling* p);

/* Whether sequence seq's grammar text is complete (nothing can follow the token sampled
 * last): the answer ends there. false without a grammar or for a NULL session. */
PI_API bool pi_session_grammar_done(const pi_session* session, int32_t seq);
/* Converts a JSON Schema (JSON text) to GBNF for pi_sampling.grammar, into text[0..cap)
 * with a NUL when it fits; returns the length without the NUL (call with cap 0 to size the
 * buffer), or -1 with the reason in pi_engine_error(engine) (the schema's unsupported part,
 * named by its path). */
PI_API int32_t pi_json_schema_to_grammar(pi_engine* engine, const char* schema, char* text,
                                         int32_t cap);

/* Sequence dst (holding nothing) shares src's cached positions (no data copied). */
PI_API pi_status pi_session_fork(pi_session* session, int32_t src, int32_t dst);
/* Sequence seq (-1: all) forgets positions [p0, p1) (p1 = -1: to the end). */
PI_API pi_status pi_session_seq_rm(pi_session* session, int32_t seq, int32_t p0, int32_t p1);
/* Sequence dst also holds src's positions [p0, p1) (p1 = -1: to the end). */
PI_API pi_status pi_session_seq_cp(pi_session* session, int32_t src, int32_t dst, int32_t p0,
                                   int32_t p1);
/* Highest position sequence seq holds; -1 when none (or a NULL session). */
PI_API int32_t pi_session_seq_pos_max(const pi_session* session, int32_t seq);
/* Forgets every sequence's context and reseeds the samplers (timings are kept). */
PI_API void pi_session_reset(pi_session* session);

PI_API int64_t pi_session_n_ctx(const pi_session* session);
PI_API int64_t pi_session_n_past(const pi_session* session); /* tokens in the context */

/* ---- Embeddings ------------------------------------------------------------------------ */

/* How the hidden states of an input's tokens (after the output norm) become one vector. */
typedef enum pi_pooling {
  PI_POOLING_MEAN = 0, /* the average over every token (llama.cpp --pooling mean) */
  PI_POOLING_LAST = 1, /* the last token's state */
  PI_POOLING_CLS = 2,  /* the first token's state */
  PI_POOLING_NONE = 3  /* no pooling: every token's state, n vectors (--pooling none) */
} pi_pooling;

/* Embeds one input: its n tokens are evaluated as sequence 0 from position 0 (whatever it held
 * is removed; it is left empty) without the output head, and the pooled vector, divided by its
 * Euclidean norm when `normalize`, is written to out[0..n_embd) when cap >= n_embd. Returns
 * n_embd (call with cap 0 to size the buffer), or -1 with the reason in pi_session_error()
 * (no tokens, a bad token id or pooling, a full context). PI_POOLING_NONE: the n tokens'
 * vectors (each normalised when `normalize`) row after row, n * n_embd floats, written when
 * cap >= n * n_embd; returns n * n_embd. */
PI_API int32_t pi_session_embed(pi_session* session, const int32_t* tokens, size_t n,
                                int32_t pooling, bool normalize, float* out, int32_t cap);

/* ---- Perplexity (powerinfer perplexity; llama.cpp's perplexity tool) --------------------- */
typedef struct pi_perplexity_params {
  int32_t n_ctx;       /* tokens per chunk, even and >= 4; 0: kl_base's, else 512 */
  int32_t n_chunks;    /* chunks evaluated at most; 0: kl_base's, else all; -1: all */
  const char* kl_save; /* write the scored log-probabilities here as a base; NULL: no */
  const char* kl_base; /* compare with such a base (KL divergence, top-1); NULL: no */
} pi_perplexity_params;

typedef struct pi_perplexity_report {
  int64_t n_tokens;   /* of the text */
  int64_t n_chunks;   /* evaluated, of n_ctx tokens each */
  int64_t n_scored;   /* tokens scored: the second half of each chunk */
  double ppl, ppl_err;
  bool has_kl;        /* with kl_base: */
  double base_ppl, base_ppl_err;
  double kl_mean, kl_mean_err, kl_median, kl_p99, kl_max;
  double same_top1;   /* share of tokens whose most likely token agrees with the base's */
} pi_perplexity_report;

PI_API pi_perplexity_params pi_perplexity_params_default(void);

/* Perplexity of the engine's model on `text` (UTF-8, len bytes; -1: NUL-terminated) as
 * llama.cpp computes it: chunks of n_ctx tokens from an empty cache, the second half of each
 * scored. Runs a session made from `opts` (NULL: defaults; its n_ctx and n_batch are set
 * here). Fails (pi_engine_error) for a text shorter than two chunks, bad sizes, or a base that
 * does not match (vocabulary, n_ctx, chunks or tokens). */
PI_API pi_status pi_engine_perplexity(pi_engine* engine, const pi_session_options* opts,
                                      const char* text, int64_t len,
                                      const pi_perplexity_params* params, pi_perplexity_report* out);

/* ---- Profiling (powerinfer profile): how often each neuron and expert fires -------------- */
typedef struct pi_profile_params {
  int32_t n_ctx;      /* tokens per chunk (>= 2), each from an empty cache */
  int32_t n_batch;    /* tokens per forward pass */
  int32_t n_threads;  /* 0: every hardware thread */
  int64_t max_tokens; /* at most this many tokens of the text; 0: all */
  bool progress;      /* a progress bar on stderr when it is a terminal */
} pi_profile_params;

typedef struct pi_profile_report {
  uint64_t n_tokens; /* tokens profiled */
  bool experts;      /* a mixture of experts: expert choice and reuse recorded */
  int64_t n_layer;
} pi_profile_report;

PI_API pi_profile_params pi_profile_params_default(void);

/* Runs the model file `model` over `text` (len bytes; -1: NUL-terminated) and writes the
 * activation statistics to `output` (what `powerinfer plan --stats` and hybrid sessions read:
 * pi_session_options.activation_stats). `report` may be NULL. On failure the one-line reason
 * goes to error[0..error_cap): PI_ERR_INVALID_ARGUMENT for bad sizes or a text without tokens,
 * PI_ERR_LOAD for a model that does not load or an output that cannot be written. */
PI_API pi_status pi_model_profile(const char* model, const char* text, int64_t len, const char* output,
                                  const pi_profile_params* params, pi_profile_report* report,
                                  char* error, size_t error_cap);

/* ---- Quantization (powerinfer quantize; llama.cpp's llama_model_quantize) ----------------- */
typedef struct pi_quantize_params {
  /* A type (f32, f16, bf16, q8_0, q5_1, q5_0, q4_1, q4_0, mxfp4), a mix following llama.cpp's
   * per-tensor recipes (q6_k, q5_k_m, q4_k_m, q3_k_m, q2_k, mxfp4_moe), in any case, or
   * llama.cpp's numeric file-type id ("15" = q4_k_m). NULL: q4_0. */
  const char* type;
  bool allow_requantize;        /* convert tensors that are already quantized */
  const char* const* overrides; /* n_overrides "PATTERN=TYPE" strings: a glob over tensor names */
  size_t n_overrides;
  int32_t n_threads;            /* >= 1 */
  bool progress;                /* a progress bar on stderr when it is a terminal */
} pi_quantize_params;

typedef struct pi_quantize_report {
  uint64_t bytes_in, bytes_out; /* tensor data */
  uint64_t file_in, file_out;   /* whole files */
  int32_t n_quantized, n_copied;
} pi_quantize_report;

PI_API pi_quantize_params pi_quantize_params_default(void);

/* Writes a copy of `input` (GGUF or PowerInfer) to `output` with its large matrices converted,
 * its metadata and small tensors kept, streaming (memory stays flat). `report` may be NULL. On
 * failure the one-line reason goes to error[0..error_cap) (NUL-terminated, cut to fit; error
 * may be NULL): PI_ERR_INVALID_ARGUMENT for a bad type, override or thread count, PI_ERR_LOAD
 * for what the files hold or refuse (a missing or damaged input, output == input, a tensor
 * already quantized without allow_requantize, a write that fails). */
PI_API pi_status pi_model_quantize(const char* input, const char* output,
                                   const pi_quantize_params* params, pi_quantize_report* report,
                                   char* error, size_t error_cap);

/* ---- Saved state (prompt caches) --------------------------------------------------------- */

/* Writes sequence seq's KV cells to a file with a header naming the model (its fingerprint),
 * the KV cache types and the n token ids it holds at positions 0..n-1 (the caller keeps them:
 * the session does not). The sequence must hold exactly those positions. *bytes_written
 * (may be NULL) is set to the file's size. */
PI_API pi_status pi_session_state_save(pi_session* session, int32_t seq, const char* path,
                                       const int32_t* tokens, size_t n, uint64_t* bytes_written);
/* Restores a file written by pi_session_state_save into sequence seq, which must hold nothing:
 * afterwards the session is as if it had fed the file's tokens (pi_session_logits() is the
 * last one's; sampling continues byte-identically). The file's token ids go to
 * tokens[0..min(n, cap)) and *n_tokens (may be NULL) is set to n. Fails with one line naming
 * the file, changing nothing (PI_ERR_LOAD), for a missing, truncated or damaged file, one of
 * another model or KV cache type, or more tokens than the free cells hold. */
PI_API pi_status pi_session_state_load(pi_session* session, int32_t seq, const char* path,
                                       int32_t* tokens, size_t cap, size_t* n_tokens);

typedef struct pi_timings {
  double prompt_ms;  int64_t n_prompt; /* tokens fed by pi_session_prompt */
  double eval_ms;    int64_t n_eval;   /* tokens fed by advance and decode */
  double sample_ms;  int64_t n_sample;
} pi_timings;

/* Fills *out with the session's wall-clock time per phase since creation. */
PI_API pi_status pi_session_timings(const pi_session* session, pi_timings* out);

typedef struct pi_placement {
  bool hybrid;                /* false: one device runs everything (the rest is zero) */
  uint64_t budget;            /* device bytes the session may use */
  uint64_t device_bytes;      /* what the ledger counts, <= budget */
  int64_t n_layer, layers_on_device;
  int64_t hot_neurons, n_neurons; /* FFN neurons on the device, of all */
} pi_placement;

/* Fills *out with where the session runs (hybrid sessions: the plan and its ledger). */
PI_API pi_status pi_session_placement(const pi_session* session, pi_placement* out);

#ifdef __cplusplus
}
#endif

#endif /* POWERINFER_POWERINFER_H */
