// One token of a multi-sequence batch (Session::decode): several sequences share one KV cache
// and advance together, one forward pass for all of their tokens.
#pragma once

#include <cstdint>

namespace pi {

struct BatchToken {
  int32_t token = 0;
  int32_t seq = 0;      // sequence id, 0 .. n_seq_max - 1
  int32_t pos = 0;      // position in its sequence: above every position the sequence holds
  bool logits = false;  // keep this token's logits (Session::batch_logits)
};

}  // namespace pi
