// Threaded front ends of the axpy family (the sparse down projection): y += sum a_r D[r,:].
// The active rows and their coefficients are compacted once, then split at row n_rows / 2:
//   y <- (y + the lower rows' terms, in list order) + (the upper rows' terms, in list order),
// the lower half accumulated into y itself, the upper into a zeroed partial added last. Two
// threads each stream whole rows of one half of the matrix; splitting the columns instead
// gave each thread 1152-byte pieces of the same scattered 2304-byte rows (~15% slower with
// two threads; splitting rows by parity, both threads in the same region, was no faster).
// More threads split each half's columns too. Every y element sees the same operations in
// the same order whatever the thread count or the number of tokens, so results are
// bit-identical for any pool size and between the one-token and many-token forms. (The
// original PowerInfer adds per-thread partial vectors without synchronisation.)
#include <cstring>

#include "kernels/cpu/front.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/scratch.h"

namespace pi::cpu {
namespace {

using detail::AxpyTask;
using detail::KernelTable;

// Smallest column slice: whole blocks, and at least 64 floats of y so that slices of
// different threads never share a cache line of y; for Q4_0_SPLIT whole four-block units
// (its AVX-512 leaf reads a unit with one load per row).
int64_t granule(DType t) {
  if (t == DType::Q4_0_SPLIT) return 128;
  return std::max<int64_t>(dtype_info(t).block_size, 64);
}

// Runs base (rows and coefficients [n, m] compacted, Y [m, ldy]) as described at the top.
void run_axpy(ThreadPool& pool, const KernelTable& kt, const AxpyTask& base, int64_t cols,
              int64_t n_rows) {
  if (base.n == 0) return;
  detail::Scratch scratch;
  const int64_t m = base.m, n = base.n;
  const int64_t split = n_rows / 2;
  // A list whose lower rows all come first (ascending lists, as every caller passes) is split
  // where it is; any other is copied, lower rows first, each half in list order.
  int64_t n_lower = 0;
  while (n_lower < n && base.rows[n_lower] < split) ++n_lower;
  bool in_place = true;
  for (int64_t k = n_lower; k < n; ++k) in_place &= base.rows[k] >= split;
  const int32_t* rows = base.rows;
  const float* coef = base.coef;
  if (!in_place) {
    auto* r = scratch.alloc<int32_t>(n);
    auto* c = scratch.alloc<float>(n * m);
    int64_t at = 0;
    for (int upper = 0; upper < 2; ++upper) {
      for (int64_t k = 0; k < n; ++k) {
        if ((base.rows[k] >= split) != (upper == 1)) continue;
        r[at] = base.rows[k];
        for (int64_t i = 0; i < m; ++i) c[at * m + i] = base.coef[k * m + i];  // m is 1 per token
        ++at;
      }
      if (upper == 0) n_lower = at;
    }
    rows = r;
    coef = c;
  }
  const int64_t n_upper = n - n_lower;
  float* partial = n_upper > 0 ? scratch.alloc<float>(m * cols) : nullptr;
  if (partial != nullptr) std::memset(partial, 0, static_cast<size_t>(m * cols) * sizeof(float));

  const int64_t g = granule(base.type);
  const int64_t n_gran = (cols + g - 1) / g;
  const int64_t n_slices = std::max<int64_t>(1, std::min<int64_t>((pool.size() + 1) / 2, n_gran));
  pool.parallel_for(
      2 * n_slices,
      [&](int64_t task_id, int) {
        const bool upper = task_id >= n_slices;
        const int64_t s = task_id % n_slices;
        AxpyTask task = base;
        task.n_rows = n_rows;
        task.rows = rows + (upper ? n_lower : 0);
        task.coef = coef + (upper ? n_lower * m : 0);
        task.n = upper ? n_upper : n_lower;
        if (upper) {
          task.Y = partial;
          task.ldy = cols;
        }
        task.c0 = std::min(cols, n_gran * s / n_slices * g);
        task.c1 = std::min(cols, n_gran * (s + 1) / n_slices * g);
        if (task.n > 0 && task.c1 > task.c0) kt.axpy(task);
      },
      Schedule::Dynamic);
  // A token none of whose upper rows has a nonzero coefficient skips the add, as its
  // one-token call (whose compacted list then has no upper row) does: y + 0 would turn a
  // -0 of y into +0.
  for (int64_t i = 0; i < m && n_upper > 0; ++i) {
    bool any = false;
    for (int64_t k = n_lower; k < n && !any; ++k) any = coef[k * m + i] != 0.0f;
    if (!any) continue;
    float* y = base.Y + i * base.ldy;
    const float* p = partial + i * cols;
    for (int64_t c = 0; c < cols; ++c) y[c] += p[c];
  }
}

AxpyTask base_task(DType t, const void* D, int64_t cols, float* Y, int64_t ldy) {
  AxpyTask task{};
  task.type = t;
  task.D = static_cast<const uint8_t*>(D);
  task.row_bytes = row_bytes(t, cols);
  task.Y = Y;
  task.ldy = ldy;
  return task;
}

}  // namespace

void Kernels::axpy_rows(ThreadPool& pool, DType t, const void* D, int64_t n_rows, int64_t cols,
               const int32_t* idx, int64_t n_idx, const float* a, float* y) const {
  detail::check_axpy_matrix(t, cols);
  detail::Scratch scratch;
  auto* rows = scratch.alloc<int32_t>(n_idx);
  auto* coef = scratch.alloc<float>(n_idx);
  int64_t n = 0;
  for (int64_t k = 0; k < n_idx; ++k) {
    const float c = a[idx[k]];
    if (c != 0.0f) {
      rows[n] = idx[k];
      coef[n++] = c;
    }
  }
  AxpyTask task = base_task(t, D, cols, y, 0);
  task.rows = rows;
  task.coef = coef;
  task.n = n;
  task.m = 1;
  run_axpy(pool, *table_, task, cols, n_rows);
}

void Kernels::axpy_dense(ThreadPool& pool, DType t, const void* D, int64_t rows, int64_t cols,
                const float* a, float* y) const {
  detail::check_axpy_matrix(t, cols);
  detail::Scratch scratch;
  auto* ids = scratch.alloc<int32_t>(rows);
  auto* coef = scratch.alloc<float>(rows);
  int64_t n = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (a[r] != 0.0f) {
      ids[n] = static_cast<int32_t>(r);
      coef[n++] = a[r];
    }
  }
  AxpyTask task = base_task(t, D, cols, y, 0);
  task.rows = ids;
  task.coef = coef;
  task.n = n;
  task.m = 1;
  run_axpy(pool, *table_, task, cols, rows);
}

