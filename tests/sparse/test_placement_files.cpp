// Activation statistics files (ours and .npy directories, layers in numeric order) and the GPU
// index file (round trip, the original's layout read by name, stale indexes re-solved, damaged
// and foreign files rejected with clear errors).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <span>
#include <tuple>
#include <unistd.h>

#include "gguf/writer.h"
#include "sparse/activation_stats.h"
#include "sparse/gpu_index.h"
#include "sparse/placement.h"

namespace pi::sparse {
namespace {

std::string temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("pi_test_placement_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

void write_npy(const std::string& path, const std::vector<float>& v) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       std::to_string(v.size()) + ",), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const uint16_t n = static_cast<uint16_t>(header.size());
  out.write(reinterpret_cast<const char*>(&n), 2);
  out << header;
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
}

TEST(ActivationStats, LayerFileNumbers) {
  EXPECT_EQ(layer_file_number("activation_0.npy", "activation_", ".npy"), 0);
  EXPECT_EQ(layer_file_number("activation_12.npy", "activation_", ".npy"), 12);
  EXPECT_EQ(layer_file_number("activation_012.npy", "activation_", ".npy"), std::nullopt);
  EXPECT_EQ(layer_file_number("activation_.npy", "activation_", ".npy"), std::nullopt);
  EXPECT_EQ(layer_file_number("activation_-1.npy", "activation_", ".npy"), std::nullopt);
  EXPECT_EQ(layer_file_number("activation_3.pt", "activation_", ".npy"), std::nullopt);
  EXPECT_EQ(layer_file_number("model_3.npy", "activation_", ".npy"), std::nullopt);
}

// 13 layers: as strings "activation_10" sorts before "activation_2"; each layer's values name
// the layer, so any misordering shows.
TEST(ActivationStats, NpyDirectoryLayersInNumericOrder) {
  const std::string dir = temp_dir("npy");
  for (int l = 0; l < 13; ++l) {
    write_npy(dir + "/activation_" + std::to_string(l) + ".npy",
              {static_cast<float>(l) / 100, 0.5f, 0.0f});
  }
  auto s = read_activation_stats(dir);
  ASSERT_TRUE(s.ok()) << s.error().message;
  ASSERT_EQ(s->n_layer(), 13);
  for (int l = 0; l < 13; ++l) EXPECT_FLOAT_EQ(s->counts[l][0], static_cast<float>(l) / 100) << l;
  // Values <= 1 are frequencies; larger ones relative counts (the largest: every token).
  EXPECT_EQ(s->n_tokens, 1u);
  EXPECT_DOUBLE_EQ(s->frequencies(12)[1], 0.5);
  write_npy(dir + "/activation_12.npy", {12.0f, 6.0f, 0.0f});
  s = read_activation_stats(dir);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->n_tokens, 0u);
  EXPECT_DOUBLE_EQ(s->frequencies(12)[1], 0.5);
  EXPECT_DOUBLE_EQ(s->frequencies(3)[1], 0.5 / 12);
  // A gap is an error naming the missing layer.
  std::filesystem::remove(dir + "/activation_7.npy");
  auto gap = read_activation_stats(dir);
  ASSERT_FALSE(gap.ok());
  EXPECT_NE(gap.error().message.find("activation_7.npy is missing"), std::string::npos) << gap.error().message;
  std::filesystem::remove_all(dir);
}

TEST(ActivationStats, OwnFileRoundTripWithManyLayers) {
  const std::string dir = temp_dir("own");
  ActivationStats s;
  s.n_tokens = 1000;
  s.source = "profile";
  s.model_fingerprint = "fnv1a64:0123456789abcdef";
  for (int l = 0; l < 14; ++l) s.counts.push_back({static_cast<float>(l), 1000.0f, 3.0f});
  const std::string path = dir + "/stats.gguf";
  ASSERT_TRUE(write_activation_stats(path, s).ok());
  auto r = read_activation_stats(path);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->n_tokens, 1000u);
  EXPECT_EQ(r->source, "profile");
  EXPECT_EQ(r->model_fingerprint, s.model_fingerprint);
  EXPECT_EQ(r->counts, s.counts);
  EXPECT_DOUBLE_EQ(r->frequencies(13)[0], 0.013);
  EXPECT_TRUE(check_stats_fit(*r, 14, 3, s.model_fingerprint, path).ok());
  EXPECT_FALSE(check_stats_fit(*r, 13, 3, "", path).ok());
  EXPECT_FALSE(check_stats_fit(*r, 14, 4, "", path).ok());
  auto other = check_stats_fit(*r, 14, 3, "fnv1a64:ffffffffffffffff", path);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.error().message.find("another model"), std::string::npos);
  // Counts above n_tokens and NaN are refused on writing.
  s.counts[3][1] = 1001.0f;
  EXPECT_FALSE(write_activation_stats(dir + "/bad.gguf", s).ok());
  s.counts[3][1] = std::nanf("");
  EXPECT_FALSE(write_activation_stats(dir + "/bad.gguf", s).ok());
  // A file that is not ours.
  auto none = read_activation_stats(dir + "/missing.gguf");
  ASSERT_FALSE(none.ok());
  std::filesystem::remove_all(dir);
}

