#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <span>
#include <filesystem>
#include <numeric>

#include "gguf/byte_builder.h"
#include "gguf/reader.h"
#include "gguf/writer.h"

namespace pi::gguf {
namespace {

std::string temp_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / "pi_test_gguf";
  std::filesystem::create_directories(dir);
  return (dir / (name + "_" + std::to_string(::getpid()))).string();
}

TEST(GgufRoundTrip, EveryValueTypeAndBothMagics) {
  for (Magic magic : {Magic::GGUF, Magic::PWRI}) {
    const std::string path = temp_path(magic == Magic::GGUF ? "all.gguf" : "all.pwri");
    Writer w(magic);
    ASSERT_TRUE(w.add_kv("u8", Value(uint8_t{200})).ok());
    ASSERT_TRUE(w.add_kv("i8", Value(int8_t{-100})).ok());
    ASSERT_TRUE(w.add_kv("u16", Value(uint16_t{60000})).ok());
    ASSERT_TRUE(w.add_kv("i16", Value(int16_t{-30000})).ok());
    ASSERT_TRUE(w.add_kv("u32", Value(uint32_t{4000000000u})).ok());
    ASSERT_TRUE(w.add_kv("i32", Value(int32_t{-2000000000})).ok());
    ASSERT_TRUE(w.add_kv("f32", Value(1.5f)).ok());
    ASSERT_TRUE(w.add_kv("bool", Value(true)).ok());
    ASSERT_TRUE(w.add_kv("str", Value(std::string("h\xc3\xa9llo"))).ok());
    ASSERT_TRUE(w.add_kv("u64", Value(uint64_t{1} << 63)).ok());
    ASSERT_TRUE(w.add_kv("i64", Value(int64_t{-(int64_t{1} << 62)})).ok());
    ASSERT_TRUE(w.add_kv("f64", Value(2.0e300)).ok());
    Array strs{ValueType::String, {Value(std::string("a")), Value(std::string("")), Value(std::string("ccc"))}};
    ASSERT_TRUE(w.add_kv("arr.str", Value(strs)).ok());
    Array inner1{ValueType::F32, {Value(1.0f), Value(2.0f)}};
    Array inner2{ValueType::F32, {}};
    Array nested{ValueType::Array, {Value(inner1), Value(inner2)}};
    ASSERT_TRUE(w.add_kv("arr.nested", Value(nested)).ok());
    ASSERT_TRUE(w.add_kv("arr.empty", Value(Array{ValueType::U64, {}})).ok());

    ASSERT_TRUE(w.add_tensor("a", DType::F32, Shape{3, 5}).ok());
    ASSERT_TRUE(w.add_tensor("b", DType::Q8_0, Shape{2, 64}).ok());
    ASSERT_TRUE(w.add_tensor("c", DType::F16, Shape{7}).ok());
    ASSERT_TRUE(w.begin(path).ok());
    std::vector<std::vector<std::byte>> payloads;
    for (const auto& t : w.tensors()) {
      std::vector<std::byte> data(t.nbytes);
      for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 7 + t.name[0]);
      payloads.push_back(data);
      // Write in two pieces to exercise streaming.
      size_t half = data.size() / 2;
      ASSERT_TRUE(w.write(std::span(data).first(half)).ok());
      ASSERT_TRUE(w.write(std::span(data).subspan(half)).ok());
    }
    ASSERT_TRUE(w.finish().ok());

    auto f = File::open(path);
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_EQ(f->magic(), magic);
    EXPECT_EQ(f->is_powerinfer(), magic == Magic::PWRI);
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->metadata().size(), 15u);
    EXPECT_EQ(std::get<uint8_t>(f->find("u8")->data), 200);
    EXPECT_EQ(std::get<int8_t>(f->find("i8")->data), -100);
    EXPECT_EQ(std::get<uint16_t>(f->find("u16")->data), 60000);
    EXPECT_EQ(std::get<int16_t>(f->find("i16")->data), -30000);
    EXPECT_EQ(std::get<uint32_t>(f->find("u32")->data), 4000000000u);
    EXPECT_EQ(std::get<int32_t>(f->find("i32")->data), -2000000000);
    EXPECT_EQ(std::get<float>(f->find("f32")->data), 1.5f);
    EXPECT_EQ(std::get<bool>(f->find("bool")->data), true);
    EXPECT_EQ(*f->find("str")->as_string(), "h\xc3\xa9llo");
    EXPECT_EQ(std::get<uint64_t>(f->find("u64")->data), uint64_t{1} << 63);
    EXPECT_FALSE(f->find("u64")->as_int().has_value());  // does not fit int64
    EXPECT_EQ(std::get<int64_t>(f->find("i64")->data), -(int64_t{1} << 62));
    EXPECT_EQ(std::get<double>(f->find("f64")->data), 2.0e300);
    const Array* a = f->find("arr.str")->as_array();
    ASSERT_NE(a, nullptr);
    ASSERT_EQ(a->items.size(), 3u);
    EXPECT_EQ(*a->items[2].as_string(), "ccc");
    const Array* n = f->find("arr.nested")->as_array();
    ASSERT_NE(n, nullptr);
    ASSERT_EQ(n->items.size(), 2u);
    EXPECT_EQ(n->items[0].as_array()->items.size(), 2u);
    EXPECT_EQ(n->items[1].as_array()->elem_type, ValueType::F32);
    EXPECT_EQ(f->find("arr.empty")->as_array()->elem_type, ValueType::U64);

