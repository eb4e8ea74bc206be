// Looks up a model's tensors by name and checks their shapes and types, producing the views
// of weights.h. Every failure is one line naming the file, the tensor, the expected shape and
// what the file holds: "m.gguf: tensor 'blk.0.attn_q.weight' has shape [64, 32], expected [64,
// 64]". Not thread-safe; used only while loading.
#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/reader.h"
#include "model/weights.h"

namespace pi::model {

class TensorLoader {
 public:
  // `widened` receives f32 copies of 1-D tensors stored in another type, `stacks` the expert
  // stacks gathered from one-tensor-per-expert files; both must outlive the returned views
  // (the Model owns them).
  TensorLoader(const gguf::File& file, std::deque<std::vector<float>>& widened,
               std::deque<std::vector<std::byte>>* stacks = nullptr)
      : file_(file), widened_(widened), stacks_(stacks) {}

  // A required matrix [rows, cols] of any computable type.
  Result<Matrix> matrix(const std::string& name, int64_t rows, int64_t cols);
  // The same, but absent (Matrix with data == nullptr) when the file has no such tensor.
  Result<Matrix> optional_matrix(const std::string& name, int64_t rows, int64_t cols);
  // A required 3-D tensor [n, rows, cols] (a stack of n matrices, as experts are stored), as the
  // matrix [n * rows, cols]. Older files (Mixtral's first GGUFs) hold one tensor per expert
  // instead, "<stem>.E.weight" for "<stem>_exps.weight": they are copied into one stack
  // (`stacks`), in the file's type.
  Result<Matrix> stacked(const std::string& name, int64_t n, int64_t rows, int64_t cols);
  // A required 1-D tensor [n], widened to f32 when stored otherwise.
  Result<Vector> vector(const std::string& name, int64_t n);
  Result<Vector> optional_vector(const std::string& name, int64_t n);
  // A required 2-D tensor [n, rows] (a stack of n vectors: the experts' biases) as one vector
  // of n * rows, widened as vector().
  Result<Vector> stacked_vector(const std::string& name, int64_t n, int64_t rows);

  bool has(const std::string& name) const { return file_.find_tensor(name) != nullptr; }
  const std::string& path() const { return file_.path(); }
  // Shape of a tensor, for architectures whose sizes are read from tensors.
  const Shape* shape(const std::string& name) const;
  // Names of the tensors loaded so far (matrix/vector calls that found their tensor).
  const std::set<std::string>& used() const { return used_; }

 private:
  Result<Matrix> load_matrix(const gguf::TensorInfo& info, const Shape& want);
  Result<Vector> load_vector(const gguf::TensorInfo& info, const Shape& want);

  // The per-expert tensors of `name` gathered into one stack, or nullopt when the file has none.
  std::optional<Result<Matrix>> gathered(const std::string& name, int64_t n, int64_t rows, int64_t cols);

  const gguf::File& file_;
  std::deque<std::vector<float>>& widened_;
  std::deque<std::vector<std::byte>>* stacks_;
  std::set<std::string> used_;
};

}  // namespace pi::model