// Files written by others: NaN or negative counts, a missing layer, truncation.
TEST(ActivationStats, DamagedFilesFailClearly) {
  const std::string dir = temp_dir("damaged");
  auto write = [&](const std::string& name, uint32_t layers, const std::vector<float>& c) {
    gguf::Writer w;
    EXPECT_TRUE(w.add_kv("general.architecture", gguf::Value(std::string(kStatsArch))).ok());
    EXPECT_TRUE(w.add_kv("activation_stats.block_count", gguf::Value(layers)).ok());
    EXPECT_TRUE(w.add_kv("activation_stats.n_tokens", gguf::Value(uint64_t{0})).ok());
    EXPECT_TRUE(w.add_tensor("blk.0.activation_counts", DType::F32, Shape{static_cast<int64_t>(c.size())}).ok());
    EXPECT_TRUE(w.begin(dir + "/" + name).ok());
    EXPECT_TRUE(w.write_tensor("blk.0.activation_counts", std::as_bytes(std::span(c))).ok());
    EXPECT_TRUE(w.finish().ok());
    return dir + "/" + name;
  };
  for (auto [name, layers, counts, text] :
       {std::tuple{"nan.gguf", 1u, std::vector<float>{1.0f, std::nanf("")}, "layer 0 neuron 1"},
        {"neg.gguf", 1u, std::vector<float>{-1.0f}, "layer 0 neuron 0"},
        {"gap.gguf", 2u, std::vector<float>{1.0f}, "blk.1.activation_counts"}}) {
    auto r = read_activation_stats(write(name, layers, counts));
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_NE(r.error().message.find(text), std::string::npos) << r.error().message;
  }
  const std::string ok = write("ok.gguf", 1, {1.0f, 2.0f, 3.0f});
  ASSERT_TRUE(read_activation_stats(ok).ok());
  std::filesystem::resize_file(ok, std::filesystem::file_size(ok) - 4);
  auto cut = read_activation_stats(ok);
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.error().message.find("past end of file"), std::string::npos) << cut.error().message;
  std::filesystem::remove_all(dir);
}

