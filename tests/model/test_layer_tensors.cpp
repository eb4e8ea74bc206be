// The layer table (model/layer_tensors.h): every LayerWeights member has exactly one row, the
// names and layout twins are consistent, and every architecture's loader reaches each blk.*
// tensor of its files through the table (so placement and the ledger see all of them).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "gguf/reader.h"
#include "model/layer_tensors.h"
#include "model/model.h"
#include "model/tiny_model.h"

namespace {

using pi::DType;
using pi::model::LayerTensor;
using pi::model::LayerWeights;
using pi::model::Role;
using pi::testing::temp_path;
using pi::testing::TinySpec;
using pi::testing::tiny_variant;
using pi::testing::write_tiny_model;

TEST(LayerTensors, EveryMemberHasExactlyOneRow) {
  LayerWeights L;
  std::set<const void*> members;
  size_t bytes = 0;
  pi::model::each_layer_tensor(
      L,
      [&](const LayerTensor& t, pi::Matrix& m) {
        EXPECT_TRUE(members.insert(&m).second) << t.name() << " shares its member with another row";
        bytes += sizeof m;
      },
      [&](const LayerTensor& t, pi::Vector& v) {
        EXPECT_TRUE(members.insert(&v).second) << t.name() << " shares its member with another row";
        bytes += sizeof v;
      });
  // A member added to AttnWeights or FfnWeights without a row leaves these unequal.
  EXPECT_EQ(bytes, sizeof(pi::model::AttnWeights) + sizeof(pi::model::FfnWeights));
}

TEST(LayerTensors, NamesAreUniqueAndTwinsPair) {
  std::set<std::string> names;
  for (const LayerTensor* t : pi::model::kLayerTensors) {
    EXPECT_TRUE(names.insert(t->name()).second) << t->name();
    EXPECT_EQ(t->is_matrix(), t->role == Role::Proj) << t->name();
    EXPECT_NE(t->rows, pi::model::Dim::None) << t->name();
    EXPECT_EQ(t->cols == pi::model::Dim::None, !t->is_matrix()) << t->name();
    const LayerTensor* twin = pi::model::layout_twin(*t);
    if (t->transposed) {
      ASSERT_NE(twin, nullptr) << t->name() << " has no row in the file's layout";
      EXPECT_EQ(twin->rows, t->cols) << t->name();
      EXPECT_EQ(twin->cols, t->rows) << t->name();
      EXPECT_EQ(twin->site, t->site) << t->name();
      EXPECT_EQ(twin->group, t->group) << t->name();
    }
    if (twin != nullptr) EXPECT_EQ(pi::model::layout_twin(*twin), t) << t->name();
  }
  EXPECT_EQ(pi::model::kAttnQT.name(), "attn_q_t.weight");
  EXPECT_EQ(pi::model::kFfnNormB.name("attn_norm_2"), "attn_norm_2.bias");
}

TEST(LayerTensors, AFileTensorNameFindsItsRow) {
  using pi::model::layer_tensor_of;
  for (const LayerTensor* t : pi::model::kLayerTensors)
    EXPECT_EQ(layer_tensor_of("blk.17." + t->name()), t) << t->name();
  EXPECT_EQ(layer_tensor_of("blk.0.ffn_down_exps_t.weight"), &pi::model::kFfnDownExpsT);
  EXPECT_TRUE(layer_tensor_of("blk.3.ffn_gate_inp.weight")->keep_type);
  EXPECT_FALSE(layer_tensor_of("blk.3.ffn_gate_exps.weight")->keep_type);
  for (const char* other : {"output.weight", "token_embd.weight", "blk.0.attn_norm_2.weight", "blk..attn_q.weight",
                            "blk.1.fc1.weight", "blk.1.attn_q.weight.extra"})
    EXPECT_EQ(layer_tensor_of(other), nullptr) << other;
}

// Every blk.* tensor a loaded file holds is a present view reached through the table.
void expect_all_reached(const TinySpec& spec, const std::string& file) {
  const std::string path = temp_path(file);
  ASSERT_TRUE(write_tiny_model(spec, path).ok());
  auto m = pi::model::Model::load(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  size_t in_file = 0, reached = 0;
  for (const auto& t : (*m)->file().tensors())
    if (t.name.starts_with("blk.") && t.name.find(".fc") == std::string::npos) ++in_file;
  for (const LayerWeights& L : (*m)->weights().layers) {
    pi::model::each_layer_tensor(
        L, [&](const LayerTensor&, const pi::Matrix& x) { reached += x.present(); },
        [&](const LayerTensor&, const pi::Vector& x) { reached += x.present(); });
  }
  EXPECT_EQ(reached, in_file) << file;
}

TEST(LayerTensors, EveryArchitectureLoadsThroughTheTable) {
  for (const char* arch : {"llama", "bamboo", "opt", "qwen2", "qwen3", "falcon"}) {
    for (bool pwri : {false, true}) {
      if (pwri && std::string(arch).starts_with("qwen")) continue;
      expect_all_reached(tiny_variant(arch, DType::F32, pwri, 2, false, 3),
                         std::string("table_") + arch + (pwri ? "_pwri" : "") + ".gguf");
    }
  }
  expect_all_reached(tiny_variant("falcon", DType::F32, false, 1, true, 3), "table_falcon40b.gguf");
}

TEST(LayerTensors, SiteBytesCountEachSitesMatrices) {
  const std::string path = temp_path("table_sites.gguf");
  ASSERT_TRUE(write_tiny_model(tiny_variant("llama", DType::Q8_0, false, 2, false, 4), path).ok());
  auto m = pi::model::Model::load(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  const LayerWeights& L = (*m)->weights().layers[0];
  using pi::model::Site;
  EXPECT_EQ(site_matrix_bytes(L, Site::AttnIn), L.attn.q.nbytes() + L.attn.k.nbytes() + L.attn.v.nbytes());
  EXPECT_EQ(site_matrix_bytes(L, Site::AttnOut), L.attn.out.nbytes());
  EXPECT_EQ(site_matrix_bytes(L, Site::FfnIn), L.ffn.gate.nbytes());
  EXPECT_EQ(site_matrix_bytes(L, Site::FfnGate), L.ffn.up.nbytes() + L.ffn.down.nbytes());
}

}  // namespace
