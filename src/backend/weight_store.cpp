#include "backend/weight_store.h"

namespace pi::backend {

Result<const void*> WeightStore::copy_in(const void* host, size_t bytes, const std::string& what) {
  if (dev_->host_addressable()) return dev_->wrap_host(host, bytes);
  auto buf = dev_->alloc(bytes, what.c_str());
  if (!buf.ok()) return buf.error();
  dev_->upload(buf->data(), host, bytes);
  const void* p = buf->data();
  bytes_ += bytes;
  buffers_.push_back(std::move(*buf));
  return p;
}

Result<Matrix> WeightStore::place(const Matrix& host) {
  if (!host.present()) return host;
  auto p = copy_in(host.data, host.nbytes(), host.name);
  if (!p.ok()) return p.error();
  Matrix m = host;
  m.data = static_cast<const std::byte*>(*p);
  return m;
}

Result<Vector> WeightStore::place(const Vector& host) {
  if (!host.present()) return host;
  auto p = copy_in(host.data, host.nbytes(), "1-D weight");
  if (!p.ok()) return p.error();
  return Vector{static_cast<const float*>(*p), host.n};
}

}  // namespace pi::backend
