// Reading and validating the tokenizer.ggml.* keys of a GGUF file.
#include <algorithm>
#include <cstdio>
#include <optional>

#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace pi::tok {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581, SPM's space

std::string type_name(const gguf::Value& v) {
  std::string s(gguf::value_type_name(v.type()));
  if (const gguf::Array* a = v.as_array()) s += " of " + std::string(gguf::value_type_name(a->elem_type));
  return s;
}

// Typed access to one key, with messages that name the file and the key.
class Keys {
 public:
  explicit Keys(const gguf::File& f) : f_(f) {}

  Error error(std::string_view key, const std::string& what) const {
    return err("%s: %s: %s", f_.path().c_str(), std::string(key).c_str(), what.c_str());
  }

  // The array at `key` (nullptr and no error when the key is absent and !required).
  Result<const gguf::Array*> array(std::string_view key, bool required) const {
    const gguf::Value* v = f_.find(key);
    if (v == nullptr) {
      if (required) return error(key, "missing metadata key");
      return static_cast<const gguf::Array*>(nullptr);
    }
    const gguf::Array* a = v->as_array();
    if (a == nullptr) return error(key, "is " + type_name(*v) + ", expected an array");
    return a;
  }

  Result<std::vector<std::string>> strings(std::string_view key, bool required) const {
    auto a = array(key, required);
    if (!a.ok()) return a.error();
    std::vector<std::string> out;
    if (*a == nullptr) return out;
    if ((*a)->elem_type != gguf::ValueType::String) {
      return error(key, "is array of " + std::string(gguf::value_type_name((*a)->elem_type)) +
                            ", expected array of str");
    }
    out.reserve((*a)->items.size());
    for (const gguf::Value& item : (*a)->items) out.push_back(*item.as_string());
    return out;
  }

  // Optional integer id in [0, n); -1 when absent.
  Result<int32_t> id(std::string_view key, int32_t n) const {
    const gguf::Value* v = f_.find(key);
    if (v == nullptr) return int32_t{-1};
    std::optional<int64_t> i = v->as_int();
    if (!i) return error(key, "is " + type_name(*v) + ", expected an integer token id");
    if (*i < 0 || *i >= n) {
      return error(key, "token id " + std::to_string(*i) + " is out of range [0, " + std::to_string(n) + ")");
    }
    return static_cast<int32_t>(*i);
  }

  Result<bool> flag(std::string_view key, bool def) const {
    const gguf::Value* v = f_.find(key);
    if (v == nullptr) return def;
    if (const bool* b = std::get_if<bool>(&v->data)) return *b;
    return error(key, "is " + type_name(*v) + ", expected bool");
  }

  Result<std::string> string(std::string_view key, bool required, std::string def = {}) const {
    const gguf::Value* v = f_.find(key);
    if (v == nullptr) {
      if (required) return error(key, "missing metadata key");
      return def;
    }
    if (const std::string* s = v->as_string()) return *s;
    return error(key, "is " + type_name(*v) + ", expected str");
  }

 private:
  const gguf::File& f_;
};