void Kernels::axpy_rows_union(ThreadPool& pool, DType t, const void* D, int64_t n_rows, int64_t cols,
                     const int32_t* idx, int64_t n_idx, const float* A, int64_t m, float* Y) const {
  detail::check_axpy_matrix(t, cols);
  if (m <= 0) return;
  detail::Scratch scratch;
  auto* rows = scratch.alloc<int32_t>(n_idx);
  auto* coef = scratch.alloc<float>(n_idx * m);
  int64_t n = 0;
  for (int64_t k = 0; k < n_idx; ++k) {
    bool any = false;
    for (int64_t i = 0; i < m; ++i) {
      const float c = A[i * n_rows + idx[k]];
      coef[n * m + i] = c;
      any |= c != 0.0f;
    }
    if (any) rows[n++] = idx[k];
  }
  AxpyTask task = base_task(t, D, cols, Y, cols);
  task.rows = rows;
  task.coef = coef;
  task.n = n;
  task.m = m;
  run_axpy(pool, *table_, task, cols, n_rows);
}

void Kernels::axpy_rows_batch(ThreadPool& pool, DType t, const void* D, int64_t n_rows, int64_t cols,
                     const int32_t* idx, const int64_t* offsets, const float* A, int64_t m,
                     float* Y) const {
  detail::check_axpy_matrix(t, cols);
  if (m <= 0 || n_rows <= 0) return;
  detail::Scratch scratch;
  auto* masks = scratch.alloc<uint64_t>(n_rows);
  auto* rows = scratch.alloc<int32_t>(n_rows);
  const int64_t gmax = std::min(m, detail::kMaxMaskTokens);
  auto* coef = scratch.alloc<float>(n_rows * gmax);
  for (int64_t g0 = 0; g0 < m; g0 += detail::kMaxMaskTokens) {
    const int64_t gm = std::min(detail::kMaxMaskTokens, m - g0);
    detail::group_masks(idx, offsets, g0, gm, n_rows, masks);
    // Union rows ascending; a token's coefficient is zero (skipped) unless the row is in
    // its own list and its activation is nonzero.
    int64_t n = 0;
    for (int64_t r = 0; r < n_rows; ++r) {
      if (masks[r] == 0) continue;
      bool any = false;
      for (int64_t i = 0; i < gm; ++i) {
        const float c = ((masks[r] >> i) & 1u) != 0 ? A[(g0 + i) * n_rows + r] : 0.0f;
        coef[n * gm + i] = c;
        any |= c != 0.0f;
      }
      if (any) rows[n++] = static_cast<int32_t>(r);
    }
    AxpyTask task = base_task(t, D, cols, Y + g0 * cols, cols);
    task.rows = rows;
    task.coef = coef;
    task.n = n;
    task.m = gm;
    run_axpy(pool, *table_, task, cols, n_rows);
  }
}

}  // namespace pi::cpu
