#include "server/scheduler.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <future>
#include <numeric>
#include <optional>

#include "powerinfer/stop_text.h"

namespace pi::server {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return static_cast<size_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
}


}  // namespace

const char* finish_name(Finish f) {
  switch (f) {
    case Finish::Stop: return "stop";
    case Finish::Length: return "length";
    case Finish::Cancelled: return "cancelled";
    case Finish::Shutdown: return "shutdown";
    case Finish::Error: return "error";
    case Finish::None: break;
  }
  return "none";
}

Job::Output Job::take(std::chrono::milliseconds timeout) {
  std::unique_lock lk(m_);
  cv_.wait_for(lk, timeout, [&] { return done_ || !text_.empty() || !probs_.empty(); });
  Output o;
  o.text.swap(text_);
  o.probs.swap(probs_);
  o.done = done_;
  if (done_) {
    o.stats = stats_;
    o.embeddings.swap(embeddings_);
  }
  return o;
}

void Job::publish(std::string text, std::vector<TokenProb> probs) {
  if (text.empty() && probs.empty()) return;
  {
    std::lock_guard lk(m_);
    text_ += text;
    for (TokenProb& p : probs) probs_.push_back(std::move(p));
  }
  cv_.notify_all();
}

void Job::finish(const JobStats& stats, std::vector<float> embeddings) {
  {
    std::lock_guard lk(m_);
    done_ = true;
    stats_ = stats;
    embeddings_ = std::move(embeddings);
  }
  cv_.notify_all();
}

struct Scheduler::Slot {
  int id = 0;
  std::shared_ptr<Job> job;
  int32_t n_past = 0;           // positions 0..n_past-1 sequence `id` holds (its tokens: Session::seq_tokens)
  size_t n_prompt_fed = 0;      // prompt tokens the sequence holds
  bool generating = false;      // the prompt is done; `next` is fed in the next step
  int32_t next = -1;
  std::optional<Generator> gen;  // generate jobs: the answer's text, cut at its stop strings
  JobStats stats;
  Clock::time_point t_start;
  int64_t last_use = 0;
  // Embed jobs: inputs done, and their vectors f32 [n_embedded, n_embd].
  size_t n_embedded = 0;
  std::vector<float> embeddings;
};

struct Scheduler::SlotTask {
  SlotAction action = SlotAction::Save;
  int id = 0;
  std::string path;
  std::promise<SlotActionResult> done;
};

Scheduler::Scheduler(const Engine& engine, std::unique_ptr<Session> session,
                     const SchedulerOptions& o)
    : engine_(engine), vocab_(*engine.vocabulary()), session_(std::move(session)), o_(o) {
  for (int i = 0; i < o_.n_slots; ++i) {
    slots_.push_back(std::make_unique<Slot>());
    slots_.back()->id = i;
  }
  stats_.slots.resize(static_cast<size_t>(o_.n_slots));
  for (int i = 0; i < o_.n_slots; ++i) stats_.slots[static_cast<size_t>(i)].id = i;
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { shutdown(); }

void Scheduler::shutdown() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (!thread_.joinable()) return;
  thread_.join();
  // The thread is gone: the session and the slots are this thread's now.
  for (auto& s : slots_)
    if (s->job) end(*s, Finish::Shutdown);
  std::deque<std::shared_ptr<Job>> left;
  std::deque<std::shared_ptr<SlotTask>> tasks;
  {
    std::lock_guard lk(mu_);
    tasks.swap(tasks_);
    left.swap(queue_);
    stats_.cancelled += static_cast<int64_t>(left.size());
  }
  idle_cv_.notify_all();
  for (auto& t : tasks) t->done.set_value({503, "the server stopped", 0, 0, 0});
  for (auto& j : left) {
    JobStats st;
    st.finish = Finish::Shutdown;
    j->finish(st);
  }
}

SlotActionResult Scheduler::slot_action(SlotAction a, int id, const std::string& path) {
  auto task = std::make_shared<SlotTask>();
  task->action = a;
  task->id = id;
  task->path = path;
  std::future<SlotActionResult> result = task->done.get_future();
  {
    std::lock_guard lk(mu_);
    if (stop_) return {503, "the server stopped", 0, 0, 0};
    tasks_.push_back(task);
  }
  cv_.notify_all();
  return result.get();
}

