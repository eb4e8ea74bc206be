// Builds raw GGUF images byte by byte, so tests can craft files the writer refuses to make.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace pi::testing {

class ByteBuilder {
 public:
  template <typename T>
  ByteBuilder& pod(T v) {
    size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &v, sizeof(T));
    return *this;
  }
  ByteBuilder& u32(uint32_t v) { return pod(v); }
  ByteBuilder& u64(uint64_t v) { return pod(v); }
  ByteBuilder& str(const std::string& s) {
    u64(s.size());
    for (char c : s) bytes_.push_back(static_cast<std::byte>(c));
    return *this;
  }
  ByteBuilder& raw(const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
    return *this;
  }
  ByteBuilder& pad_to(size_t alignment) {
    while (bytes_.size() % alignment) bytes_.push_back(std::byte{0});
    return *this;
  }
  ByteBuilder& zeros(size_t n) {
    bytes_.resize(bytes_.size() + n);
    return *this;
  }
  // GGUF header: magic "GGUF", version, tensor count, kv count.
  ByteBuilder& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv,
                      uint32_t magic = 0x46554747) {
    return u32(magic).u32(version).u64(n_tensors).u64(n_kv);
  }
  // Tensor info with dims given innermost first, as on disk.
  ByteBuilder& tensor_info(const std::string& name, std::vector<uint64_t> dims_inner_first,
                           uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims_inner_first.size()));
    for (uint64_t d : dims_inner_first) u64(d);
    return u32(type).u64(offset);
  }
  size_t size() const { return bytes_.size(); }
  const std::vector<std::byte>& bytes() const { return bytes_; }
  std::vector<std::byte>& bytes() { return bytes_; }

 private:
  std::vector<std::byte> bytes_;
};

}  // namespace pi::testing
