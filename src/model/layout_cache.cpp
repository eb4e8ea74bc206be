#include "model/layout_cache.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tensor/quant.h"

namespace pi::model {

DType file_layout(DType t) { return t == DType::Q4_0_SPLIT ? DType::Q4_0 : r16_file_type(t); }

bool converts(DType from, DType to) {
  const auto either_way = [&](DType a, DType b) { return (from == a && to == b) || (from == b && to == a); };
  return from == to || either_way(DType::Q4_0, DType::Q4_0_SPLIT) || (is_r16(to) && r16_file_type(to) == from) ||
         (is_r16(from) && r16_file_type(from) == to);
}

namespace {

// Groups [g0, g1) of 16 rows of a conversion of m to or from an R16 layout.
void convert_groups(const Matrix& m, DType layout, std::byte* out, int64_t g0, int64_t g1) {
  const size_t group = 16 * m.row_stride();
  const auto* src = reinterpret_cast<const std::byte*>(m.data) + static_cast<size_t>(g0) * group;
  std::byte* dst = out + static_cast<size_t>(g0) * group;
  const int64_t rows = 16 * (g1 - g0);
  if (is_r16(layout)) return interleave_rows(layout, src, dst, rows, m.cols);
  deinterleave_rows(m.type, src, dst, rows, m.cols);
}

}  // namespace

void convert_row(const Matrix& m, int64_t r, DType layout, std::byte* out) {
  if (is_r16(m.type)) {
    // A row of an interleaved group: its 16 rows converted through a group-sized buffer.
    std::vector<std::byte> group(16 * m.row_stride());
    Matrix g = m;
    g.data = reinterpret_cast<const std::byte*>(m.data) + static_cast<size_t>(r / 16) * group.size();
    convert_groups(g, layout, group.data(), 0, 1);
    std::memcpy(out, group.data() + static_cast<size_t>(r % 16) * m.row_stride(), m.row_stride());
  } else if (layout == m.type) {
    std::memcpy(out, m.row(r), m.row_stride());
  } else if (layout == DType::Q4_0_SPLIT) {
    split_q4_0_row(m.row(r), out, m.cols);
  } else {
    join_q4_0_row(m.row(r), out, m.cols);
  }
}

Status convert_rows(const Matrix& m, DType layout, std::byte* out) {
  if (!converts(m.type, layout)) {
    return err("%s: no layout conversion from %s to %s", m.name.c_str(),
               std::string(dtype_name(m.type)).c_str(), std::string(dtype_name(layout)).c_str());
  }
  // Any split of the rows gives the same bytes: big matrices are split over the machine's
  // threads (most of the time is the kernel clearing the new pages).
  const size_t rb = m.row_stride();
  const bool groups = is_r16(m.type) || is_r16(layout);  // 16 rows at a time
  if (groups && m.rows % 16 != 0) {
    return err("%s: %lld rows are not whole groups of 16 for %s", m.name.c_str(), static_cast<long long>(m.rows),
               std::string(dtype_name(is_r16(layout) ? layout : m.type)).c_str());
  }
  const auto convert = [&](int64_t r0, int64_t r1) {
    if (groups) return convert_groups(m, layout, out, r0 / 16, r1 / 16);
    for (int64_t r = r0; r < r1; ++r) convert_row(m, r, layout, out + static_cast<size_t>(r) * rb);
  };
  const int64_t n = m.nbytes() < (uint64_t{8} << 20)
                        ? 1
                        : std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::min<int64_t>(8, m.rows));
  std::vector<std::thread> workers;
  for (int64_t i = 1; i < n; ++i) workers.emplace_back(convert, m.rows * i / n, m.rows * (i + 1) / n);
  convert(0, m.rows / n);
  for (auto& w : workers) w.join();
  return Status::Ok();
}

Result<Matrix> LayoutCache::get(const Matrix& m, DType layout) {
  if (!m.present() || layout == m.type) return m;
  if (!converts(m.type, layout)) {
    return err("%s: no layout conversion from %s to %s", m.name.c_str(),
               std::string(dtype_name(m.type)).c_str(), std::string(dtype_name(layout)).c_str());
  }
  std::lock_guard<std::mutex> lock(mu_);
  const auto key = std::make_pair(m.data, layout);
  auto it = copies_.find(key);
  if (it == copies_.end()) {
    HugeRegion copy(m.nbytes());
    if (!copy.ok()) {
      return err("%s: cannot allocate %llu bytes for its %s copy: %s", m.name.c_str(),
                 static_cast<unsigned long long>(m.nbytes()), std::string(dtype_name(layout)).c_str(),
                 std::strerror(errno));
    }
    PI_TRY(convert_rows(m, layout, copy.data()));
    bytes_ += m.nbytes();
    it = copies_.emplace(key, std::move(copy)).first;
  }
  Matrix out = m;
  out.type = layout;
  out.data = it->second.data();
  return out;
}

bool LayoutCache::has(const Matrix& m, DType layout) const {
  std::lock_guard<std::mutex> lock(mu_);
  return copies_.count(std::make_pair(m.data, layout)) != 0;
}

uint64_t LayoutCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace pi::model