SlotActionResult Scheduler::run_slot_task(const SlotTask& t) {
  if (t.id < 0 || t.id >= o_.n_slots)
    return {400, "invalid slot id " + std::to_string(t.id) + " (the server has " +
                     std::to_string(o_.n_slots) + " slots)", 0, 0, 0};
  Slot& s = *slots_[static_cast<size_t>(t.id)];
  if (s.job) return {503, "slot " + std::to_string(t.id) + " is processing a request", 0, 0, 0};
  SlotActionResult r;
  const Clock::time_point t0 = Clock::now();
  switch (t.action) {
    case SlotAction::Save: {
      if (s.n_past == 0)
        return {400, "slot " + std::to_string(t.id) + " holds no tokens to save", 0, 0, 0};
      auto w = session_->save_state(s.id, t.path, session_->seq_tokens(s.id));
      if (!w.ok()) return {500, w.error().message, 0, 0, 0};
      r.n_tokens = s.n_past;
      r.n_bytes = *w;
      break;
    }
    case SlotAction::Restore: {
      std::error_code ec;
      if (!std::filesystem::is_regular_file(t.path, ec))
        return {400, t.path + ": no such slot save file", 0, 0, 0};
      (void)session_->seq_rm(s.id, 0);
      s.n_past = 0;
      auto st = session_->load_state(s.id, t.path);
      if (st.ok() && static_cast<int64_t>(st->tokens.size()) >= o_.n_ctx_slot) {
        (void)session_->seq_rm(s.id, 0);
        r = {400, t.path + ": " + std::to_string(st->tokens.size()) +
                      " tokens do not fit a slot's context of " + std::to_string(o_.n_ctx_slot),
             0, 0, 0};
      } else if (st.ok()) {
        s.n_past = static_cast<int32_t>(st->tokens.size());
        s.last_use = ++use_clock_;
        r.n_tokens = s.n_past;
        r.n_bytes = st->file_bytes;
      } else {
        r = {400, st.error().message, 0, 0, 0};
      }
      break;
    }
    case SlotAction::Erase:
      r.n_tokens = s.n_past;
      (void)session_->seq_rm(s.id, 0);
      s.n_past = 0;
      break;
  }
  r.ms = ms_between(t0, Clock::now());
  std::lock_guard lk(mu_);
  stats_.slots[static_cast<size_t>(s.id)].n_cached = s.n_past;
  return r;
}

void Scheduler::drain() {
  std::lock_guard lk(mu_);
  stats_.draining = true;
}

bool Scheduler::draining() const {
  std::lock_guard lk(mu_);
  return stats_.draining;
}

bool Scheduler::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  return idle_cv_.wait_for(lk, timeout, [&] { return stats_.processing == 0 && queue_.empty(); });
}

std::shared_ptr<Job> Scheduler::submit(JobSpec spec) {
  auto job = std::make_shared<Job>();
  job->spec = std::move(spec);
  job->submitted = Clock::now();
  {
    std::lock_guard lk(mu_);
    const auto free_slots = static_cast<size_t>(o_.n_slots - stats_.processing);
    if (stop_ || stats_.draining ||
        queue_.size() >= static_cast<size_t>(o_.max_queue) + free_slots) {
      stats_.rejected += 1;
      return nullptr;
    }
    stats_.submitted += 1;
    queue_.push_back(job);
  }
  cv_.notify_all();
  return job;
}

SchedulerStats Scheduler::snapshot() const {
  std::lock_guard lk(mu_);
  SchedulerStats s = stats_;
  s.queued = static_cast<int64_t>(queue_.size());
  return s;
}

void Scheduler::start(Slot& s, std::shared_ptr<Job> job) {
  const JobSpec& sp = job->spec;
  s.job = std::move(job);
  // The slot's cached prefix of the prompt is kept (Session::seq_reuse_prefix), the rest of
  // what it held forgotten.
  Result<int64_t> kept = int64_t{0};
  if (sp.cache_prompt) kept = session_->seq_reuse_prefix(s.id, sp.prompt);
  else if (Status st = session_->seq_rm(s.id, 0); !st.ok()) kept = st.error();
  const size_t n_common = kept.ok() ? static_cast<size_t>(*kept) : 0;
  s.n_past = kept.ok() ? static_cast<int32_t>(n_common) : session_->seq_pos_max(s.id) + 1;
  s.stats = JobStats{};
  s.stats.slot = s.id;
  s.stats.n_prompt = static_cast<int64_t>(sp.prompt.size());
  s.stats.n_cached = static_cast<int64_t>(n_common);
  s.t_start = Clock::now();
  s.stats.queue_ms = ms_between(s.job->submitted, s.t_start);
  s.last_use = ++use_clock_;
  s.generating = false;
  s.n_prompt_fed = n_common;
  // The decoder sees the prompt first, as `powerinfer run` does, so the answer's first piece
  // keeps its leading space (SPM drops it only at the start of a text).
  s.gen.emplace(vocab_);
  (void)s.gen->context(sp.prompt);
  s.gen->begin(GenerateParams{sp.n_predict, sp.stop, sp.ignore_eos, sp.end_tokens, sp.shown_tokens,
                              sp.logprobs ? sp.top_logprobs : -1});
  session_->reset_seq_timings(s.id);
  {
    std::lock_guard lk(mu_);
    stats_.cached_tokens += static_cast<int64_t>(n_common);
    stats_.slots[static_cast<size_t>(s.id)].busy = true;
    stats_.slots[static_cast<size_t>(s.id)].n_predicted = 0;
  }
  if (!kept.ok()) {
    end(s, Finish::Error, kept.error().message);
    return;
  }
  Status st = session_->set_sampling(
      s.id, sp.sampling, std::span<const int32_t>(sp.prompt.data(), n_common));
  if (!st.ok()) {
    end(s, Finish::Error, st.error().message);
    return;
  }
  if (sp.ignore_eos)
    session_->ban_tokens(s.id, sp.end_tokens.empty() ? vocab_.eog_tokens() : sp.end_tokens);
}