// Routing counted by hand: three tokens of one sequence, top 2 of 4, then a second sequence.
TEST(ActivationStats, ExpertRoutesCountSharesAndReuse) {
  ActivationStats s;
  s.n_expert = 4;
  s.n_expert_used = 2;
  s.expert_counts.assign(2, std::vector<float>(4));
  s.expert_reuse.assign(2, 0.0f);
  s.counts.resize(2);
  const std::vector<int32_t> seq1 = {0, 1, /**/ 1, 2, /**/ 2, 1};  // reuses: 1, then 2 and 1
  const std::vector<int32_t> seq2 = {3, 0};                        // alone: no predecessor
  for (int64_t l : {0, 1}) {
    ASSERT_TRUE(count_routes(s, l, seq1).ok());
    ASSERT_TRUE(count_routes(s, l, seq2).ok());
  }
  EXPECT_EQ(s.expert_counts[0], (std::vector<float>{2, 3, 2, 1}));
  EXPECT_EQ(s.expert_reuse[0], 3.0f);
  EXPECT_EQ(s.expert_pairs, 4u);  // tokens 2 and 3 of the first sequence, 2 slots each
  s.n_tokens = 4;
  EXPECT_DOUBLE_EQ(s.reuse_rate(1), 0.75);
  EXPECT_DOUBLE_EQ(s.expert_shares(0)[1], 0.75);
  const std::vector<int32_t> bad = {0, 4};
  auto e = count_routes(s, 0, bad);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("expert id 4 outside [0, 4)"), std::string::npos) << e.error().message;

  // The file keeps it, with neuron counts (ReGLU experts) and without (SwiGLU).
  const std::string dir = temp_dir("experts");
  for (bool neurons : {false, true}) {
    s.counts.assign(2, neurons ? std::vector<float>(4 * 3, 1.0f) : std::vector<float>{});
    const std::string path = dir + (neurons ? "/reglu.gguf" : "/swiglu.gguf");
    ASSERT_TRUE(write_activation_stats(path, s).ok());
    auto r = read_activation_stats(path);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->n_expert, 4);
    EXPECT_EQ(r->n_expert_used, 2);
    EXPECT_EQ(r->expert_pairs, 4u);
    EXPECT_EQ(r->expert_counts, s.expert_counts);
    EXPECT_EQ(r->expert_reuse, s.expert_reuse);
    EXPECT_EQ(r->counts, s.counts);
  }
  // Reuse above the pairs counted, and a layer's expert counts of the wrong length.
  ActivationStats over = s;
  over.expert_reuse[1] = 5.0f;
  ASSERT_TRUE(write_activation_stats(dir + "/over.gguf", over).ok());
  auto r = read_activation_stats(dir + "/over.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("layer 1: expert reuse 5"), std::string::npos) << r.error().message;
  ActivationStats ragged = s;
  ragged.expert_counts[1].push_back(0.0f);
  auto w = write_activation_stats(dir + "/ragged.gguf", ragged);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().message.find("layer 1 has 5 expert counts, want 4"), std::string::npos) << w.error().message;
  std::filesystem::remove_all(dir);
}

// activation_N.pt files are read as torch wrote them (test_torch_file.cpp); one that is not a
// torch file is an error naming it.
TEST(ActivationStats, TorchFilesThatAreNotTorchFilesAreErrors) {
  const std::string dir = temp_dir("pt");
  std::ofstream(dir + "/activation_0.pt") << "x";
  auto r = read_activation_stats(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("activation_0.pt: not a torch file"), std::string::npos) << r.error().message;
  std::filesystem::remove_all(dir);
}

PlacementProblem small_problem(int n_layer, int n_ff) {
  PlacementProblem p;
  p.layers.resize(static_cast<size_t>(n_layer));
  for (int l = 0; l < n_layer; ++l) {
    LayerCost& c = p.layers[static_cast<size_t>(l)];
    c.dense_bytes = c.dense_read_bytes = 1000;
    c.neuron_bytes = 10;
    for (int i = 0; i < n_ff; ++i) c.freq.push_back(static_cast<float>((i * 7 + l * 3) % n_ff) / n_ff);
  }
  p.head_bytes = 500;
  p.scratch_bytes = 100;
  p.granularity = 4;
  p.budget = 3 * 1000 + 100 + 40 * 10 * 4;
  return p;
}

IndexKey key_for(const PlacementProblem& p) {
  return IndexKey{"fnv1a64:00000000000000aa", "fnv1a64:00000000000000bb", p.granularity, p.budget, 256, 32};
}

