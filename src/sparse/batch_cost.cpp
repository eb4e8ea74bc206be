#include "sparse/batch_cost.h"

#include <algorithm>

namespace pi::sparse {
namespace {

// Tokens per group of the masked kernel (one mask bit per token, cpu::matvec_rows_batch).
constexpr int64_t kGroupTokens = 64;

}  // namespace

const char* rows_path_name(RowsPath p) {
  switch (p) {
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
  CostParams p;
  switch (t) {
    case DType::F32:
      p.rho_lists = 0.08;
      p.rho_dense = 0.06;
      break;
    case DType::F16:
    case DType::BF16:
      p.rho_lists = 0.15;
      p.rho_dense = 0.12;
      break;
    default:  // block-quantized types: integer dot products against 8-bit activations
      p.rho_lists = 0.25;
      p.rho_dense = 0.20;
      break;
  }
  return p;
}

PathCosts batch_costs(const CostParams& p, int64_t n_rows, size_t row_bytes, const int32_t* idx,
                      const int64_t* offsets, int64_t m, int32_t* counts) {
  PathCosts c;
  const double rb = static_cast<double>(row_bytes);
  const double gathered = rb * (1.0 + p.gather);
  const double total = static_cast<double>(offsets[m] - offsets[0]);
  c.one_by_one = total * gathered;

  // Lists: per 64-token group, each row of the group's union costs max(1, rho * k_r).
  for (int64_t g0 = 0; g0 < m; g0 += kGroupTokens) {
    const int64_t g1 = std::min(m, g0 + kGroupTokens);
    for (int64_t k = offsets[g0]; k < offsets[g1]; ++k) ++counts[idx[k]];
    for (int64_t k = offsets[g0]; k < offsets[g1]; ++k) {
      const int32_t r = idx[k];
      if (counts[r] == 0) continue;  // already costed in this group
      c.lists += gathered * std::max(1.0, p.rho_lists * counts[r]);
      ++c.group_rows;
      counts[r] = 0;
    }
  }
  // Union size over the whole batch (counts are back to zero).
  for (int64_t k = offsets[0]; k < offsets[m]; ++k) {
    if (counts[idx[k]] == 0) ++c.union_size;
    counts[idx[k]] = 1;
  }
  for (int64_t k = offsets[0]; k < offsets[m]; ++k) counts[idx[k]] = 0;

  const double per_row = std::max(1.0, p.rho_dense * static_cast<double>(m));
  c.union_rows = static_cast<double>(c.union_size) * gathered * per_row;
  c.dense = static_cast<double>(n_rows) * rb * per_row;

  // A path must be cheaper by more than rounding to displace an earlier one (sums and
  // products of the same terms differ in the last bits).
  constexpr double kMargin = 1.0 - 1e-9;
  c.best = RowsPath::Lists;
  double best = c.lists;
  if (c.union_rows < best * kMargin) {
    best = c.union_rows;
    c.best = RowsPath::Union;
  }
  if (c.dense < best * kMargin) c.best = RowsPath::Dense;
  return c;
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

}  // namespace pi::sparse
