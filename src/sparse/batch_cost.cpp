#include "sparse/batch_cost.h"

#include <algorithm>

namespace pi::sparse {
namespace {

// Tokens per group of the masked kernel (one mask bit per token, cpu::matvec_rows_batch).
constexpr int64_t kGroupTokens = 64;

}  // namespace

const char* rows_path_name(RowsPath p) {
  switch (p) {
    case RowsPath::PerToken:
      return "per-token";
    case RowsPath::Lists:
      return "lists";
    case RowsPath::Union:
      return "union";
    case RowsPath::Dense:
      return "dense";
  }
  return "?";
}

CostParams default_cost_params(DType t) {
  // Fitted to the gate/up time of each path on the 150-token prompt of a Llama-2-7B-shaped
  // synthetic PowerInfer file (10% activity), one thread (docs/BENCHMARKS.md, "Sparse decode").
  CostParams p;
  switch (t) {
    case DType::F32:
      p.list_row = 0.3, p.list_dot = 0.63, p.many_dot = 0.40;
      break;
    case DType::F16:
    case DType::BF16:
      p.list_row = 0.3, p.list_dot = 0.90, p.many_dot = 0.66;
      break;
    case DType::Q8_0:
      p.list_row = 0.3, p.list_dot = 1.65, p.many_dot = 1.40;
      break;
    default:  // Q4_0 and the other block formats
      p.list_row = 0.3, p.list_dot = 1.60, p.many_dot = 1.50;
      break;
  }
  return p;
}

int64_t group_union_rows(const int32_t* idx, const int64_t* offsets, int64_t m, int32_t* counts) {
  int64_t n = 0;
  for (int64_t g0 = 0; g0 < m; g0 += kGroupTokens) {
    const int64_t g1 = std::min(m, g0 + kGroupTokens);
    for (int64_t k = offsets[g0]; k < offsets[g1]; ++k) {
      n += counts[idx[k]] == 0 ? 1 : 0;
      counts[idx[k]] = 1;
    }
    for (int64_t k = offsets[g0]; k < offsets[g1]; ++k) counts[idx[k]] = 0;
  }
  return n;
}

PathCosts batch_costs(const CostParams& p, int64_t n_rows, const int32_t* idx,
                      const int64_t* offsets, int64_t m, int32_t* counts) {
  PathCosts c;
  const double s = static_cast<double>(offsets[m] - offsets[0]);
  c.per_token = s;
  if (m <= 1) {  // one token: the one-token kernel; its list has no duplicates
    c.union_size = c.group_rows = offsets[m] - offsets[0];
    c.lists = c.union_rows = c.dense = s;
    return c;
  }
  c.group_rows = group_union_rows(idx, offsets, m, counts);
  for (int64_t k = offsets[0]; k < offsets[m]; ++k) {
    c.union_size += counts[idx[k]] == 0 ? 1 : 0;
    counts[idx[k]] = 1;
  }
  for (int64_t k = offsets[0]; k < offsets[m]; ++k) counts[idx[k]] = 0;
  const double per_row = std::max(1.0, p.many_dot * static_cast<double>(m));
  c.lists = p.list_row * static_cast<double>(c.group_rows) + p.list_dot * s;
  c.union_rows = static_cast<double>(c.union_size) * (1.0 + p.gather) * per_row;
  c.dense = static_cast<double>(n_rows) * per_row;

  // A path must be cheaper by more than rounding to displace an earlier one.
  constexpr double kMargin = 1.0 - 1e-9;
  double best = c.per_token;
  const double costs[] = {c.lists, c.union_rows, c.dense};
  const RowsPath paths[] = {RowsPath::Lists, RowsPath::Union, RowsPath::Dense};
  for (int k = 0; k < 3; ++k) {
    if (costs[k] < best * kMargin) {
      best = costs[k];
      c.best = paths[k];
    }
  }
  return c;
}

int64_t union_rows(const int32_t* idx, int64_t n_idx, int64_t n_rows, int32_t* counts, int32_t* out) {
  // Marked in counts, then collected in row order (branch-free), counts left zero.
  for (int64_t k = 0; k < n_idx; ++k) counts[idx[k]] = 1;
  int64_t n = 0;
  for (int64_t r = 0; r < n_rows; ++r) {
    out[n] = static_cast<int32_t>(r);
    n += counts[r];
    counts[r] = 0;
  }
  return n;
}

}  // namespace pi::sparse
