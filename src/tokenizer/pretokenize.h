// BPE pre-tokenizers: split text into the words that BPE merges never cross. Each is a
// hand-written matcher equivalent to one regex of the Hugging Face / llama.cpp family,
// evaluated as a leftmost-first regex engine would (alternatives in order, greedy, with
// the backtracking that the (?!\S) lookahead implies). Internal to src/tokenizer.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace pi::tok {

enum class PreTokenizer {
  // GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  Gpt2,
  // Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  Llama3,
  // Qwen2: Llama 3's with single digits, \p{N} instead of \p{N}{1,3}
  Qwen2,
  // o200k_base (GPT-4o, gpt-oss): words split by case, contractions as their suffix:
  //   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
  //   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
  //   \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
  O200k,
};

struct ByteSpan {
  size_t begin;
  size_t end;  // exclusive
};

// Appends the pre-tokens of `text` to `out` as byte ranges; together they cover `text`
// exactly, in order. Invalid UTF-8 bytes are single characters of no class (like
// punctuation), so every byte of the input lands in some pre-token.
void pretokenize(PreTokenizer kind, std::string_view text, std::vector<ByteSpan>& out);

}  // namespace pi::tok