std::string printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// "<0x41>" -> 0x41; -1 if the text is not a byte token.
int parse_byte_token(std::string_view s) {
  if (s.size() != 6 || s.substr(0, 3) != "<0x" || s[5] != '>') return -1;
  int v = 0;
  for (char c : s.substr(3, 2)) {
    v <<= 4;
    if (c >= '0' && c <= '9') v |= c - '0';
    else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
    else return -1;
  }
  return v;
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  for (size_t pos = 0;;) {
    size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) {
      out.append(s.substr(pos));
      return out;
    }
    out.append(s.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
}

std::string byte_level_decode(std::string_view s) {
  std::string out;
  for (size_t pos = 0; pos < s.size();) {
    const Utf8Char c = decode_utf8(s, pos);
    const int b = c.valid ? byte_from_unicode(c.cp) : -1;
    if (b >= 0) out += static_cast<char>(b);
    else out.append(s.substr(pos, c.len));
    pos += c.len;
  }
  return out;
}

bool is_eog_text(std::string_view s) {
  static constexpr std::string_view kNames[] = {
      "<|eot_id|>", "<|eom_id|>",    "<|im_end|>", "<|end|>", "<end_of_turn>",
      "<|endoftext|>", "<|end_of_text|>", "<EOT>", "<|return|>", "<|call|>"};
  return std::find(std::begin(kNames), std::end(kNames), s) != std::end(kNames);
}

Status load_tokens(const Keys& k, Vocab& v) {
  auto tokens = k.strings("tokenizer.ggml.tokens", true);
  if (!tokens.ok()) return tokens.error();
  if (tokens->empty()) return k.error("tokenizer.ggml.tokens", "is empty");
  v.text = std::move(*tokens);
  const size_t n = v.text.size();

  auto scores = k.array("tokenizer.ggml.scores", v.kind == Tokenizer::Kind::Spm);
  if (!scores.ok()) return scores.error();
  v.score.assign(n, 0.0f);
  if (*scores != nullptr) {
    const gguf::Array& a = **scores;
    if (a.items.size() != n) {
      return k.error("tokenizer.ggml.scores", "has " + std::to_string(a.items.size()) +
                                                  " entries for " + std::to_string(n) + " tokens");
    }
    for (size_t i = 0; i < n; ++i) {
      std::optional<double> d = a.items[i].as_number();
      if (!d) {
        return k.error("tokenizer.ggml.scores", "is array of " + std::string(gguf::value_type_name(a.elem_type)) +
                                                    ", expected array of float32");
      }
      v.score[i] = static_cast<float>(*d);
    }
  }

  auto types = k.array("tokenizer.ggml.token_type", false);
  if (!types.ok()) return types.error();
  v.type.assign(n, TokenType::Normal);
  if (*types != nullptr) {
    const gguf::Array& a = **types;
    if (a.items.size() != n) {
      return k.error("tokenizer.ggml.token_type", "has " + std::to_string(a.items.size()) +
                                                      " entries for " + std::to_string(n) + " tokens");
    }
    for (size_t i = 0; i < n; ++i) {
      std::optional<int64_t> t = a.items[i].as_int();
      if (!t) {
        return k.error("tokenizer.ggml.token_type", "is array of " +
                                                        std::string(gguf::value_type_name(a.elem_type)) +
                                                        ", expected array of int32");
      }
      if (*t < 0 || *t > 6) {
        return k.error("tokenizer.ggml.token_type",
                       "entry " + std::to_string(i) + " is " + std::to_string(*t) + ", expected 0..6");
      }
      v.type[i] = static_cast<TokenType>(*t);
    }
  }

  v.id_of.reserve(n);
  for (size_t i = 0; i < n; ++i) v.id_of.emplace(v.text[i], static_cast<int32_t>(i));
  return Status::Ok();
}

Status load_special_ids(const Keys& k, Vocab& v) {
  const int32_t n = v.n();
  auto bos = k.id("tokenizer.ggml.bos_token_id", n);
  auto eos = k.id("tokenizer.ggml.eos_token_id", n);
  auto unk = k.id("tokenizer.ggml.unknown_token_id", n);
  auto pad = k.id("tokenizer.ggml.padding_token_id", n);
  auto eot = k.id("tokenizer.ggml.eot_token_id", n);
  auto eom = k.id("tokenizer.ggml.eom_token_id", n);
  for (const auto* r : {&bos, &eos, &unk, &pad, &eot, &eom}) {
    if (!r->ok()) return r->error();
  }
  v.bos = *bos;
  v.eos = *eos;
  v.unk = *unk;
  v.pad = *pad;
  if (v.unk < 0) {
    auto it = std::find(v.type.begin(), v.type.end(), TokenType::Unknown);
    if (it != v.type.end()) v.unk = static_cast<int32_t>(it - v.type.begin());
  }

  const bool spm = v.kind == Tokenizer::Kind::Spm;
  auto add_bos = k.flag("tokenizer.ggml.add_bos_token", spm);
  auto add_eos = k.flag("tokenizer.ggml.add_eos_token", false);
  auto add_space = k.flag("tokenizer.ggml.add_space_prefix", spm);
  for (const auto* r : {&add_bos, &add_eos, &add_space}) {
    if (!r->ok()) return r->error();
  }
  v.add_bos = *add_bos && v.bos >= 0;
  v.add_eos = *add_eos && v.eos >= 0;
  v.add_space_prefix = spm && *add_space;

  v.eog.assign(v.text.size(), false);
  for (int32_t id : {v.eos, *eot, *eom}) {
    if (id >= 0) v.eog[id] = true;
  }
  for (int32_t i = 0; i < n; ++i) {
    if (v.type[i] == TokenType::Control && is_eog_text(v.text[i])) v.eog[i] = true;
  }
  return Status::Ok();
}

Status load_byte_tokens(const Keys& k, Vocab& v) {
  v.byte_token.fill(-1);
  for (int32_t i = 0; i < v.n(); ++i) {
    if (v.type[i] != TokenType::Byte) continue;
    const int b = parse_byte_token(v.text[i]);
    if (b < 0) {
      return k.error("tokenizer.ggml.tokens", "token " + std::to_string(i) + " '" + printable(v.text[i]) +
                                                  "' has type byte but is not of the form <0xXX>");
    }
    if (v.byte_token[b] < 0) v.byte_token[b] = i;
  }
  return Status::Ok();
}

Status load_merges(const Keys& k, Vocab& v) {
  auto merges = k.strings("tokenizer.ggml.merges", true);
  if (!merges.ok()) return merges.error();
  v.merges.reserve(merges->size());
  std::string joined;
  for (size_t i = 0; i < merges->size(); ++i) {
    const std::string& m = (*merges)[i];
    const auto where = [&] { return "entry " + std::to_string(i) + " '" + printable(m) + "'"; };
    // The separator is the first space after the first character, so a left token that
    // is itself a space still parses.
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (sp == std::string::npos || sp + 1 >= m.size()) {
      return k.error("tokenizer.ggml.merges", where() + " is not two tokens separated by a space");
    }
    const std::string_view left(m.data(), sp);
    const std::string_view right(m.data() + sp + 1, m.size() - sp - 1);
    const int32_t l = v.find(left), r = v.find(right);
    if (l < 0 || r < 0) {
      return k.error("tokenizer.ggml.merges",
                     where() + ": token '" + printable(l < 0 ? left : right) + "' is not in the vocabulary");
    }
    joined.assign(left);
    joined.append(right);
    const int32_t id = v.find(joined);
    if (id < 0) {
      return k.error("tokenizer.ggml.merges",
                     where() + ": the merged token '" + printable(joined) + "' is not in the vocabulary");
    }
    const uint64_t key = (static_cast<uint64_t>(l) << 32) | static_cast<uint32_t>(r);
    v.merges.emplace(key, MergeRule{static_cast<int32_t>(i), id});  // first rank wins
  }
  const auto& chars = byte_to_unicode();
  for (int b = 0; b < 256; ++b) v.byte_char_token[b] = v.find(chars[b]);
  return Status::Ok();
}

Status load_pre_tokenizer(const Keys& k, Vocab& v) {
  auto pre = k.string("tokenizer.ggml.pre", false, "default");
  if (!pre.ok()) return pre.error();
  if (*pre == "default" || *pre == "gpt2" || *pre == "gpt-2") {
    v.pre = PreTokenizer::Gpt2;
    v.ignore_merges = false;
  } else if (*pre == "llama-bpe" || *pre == "llama3" || *pre == "llama-v3") {
    v.pre = PreTokenizer::Llama3;
    v.ignore_merges = true;
  } else if (*pre == "qwen2") {
    v.pre = PreTokenizer::Qwen2;  // Qwen2's tokenizer.json sets ignore_merges false
    v.ignore_merges = false;
  } else if (*pre == "gpt-4o" || *pre == "o200k") {
    v.pre = PreTokenizer::O200k;  // merges not ignored, as llama.cpp loads "gpt-4o"
    v.ignore_merges = false;
  } else {
    return k.error("tokenizer.ggml.pre",
                   "pre-tokenizer '" + printable(*pre) +
                       "' is not supported (supported: default, gpt2, llama-bpe, qwen2, gpt-4o)");
  }
  return Status::Ok();
}

void build_pieces(Vocab& v) {
  v.piece.resize(v.text.size());
  for (int32_t i = 0; i < v.n(); ++i) {
    const std::string& t = v.text[i];
    std::string& p = v.piece[i];
    switch (v.type[i]) {
      case TokenType::Byte: {
        const int b = parse_byte_token(t);
        p.assign(1, static_cast<char>(b));
        break;
      }
      case TokenType::Control:
        p = t;
        break;
      case TokenType::Unknown:
        // sentencepiece prints an unknown token as " \u2047 ".
        p = v.kind == Tokenizer::Kind::Spm ? std::string(" \xE2\x81\x87 ") : t;
        break;
      case TokenType::UserDefined:
        p = v.kind == Tokenizer::Kind::Spm ? replace_all(t, kSpaceMarker, " ") : t;
        break;
      default:  // Normal, Undefined, Unused
        p = v.kind == Tokenizer::Kind::Spm ? replace_all(t, kSpaceMarker, " ") : byte_level_decode(t);
        break;
    }
  }
}

void build_matchers(Vocab& v) {
  const bool spm = v.kind == Tokenizer::Kind::Spm;
  for (int32_t i = 0; i < v.n(); ++i) {
    const std::string& t = v.text[i];
    if (t.empty()) continue;
    switch (v.type[i]) {
      case TokenType::Control:
      case TokenType::Unknown:
        v.special_and_user.add(t, i);
        break;
      case TokenType::UserDefined:
        if (spm) {
          v.spm_user_defined.add(t, i);
        } else {
          v.user.add(t, i);
          v.special_and_user.add(t, i);
        }
        break;
      default:
        break;
    }
  }
  v.user.finish();
  v.special_and_user.finish();
  v.spm_user_defined.finish();
}

}  // namespace