    ASSERT_EQ(f->tensors().size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      const TensorInfo& t = f->tensors()[i];
      EXPECT_EQ(t.offset % f->alignment(), 0u);
      TensorView v = f->view(t);
      ASSERT_EQ(v.nbytes(), payloads[i].size());
      EXPECT_EQ(std::memcmp(v.data, payloads[i].data(), payloads[i].size()), 0) << t.name;
    }
    EXPECT_EQ(f->find_tensor("a")->shape, (Shape{3, 5}));
    EXPECT_EQ(f->find_tensor("b")->nbytes, 2u * 2 * 34);
    EXPECT_EQ(f->find_tensor("c")->shape, (Shape{7}));
    EXPECT_FALSE(f->tensor("missing").ok());
    std::filesystem::remove(path);
  }
}

TEST(GgufRoundTrip, CustomAlignmentIsRecordedAndHonoured) {
  const std::string path = temp_path("align.gguf");
  Writer w;
  ASSERT_TRUE(w.set_alignment(64).ok());
  ASSERT_TRUE(w.add_tensor("x", DType::F32, Shape{3}).ok());
  ASSERT_TRUE(w.add_tensor("y", DType::F32, Shape{5}).ok());
  ASSERT_TRUE(w.begin(path).ok());
  std::vector<float> x(3, 1.0f), y(5, 2.0f);
  ASSERT_TRUE(w.write_tensor("x", std::as_bytes(std::span(x))).ok());
  ASSERT_TRUE(w.write_tensor("y", std::as_bytes(std::span(y))).ok());
  ASSERT_TRUE(w.finish().ok());
  auto f = File::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  EXPECT_EQ(f->find_tensor("y")->offset, 64u);
  auto yv = f->tensor("y");
  ASSERT_TRUE(yv.ok());
  EXPECT_EQ(reinterpret_cast<const float*>(yv->data)[4], 2.0f);
  std::filesystem::remove(path);
}

TEST(GgufRoundTrip, ReadsVersion2) {
  testing::ByteBuilder b;
  b.header(2, 1, 1).str("general.architecture").u32(8).str("llama");
  b.tensor_info("t", {4}, 0, 0).pad_to(32);
  float v[4] = {1, 2, 3, 4};
  b.raw(v, sizeof v);
  auto f = parse_bytes("v2.gguf", b.bytes().data(), b.size());
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(*f->get_string("general.architecture"), "llama");
  EXPECT_EQ(reinterpret_cast<const float*>(f->tensor("t")->data)[3], 4.0f);
}

TEST(GgufWriter, RefusesBadDeclarations) {
  Writer w;
  ASSERT_TRUE(w.add_kv("k", Value(1.0f)).ok());
  EXPECT_FALSE(w.add_kv("k", Value(2.0f)).ok());
  EXPECT_FALSE(w.add_tensor("q", DType::Q4_0, Shape{2, 33}).ok());
  EXPECT_FALSE(w.add_tensor("z", DType::F32, Shape{0, 4}).ok());
  ASSERT_TRUE(w.add_tensor("t", DType::F32, Shape{4}).ok());
  EXPECT_FALSE(w.add_tensor("t", DType::F32, Shape{4}).ok());
  EXPECT_FALSE(w.set_alignment(48).ok());
}

TEST(GgufWriter, DetectsIncompleteAndOverlongData) {
  const std::string path = temp_path("incomplete.gguf");
  {
    Writer w;
    ASSERT_TRUE(w.add_tensor("t", DType::F32, Shape{4}).ok());
    ASSERT_TRUE(w.begin(path).ok());
    float v[2] = {1, 2};
    ASSERT_TRUE(w.write(std::as_bytes(std::span(v))).ok());
    Status s = w.finish();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find("incomplete"), std::string::npos);
  }
  {
    Writer w;
    ASSERT_TRUE(w.add_tensor("t", DType::F32, Shape{1}).ok());
    ASSERT_TRUE(w.begin(path).ok());
    float v[2] = {1, 2};
    EXPECT_FALSE(w.write(std::as_bytes(std::span(v))).ok());
  }
  std::filesystem::remove(path);
}

// The original PowerInfer's index files number I32 as 18 (IQ3_XXS in today's ggml): a PWRI
// file with general.architecture = generic.gpu_index is written with 18 and read back as
// I32; the same id in any other file stays IQ3_XXS.
TEST(GgufRoundTrip, GpuIndexFilesNumberI32As18) {
  const std::string path = temp_path("index.gpuidx");
  Writer w(Magic::PWRI);
  ASSERT_TRUE(w.add_kv("general.architecture", Value(std::string(kGpuIndexArch))).ok());
  ASSERT_TRUE(w.add_tensor("blk.0.gpu_idx", DType::I32, Shape{5}).ok());
  ASSERT_TRUE(w.begin(path).ok());
  const int32_t v[5] = {1, 0, 1, 1, 0};
  ASSERT_TRUE(w.write_tensor("blk.0.gpu_idx", std::as_bytes(std::span(v))).ok());
  ASSERT_TRUE(w.finish().ok());
  auto f = File::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_TRUE(f->is_gpu_index());
  const TensorInfo* t = f->find_tensor("blk.0.gpu_idx");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->type, DType::I32);
  EXPECT_EQ(t->nbytes, 20u);
  uint32_t id = 0;
  std::memcpy(&id, f->base() + t->info_offset + 8 + t->name.size() + 4 + 8, 4);
  EXPECT_EQ(id, 18u);
  // The same bytes with GGUF magic: 18 is IQ3_XXS, whose 256-element blocks a 5-element row
  // cannot hold.
  std::string bytes(reinterpret_cast<const char*>(f->base()), f->file_size());
  std::memcpy(bytes.data(), "GGUF", 4);
  auto g = parse_bytes("as-gguf", reinterpret_cast<const std::byte*>(bytes.data()), bytes.size());
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.error().message.find("iq3_xxs"), std::string::npos) << g.error().message;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace pi::gguf