TEST(GpuIndex, RoundTripKeepsThePlan) {
  const std::string dir = temp_dir("idx");
  const PlacementProblem p = small_problem(12, 64);
  auto plan = solve_placement(p);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  ASSERT_GT(plan->n_device_neurons(), 0);
  const std::string path = dir + "/m.gguf.generated.gpuidx";
  const std::vector<int64_t> n_ff(12, 64);
  IndexKey key = key_for(p);
  key.kv_type_k = DType::Q8_0;
  key.kv_type_v = DType::Q4_0;
  ASSERT_TRUE(write_gpu_index(path, *plan, key, n_ff).ok());
  auto idx = read_gpu_index(path);
  ASSERT_TRUE(idx.ok()) << idx.error().message;
  EXPECT_EQ(idx->vram_capacity, p.budget);
  ASSERT_TRUE(idx->has_key);
  EXPECT_EQ(idx->key.model_fingerprint, key.model_fingerprint);
  EXPECT_EQ(idx->key.kv_type_k, DType::Q8_0);
  EXPECT_EQ(idx->key.kv_type_v, DType::Q4_0);
  EXPECT_EQ(idx->n_dense_layers, plan->n_dense_layers);
  EXPECT_EQ(idx->head_on_device, plan->head_on_device);
  for (size_t l = 0; l < 12; ++l) EXPECT_EQ(idx->hot[l], plan->layers[l].device_neurons) << l;
  EXPECT_TRUE(check_index_matches(*idx, key, n_ff, path).ok());
  EXPECT_FALSE(check_index_matches(*idx, key_for(p), n_ff, path).ok());  // f16 KV
  std::filesystem::remove_all(dir);
}

