#include "model/model_checks.h"

#include <cmath>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <vector>

#include "core/log.h"
#include "core/progress.h"
#include "tensor/quant.h"

namespace pi::model {
namespace {

// The block index N of a tensor named "blk.N.<rest>", or -1.
int64_t block_index(std::string_view name) {
  constexpr std::string_view kPrefix = "blk.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return -1;
  int64_t n = 0;
  size_t i = kPrefix.size();
  if (i >= name.size() || name[i] < '0' || name[i] > '9') return -1;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) {
    n = n * 10 + (name[i] - '0');
    if (n > (int64_t{1} << 31)) return -1;
  }
  return i < name.size() && name[i] == '.' ? n : -1;
}

bool is_predictor(std::string_view name) {
  if (block_index(name) < 0) return false;
  const std::string_view rest = name.substr(name.find('.', 4) + 1);
  return rest == "fc1.weight" || rest == "fc2.weight";
}

}  // namespace

Status check_block_count(const gguf::File& f, const HParams& hp) {
  int64_t n_blocks = 0;
  const std::string* example = nullptr;
  for (const gguf::TensorInfo& t : f.tensors()) {
    const int64_t b = block_index(t.name);
    if (b + 1 > n_blocks) {
      n_blocks = b + 1;
      example = &t.name;
    }
  }
  if (n_blocks > hp.n_layer) {
    return err("%s: %s.block_count is %lld but the file has tensors for %lld blocks (e.g. '%s')",
               f.path().c_str(), hp.arch_name.c_str(), static_cast<long long>(hp.n_layer),
               static_cast<long long>(n_blocks), example->c_str());
  }
  if (n_blocks < hp.n_layer) {
    return err("%s: %s.block_count is %lld but the file has tensors for only %lld blocks",
               f.path().c_str(), hp.arch_name.c_str(), static_cast<long long>(hp.n_layer),
               static_cast<long long>(n_blocks));
  }
  return Status::Ok();
}

Status check_vocab_size(const gguf::File& f, const HParams& hp) {
  const gguf::Value* v = f.find("tokenizer.ggml.tokens");
  if (v == nullptr || v->as_array() == nullptr) return Status::Ok();
  const auto n = static_cast<int64_t>(v->as_array()->items.size());
  if (n != hp.n_vocab) {
    return err("%s: the vocabulary (tokenizer.ggml.tokens) has %lld tokens but token_embd.weight "
               "has %lld rows",
               f.path().c_str(), static_cast<long long>(n), static_cast<long long>(hp.n_vocab));
  }
  return Status::Ok();
}

Status check_norm_eps(const gguf::File& f, const HParams& hp) {
  if (std::isfinite(hp.norm_eps) && hp.norm_eps > 0.0f) return Status::Ok();
  const char* key = hp.norm == NormKind::RMS ? "attention.layer_norm_rms_epsilon"
                                             : "attention.layer_norm_epsilon";
  return err("%s: metadata key '%s.%s' = %g: the norm epsilon must be finite and positive",
             f.path().c_str(), hp.arch_name.c_str(), key, static_cast<double>(hp.norm_eps));
}

void warn_unused_tensors(const gguf::File& f, const std::set<std::string>& used) {
  std::string names;
  int n = 0;
  constexpr int kShown = 8;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (used.count(t.name) > 0 || is_predictor(t.name)) continue;
    if (n < kShown) names += (n > 0 ? ", " : "") + t.name;
    ++n;
  }
  if (n == 0) return;
  if (n > kShown) names += ", ... (" + std::to_string(n - kShown) + " more)";
  log_warn("%s: %d tensor%s the architecture does not use (ignored): %s", f.path().c_str(), n,
           n == 1 ? "" : "s", names.c_str());
}

Status check_tensor_values(const gguf::File& f, bool all) {
  std::vector<const gguf::TensorInfo*> todo;
  uint64_t total = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (!dtype_info(t.type).computable || t.type == DType::I32) continue;
    if (all || t.shape.rank == 1 || t.shape.numel() <= kSmallTensor) {
      todo.push_back(&t);
      total += t.nbytes;
    }
  }
  std::optional<ProgressBar> bar;
  if (all) bar.emplace("checking tensors", total);
  uint64_t done = 0;
  std::vector<float> row;
  for (const gguf::TensorInfo* t : todo) {
    const int64_t cols = t->shape.cols(), rows = t->shape.numel() == 0 ? 0 : t->shape.rows();
    const size_t stride = row_bytes(t->type, cols);
    const std::byte* data = f.view(*t).data;
    row.resize(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      PI_TRY(dequantize_row(t->type, data + static_cast<size_t>(r) * stride, row.data(), cols));
      for (int64_t c = 0; c < cols; ++c) {
        if (!std::isfinite(row[static_cast<size_t>(c)])) {
          return err("%s: tensor '%s' has a non-finite value (%g) at row %lld, column %lld",
                     f.path().c_str(), t->name.c_str(),
                     static_cast<double>(row[static_cast<size_t>(c)]), static_cast<long long>(r),
                     static_cast<long long>(c));
        }
      }
    }
    done += t->nbytes;
    if (bar) bar->update(done);
  }
  if (bar) bar->finish();
  return Status::Ok();
}

}  // namespace pi::model
