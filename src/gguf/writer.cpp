#include "gguf/writer.h"

#include <cerrno>
#include <cstring>

namespace pi::gguf {

Writer::Writer(Magic magic, uint32_t version) : magic_(magic), version_(version) {}

Writer::~Writer() {
  if (fp_ != nullptr) std::fclose(fp_);
}

Status Writer::set_alignment(uint32_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    return err("alignment %u is not a power of two", alignment);
  }
  if (!tensors_.empty()) return err("set_alignment() after add_tensor()");
  alignment_ = alignment;
  for (auto& kv : kvs_) {
    if (kv.key == "general.alignment") {
      kv.value = Value(alignment);
      return Status::Ok();
    }
  }
  if (alignment != kDefaultAlignment) return add_kv("general.alignment", Value(alignment));
  return Status::Ok();
}

Status Writer::add_kv(std::string key, Value value) {
  if (began_) return err("add_kv('%s') after begin()", key.c_str());
  for (const auto& kv : kvs_) {
    if (kv.key == key) return err("duplicate metadata key '%s'", key.c_str());
  }
  kvs_.push_back(KeyValue{std::move(key), std::move(value), 0});
  return Status::Ok();
}

bool Writer::is_gpu_index() const {
  if (magic_ != Magic::PWRI) return false;
  for (const auto& kv : kvs_) {
    if (kv.key == "general.architecture" && kv.value.as_string() != nullptr &&
        *kv.value.as_string() == kGpuIndexArch)
      return true;
  }
  return false;
}

Status Writer::add_tensor(std::string name, DType type, const Shape& shape) {
  if (began_) return err("add_tensor('%s') after begin()", name.c_str());
  for (const auto& t : tensors_) {
    if (t.name == name) return err("duplicate tensor name '%s'", name.c_str());
  }
  if (shape.rank < 1 || shape.rank > Shape::kMaxRank) {
    return err("tensor '%s': rank %d not in 1..%d", name.c_str(), shape.rank, Shape::kMaxRank);
  }
  // Index files may hold empty tensors (a layer without hot neurons has an empty gpu_bucket).
  const int64_t min_dim = is_gpu_index() ? 0 : 1;
  for (int i = 0; i < shape.rank; ++i) {
    if (shape[i] < min_dim) return err("tensor '%s': dimension %d is %lld", name.c_str(), i, static_cast<long long>(shape[i]));
  }
  const DTypeInfo& info = dtype_info(type);
  if (shape.cols() % info.block_size != 0) {
    return err("tensor '%s': row length %lld is not a multiple of the %s block size %lld",
               name.c_str(), static_cast<long long>(shape.cols()), std::string(info.name).c_str(),
               static_cast<long long>(info.block_size));
  }
  TensorInfo t;
  t.name = std::move(name);
  t.type = type;
  t.shape = shape;
  t.nbytes = static_cast<uint64_t>(shape.numel() / info.block_size) * info.type_size;
  t.offset = (data_size_ + alignment_ - 1) / alignment_ * alignment_;
  data_size_ = t.offset + t.nbytes;
  tensors_.push_back(std::move(t));
  return Status::Ok();
}

Status Writer::put(const void* p, size_t n) {
  if (n > 0 && std::fwrite(p, 1, n, fp_) != n) {
    return err("%s: write failed at offset %llu: %s", path_.c_str(),
               static_cast<unsigned long long>(written_), std::strerror(errno));
  }
  written_ += n;
  return Status::Ok();
}

Status Writer::put_string(const std::string& s) {
  uint64_t n = s.size();
  PI_TRY(put(&n, sizeof n));
  return put(s.data(), s.size());
}

Status Writer::put_value(const Value& v) {
  return std::visit(
      [&](const auto& x) -> Status {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return put_string(x);
        } else if constexpr (std::is_same_v<T, Array>) {
          uint32_t et = static_cast<uint32_t>(x.elem_type);
          uint64_t n = x.items.size();
          PI_TRY(put(&et, sizeof et));
          PI_TRY(put(&n, sizeof n));
          for (const Value& item : x.items) {
            if (item.type() != x.elem_type) {
              return err("array of %s holds a %s item",
                         std::string(value_type_name(x.elem_type)).c_str(),
                         std::string(value_type_name(item.type())).c_str());
            }
            PI_TRY(put_value(item));
          }
          return Status::Ok();
        } else if constexpr (std::is_same_v<T, bool>) {
          uint8_t b = x ? 1 : 0;
          return put(&b, 1);
        } else {
          return put(&x, sizeof x);
        }
      },
      v.data);
}

Status Writer::pad_to_alignment() {
  static const char zeros[256] = {};
  uint64_t target = (written_ + alignment_ - 1) / alignment_ * alignment_;
  while (written_ < target) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(target - written_, sizeof zeros));
    PI_TRY(put(zeros, n));
  }
  return Status::Ok();
}

