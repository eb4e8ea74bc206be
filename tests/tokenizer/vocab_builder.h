// Small hand-made vocabularies written as GGUF files, for the tokenizer unit tests.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "gguf/reader.h"
#include "gguf/writer.h"
#include "tokenizer/tokenizer.h"

namespace pi::testing {

using Kvs = std::map<std::string, gguf::Value>;

inline gguf::Value strings(const std::vector<std::string>& v) {
  gguf::Array a{gguf::ValueType::String, {}};
  for (const auto& s : v) a.items.emplace_back(s);
  return gguf::Value(a);
}

inline gguf::Value floats(const std::vector<float>& v) {
  gguf::Array a{gguf::ValueType::F32, {}};
  for (float f : v) a.items.emplace_back(f);
  return gguf::Value(a);
}

inline gguf::Value ints(const std::vector<int32_t>& v) {
  gguf::Array a{gguf::ValueType::I32, {}};
  for (int32_t i : v) a.items.emplace_back(i);
  return gguf::Value(a);
}

// A SentencePiece vocabulary: <unk> <s> </s>, the 256 byte tokens, then `pieces` with
// descending scores (the first merges first).
inline Kvs spm_vocab(const std::vector<std::string>& pieces) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    tokens.push_back(buf);
    scores.push_back(0);
    types.push_back(6);
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    tokens.push_back(pieces[i]);
    scores.push_back(-static_cast<float>(i));
    types.push_back(1);
  }
  Kvs kv;
  kv["tokenizer.ggml.model"] = gguf::Value(std::string("llama"));
  kv["tokenizer.ggml.tokens"] = strings(tokens);
  kv["tokenizer.ggml.scores"] = floats(scores);
  kv["tokenizer.ggml.token_type"] = ints(types);
  kv["tokenizer.ggml.bos_token_id"] = gguf::Value(uint32_t{1});
  kv["tokenizer.ggml.eos_token_id"] = gguf::Value(uint32_t{2});
  kv["tokenizer.ggml.unknown_token_id"] = gguf::Value(uint32_t{0});
  kv["tokenizer.ggml.add_bos_token"] = gguf::Value(true);
  return kv;
}

// A byte-level BPE vocabulary: GPT-2's 256 byte characters, <|endoftext|>, and one token
// per merge ("a b" -> "ab") in rank order.
inline Kvs bpe_vocab(const std::vector<std::string>& merges) {
  std::vector<std::string> tokens;
  auto utf8 = [](char32_t cp) {
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
  };
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    tokens.push_back(utf8(printable ? static_cast<char32_t>(b) : next++));
  }
  tokens.push_back("<|endoftext|>");
  std::vector<int32_t> types(tokens.size(), 1);
  types.back() = 3;
  for (const std::string& m : merges) {
    std::string joined = m;
    joined.erase(joined.find(' '), 1);
    tokens.push_back(joined);
    types.push_back(1);
  }
  Kvs kv;
  kv["tokenizer.ggml.model"] = gguf::Value(std::string("gpt2"));
  kv["tokenizer.ggml.pre"] = gguf::Value(std::string("default"));
  kv["tokenizer.ggml.tokens"] = strings(tokens);
  kv["tokenizer.ggml.token_type"] = ints(types);
  kv["tokenizer.ggml.merges"] = strings(merges);
  kv["tokenizer.ggml.eos_token_id"] = gguf::Value(uint32_t{256});
  return kv;
}

inline std::string vocab_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / "pi_test_tokenizer";
  std::filesystem::create_directories(dir);
  return (dir / (name + "_" + std::to_string(::getpid()) + ".gguf")).string();
}

// Writes `kv` to a file and loads a tokenizer from it.
inline Result<Tokenizer> load_vocab(const Kvs& kv, const std::string& name = "vocab") {
  const std::string path = vocab_path(name);
  gguf::Writer w;
  for (const auto& [k, v] : kv) PI_TRY(w.add_kv(k, v));
  PI_TRY(w.begin(path));
  PI_TRY(w.finish());
  auto file = gguf::File::open(path);
  if (!file.ok()) return file.error();
  auto tok = Tokenizer::from_gguf(*file);
  std::filesystem::remove(path);
  return tok;
}

}  // namespace pi::testing
