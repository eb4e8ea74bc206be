// Saved sequence state (Session::save_state / load_state, runtime/kv_state.h): a session
// restored from a file continues bit for bit like the session that evaluated the prompt
// (greedy and seeded sampling, the logits of the last prompt token), into sequence 0 or
// another one, on the CPU and on the simulated GPU (the whole cache there, or split between
// the sim and the CPU by layers). Every bad file (another model, truncated at any point of
// the format, garbage, missing) and every misuse (a context too small, a sequence out of
// range or in use) is a one-line error naming the file, and the session is unchanged.
// Quantized KV caches (-ctk/-ctv q8_0, q4_0) save and restore their blocks, and a file of
// other KV types is refused; their logits stay close to the f16 cache's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "model/tiny_model.h"
#include "powerinfer/engine.h"

namespace {

using pi::testing::TinySpec;

std::unique_ptr<pi::Engine> load_engine(const std::string& name, TinySpec spec = {}) {
  const std::string path = pi::testing::temp_path(name);
  const pi::Status w = pi::testing::write_tiny_model(spec, path);
  EXPECT_TRUE(w.ok()) << w.error().message;
  auto e = pi::Engine::load(path);
  EXPECT_TRUE(e.ok()) << e.error().message;
  return e.ok() ? std::move(e).value() : nullptr;
}

struct Config {
  std::string device = "cpu";
  int n_gpu_layers = -1;  // sim: layers on the device (-1: all the budget holds)
  int n_seq = 1;
  int64_t n_ctx = 64;
  float temperature = 0.0f;
  uint64_t seed = 7;
  pi::KvCacheType kv_k = pi::KvCacheType::F16;
  pi::KvCacheType kv_v = pi::KvCacheType::F16;
};

std::unique_ptr<pi::Session> make_session(const pi::Engine& e, const Config& s) {
  pi::SessionOptions o;
  o.n_ctx = s.n_ctx;
  o.n_batch = 8;  // prompts span several batches
  o.n_threads = 2;
  o.n_seq_max = s.n_seq;
  o.device = s.device;
  o.n_gpu_layers = s.n_gpu_layers;
  o.sampling.temperature = s.temperature;
  o.sampling.repeat_penalty = 1.3f;  // the penalty window must be restored too
  o.sampling.seed = s.seed;
  o.kv_type_k = s.kv_k;
  o.kv_type_v = s.kv_v;
  o.gpu_index = pi::testing::temp_path("state.gpuidx");
  o.reset_gpu_index = true;
  auto r = pi::Session::create(e, o);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? std::move(r).value() : nullptr;
}

std::vector<int32_t> prompt_tokens() {
  return {1, 17, 250, 3, 99, 42, 7, 7, 7, 180, 5, 64, 12, 200, 33, 91, 8, 8, 150};
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Samples and feeds n tokens on sequence 0.
std::vector<int32_t> generate(pi::Session& s, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t t = s.sample();
    out.push_back(t);
    EXPECT_TRUE(s.advance(t).ok());
  }
  return out;
}

std::string save_prompt(const pi::Engine& e, const Config& s, const std::string& name) {
  auto a = make_session(e, s);
  const auto p = prompt_tokens();
  EXPECT_TRUE(a->prompt(p).ok());
  const std::string path = pi::testing::temp_path(name);
  auto w = a->save_state(0, path, p);
  EXPECT_TRUE(w.ok()) << w.error().message;
  EXPECT_EQ(w.ok() ? *w : 0, std::filesystem::file_size(path));
  return path;
}

// The session that evaluated the prompt against one restored from its file.
void expect_restored_continues(const pi::Engine& e, const Config& s) {
  const std::string path = save_prompt(e, s, "state_" + s.device + ".bin");
  auto cold = make_session(e, s);
  ASSERT_TRUE(cold->prompt(prompt_tokens()).ok());
  const std::vector<float> cold_logits(cold->logits().begin(), cold->logits().end());
  const auto want = generate(*cold, 12);

  auto warm = make_session(e, s);
  auto r = warm->load_state(0, path);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->tokens, prompt_tokens());
  EXPECT_EQ(r->file_bytes, std::filesystem::file_size(path));
  EXPECT_EQ(warm->n_past(), static_cast<int64_t>(prompt_tokens().size()));
  EXPECT_TRUE(same_bits(warm->logits(), cold_logits));
  EXPECT_EQ(generate(*warm, 12), want);
}

