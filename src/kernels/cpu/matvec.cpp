// Threaded front ends of the dot-product family: dense matvec and matmul, row-sparse matvec
// and its batched forms. Activations are prepared once per call (quantized to Q8 blocks for
// the integer paths); tasks own disjoint sets of output rows, so results do not depend on
// the thread count or schedule.
#include <cstring>

#include "kernels/cpu/front.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/r16.h"
#include "kernels/cpu/scratch.h"

namespace pi::cpu {
namespace {

using detail::DotTask;
using detail::KernelTable;
using detail::Scratch;

// Batched forms walk each task's rows in blocks of about kRowBlockBytes (they stay in L2)
// and, per block, the tokens in tiles of kTokenTile (their prepared activations, ~2 bytes
// per element each for Q4_0, stay in L1). Each row is read from DRAM once per block and from
// L2 once per tile; each activation from L1. (Tiles of 16 tokens over whole tasks streamed
// 16 activations from L2 for every row, which bound prompt processing.)
constexpr int64_t kTokenTile = 4;
constexpr size_t kRowBlockBytes = size_t{256} << 10;

struct Prepared {
  const uint8_t* act = nullptr;
  size_t stride = 0;
};

Prepared prepare(ThreadPool& pool, Scratch& scratch, const KernelTable& kt, DType t,
                 const float* X, int64_t m, int64_t cols) {
  const bool r16 = detail::is_r16(t);
  const size_t bytes = r16 ? detail::r16_act_bytes(t, cols) : kt.act_bytes(t, cols);
  if (bytes == 0) return {};
  const size_t stride = (bytes + 63) / 64 * 64;
  auto* buf = static_cast<uint8_t*>(scratch.alloc_bytes(stride * static_cast<size_t>(m)));
  auto one = [&](const float* x, uint8_t* out) {
    if (r16) {
      kt.r16_prepare(t, x, cols, out);
    } else {
      kt.prepare_act(t, x, cols, out);
    }
  };
  if (m == 1) {
    one(X, buf);
  } else {
    pool.parallel_for(
        m, [&](int64_t i, int) { one(X + i * cols, buf + i * stride); }, Schedule::Dynamic, 1);
  }
  return {buf, stride};
}

// Rows per dot task for a matrix of type t: rows_per_task, in whole groups of 16 for the R16 types.
int64_t task_rows(DType t, int64_t n_items, int n_threads) {
  const int64_t per = detail::rows_per_task(n_items, n_threads);
  return detail::is_r16(t) ? (per + detail::kR16Rows - 1) / detail::kR16Rows * detail::kR16Rows : per;
}

// The leaf of type t: the R16 types have their own.
void run_leaf(const KernelTable& kt, const DotTask& task) {
  if (detail::is_r16(task.type)) {
    kt.r16_dot(task);
  } else {
    kt.dot(task);
  }
}

DotTask base_task(DType t, const void* W, int64_t cols, const float* X, const Prepared& p,
                  float* Y, int64_t ldy) {
  DotTask task{};
  task.type = t;
  task.W = static_cast<const uint8_t*>(W);
  task.row_bytes = row_bytes(t, cols);
  task.cols = cols;
  task.x = X;
  task.x_stride = cols;
  task.act = p.act;
  task.act_stride = p.stride;
  task.Y = Y;
  task.ldy = ldy;
  return task;
}

// Runs the leaf over items [0, n_items) (rows, or entries of task.idx) for tokens [0, m),
// in tasks of whole items (whole groups of 16 rows for the R16 types); with several tokens each
// task walks its items in row blocks and each block once per token tile.
void run_dot(ThreadPool& pool, const KernelTable& kt, const DotTask& base, int64_t n_items,
             int64_t m) {
  if (n_items <= 0 || m <= 0) return;
  const bool r16 = detail::is_r16(base.type);
  const int64_t per = task_rows(base.type, n_items, pool.size());
  const int64_t n_tasks = (n_items + per - 1) / per;
  const int64_t unit = r16 ? detail::kR16Rows : 1;
  const int64_t tile = r16 ? detail::kR16TokenTile : kTokenTile;
  pool.parallel_for(
      n_tasks,
      [&](int64_t task_id, int) {
        DotTask task = base;
        const int64_t k0 = task_id * per, k1 = std::min(n_items, k0 + per);
        if (m == 1) {
          task.k0 = k0;
          task.k1 = k1;
          task.m = 1;
          run_leaf(kt, task);
          return;
        }
        const int64_t fit = static_cast<int64_t>(kRowBlockBytes / base.row_bytes) / unit * unit;
        const int64_t block = std::max<int64_t>(unit, fit);
        for (int64_t r0 = k0; r0 < k1; r0 += block) {
          task.k0 = r0;
          task.k1 = std::min(k1, r0 + block);
          for (int64_t i0 = 0; i0 < m; i0 += tile) {
            task.m = std::min(tile, m - i0);
            task.x = base.x + i0 * base.x_stride;
            task.act = base.act != nullptr ? base.act + i0 * base.act_stride : nullptr;
            task.Y = base.Y + i0 * base.ldy;
            run_leaf(kt, task);
          }
        }
      },
      Schedule::Dynamic, 1);
}

}  // namespace

void Kernels::matvec(ThreadPool& pool, DType t, const void* W, int64_t rows, int64_t cols,
            const float* x, float* y) const {
  detail::check_dense_matrix(t, rows, cols);
  const KernelTable& kt = *table_;
  Scratch scratch;
  const Prepared p = prepare(pool, scratch, kt, t, x, 1, cols);
  run_dot(pool, kt, base_task(t, W, cols, x, p, y, rows), rows, 1);
}

void Kernels::matvec_multi(ThreadPool& pool, const MatvecPart* parts, int n_parts, int64_t cols,
                  const float* x) const {
  constexpr int kMaxParts = kMaxMatvecParts;
  detail::require(n_parts >= 1 && n_parts <= kMaxParts, "matvec_multi: 1..32 parts");
  const KernelTable& kt = *table_;
  Scratch scratch;
  DotTask base[kMaxParts];
  int64_t total = 0;
  for (int j = 0; j < n_parts; ++j) {
    detail::check_dense_matrix(parts[j].type, parts[j].rows, cols);
    const float* xj = parts[j].x != nullptr ? parts[j].x : x;
    // Parts of one type and input share the prepared activation.
    Prepared p{};
    int same = -1;
    for (int i = 0; i < j && same < 0; ++i)
      if (parts[i].type == parts[j].type && base[i].x == xj) same = i;
    if (same >= 0) {
      p = {base[same].act, base[same].act_stride};
    } else {
      p = prepare(pool, scratch, kt, parts[j].type, xj, 1, cols);
    }
    base[j] = base_task(parts[j].type, parts[j].W, cols, xj, p, parts[j].y, parts[j].rows);
    base[j].m = 1;
    total += parts[j].rows;
  }
  // Tasks of about the size matvec would use for all rows together, never spanning parts.
  int64_t per[kMaxParts];
  int64_t first_task[kMaxParts + 1];
  first_task[0] = 0;
  for (int j = 0; j < n_parts; ++j) {
    per[j] = task_rows(parts[j].type, total, pool.size());
    first_task[j + 1] = first_task[j] + (parts[j].rows + per[j] - 1) / per[j];
  }
  pool.parallel_for(
      first_task[n_parts],
      [&](int64_t task_id, int) {
        int j = 0;
        while (task_id >= first_task[j + 1]) ++j;
        DotTask task = base[j];
        task.k0 = (task_id - first_task[j]) * per[j];
        task.k1 = std::min(parts[j].rows, task.k0 + per[j]);
        run_leaf(kt, task);
      },
      Schedule::Dynamic, 1);
}

void Kernels::matmul(ThreadPool& pool, DType t, const void* W, int64_t rows, int64_t cols,
            const float* X, int64_t m, float* Y) const {
  detail::check_dense_matrix(t, rows, cols);
  const KernelTable& kt = *table_;
  Scratch scratch;
  const Prepared p = prepare(pool, scratch, kt, t, X, m, cols);
  run_dot(pool, kt, base_task(t, W, cols, X, p, Y, rows), rows, m);
}

void Kernels::matvec_rows(ThreadPool& pool, DType t, const void* W, int64_t cols, const int32_t* idx,
                 int64_t n_idx, const float* x, float* y) const {
  detail::check_matrix(t, cols);
  if (n_idx <= 0) return;
  const KernelTable& kt = *table_;
  Scratch scratch;
  const Prepared p = prepare(pool, scratch, kt, t, x, 1, cols);
  DotTask base = base_task(t, W, cols, x, p, y, 0);
  base.idx = idx;
  run_dot(pool, kt, base, n_idx, 1);
}

void Kernels::matvec_rows_union(ThreadPool& pool, DType t, const void* W, int64_t n_rows, int64_t cols,
                       const int32_t* idx, int64_t n_idx, const float* X, int64_t m, float* Y) const {
  detail::check_matrix(t, cols);
  if (n_idx <= 0 || m <= 0) return;
  const KernelTable& kt = *table_;
  Scratch scratch;
  const Prepared p = prepare(pool, scratch, kt, t, X, m, cols);
  DotTask base = base_task(t, W, cols, X, p, Y, n_rows);
  base.idx = idx;
  run_dot(pool, kt, base, n_idx, m);
}

void Kernels::matvec_rows_batch(ThreadPool& pool, DType t, const void* W, int64_t n_rows, int64_t cols,
                       const int32_t* idx, const int64_t* offsets, const float* X, int64_t m,
                       float* Y) const {
  detail::check_matrix(t, cols);
  if (m <= 0 || n_rows <= 0) return;
  const KernelTable& kt = *table_;
  Scratch scratch;
  const Prepared p = prepare(pool, scratch, kt, t, X, m, cols);
  auto* masks = scratch.alloc<uint64_t>(n_rows);
  auto* rows = scratch.alloc<int32_t>(n_rows);
  auto* row_masks = scratch.alloc<uint64_t>(n_rows);
  // Tokens in groups of 64: one mask bit per token; each group reads its union of rows once.
  for (int64_t g0 = 0; g0 < m; g0 += detail::kMaxMaskTokens) {
    const int64_t gm = std::min(detail::kMaxMaskTokens, m - g0);
    detail::group_masks(idx, offsets, g0, gm, n_rows, masks);
    int64_t n_union = 0;
    for (int64_t r = 0; r < n_rows; ++r) {
      if (masks[r] != 0) {
        rows[n_union] = static_cast<int32_t>(r);
        row_masks[n_union++] = masks[r];
      }
    }
    Prepared pg = p;
    if (pg.act != nullptr) pg.act += g0 * pg.stride;
    DotTask base = base_task(t, W, cols, X + g0 * cols, pg, Y + g0 * n_rows, n_rows);
    base.idx = rows;
    base.masks = row_masks;
    // One leaf call per task covers the whole group (m <= 64), masks select the tokens.
    if (n_union == 0) continue;
    const int64_t per = detail::rows_per_task(n_union, pool.size());
    pool.parallel_for(
        (n_union + per - 1) / per,
        [&](int64_t task_id, int) {
          DotTask task = base;
          task.m = gm;
          task.k0 = task_id * per;
          task.k1 = std::min(n_union, task.k0 + per);
          kt.dot(task);
        },
        Schedule::Dynamic, 1);
  }
}

}  // namespace pi::cpu
