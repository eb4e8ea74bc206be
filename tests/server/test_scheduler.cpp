// The scheduler on the bundled model: answers that do not depend on what else runs, the
// bounded queue, cancellation, limits, draining, per-request timings. No sockets (the pytest
// files cover HTTP).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "model/tiny_model.h"
#include "server/scheduler.h"

namespace pi::server {
namespace {

const std::string kModel = std::string(PI_SOURCE_DIR) + "/models/kjv-relu/kjv-relu.pwri.gguf";

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kModel)) GTEST_SKIP() << kModel << " not present";
    auto e = Engine::load(kModel);
    ASSERT_TRUE(e.ok()) << e.error().message;
    engine_ = std::move(*e);
  }

  std::unique_ptr<Scheduler> make(int slots, int max_queue) {
    SessionOptions so;
    so.n_ctx = 256 * slots;
    so.n_threads = 1;
    so.n_seq_max = slots;
    auto s = Session::create(*engine_, so);
    EXPECT_TRUE(s.ok()) << s.error().message;
    return std::make_unique<Scheduler>(*engine_, std::move(*s),
                                       SchedulerOptions{slots, 256, max_queue});
  }

  JobSpec spec(const std::string& prompt, int64_t n, uint64_t seed) const {
    JobSpec j;
    const Vocabulary& v = *engine_->vocabulary();
    j.prompt = v.encode(prompt, v.add_bos(), true);
    j.n_predict = n;
    j.sampling.seed = seed;
    return j;
  }

  static std::pair<std::string, JobStats> wait(Job& job) {
    std::string text;
    while (true) {
      Job::Output o = job.take(std::chrono::milliseconds(200));
      text += o.text;
      if (o.done) return {text, o.stats};
    }
  }

  std::unique_ptr<Engine> engine_;
};

TEST_F(SchedulerTest, AnswersDoNotDependOnOtherRequests) {
  const std::vector<std::string> prompts = {"And God said", "In the beginning", "Jesus wept"};
  std::vector<std::string> alone;
  {
    auto s = make(1, 8);
    for (const auto& p : prompts) alone.push_back(wait(*s->submit(spec(p, 20, 5))).first);
  }
  auto s = make(2, 8);
  std::vector<std::shared_ptr<Job>> jobs;
  for (int round = 0; round < 2; ++round)
    for (const auto& p : prompts) jobs.push_back(s->submit(spec(p, 20, 5)));
  for (size_t i = 0; i < jobs.size(); ++i) {
    ASSERT_NE(jobs[i], nullptr);
    auto [text, st] = wait(*jobs[i]);
    EXPECT_EQ(text, alone[i % prompts.size()]) << i;
    EXPECT_TRUE(st.finish == Finish::Length || st.finish == Finish::Stop);
  }
  const SchedulerStats m = s->snapshot();
  EXPECT_EQ(m.submitted, 6);
  EXPECT_EQ(m.finished, 6);
  EXPECT_EQ(m.processing, 0);
  EXPECT_GT(m.cached_tokens, 0);  // the second round reuses the slots' prompts
}

// The engine's per-sequence counts agree with the scheduler's own bookkeeping: the prompt
// tokens each request evaluated are its prompt minus the cached prefix, however the batches
// mixed them with other slots' tokens and prompt chunks.
TEST_F(SchedulerTest, TimingsComeFromTheSlotsSequence) {
  auto s = make(2, 8);
  std::vector<std::shared_ptr<Job>> jobs;
  for (const char* p : {"And God said", "In the beginning God created", "And God said unto Moses"})
    jobs.push_back(s->submit(spec(p, 6, 3)));
  int64_t evaluated = 0;
  for (auto& j : jobs) {
    ASSERT_NE(j, nullptr);
    const JobStats st = wait(*j).second;
    EXPECT_GT(st.prompt_ms, 0.0);
    EXPECT_GT(st.predict_ms, 0.0);
    evaluated += st.n_prompt - st.n_cached;
  }
  EXPECT_EQ(s->snapshot().prompt_tokens, evaluated);
}