void TokenMatcher::add(std::string_view text, int32_t id) {
  by_first_byte_[static_cast<uint8_t>(text[0])].emplace_back(text, id);
  ++count_;
}

void TokenMatcher::finish() {
  for (auto& list : by_first_byte_) {
    // Longest first; among equal texts the lowest id (stable sort keeps file order).
    std::stable_sort(list.begin(), list.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  }
}

TokenMatcher::Match TokenMatcher::longest_at(std::string_view s, size_t pos) const {
  for (const auto& [text, id] : by_first_byte_[static_cast<uint8_t>(s[pos])]) {
    if (s.compare(pos, text.size(), text) == 0) return {id, text.size()};
  }
  return {};
}

Result<std::unique_ptr<Vocab>> load_vocab(const gguf::File& file) {
  const Keys k(file);
  auto v = std::make_unique<Vocab>();
  v->source = file.path();

  auto model = k.string("tokenizer.ggml.model", true);
  if (!model.ok()) return model.error();
  if (*model == "llama") {
    v->kind = Tokenizer::Kind::Spm;
  } else if (*model == "gpt2") {
    v->kind = Tokenizer::Kind::Bpe;
  } else {
    return k.error("tokenizer.ggml.model",
                   "tokenizer model '" + printable(*model) + "' is not supported (supported: llama, gpt2)");
  }

  PI_TRY(load_tokens(k, *v));
  PI_TRY(load_special_ids(k, *v));
  PI_TRY(load_byte_tokens(k, *v));
  if (v->kind == Tokenizer::Kind::Bpe) {
    PI_TRY(load_merges(k, *v));
    PI_TRY(load_pre_tokenizer(k, *v));
  }
  build_pieces(*v);
  build_matchers(*v);
  return v;
}

}  // namespace pi::tok
