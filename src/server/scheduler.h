// The scheduler: one thread owns the Session (n_seq_max = slots) and runs continuous batching.
// Each step adds the next token of every generating slot to one batch, then fills it with
// chunks of waiting prompts, and evaluates it with one Session::decode call. A new request
// takes the free slot whose cached tokens share the longest prefix with its prompt; only the
// tail after the common prefix is evaluated (seq_rm drops the rest). Requests beyond the slots
// wait in a bounded queue.
//
// Same answers everywhere: each request's sequence gets a sampler seeded with the request's
// seed (Session::set_sampling) whose penalty window holds exactly the prompt, and the engine is
// batch-invariant, so a request gives the tokens `powerinfer run` prints for the same prompt,
// seed and settings, whatever the other slots do.
//
// Draining (a graceful stop): drain() refuses new jobs while running and queued ones go on;
// wait_idle() tells when they are done; shutdown() ends whatever is left as Finish::Shutdown.
//
// Per-request timings come from the engine (Session::seq_timings of the slot's sequence).
//
// Embeddings are jobs too (JobSpec::kind Embed): such a job takes a free slot like a
// generation (preferring the one with the least cached), and each step the scheduler thread
// embeds its next input on that slot's sequence with Session::embed before the step's batch,
// so a long list of inputs does not stall the generating slots; the slot's cache is left
// empty, the other slots' sequences are untouched.
// Slot actions (llama.cpp's POST /slots/{id}?action=save|restore|erase): slot_action() queues
// a task that the scheduler thread runs between two steps, before it hands queued requests to
// slots; the HTTP thread waits for the result. A restored slot's tokens become its cached
// prompt, so the next request sharing their prefix reuses them like any cached prompt.
//
// Thread-safety: submit(), snapshot(), drain(), wait_idle() and the Job methods may be called
// from any thread; they
// talk to the scheduler thread through mutex/condition-variable protected state only. The
// Session is touched by the scheduler thread alone.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "powerinfer/engine.h"
#include "powerinfer/generator.h"

namespace pi::server {

// Cancelled: the client went away or its time ran out. Shutdown: the server stopped (the
// drain timeout ran out, or no drain) before the job was done.
enum class Finish { None, Stop, Length, Cancelled, Shutdown, Error };
const char* finish_name(Finish f);  // "stop", "length", "cancelled", "shutdown", "error"

// Generated tokens carry pi::TokenProb (powerinfer/generator.h).

enum class JobKind { Generate, Embed };

struct JobSpec {
  JobKind kind = JobKind::Generate;
  // Embed: the inputs (each at least one token, at most the slot context) and how to pool.
  std::vector<std::vector<int32_t>> inputs;
  EmbedParams embed;
  // Generate:
  std::vector<int32_t> prompt;  // at least one token, fewer than the slot context
  SamplingParams sampling;      // seed used exactly
  int64_t n_predict = -1;       // -1: until end of generation or a full slot context
  std::vector<std::string> stop;
  bool logprobs = false;
  int top_logprobs = 0;
  bool cache_prompt = true;
  bool ignore_eos = false;
  // Control tokens whose text goes into the output (harmony's message headers and ends, which
  // the reply split reads: chat::reply_tokens); other control tokens add no text.
  std::vector<int32_t> shown_tokens;
  // The tokens that end the job; empty: the vocabulary's end-of-generation tokens
  // (Vocabulary::is_eog). With ignore_eos these are the ones banned.
  std::vector<int32_t> end_tokens;
};

struct JobStats {
  Finish finish = Finish::None;
  std::string error;  // Finish::Error
  int slot = -1;
  int64_t n_prompt = 0;  // prompt tokens
  int64_t n_cached = 0;  // of which reused from the slot's cache
  int64_t n_predicted = 0;
  // queue_ms: waiting for a slot (wall clock). prompt_ms: the engine's time on the prompt
  // tokens; predict_ms: on the generated tokens, sampling included (Session::seq_timings).
  double queue_ms = 0, prompt_ms = 0, predict_ms = 0;
  std::string stop_word;  // the stop string that ended it, if any
};

// A request in flight. The scheduler appends output; the HTTP thread takes it.
class Job {
 public:
  struct Output {
    std::string text;
    std::vector<TokenProb> probs;
    bool done = false;
    JobStats stats;  // valid when done
    // Embed jobs, when done without error: f32 [inputs, n_embd], one row per input (Pooling
    // None: one per token, input after input).
    std::vector<float> embeddings;
  };
  // Waits until there is output or the job is done, at most `timeout`, and takes what there is.
  Output take(std::chrono::milliseconds timeout);
  // Asks the scheduler to stop the job (client gone); it frees the slot at its next step.
  void cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