// drain(): new jobs are refused, the running and the queued ones finish normally, and
// wait_idle() returns once every one of them is done.
TEST_F(SchedulerTest, DrainRefusesNewJobsAndFinishesAcceptedOnes) {
  auto s = make(1, 4);
  JobSpec j = spec("And God said", 40, 1);
  j.ignore_eos = true;
  auto a = s->submit(j), b = s->submit(j);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  s->drain();
  s->drain();  // idempotent
  EXPECT_TRUE(s->draining());
  EXPECT_TRUE(s->snapshot().draining);
  EXPECT_EQ(s->submit(spec("x", 1, 1)), nullptr);
  ASSERT_TRUE(s->wait_idle(std::chrono::seconds(120)));
  for (auto* job : {a.get(), b.get()}) {
    Job::Output o = job->take(std::chrono::milliseconds(0));
    ASSERT_TRUE(o.done);  // idle means every accepted job has its answer
    EXPECT_EQ(o.stats.finish, Finish::Length);
    EXPECT_EQ(o.stats.n_predicted, 40);
  }
  const SchedulerStats m = s->snapshot();
  EXPECT_EQ(m.finished, 2);
  EXPECT_EQ(m.rejected, 1);
  EXPECT_EQ(m.processing, 0);
  EXPECT_EQ(m.queued, 0);
  EXPECT_TRUE(s->wait_idle(std::chrono::milliseconds(0)));
}

TEST_F(SchedulerTest, QueueIsBoundedAndCancelFreesTheSlot) {
  auto s = make(1, 0);
  JobSpec long_job = spec("And God said", 200, 1);
  long_job.ignore_eos = true;
  auto a = s->submit(long_job);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(s->submit(spec("x", 2, 1)), nullptr);  // no free slot, no queue
  EXPECT_EQ(s->snapshot().rejected, 1);
  a->cancel();
  auto [text, st] = wait(*a);
  EXPECT_EQ(st.finish, Finish::Cancelled);
  EXPECT_LT(st.n_predicted, 200);
  auto b = s->submit(spec("And God said", 3, 1));
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(wait(*b).second.n_predicted, 3);
  EXPECT_EQ(s->snapshot().cancelled, 1);
}

TEST_F(SchedulerTest, StopStringsEndTheAnswerBeforeTheStop) {
  auto s = make(1, 4);
  JobSpec j = spec("And God said", 30, 2);
  j.sampling.temperature = 0;
  const std::string full = wait(*s->submit(j)).first;
  ASSERT_GT(full.size(), 12u);
  const std::string word = full.substr(8, 4);
  j.stop = {word};
  auto [text, st] = wait(*s->submit(j));
  EXPECT_EQ(text, full.substr(0, full.find(word)));
  EXPECT_EQ(st.finish, Finish::Stop);
  EXPECT_EQ(st.stop_word, word);
}

// JobSpec::end_tokens (harmony's <|return|>/<|call|>): a token of the list ends the job
// before its text, as an end-of-generation token does; shown_tokens adds a control token's
// text (here BOS, "<s>", which the model never samples: the answer is unchanged).
TEST_F(SchedulerTest, EndTokensReplaceTheVocabularysEndOfGeneration) {
  auto s = make(1, 4);
  JobSpec j = spec("And God said", 12, 2);
  j.sampling.temperature = 0;
  j.logprobs = true;
  std::string full;
  std::vector<int32_t> ids;
  std::vector<std::string> pieces;
  for (auto job = s->submit(j);;) {
    Job::Output o = job->take(std::chrono::milliseconds(200));
    full += o.text;
    for (const TokenProb& p : o.probs) {
      ids.push_back(p.id);
      pieces.push_back(p.text);
    }
    if (o.done) break;
  }
  ASSERT_GE(ids.size(), 6u);
  const Vocabulary& v = *engine_->vocabulary();
  j.logprobs = false;
  j.end_tokens = {ids[5]};
  j.shown_tokens = {v.bos()};
  auto [text, st] = wait(*s->submit(j));
  EXPECT_EQ(st.finish, Finish::Stop);
  EXPECT_EQ(st.n_predicted, 5);
  EXPECT_EQ(text, pieces[0] + pieces[1] + pieces[2] + pieces[3] + pieces[4]);
  EXPECT_EQ(full.compare(0, text.size(), text), 0);
}