// The original's layout, tensors declared in an order where "by position" would pair them
// wrongly (bucket before idx, layers 10 and 11 before 2): read by name.
TEST(GpuIndex, OriginalLayoutReadByName) {
  const std::string dir = temp_dir("orig");
  const std::string path = dir + "/orig.gpuidx";
  const int L = 12, n_ff = 8;
  gguf::Writer w(gguf::Magic::PWRI);
  ASSERT_TRUE(w.add_kv("general.architecture", gguf::Value(std::string("generic.gpu_index"))).ok());
  ASSERT_TRUE(w.add_kv("generic.gpu_index.block_count", gguf::Value(uint32_t{L})).ok());
  ASSERT_TRUE(w.add_kv("split.vram_capacity", gguf::Value(uint64_t{123456})).ok());
  std::vector<int> order = {0, 1, 10, 11, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<std::vector<int32_t>> masks(L), buckets(L);
  for (int l = 0; l < L; ++l) {
    masks[l].assign(n_ff, 0);
    masks[l][l % n_ff] = 1;  // layer l: neuron l % 8 hot
    buckets[l] = {l % n_ff};
  }
  for (int l : order) {
    ASSERT_TRUE(w.add_tensor("blk." + std::to_string(l) + ".gpu_bucket", DType::I32, Shape{1}).ok());
    ASSERT_TRUE(w.add_tensor("blk." + std::to_string(l) + ".gpu_idx", DType::I32, Shape{n_ff}).ok());
  }
  ASSERT_TRUE(w.begin(path).ok());
  for (int l : order) {
    ASSERT_TRUE(w.write(std::as_bytes(std::span(buckets[l]))).ok());
    ASSERT_TRUE(w.write(std::as_bytes(std::span(masks[l]))).ok());
  }
  ASSERT_TRUE(w.finish().ok());
  auto idx = read_gpu_index(path);
  ASSERT_TRUE(idx.ok()) << idx.error().message;
  EXPECT_FALSE(idx->has_key);
  for (int l = 0; l < L; ++l) EXPECT_EQ(idx->hot[l], std::vector<int32_t>{l % n_ff}) << l;
  auto m = check_index_matches(*idx, IndexKey{}, std::vector<int64_t>(L, n_ff), path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("original"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(GpuIndex, StaleForeignAndDamagedIndexesAreSolvedAgain) {
  const std::string dir = temp_dir("stale");
  const std::string path = dir + "/m.gpuidx";
  PlacementProblem p = small_problem(12, 64);
  IndexKey key = key_for(p);
  auto first = plan_with_index(path, p, key, {});
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_FALSE(first->loaded);
  EXPECT_NE(first->reason.find("no index yet"), std::string::npos) << first->reason;
  auto second = plan_with_index(path, p, key, {});
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->loaded) << second->reason;
  EXPECT_EQ(second->plan.cpu_bytes_per_token, first->plan.cpu_bytes_per_token);

  // A larger budget: the original would reuse the old index; we solve again.
  p.budget += 4 * 10 * 8;
  key.budget = p.budget;
  auto bigger = plan_with_index(path, p, key, {});
  ASSERT_TRUE(bigger.ok());
  EXPECT_FALSE(bigger->loaded);
  EXPECT_NE(bigger->reason.find("budget"), std::string::npos) << bigger->reason;
  EXPECT_GT(bigger->plan.n_device_neurons(), first->plan.n_device_neurons());
  EXPECT_TRUE(plan_with_index(path, p, key, {})->loaded);  // rewritten for the new budget

  for (auto [field, text] : {std::pair{0, "another model"}, {1, "statistics"}, {2, "granularity"},
                             {3, "n_ctx"}, {4, "n_batch"}, {5, "KV cache of f16/f16"},
                             {6, "now f16/q4_0"}}) {
    IndexKey k = key;
    PlacementProblem q = p;
    if (field == 0) k.model_fingerprint = "fnv1a64:1111111111111111";
    if (field == 1) k.stats_fingerprint = "fnv1a64:2222222222222222";
    if (field == 2) q.granularity = k.granularity = 8;
    if (field == 3) k.n_ctx = 512;
    if (field == 4) k.n_batch = 64;
    if (field == 5) k.kv_type_k = DType::Q8_0;  // the KV bytes per layer differ
    if (field == 6) k.kv_type_v = DType::Q4_0;
    IndexOptions no_write;
    no_write.write = false;
    auto r = plan_with_index(path, q, k, no_write);
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r->loaded);
    EXPECT_NE(r->reason.find(text), std::string::npos) << r->reason;
  }
  IndexOptions reset;
  reset.reset = true;
  EXPECT_FALSE(plan_with_index(path, p, key, reset)->loaded);
  IndexOptions disable;
  disable.disable = true;
  auto off = plan_with_index(path, p, key, disable);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->plan.n_device_neurons(), 0);

  // Truncated: a clear error from the reader, a re-solve from plan_with_index.
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 16);
  auto bad = read_gpu_index(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find(path), std::string::npos) << bad.error().message;
  auto resolved = plan_with_index(path, p, key, {});
  ASSERT_TRUE(resolved.ok());
  EXPECT_FALSE(resolved->loaded);
  EXPECT_NE(resolved->reason.find("past end of file"), std::string::npos) << resolved->reason;
  EXPECT_TRUE(read_gpu_index(path).ok());  // rewritten whole

  // An index for a model with other layer sizes.
  auto idx = read_gpu_index(path);
  auto other = check_index_matches(*idx, key, std::vector<int64_t>(12, 32), path);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.error().message.find("sizes"), std::string::npos);
  // Not an index at all.
  ActivationStats s;
  s.counts = {{1.0f}};
  ASSERT_TRUE(write_activation_stats(dir + "/stats.gguf", s).ok());
  auto notidx = read_gpu_index(dir + "/stats.gguf");
  ASSERT_FALSE(notidx.ok());
  EXPECT_NE(notidx.error().message.find("not a GPU index"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(GpuIndex, StatsFingerprintFollowsTheCounts) {
  ActivationStats a;
  a.n_tokens = 10;
  a.counts = {{1.0f, 2.0f}, {3.0f}};
  ActivationStats b = a;
  EXPECT_EQ(stats_fingerprint(a), stats_fingerprint(b));
  b.counts[1][0] = 4.0f;
  EXPECT_NE(stats_fingerprint(a), stats_fingerprint(b));
  b = a;
  b.n_tokens = 11;
  EXPECT_NE(stats_fingerprint(a), stats_fingerprint(b));
}

}  // namespace
}  // namespace pi::sparse