void Scheduler::start_embed(Slot& s, std::shared_ptr<Job> job) {
  s.job = std::move(job);
  s.stats = JobStats{};
  s.stats.slot = s.id;
  for (const auto& in : s.job->spec.inputs) s.stats.n_prompt += static_cast<int64_t>(in.size());
  s.t_start = Clock::now();
  s.stats.queue_ms = ms_between(s.job->submitted, s.t_start);
  s.last_use = ++use_clock_;
  s.generating = false;
  s.gen.reset();
  s.n_embedded = 0;
  s.embeddings.clear();
  session_->reset_seq_timings(s.id);
  {
    std::lock_guard lk(mu_);
    stats_.slots[static_cast<size_t>(s.id)].busy = true;
    stats_.slots[static_cast<size_t>(s.id)].n_predicted = 0;
  }
}

void Scheduler::embed_step(Slot& s) {
  const JobSpec& sp = s.job->spec;
  // Session::embed empties the slot's sequence: its cached prompt is gone.
  s.n_past = 0;
  const EmbedInput in[1] = {{s.id, sp.inputs[s.n_embedded]}};
  std::vector<float> one;
  if (Status st = session_->embed(in, sp.embed, one); !st.ok()) {
    end(s, Finish::Error, st.error().message);
    return;
  }
  s.embeddings.insert(s.embeddings.end(), one.begin(), one.end());
  if (++s.n_embedded == sp.inputs.size()) end(s, Finish::Stop, {}, std::move(s.embeddings));
}

void Scheduler::publish_safe(Slot& s) {
  s.job->publish(s.gen->take(), s.gen->take_probs());
}

void Scheduler::end(Slot& s, Finish f, std::string error, std::vector<float> embeddings) {
  if (s.gen) {
    std::string rest = s.gen->finish();
    s.stats.stop_word = s.gen->stop_word();
    s.job->publish(std::move(rest), s.gen->take_probs());
  }
  s.stats.finish = f;
  s.stats.error = std::move(error);
  const SeqTimings t = session_->seq_timings(s.id);
  s.stats.prompt_ms = t.prompt_ms;
  s.stats.predict_ms = t.eval_ms + t.sample_ms;
  {
    std::lock_guard lk(mu_);
    stats_.processing -= 1;
    stats_.slots[static_cast<size_t>(s.id)].busy = false;
    stats_.slots[static_cast<size_t>(s.id)].n_cached = s.n_past;
    if (f == Finish::Cancelled || f == Finish::Shutdown) {
      stats_.cancelled += 1;
    } else if (f == Finish::Error) {
      stats_.failed += 1;
    } else {
      stats_.finished += 1;
    }
    stats_.prompt_tokens += t.n_prompt;
    stats_.predicted_tokens += s.stats.n_predicted;
    stats_.prompt_seconds += s.stats.prompt_ms / 1e3;
    stats_.predict_seconds += s.stats.predict_ms / 1e3;
  }
  s.job->finish(s.stats, std::move(embeddings));
  idle_cv_.notify_all();
  s.job.reset();
  s.generating = false;
  s.gen.reset();
}

bool Scheduler::on_token(Slot& s, int32_t t, std::span<const float> logits) {
  const bool full = s.n_past >= o_.n_ctx_slot;
  const GenEnd e = s.gen->accept(t, logits, t >= 0 && session_->grammar_done(s.id), full);
  s.stats.n_predicted = s.gen->n_tokens();
  switch (e) {
    case GenEnd::None:
      s.next = t;
      publish_safe(s);
      return true;
    case GenEnd::NoToken:
      end(s, Finish::Error, kGrammarAllowsNoToken);
      return false;
    case GenEnd::EndToken:
    case GenEnd::StopString:
    case GenEnd::GrammarDone:
      end(s, Finish::Stop);
      return false;
    case GenEnd::ContextFull:
    case GenEnd::Length:
      end(s, Finish::Length);
      return false;
  }
  return false;
}