TEST_F(SchedulerTest, ShutdownEndsRunningAndQueuedJobs) {
  auto s = make(1, 4);
  JobSpec long_job = spec("And God said", 250, 1);
  long_job.ignore_eos = true;
  auto a = s->submit(long_job), b = s->submit(long_job);
  s->shutdown();
  const Finish fa = wait(*a).second.finish;
  EXPECT_TRUE(fa == Finish::Shutdown || fa == Finish::Length);
  EXPECT_EQ(wait(*b).second.finish, Finish::Shutdown);
  EXPECT_EQ(s->submit(spec("x", 1, 1)), nullptr);
  const SchedulerStats m = s->snapshot();
  EXPECT_EQ(m.submitted, m.finished + m.cancelled + m.failed);  // the queued one counts too
}

// Embedding jobs run on a free slot between generation steps: each input's vector equals
// Session::embed's alone, and generation in the other slot gives the text it gives alone.
TEST_F(SchedulerTest, EmbeddingJobsLeaveGenerationAlone) {
  const Vocabulary& v = *engine_->vocabulary();
  const std::vector<std::string> texts = {"In the beginning", "Jesus wept"};
  std::vector<std::vector<float>> want;
  {
    SessionOptions so;
    so.n_ctx = 256;
    so.n_threads = 1;
    auto s = Session::create(*engine_, so);
    ASSERT_TRUE(s.ok()) << s.error().message;
    for (const auto& t : texts) {
      std::vector<float> e;
      ASSERT_TRUE((*s)->embed(v.encode(t, v.add_bos(), true), {}, e).ok());
      want.push_back(e);
    }
  }
  std::string alone;
  {
    auto s = make(1, 8);
    alone = wait(*s->submit(spec("And God said", 24, 3))).first;
  }
  auto s = make(2, 8);
  auto gen = s->submit(spec("And God said", 24, 3));
  std::vector<std::shared_ptr<Job>> embeds;
  for (int round = 0; round < 3; ++round) {
    JobSpec j;
    j.kind = JobKind::Embed;
    for (const auto& t : texts) j.inputs.push_back(v.encode(t, v.add_bos(), true));
    embeds.push_back(s->submit(std::move(j)));
  }
  for (auto& job : embeds) {
    ASSERT_NE(job, nullptr);
    Job::Output o;
    do {
      o = job->take(std::chrono::milliseconds(200));
    } while (!o.done);
    EXPECT_EQ(o.stats.finish, Finish::Stop) << o.stats.error;
    const size_t d = want[0].size();
    ASSERT_EQ(o.embeddings.size(), 2 * d);
    EXPECT_EQ(std::vector<float>(o.embeddings.begin(), o.embeddings.begin() + d), want[0]);
    EXPECT_EQ(std::vector<float>(o.embeddings.begin() + d, o.embeddings.end()), want[1]);
  }
  EXPECT_EQ(wait(*gen).first, alone);
  const SchedulerStats m = s->snapshot();
  EXPECT_EQ(m.finished, 4);
  EXPECT_EQ(m.processing, 0);
}