TEST(SavedState, GreedyContinuesBitIdentically) {
  auto e = load_engine("state_greedy.gguf");
  ASSERT_NE(e, nullptr);
  expect_restored_continues(*e, {});
}

// gpt-oss's sliding-window layers keep a store of 2 + 8 cells (runtime/kv_cache.h): the
// file holds their rows of the positions still there, the restore gives window cells to the
// ones the next token reads, and the session continues bit for bit.
TEST(SavedState, SlidingWindowStoreRestores) {
  TinySpec spec;
  spec.arch = "gpt-oss";
  spec.n_layer = 3;
  spec.n_swa = 3;
  spec.expert_wtype = pi::DType::MXFP4;
  auto e = load_engine("state_gpt_oss.gguf", spec);
  ASSERT_NE(e, nullptr);
  expect_restored_continues(*e, {});
}

TEST(SavedState, SeededContinuesIdentically) {
  auto e = load_engine("state_seeded.gguf");
  ASSERT_NE(e, nullptr);
  Config s;
  s.temperature = 0.9f;
  expect_restored_continues(*e, s);
}

TEST(SavedState, QuantizedSparseFileContinues) {
  TinySpec spec;
  spec.pwri = true;
  spec.predictor_rank = 32;
  spec.wtype = pi::DType::Q4_0;
  spec.n_embd = 64;
  auto e = load_engine("state_q4.pwri.gguf", spec);
  ASSERT_NE(e, nullptr);
  Config s;
  s.temperature = 0.7f;
  expect_restored_continues(*e, s);
}

TEST(SavedState, SimDeviceWholeAndSplitCache) {
  auto e = load_engine("state_sim.gguf");
  ASSERT_NE(e, nullptr);
  Config s;
  s.device = "sim";
  s.temperature = 0.8f;
  expect_restored_continues(*e, s);  // every layer's cells on the sim
  s.n_gpu_layers = 1;                // layer 0 on the sim, layer 1 on the CPU
  expect_restored_continues(*e, s);
}

// A tiny model whose head_dim (128 / 4) is a multiple of 32, as the block KV types need.
TinySpec hd32_spec() {
  TinySpec spec;
  spec.n_embd = 128;
  return spec;
}

TEST(SavedState, QuantizedKvCachesRestoreOnCpuAndSim) {
  auto e = load_engine("state_kvq.gguf", hd32_spec());
  ASSERT_NE(e, nullptr);
  Config s;
  s.temperature = 0.8f;
  s.kv_k = s.kv_v = pi::KvCacheType::Q8_0;
  expect_restored_continues(*e, s);
  const auto q8_bytes = std::filesystem::file_size(pi::testing::temp_path("state_cpu.bin"));
  s.kv_k = pi::KvCacheType::Q4_0;  // keys q4_0, values q8_0
  expect_restored_continues(*e, s);
  EXPECT_LT(std::filesystem::file_size(pi::testing::temp_path("state_cpu.bin")), q8_bytes);
  s.device = "sim";
  s.n_gpu_layers = 1;  // layer 0's cells on the sim, layer 1's on the CPU
  expect_restored_continues(*e, s);
}

