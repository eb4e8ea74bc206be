// Writes a small example GGUF (or, with --pwri, a PowerInfer file) with every metadata
// value type and a few tensors. Used by README's first command until a bundled model
// exists, and by CLI tests.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gguf/writer.h"

using namespace pi;
using gguf::Array;
using gguf::Value;
using gguf::ValueType;

namespace {
void check(const Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.error().message.c_str());
    std::exit(1);
  }
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT.gguf [--pwri]\n", argv[0]);
    return 2;
  }
  const bool pwri = argc > 2 && std::strcmp(argv[2], "--pwri") == 0;
  gguf::Writer w(pwri ? gguf::Magic::PWRI : gguf::Magic::GGUF);
  check(w.add_kv("general.architecture", Value(std::string("llama"))));
  check(w.add_kv("general.name", Value(std::string("example"))));
  check(w.add_kv("llama.block_count", Value(uint32_t{1})));
  check(w.add_kv("llama.embedding_length", Value(uint32_t{64})));
  check(w.add_kv("llama.feed_forward_length", Value(uint32_t{128})));
  check(w.add_kv("llama.attention.layer_norm_rms_epsilon", Value(1e-5f)));
  check(w.add_kv("example.i8", Value(int8_t{-3})));
  check(w.add_kv("example.u16", Value(uint16_t{65535})));
  check(w.add_kv("example.i64", Value(int64_t{-1234567890123})));
  check(w.add_kv("example.f64", Value(3.25)));
  check(w.add_kv("example.bool", Value(true)));
  Array words{ValueType::String, {}};
  for (const char* s : {"<unk>", "<s>", "</s>", "hello", "world"}) words.items.emplace_back(std::string(s));
  check(w.add_kv("tokenizer.ggml.tokens", Value(words)));
  Array nested{ValueType::Array, {}};
  for (int i = 0; i < 3; ++i) {
    Array inner{ValueType::I32, {}};
    for (int j = 0; j <= i; ++j) inner.items.emplace_back(int32_t{j});
    nested.items.emplace_back(inner);
  }
  check(w.add_kv("example.nested", Value(nested)));
  if (pwri) check(w.add_kv("powerinfer.sparse_threshold", Value(0.0f)));

  check(w.add_tensor("token_embd.weight", DType::F32, Shape{5, 64}));
  check(w.add_tensor("blk.0.ffn_gate.weight", DType::F32, Shape{128, 64}));
  check(w.add_tensor("output_norm.weight", DType::F32, Shape{64}));
  check(w.begin(argv[1]));
  for (const auto& t : w.tensors()) {
    std::vector<float> data(static_cast<size_t>(t.shape.numel()));
    for (size_t i = 0; i < data.size(); ++i) data[i] = std::sin(static_cast<float>(i) * 0.1f);
    check(w.write_tensor(t.name, std::as_bytes(std::span(data))));
  }
  check(w.finish());
  std::printf("wrote %s\n", argv[1]);
  return 0;
}