// Slot actions run on the scheduler thread while other slots generate: a slot saved after a
// request and restored into another scheduler's slot is that slot's cached prompt (the same
// request reuses all of it but its last token and gives the same text); a slot that runs a
// request is refused, an empty one has nothing to save, an id out of range is refused.
TEST_F(SchedulerTest, SlotSaveAndRestoreMakeTheCachedPrompt) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("pi_slot_" + std::to_string(::getpid()) + ".bin")).string();
  const JobSpec req = spec("And God said, Let there be light", 8, 3);
  std::string first_text;
  {
    auto a = make(2, 4);
    auto job = a->submit(req);
    ASSERT_NE(job, nullptr);
    auto [text, st] = wait(*job);
    first_text = text;
    const SlotActionResult saved = a->slot_action(SlotAction::Save, st.slot, path);
    ASSERT_EQ(saved.status, 200) << saved.error;
    EXPECT_GE(saved.n_tokens, static_cast<int64_t>(req.prompt.size()));
    EXPECT_EQ(saved.n_bytes, std::filesystem::file_size(path));
    EXPECT_EQ(a->slot_action(SlotAction::Save, 1 - st.slot, path + ".x").status, 400);
    EXPECT_EQ(a->slot_action(SlotAction::Save, 7, path + ".x").status, 400);
    EXPECT_FALSE(std::filesystem::exists(path + ".x"));
  }
  auto b = make(2, 4);
  JobSpec other = spec("Jesus wept", 200, 1);
  other.ignore_eos = true;
  auto running = b->submit(other);
  ASSERT_NE(running, nullptr);
  Job::Output o = running->take(std::chrono::milliseconds(5000));  // started: it holds slot 0
  ASSERT_FALSE(o.text.empty() && !o.done);
  const SlotActionResult restored = b->slot_action(SlotAction::Restore, 1, path);
  ASSERT_EQ(restored.status, 200) << restored.error;
  EXPECT_GT(restored.n_tokens, 0);
  const SlotActionResult busy = b->slot_action(SlotAction::Save, 0, path + ".busy");
  EXPECT_TRUE(busy.status == 503 || running->take(std::chrono::milliseconds(0)).done)
      << busy.status << " " << busy.error;
  running->cancel();
  wait(*running);
  EXPECT_EQ(b->snapshot().slots[1].n_cached, restored.n_tokens);

  auto again = b->submit(req);
  ASSERT_NE(again, nullptr);
  auto [text, st] = wait(*again);
  EXPECT_EQ(st.slot, 1);
  EXPECT_EQ(st.n_cached, static_cast<int64_t>(req.prompt.size()) - 1);
  EXPECT_EQ(text, first_text);

  const SlotActionResult erased = b->slot_action(SlotAction::Erase, 1, "");
  EXPECT_EQ(erased.status, 200);
  EXPECT_EQ(b->snapshot().slots[1].n_cached, 0);
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".busy");
}

// A model whose sliding-window layers keep only their window (gpt-oss, windows of 3): a cached
// prompt is reused where the new prompt extends it, and where it would be cut back to a point
// whose window is gone the slot evaluates from scratch, with the answer a fresh slot gives.
TEST(SchedulerWindow, APrefixWhoseWindowIsGoneIsEvaluatedAgain) {
  testing::TinySpec spec;
  spec.arch = "gpt-oss";
  spec.n_layer = 3;
  spec.n_swa = 3;
  const std::string path = testing::temp_path("scheduler_gpt_oss.gguf");
  ASSERT_TRUE(testing::write_tiny_model(spec, path).ok());
  auto e = Engine::load(path);
  ASSERT_TRUE(e.ok()) << e.error().message;
  const auto make = [&] {
    SessionOptions so;
    so.n_ctx = 128;
    so.n_batch = 8;
    so.n_threads = 1;
    auto s = Session::create(**e, so);
    EXPECT_TRUE(s.ok()) << s.error().message;
    return std::make_unique<Scheduler>(**e, std::move(*s), SchedulerOptions{1, 128, 4});
  };
  const auto job = [](std::vector<int32_t> prompt) {
    JobSpec j;
    j.prompt = std::move(prompt);
    j.n_predict = 6;
    j.sampling.temperature = 0.0f;
    return j;
  };
  const auto run = [](Scheduler& s, JobSpec j) {
    auto h = s.submit(std::move(j));
    EXPECT_NE(h, nullptr);
    std::string text;
    while (true) {
      Job::Output o = h->take(std::chrono::milliseconds(200));
      text += o.text;
      if (o.done) return std::make_pair(text, o.stats);
    }
  };
  std::vector<int32_t> a;
  for (int32_t i = 0; i < 30; ++i) a.push_back(3 + (i * 37) % 250);
  std::vector<int32_t> b(a.begin(), a.begin() + 10);  // shares 10 tokens: their window is gone
  for (int32_t i = 0; i < 8; ++i) b.push_back(200 + i);
  auto s = make();
  const auto first = run(*s, job(a));
  EXPECT_EQ(first.second.n_cached, 0);
  const auto cut = run(*s, job(b));
  EXPECT_EQ(cut.second.n_cached, 0);  // not 10
  EXPECT_EQ(cut.first, run(*make(), job(b)).first);
  // A prompt extending what the slot holds (b and its answer's first tokens were fed): reused.
  std::vector<int32_t> c = b;
  c.push_back(77);
  const auto extended = run(*s, job(c));
  EXPECT_EQ(extended.second.n_cached, static_cast<int64_t>(b.size()));
  EXPECT_EQ(extended.first, run(*make(), job(c)).first);
}

}  // namespace
}  // namespace pi::server