TEST(SavedState, AFileOfOtherKvTypesIsRefused) {
  auto e = load_engine("state_kvq_mismatch.gguf", hd32_spec());
  ASSERT_NE(e, nullptr);
  Config q8;
  q8.kv_k = q8.kv_v = pi::KvCacheType::Q8_0;
  const std::string path = save_prompt(*e, q8, "state_kvq_mismatch.bin");
  for (auto [k, v] : {std::pair{pi::KvCacheType::F16, pi::KvCacheType::F16},
                      std::pair{pi::KvCacheType::Q8_0, pi::KvCacheType::Q4_0}}) {
    Config other;
    other.kv_k = k;
    other.kv_v = v;
    auto s = make_session(*e, other);
    auto r = s->load_state(0, path);
    ASSERT_FALSE(r.ok());
    const std::string& msg = r.error().message;
    EXPECT_NE(msg.find("a KV cache of keys q8_0 and values q8_0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("-ctk/-ctv must match"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_EQ(s->seq_pos_max(0), -1);
  }
}

// The logits of a prompt over a q8_0 cache stay close to the f16 cache's (q4_0: looser), on the
// CPU and the simulated GPU.
TEST(QuantizedKv, LogitsStayCloseToF16) {
  auto e = load_engine("kvq_logits.gguf", hd32_spec());
  ASSERT_NE(e, nullptr);
  for (const char* device : {"cpu", "sim"}) {
    Config f16;
    f16.device = device;
    auto base = make_session(*e, f16);
    ASSERT_TRUE(base->prompt(prompt_tokens()).ok());
    const std::vector<float> want(base->logits().begin(), base->logits().end());
    double rms = 0.0;
    for (float x : want) rms += static_cast<double>(x) * x;
    rms = std::sqrt(rms / static_cast<double>(want.size()));
    for (auto [t, rel] : {std::pair{pi::KvCacheType::Q8_0, 0.02}, std::pair{pi::KvCacheType::Q4_0, 0.15}}) {
      Config q = f16;
      q.kv_k = q.kv_v = t;
      auto s = make_session(*e, q);
      ASSERT_TRUE(s->prompt(prompt_tokens()).ok());
      const std::span<const float> got = s->logits();
      ASSERT_EQ(got.size(), want.size());
      double err = 0.0;
      for (size_t i = 0; i < want.size(); ++i) {
        const double d = static_cast<double>(got[i]) - want[i];
        err += d * d;
      }
      err = std::sqrt(err / static_cast<double>(want.size()));
      EXPECT_LT(err, rel * rms) << device << " " << pi::kv_cache_type_name(t);
      EXPECT_GT(err, 0.0) << device << " " << pi::kv_cache_type_name(t) << ": not quantized?";
    }
  }
}

// A batch over a quantized cache reads each KV head's rows decoded once to f32, one query reads
// the blocks: the same floats, so a prompt fed in batches of 8 and token by token ends with the
// same logits, bit for bit (CPU and sim).
TEST(QuantizedKv, AnyBatchSplitGivesTheSameBits) {
  auto e = load_engine("kvq_split.gguf", hd32_spec());
  ASSERT_NE(e, nullptr);
  for (const char* device : {"cpu", "sim"}) {
    for (auto [k, v] : {std::pair{pi::KvCacheType::Q8_0, pi::KvCacheType::Q8_0},
                        std::pair{pi::KvCacheType::Q4_0, pi::KvCacheType::Q4_0},
                        std::pair{pi::KvCacheType::F16, pi::KvCacheType::Q4_0}}) {
      Config c;
      c.device = device;
      c.kv_k = k;
      c.kv_v = v;
      auto batched = make_session(*e, c);
      auto single = make_session(*e, c);
      // Two whole batches of 8: the last token's logits come out of a batch read over the
      // decoded rows (a difference there would not be absorbed by the cache's rounding).
      std::vector<int32_t> prompt = prompt_tokens();
      prompt.resize(16);
      ASSERT_TRUE(batched->prompt(prompt).ok());
      for (int32_t t : prompt) ASSERT_TRUE(single->prompt(std::vector<int32_t>{t}).ok());
      EXPECT_TRUE(same_bits(batched->logits(), single->logits()))
          << device << " " << pi::kv_cache_type_name(k) << "/" << pi::kv_cache_type_name(v);
    }
  }
}

TEST(SavedState, FileFromTheCpuRestoresOnTheSim) {
  auto e = load_engine("state_cross.gguf");
  ASSERT_NE(e, nullptr);
  Config cpu;
  const std::string path = save_prompt(*e, cpu, "state_cross.bin");
  Config sim = cpu;
  sim.device = "sim";
  sim.n_gpu_layers = 1;
  auto cold = make_session(*e, sim);
  ASSERT_TRUE(cold->prompt(prompt_tokens()).ok());
  auto warm = make_session(*e, sim);
  ASSERT_TRUE(warm->load_state(0, path).ok());
  EXPECT_TRUE(same_bits(warm->logits(), cold->logits()));
  EXPECT_EQ(generate(*warm, 8), generate(*cold, 8));
}

TEST(SavedState, RestoresIntoAnotherSequence) {
  auto e = load_engine("state_seq.gguf");
  ASSERT_NE(e, nullptr);
  Config one;
  one.temperature = 0.9f;
  const std::string path = save_prompt(*e, one, "state_seq.bin");
  auto cold = make_session(*e, one);
  ASSERT_TRUE(cold->prompt(prompt_tokens()).ok());
  const auto want = generate(*cold, 10);

  // Sequence 2 of a three-sequence session, next to sequence 0 holding other tokens.
  Config three = one;
  three.n_seq = 3;
  auto s = make_session(*e, three);
  ASSERT_TRUE(s->prompt(std::vector<int32_t>{4, 5, 6}).ok());
  auto r = s->load_state(2, path);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(s->seq_pos_max(2), static_cast<int32_t>(prompt_tokens().size()) - 1);
  EXPECT_EQ(s->seq_pos_max(0), 2);
  // Sampling as the one-sequence session seeded `seed`, with the restored window.
  pi::SamplingParams p;
  p.temperature = one.temperature;
  p.repeat_penalty = 1.3f;
  p.seed = one.seed;
  ASSERT_TRUE(s->set_sampling(2, p, r->tokens).ok());
  std::vector<int32_t> got;
  std::span<const float> logits = s->batch_logits(0);
  for (int i = 0; i < 10; ++i) {
    const int32_t t = s->sample(2, logits);
    got.push_back(t);
    const pi::BatchToken b{t, 2, s->seq_pos_max(2) + 1, true};
    ASSERT_TRUE(s->decode(std::span<const pi::BatchToken>(&b, 1)).ok());
    logits = s->batch_logits(0);
  }
  EXPECT_EQ(got, want);
}

// The session holds nothing after a refused load and still works like a fresh one.
void expect_unchanged(const pi::Engine& e, pi::Session& s, const Config& setup) {
  for (int q = 0; q < s.n_seq_max(); ++q) EXPECT_EQ(s.seq_pos_max(q), -1);
  auto fresh = make_session(e, setup);
  ASSERT_TRUE(fresh->prompt(prompt_tokens()).ok());
  ASSERT_TRUE(s.prompt(prompt_tokens()).ok());
  EXPECT_TRUE(same_bits(s.logits(), fresh->logits()));
  EXPECT_EQ(generate(s, 5), generate(*fresh, 5));
}

void expect_error(const pi::Result<pi::SavedState>& r, const std::string& path,
                  const std::string& what) {
  ASSERT_FALSE(r.ok());
  const std::string& m = r.error().message;
  EXPECT_NE(m.find(path), std::string::npos) << m;
  EXPECT_NE(m.find(what), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

TEST(SavedState, AnotherModelIsRefusedNamingTheField) {
  auto e = load_engine("state_mine.gguf");
  ASSERT_NE(e, nullptr);
  struct Case {
    const char* name;
    TinySpec spec;
    const char* field;
  };
  std::vector<Case> cases(5);
  cases[0] = {"state_other_seed.gguf", {}, "model hash"};
  cases[0].spec.seed = 2;
  cases[1] = {"state_other_layers.gguf", {}, "n_layer"};
  cases[1].spec.n_layer = 3;
  cases[2] = {"state_other_kv.gguf", {}, "n_head_kv"};
  cases[2].spec.n_head_kv = 4;
  cases[3] = {"state_other_vocab.gguf", {}, "n_vocab"};
  cases[3].spec.n_vocab = 320;
  cases[4] = {"state_other_arch.gguf", {}, "architecture"};
  cases[4].spec.arch = "qwen2";
  Config s;
  for (const Case& c : cases) {
    auto other = load_engine(c.name, c.spec);
    ASSERT_NE(other, nullptr);
    const std::string path = save_prompt(*other, s, std::string(c.name) + ".bin");
    auto session = make_session(*e, s);
    expect_error(session->load_state(0, path), path, c.field);
    expect_unchanged(*e, *session, s);
  }
}

std::vector<char> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_all(const std::string& path, const std::vector<char>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(b.data(), static_cast<std::streamsize>(b.size()));
}

TEST(SavedState, TruncatedGarbageAndMissingFilesAreRefused) {
  auto e = load_engine("state_bad.gguf");
  ASSERT_NE(e, nullptr);
  Config s;
  const std::string good = save_prompt(*e, s, "state_good.bin");
  const std::vector<char> bytes = read_all(good);
  // Offsets inside the magic, version, architecture, dimensions, hash, token count, tokens,
  // the first layer's K rows, the last V rows.
  const std::string bad = pi::testing::temp_path("state_truncated.bin");
  for (size_t cut : {size_t{0}, size_t{2}, size_t{6}, size_t{14}, size_t{40}, size_t{70},
                     size_t{90}, size_t{100}, bytes.size() / 2, bytes.size() - 1}) {
    ASSERT_LT(cut, bytes.size());
    write_all(bad, std::vector<char>(bytes.begin(), bytes.begin() + static_cast<long>(cut)));
    auto session = make_session(*e, s);
    const auto r = session->load_state(0, bad);
    expect_error(r, bad, "truncated");
    expect_unchanged(*e, *session, s);
  }
  std::vector<char> longer = bytes;
  longer.push_back('x');
  write_all(bad, longer);
  {
    auto session = make_session(*e, s);
    expect_error(session->load_state(0, bad), bad, "oversized");
  }
  std::vector<char> garbage(bytes.size());
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>(i * 131 + 7);
  write_all(bad, garbage);
  {
    auto session = make_session(*e, s);
    expect_error(session->load_state(0, bad), bad, "bad magic");
    expect_unchanged(*e, *session, s);
  }
  std::vector<char> version = bytes;
  version[4] = 9;
  write_all(bad, version);
  {
    auto session = make_session(*e, s);
    expect_error(session->load_state(0, bad), bad, "version 9");
  }
  // A token count that no file could hold, and one of zero.
  for (int64_t n : {int64_t{1} << 62, int64_t{-1}, int64_t{0}}) {
    std::vector<char> count = bytes;
    const size_t at = 4 + 4 + 4 + 5 + 5 * 8 + 4 + 4 + 8 + 8;  // after magic..hash ("llama")
    std::memcpy(count.data() + at, &n, sizeof n);
    write_all(bad, count);
    auto session = make_session(*e, s);
    expect_error(session->load_state(0, bad), bad, "corrupt");
  }
  const std::string missing = pi::testing::temp_path("state_missing.bin");
  std::filesystem::remove(missing);
  auto session = make_session(*e, s);
  expect_error(session->load_state(0, missing), missing, "cannot open");
  expect_unchanged(*e, *session, s);
}

TEST(SavedState, MisuseIsRefusedAndChangesNothing) {
  auto e = load_engine("state_misuse.gguf");
  ASSERT_NE(e, nullptr);
  Config s;
  const std::string path = save_prompt(*e, s, "state_misuse.bin");
  Config small = s;
  small.n_ctx = 16;  // the prompt is 19 tokens
  {
    auto session = make_session(*e, small);
    expect_error(session->load_state(0, path), path, "do not fit a context of 16");
    for (int q = 0; q < session->n_seq_max(); ++q) EXPECT_EQ(session->seq_pos_max(q), -1);
  }
  Config full = s;
  full.n_ctx = 24;
  {
    Config two = full;
    two.n_seq = 2;
    auto s2 = make_session(*e, two);
    ASSERT_TRUE(s2->prompt(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8}).ok());
    expect_error(s2->load_state(1, path), path, "free cells");
    EXPECT_EQ(s2->seq_pos_max(1), -1);
    EXPECT_EQ(s2->seq_pos_max(0), 7);
  }
  Config three = s;
  three.n_seq = 3;
  auto session = make_session(*e, three);
  expect_error(session->load_state(3, path), path, "sequence id 3");
  expect_error(session->load_state(-1, path), path, "sequence id -1");
  ASSERT_TRUE(session->prompt(std::vector<int32_t>{1, 2}).ok());
  expect_error(session->load_state(0, path), path, "holds positions");
  EXPECT_EQ(session->seq_pos_max(0), 1);
  // Saving: a sequence out of range, a token count that differs from its positions.
  const std::string out = pi::testing::temp_path("state_misuse_out.bin");
  EXPECT_FALSE(session->save_state(5, out, std::vector<int32_t>{1, 2}).ok());
  auto w = session->save_state(0, out, std::vector<int32_t>{1, 2, 3});
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().message.find("holds 2 positions"), std::string::npos) << w.error().message;
  EXPECT_FALSE(session->save_state(1, out, std::vector<int32_t>{}).ok());
}

}  // namespace

namespace {

// The session keeps each sequence's tokens from position 0 (Session::seq_tokens) through
// every way tokens enter or leave a sequence, and a new prompt keeps the longest prefix of
// them it shares (Session::seq_reuse_prefix), after which it continues exactly as a session
// fed the whole prompt.
TEST(SeqTokens, FollowFeedsCutsForksRestoresAndEmbeddings) {
  auto e = load_engine("seq_tokens.gguf");
  ASSERT_NE(e, nullptr);
  Config c;
  c.n_seq = 3;
  auto s = make_session(*e, c);
  ASSERT_NE(s, nullptr);
  const std::vector<int32_t> p = prompt_tokens();
  ASSERT_TRUE(s->prompt(p).ok());
  EXPECT_EQ(s->seq_tokens(0), p);
  std::vector<int32_t> all = p;
  for (int32_t t : generate(*s, 3)) all.push_back(t);
  EXPECT_EQ(s->seq_tokens(0), all);
  ASSERT_TRUE(s->fork(0, 1).ok());
  EXPECT_EQ(s->seq_tokens(1), all);
  ASSERT_TRUE(s->seq_rm(0, 5).ok());
  EXPECT_EQ(s->seq_tokens(0), std::vector<int32_t>(p.begin(), p.begin() + 5));
  // A hole: the tokens end where the positions stop following each other.
  ASSERT_TRUE(s->seq_rm(1, 2, 4).ok());
  EXPECT_EQ(s->seq_tokens(1), std::vector<int32_t>(p.begin(), p.begin() + 2));
  // Tokens decoded after a gap are not part of the prefix.
  const pi::BatchToken gap[] = {{9, 2, 3, true}};
  ASSERT_TRUE(s->decode(gap).ok());
  EXPECT_TRUE(s->seq_tokens(2).empty());
  ASSERT_TRUE(s->seq_rm(2, 0).ok());
  const pi::BatchToken two[] = {{9, 2, 0, false}, {10, 2, 1, true}};
  ASSERT_TRUE(s->decode(two).ok());
  EXPECT_EQ(s->seq_tokens(2), (std::vector<int32_t>{9, 10}));
  // Saved and restored into another sequence.
  const std::string path = pi::testing::temp_path("seq_tokens.state");
  ASSERT_TRUE(s->save_state(0, path, s->seq_tokens(0)).ok());
  ASSERT_TRUE(s->seq_rm(2, 0).ok());
  ASSERT_TRUE(s->load_state(2, path).ok());
  EXPECT_EQ(s->seq_tokens(2), s->seq_tokens(0));
  // Embeddings leave their sequences empty; reset empties every one.
  std::vector<float> out;
  const std::vector<int32_t> words{4, 5, 6};
  const pi::EmbedInput in[] = {{2, words}};
  const pi::Status es = s->embed(in, pi::EmbedParams{}, out);
  ASSERT_TRUE(es.ok()) << es.error().message;
  EXPECT_TRUE(s->seq_tokens(2).empty());
  s->reset();
  for (int q = 0; q < 3; ++q) EXPECT_TRUE(s->seq_tokens(q).empty());
  EXPECT_TRUE(s->seq_tokens(3).empty());
  EXPECT_TRUE(s->seq_tokens(-1).empty());
}

TEST(SeqTokens, ReusedPrefixContinuesAsAFreshSession) {
  auto e = load_engine("seq_reuse.gguf");
  ASSERT_NE(e, nullptr);
  const std::vector<int32_t> p = prompt_tokens();
  std::vector<int32_t> q(p.begin(), p.begin() + 11);  // shares 11 tokens, then differs
  q.insert(q.end(), {77, 78, 79});
  auto fresh = make_session(*e, Config{});
  ASSERT_NE(fresh, nullptr);
  ASSERT_TRUE(fresh->prompt(q).ok());
  const std::vector<int32_t> want = generate(*fresh, 6);

  auto s = make_session(*e, Config{});
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->prompt(p).ok());
  (void)generate(*s, 2);
  auto kept = s->seq_reuse_prefix(0, q);
  ASSERT_TRUE(kept.ok()) << kept.error().message;
  EXPECT_EQ(*kept, 11);
  EXPECT_EQ(s->seq_pos_max(0), 10);
  ASSERT_TRUE(s->set_sampling(0, pi::SamplingParams{.temperature = 0.0f, .repeat_penalty = 1.3f, .seed = 7},
                              std::span<const int32_t>(q).first(11)).ok());
  ASSERT_TRUE(s->prompt(std::span<const int32_t>(q).subspan(11)).ok());
  EXPECT_EQ(generate(*s, 6), want);

  // The same prompt again keeps all but its last token; an unrelated one keeps nothing.
  auto again = s->seq_reuse_prefix(0, s->seq_tokens(0));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, static_cast<int64_t>(q.size() + 6 - 1));
  auto none = s->seq_reuse_prefix(0, std::vector<int32_t>{5, 6});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 0);
  EXPECT_EQ(s->seq_pos_max(0), -1);
  EXPECT_FALSE(s->seq_reuse_prefix(4, q).ok());
}

}  // namespace
