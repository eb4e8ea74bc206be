// Embeddings (Session::embed): one vector per input text (or one per token, Pooling::None),
// pooled from the model's final hidden states after the output norm (llama.cpp's `result_norm`), as llama.cpp computes them for
// decoder models. The output head is not computed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace pi {

// How the hidden states of an input's tokens become vectors of n_embd floats.
//   Mean: the average over every token (llama.cpp --pooling mean)
//   Last: the last token's state (--pooling last)
//   Cls:  the first token's state (--pooling cls)
//   None: no pooling: every token's state, one vector per token (--pooling none)
enum class Pooling { Mean, Last, Cls, None };

// "mean", "last", "cls", "none".
const char* pooling_name(Pooling p);
// The pooling named `name` ("mean", "last", "cls", "none"); nullopt for anything else.
std::optional<Pooling> parse_pooling(std::string_view name);

struct EmbedParams {
  Pooling pooling = Pooling::Mean;
  // Divide each pooled vector (each token's, for None) by its Euclidean norm (llama.cpp's --embd-normalize 2, the
  // default of its embedding tool and server). false: the raw pooled vector (-1).
  bool normalize = true;
};

// One input of Session::embed: its tokens, evaluated as sequence `seq` from position 0.
struct EmbedInput {
  int32_t seq = 0;                 // 0 .. n_seq_max - 1, distinct among one call's inputs
  std::span<const int32_t> tokens;  // at least one token
};

// The rows Session::embed gives for `inputs` under pooling `p`: one per input, or one per
// token for Pooling::None.
size_t embed_rows(std::span<const EmbedInput> inputs, Pooling p);

}  // namespace pi
