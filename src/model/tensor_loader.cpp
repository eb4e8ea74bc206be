#include "model/tensor_loader.h"

#include <cstdint>
#include <cstring>

#include "tensor/quant.h"

namespace pi::model {

Result<Matrix> TensorLoader::matrix(const std::string& name, int64_t rows, int64_t cols) {
  const gguf::TensorInfo* info = file_.find_tensor(name);
  if (info == nullptr) {
    return err("%s: missing tensor '%s' (expected shape %s)", file_.path().c_str(), name.c_str(),
               Shape{rows, cols}.str().c_str());
  }
  return load_matrix(*info, Shape{rows, cols});
}

Result<Matrix> TensorLoader::stacked(const std::string& name, int64_t n, int64_t rows, int64_t cols) {
  const gguf::TensorInfo* info = file_.find_tensor(name);
  if (info == nullptr) {
    if (auto g = gathered(name, n, rows, cols)) return std::move(*g);
    return err("%s: missing tensor '%s' (expected shape %s)", file_.path().c_str(), name.c_str(),
               Shape{n, rows, cols}.str().c_str());
  }
  auto m = load_matrix(*info, Shape{n, rows, cols});
  if (m.ok()) m->stack = n;
  return m;
}

std::optional<Result<Matrix>> TensorLoader::gathered(const std::string& name, int64_t n, int64_t rows,
                                                    int64_t cols) {
  const std::string suffix = "_exps.weight";
  if (stacks_ == nullptr || name.size() <= suffix.size() ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return std::nullopt;
  const std::string stem = name.substr(0, name.size() - suffix.size());
  const auto expert_name = [&](int64_t e) { return stem + "." + std::to_string(e) + ".weight"; };
  if (file_.find_tensor(expert_name(0)) == nullptr) return std::nullopt;
  std::vector<Matrix> parts;
  for (int64_t e = 0; e < n; ++e) {
    const gguf::TensorInfo* info = file_.find_tensor(expert_name(e));
    if (info == nullptr) {
      return Result<Matrix>(err("%s: missing tensor '%s' (expert %lld of %lld; the file stores one tensor per expert)",
                                file_.path().c_str(), expert_name(e).c_str(), static_cast<long long>(e),
                                static_cast<long long>(n)));
    }
    auto m = load_matrix(*info, Shape{rows, cols});
    if (!m.ok()) return Result<Matrix>(m.error());
    if (e > 0 && m->type != parts[0].type) {
      return Result<Matrix>(err("%s: tensor '%s' has type %s, expert 0 %s (a stack holds one type)",
                                file_.path().c_str(), info->name.c_str(), std::string(dtype_name(m->type)).c_str(),
                                std::string(dtype_name(parts[0].type)).c_str()));
    }
    parts.push_back(*m);
  }
  const size_t one = static_cast<size_t>(parts[0].nbytes());
  // 64 bytes of slack so that the stack can start on a 64-byte boundary.
  std::vector<std::byte>& bytes = stacks_->emplace_back(one * static_cast<size_t>(n) + 64);
  const auto misalign = reinterpret_cast<uintptr_t>(bytes.data()) % 64;
  std::byte* at = bytes.data() + (misalign == 0 ? 0 : 64 - misalign);
  for (size_t e = 0; e < parts.size(); ++e) std::memcpy(at + e * one, parts[e].data, one);
  Matrix m = parts[0];
  m.data = at;
  m.rows = rows * n;
  m.stack = n;
  m.name = name;
  return Result<Matrix>(m);
}

Result<Matrix> TensorLoader::optional_matrix(const std::string& name, int64_t rows, int64_t cols) {
  const gguf::TensorInfo* info = file_.find_tensor(name);
  if (info == nullptr) return Matrix{};
  return load_matrix(*info, Shape{rows, cols});
}

Result<Vector> TensorLoader::vector(const std::string& name, int64_t n) {
  const gguf::TensorInfo* info = file_.find_tensor(name);
  if (info == nullptr) {
    return err("%s: missing tensor '%s' (expected shape %s)", file_.path().c_str(), name.c_str(),
               Shape{n}.str().c_str());
  }
  return load_vector(*info, Shape{n});
}

Result<Vector> TensorLoader::optional_vector(const std::string& name, int64_t n) {
  const gguf::TensorInfo* info = file_.find_tensor(name);
  if (info == nullptr) return Vector{};
  return load_vector(*info, Shape{n});
}

Result<Vector> TensorLoader::stacked_vector(const std::string& name, int64_t n, int64_t rows) {
  const gguf::TensorInfo* info = file_.find_tensor(name);
  if (info == nullptr) {
    return err("%s: missing tensor '%s' (expected shape %s)", file_.path().c_str(), name.c_str(),
               Shape{n, rows}.str().c_str());
  }
  return load_vector(*info, Shape{n, rows});
}

const Shape* TensorLoader::shape(const std::string& name) const {
  const gguf::TensorInfo* info = file_.find_tensor(name);
  return info == nullptr ? nullptr : &info->shape;
}

Result<Matrix> TensorLoader::load_matrix(const gguf::TensorInfo& info, const Shape& want) {
  used_.insert(info.name);
  if (!(info.shape == want)) {
    return err("%s: tensor '%s' has shape %s, expected %s", file_.path().c_str(), info.name.c_str(),
               info.shape.str().c_str(), want.str().c_str());
  }
  if (!dtype_info(info.type).computable) {
    return err("%s: tensor '%s' has type %s, which this engine cannot compute with",
               file_.path().c_str(), info.name.c_str(), std::string(dtype_name(info.type)).c_str());
  }
  Matrix m;
  m.type = info.type;
  m.data = file_.view(info).data;
  m.rows = want.numel() / want.cols();
  m.cols = want.cols();
  m.name = info.name;
  return m;
}

Result<Vector> TensorLoader::load_vector(const gguf::TensorInfo& info, const Shape& want) {
  used_.insert(info.name);
  if (!(info.shape == want)) {
    return err("%s: tensor '%s' has shape %s, expected %s", file_.path().c_str(), info.name.c_str(),
               info.shape.str().c_str(), want.str().c_str());
  }
  const int64_t n = want.numel();
  const std::byte* data = file_.view(info).data;
  const bool aligned = reinterpret_cast<uintptr_t>(data) % alignof(float) == 0;
  if (info.type == DType::F32 && aligned) return Vector{reinterpret_cast<const float*>(data), n};
  if (!dtype_info(info.type).computable) {
    return err("%s: tensor '%s' has type %s, which this engine cannot compute with",
               file_.path().c_str(), info.name.c_str(), std::string(dtype_name(info.type)).c_str());
  }
  std::vector<float>& out = widened_.emplace_back(static_cast<size_t>(n));
  Status s = dequantize_row(info.type, data, out.data(), n);
  if (!s.ok())
    return err("%s: tensor '%s': %s", file_.path().c_str(), info.name.c_str(),
               s.error().message.c_str());
  return Vector{out.data(), n};
}

}  // namespace pi::model