  JobSpec spec;
  std::chrono::steady_clock::time_point submitted;

 private:
  friend class Scheduler;
  void publish(std::string text, std::vector<TokenProb> probs);
  void finish(const JobStats& stats, std::vector<float> embeddings = {});
  std::mutex m_;
  std::condition_variable cv_;
  std::string text_;
  std::vector<TokenProb> probs_;
  bool done_ = false;
  JobStats stats_;
  std::vector<float> embeddings_;
  std::atomic<bool> cancelled_{false};
};

struct SchedulerOptions {
  int n_slots = 1;
  int64_t n_ctx_slot = 0;  // positions per slot
  int max_queue = 16;      // requests waiting for a slot beyond the slots
};

// Counters for /metrics and /slots.
struct SchedulerStats {
  int64_t submitted = 0, rejected = 0, finished = 0, cancelled = 0, failed = 0;
  int64_t prompt_tokens = 0, cached_tokens = 0, predicted_tokens = 0, steps = 0;
  double prompt_seconds = 0, predict_seconds = 0;
  int64_t processing = 0, queued = 0;  // slots in use, jobs waiting for one
  bool draining = false;                // drain() was called
  struct Slot {
    int id = 0;
    bool busy = false;
    int64_t n_cached = 0;     // tokens the slot's sequence holds
    int64_t n_predicted = 0;  // of the current request
  };
  std::vector<Slot> slots;
};

enum class SlotAction { Save, Restore, Erase };

struct SlotActionResult {
  // 200 done; 400 a slot id out of range, nothing to save, a file that is missing or cannot be
  // restored; 503 the slot runs a request, or the scheduler stopped; 500 the file could not be
  // written.
  int status = 200;
  std::string error;     // when status != 200: one line
  int64_t n_tokens = 0;  // tokens saved, restored or erased
  uint64_t n_bytes = 0;  // bytes written or read
  double ms = 0;         // time the save or restore took
};

class Scheduler {
 public:
  // Takes over `session` (created with n_seq_max = o.n_slots) and starts the thread.
  Scheduler(const Engine& engine, std::unique_ptr<Session> session, const SchedulerOptions& o);
  ~Scheduler();  // shutdown()
  // Stops the thread and ends every running and queued job as Finish::Shutdown; later
  // submits fail. Idempotent; call before stopping the HTTP server so that no handler waits
  // on a job.
  void shutdown();
  // From now on submit() fails; running and queued jobs go on. Idempotent.
  void drain();
  bool draining() const;
  // Waits until no job runs or waits for a slot, at most `timeout`; true when none does.
  bool wait_idle(std::chrono::milliseconds timeout);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a job; nullptr when the queue is full or the scheduler drains or has stopped
  // (the caller answers 503; draining() tells which).
  std::shared_ptr<Job> submit(JobSpec spec);
  // Runs `a` on slot `id` on the scheduler thread and waits for it. `path` is the state file
  // of Save and Restore (docs/FORMATS.md), already checked by the caller. Restore replaces
  // what the slot holds with the file's tokens (a slot whose restore fails after the file was
  // found holds nothing). A slot running a request is refused (503).
  SlotActionResult slot_action(SlotAction a, int id, const std::string& path);
  SchedulerStats snapshot() const;
  const SchedulerOptions& options() const { return o_; }

 private:
  struct Slot;
  void loop();
  void start(Slot& s, std::shared_ptr<Job> job);
  // Gives slot s an Embed job; embed_step() embeds its next input and ends it after the last.
  void start_embed(Slot& s, std::shared_ptr<Job> job);
  void embed_step(Slot& s);
  // Handles the token sampled for slot s; false when the job ended.
  bool on_token(Slot& s, int32_t token, std::span<const float> logits);
  void end(Slot& s, Finish f, std::string error = {}, std::vector<float> embeddings = {});
  void publish_safe(Slot& s);
  struct SlotTask;
  SlotActionResult run_slot_task(const SlotTask& t);

  const Engine& engine_;
  const Vocabulary& vocab_;
  std::unique_ptr<Session> session_;  // scheduler thread only
  SchedulerOptions o_;
  std::vector<std::unique_ptr<Slot>> slots_;  // scheduler thread only (busy flags mirrored)
  int64_t use_clock_ = 0;

  mutable std::mutex mu_;  // guards queue_, stop_, stats_
  std::condition_variable cv_;       // wakes the scheduler thread
  std::condition_variable idle_cv_;  // signalled when a job ends (wait_idle)
  std::deque<std::shared_ptr<Job>> queue_;
  std::deque<std::shared_ptr<SlotTask>> tasks_;  // slot actions for the scheduler thread
  bool stop_ = false;
  SchedulerStats stats_;
  std::thread thread_;
};

}  // namespace pi::server
