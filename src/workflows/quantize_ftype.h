// The TYPE argument of `powerinfer quantize` as llama.cpp's quantize accepts it: a name in
// any case (Q4_0, q4_k_m) or llama.cpp's numeric file-type id (llama_ftype: 2 = Q4_0,
// 7 = Q8_0, 15 = Q4_K_M, ...).
#pragma once

#include <string>

#include "core/error.h"

namespace pi::workflows {

// The lower-case type name for `arg`; an error for ids llama.cpp retired or that name a
// type family this engine does not have (IQ*, TQ*).
Result<std::string> quantize_type_name(const std::string& arg);

}  // namespace pi::workflows
