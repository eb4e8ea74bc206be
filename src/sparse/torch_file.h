// Reads what `torch.save(tensor)` writes for one 1-D tensor, without torch: the original
// PowerInfer's activation statistics (`activation/activation_N.pt`). The format is a zip
// archive (entries stored, not compressed) holding `<name>/data.pkl`, a pickle that rebuilds
// the tensor (torch._utils._rebuild_tensor_v2 over a storage named by a persistent id:
// ('storage', torch.<Type>Storage, key, location, numel), an offset, a size and a stride),
// and `<name>/data/<key>`, the storage's little-endian bytes. Only the pickle opcodes such a
// file uses are understood; anything else is an error naming the file and the opcode.
#pragma once

#include <string>
#include <vector>

#include "core/error.h"

namespace pi::sparse {

// The tensor's values widened to float (float32, float64, float16, bfloat16, int64, int32
// storages); a view's offset and stride are honoured. Errors name the file and what is wrong
// (not a zip, compressed entries, no data.pkl, not one 1-D tensor, a storage out of bounds).
Result<std::vector<float>> read_torch_1d(const std::string& path);

}  // namespace pi::sparse