void Scheduler::loop() {
  std::vector<BatchToken> batch;
  std::vector<Slot*> owner;
  while (true) {
    std::vector<std::shared_ptr<Job>> incoming;
    std::deque<std::shared_ptr<SlotTask>> tasks;
    {
      std::unique_lock lk(mu_);
      auto busy = [&] {
        return std::any_of(slots_.begin(), slots_.end(), [](const auto& s) { return s->job != nullptr; });
      };
      cv_.wait(lk, [&] { return stop_ || !queue_.empty() || !tasks_.empty() || busy(); });
      if (stop_) return;
      tasks.swap(tasks_);
      size_t free_slots = 0;
      for (const auto& s : slots_) free_slots += s->job == nullptr ? 1 : 0;
      while (free_slots > 0 && !queue_.empty()) {
        incoming.push_back(std::move(queue_.front()));
        queue_.pop_front();
        --free_slots;
        stats_.processing += 1;  // counted from here, so that wait_idle() never sees a gap
      }
    }
    // Slot actions first: a request queued behind a restore finds the restored prompt.
    for (auto& t : tasks) t->done.set_value(run_slot_task(*t));
    for (auto& job : incoming) {
      if (job->spec.kind == JobKind::Embed) {
        // The free slot with the least cached (it loses its cache), else the least recently
        // used one.
        Slot* best = nullptr;
        for (auto& s : slots_) {
          if (s->job) continue;
          if (best == nullptr || s->n_past < best->n_past ||
              (s->n_past == best->n_past && s->last_use < best->last_use))
            best = s.get();
        }
        start_embed(*best, std::move(job));
        continue;
      }
      // The free slot whose cache shares the longest prefix with the prompt, else the least
      // recently used one.
      Slot* best = nullptr;
      size_t best_common = 0;
      for (auto& s : slots_) {
        if (s->job) continue;
        const size_t c = job->spec.cache_prompt ? common_prefix(session_->seq_tokens(s->id), job->spec.prompt) : 0;
        if (best == nullptr || c > best_common ||
            (c == best_common && s->last_use < best->last_use)) {
          best = s.get();
          best_common = c;
        }
      }
      start(*best, std::move(job));
    }
    for (auto& s : slots_)
      if (s->job && s->job->cancelled()) end(*s, Finish::Cancelled);
    for (auto& s : slots_)
      if (s->job && s->job->spec.kind == JobKind::Embed) embed_step(*s);

    batch.clear();
    owner.clear();
    for (auto& s : slots_) {
      if (!s->job || !s->generating) continue;
      batch.push_back({s->next, s->id, s->n_past, true});
      owner.push_back(s.get());
    }
    auto budget = static_cast<size_t>(std::max<int64_t>(1, session_->n_batch()));
    budget = budget > batch.size() ? budget - batch.size() : 0;
    for (auto& s : slots_) {
      if (!s->job || s->generating || s->job->spec.kind != JobKind::Generate || budget == 0)
        continue;
      const std::vector<int32_t>& p = s->job->spec.prompt;
      const size_t n = std::min(budget, p.size() - s->n_prompt_fed);
      for (size_t k = 0; k < n; ++k) {
        const size_t i = s->n_prompt_fed + k;
        batch.push_back({p[i], s->id, s->n_past + static_cast<int32_t>(k), i + 1 == p.size()});
        owner.push_back(s.get());
      }
      budget -= n;
    }
    if (batch.empty()) continue;

    if (Status st = session_->decode(batch); !st.ok()) {
      for (Slot* s : owner) {
        if (!s->job) continue;
        (void)session_->seq_rm(s->id, 0);
        s->n_past = 0;
        end(*s, Finish::Error, st.error().message);
      }
      continue;
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      Slot& s = *owner[i];
      s.n_past += 1;
      if (!s.generating) s.n_prompt_fed += 1;
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!batch[i].logits) continue;
      Slot& s = *owner[i];
      s.generating = true;
      const int32_t t = session_->sample(s.id, session_->batch_logits(i));
      on_token(s, t, session_->batch_logits(i));
    }
    std::lock_guard lk(mu_);
    stats_.steps += 1;
    for (auto& s : slots_) {
      SchedulerStats::Slot& o = stats_.slots[static_cast<size_t>(s->id)];
      o.n_cached = s->n_past;
      o.n_predicted = s->stats.n_predicted;
    }
  }
}

}  // namespace pi::server