Status Writer::begin(const std::string& path) {
  if (began_) return err("begin() called twice");
  path_ = path;
  fp_ = std::fopen(path.c_str(), "wb");
  if (fp_ == nullptr) return err("%s: cannot create: %s", path.c_str(), std::strerror(errno));
  buffer_.resize(1 << 20);
  std::setvbuf(fp_, buffer_.data(), _IOFBF, buffer_.size());
  began_ = true;
  uint32_t magic = static_cast<uint32_t>(magic_);
  uint64_t n_tensors = tensors_.size(), n_kv = kvs_.size();
  PI_TRY(put(&magic, 4));
  PI_TRY(put(&version_, 4));
  PI_TRY(put(&n_tensors, 8));
  PI_TRY(put(&n_kv, 8));
  for (const auto& kv : kvs_) {
    PI_TRY(put_string(kv.key));
    uint32_t type = static_cast<uint32_t>(kv.value.type());
    PI_TRY(put(&type, 4));
    PI_TRY(put_value(kv.value));
  }
  const bool gpu_index = is_gpu_index();
  for (const auto& t : tensors_) {
    PI_TRY(put_string(t.name));
    uint32_t rank = static_cast<uint32_t>(t.shape.rank);
    PI_TRY(put(&rank, 4));
    for (int d = t.shape.rank - 1; d >= 0; --d) {  // innermost first on disk
      uint64_t dim = static_cast<uint64_t>(t.shape[d]);
      PI_TRY(put(&dim, 8));
    }
    uint32_t type = gpu_index ? gpu_index_type_id(t.type) : static_cast<uint32_t>(t.type);
    PI_TRY(put(&type, 4));
    PI_TRY(put(&t.offset, 8));
  }
  PI_TRY(pad_to_alignment());
  return Status::Ok();
}

Status Writer::skip_empty_tensors() {
  while (current_ < tensors_.size() && current_done_ == 0 && tensors_[current_].nbytes == 0) {
    ++current_;
    if (current_ < tensors_.size()) PI_TRY(pad_to_alignment());
  }
  return Status::Ok();
}

Status Writer::write(std::span<const std::byte> bytes) {
  if (!began_ || fp_ == nullptr) return err("write() before begin()");
  PI_TRY(skip_empty_tensors());
  while (!bytes.empty()) {
    if (current_ >= tensors_.size()) {
      return err("%s: %zu bytes written past the last tensor", path_.c_str(), bytes.size());
    }
    const TensorInfo& t = tensors_[current_];
    uint64_t need = t.nbytes - current_done_;
    size_t n = static_cast<size_t>(std::min<uint64_t>(need, bytes.size()));
    PI_TRY(put(bytes.data(), n));
    current_done_ += n;
    bytes = bytes.subspan(n);
    if (current_done_ == t.nbytes) {
      ++current_;
      current_done_ = 0;
      if (current_ < tensors_.size()) PI_TRY(pad_to_alignment());
      PI_TRY(skip_empty_tensors());
    }
  }
  return Status::Ok();
}

Status Writer::write_tensor(const std::string& name, std::span<const std::byte> bytes) {
  if (began_ && fp_ != nullptr) PI_TRY(skip_empty_tensors());
  if (current_ >= tensors_.size() || tensors_[current_].name != name) {
    return err("%s: tensor '%s' written out of order", path_.c_str(), name.c_str());
  }
  if (current_done_ != 0 || bytes.size() != tensors_[current_].nbytes) {
    return err("%s: tensor '%s' needs %llu bytes, got %zu", path_.c_str(), name.c_str(),
               static_cast<unsigned long long>(tensors_[current_].nbytes), bytes.size());
  }
  return write(bytes);
}

Status Writer::finish() {
  if (!began_ || fp_ == nullptr) return err("finish() before begin()");
  PI_TRY(skip_empty_tensors());
  // A trailing empty tensor's offset is the aligned end of the data: the file must reach it.
  if (!tensors_.empty() && tensors_.back().nbytes == 0) PI_TRY(pad_to_alignment());
  if (current_ != tensors_.size()) {
    return err("%s: tensor '%s' incomplete (%llu of %llu bytes written)", path_.c_str(),
               tensors_[current_].name.c_str(), static_cast<unsigned long long>(current_done_),
               static_cast<unsigned long long>(tensors_[current_].nbytes));
  }
  int rc = std::fclose(fp_);
  fp_ = nullptr;
  if (rc != 0) return err("%s: close failed: %s", path_.c_str(), std::strerror(errno));
  return Status::Ok();
}

}  // namespace pi::gguf
