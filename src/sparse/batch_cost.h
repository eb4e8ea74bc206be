// The cost model that decides, per layer and per weight matrix, how a row-sparse product over
// a prompt batch is computed. Costs are in bytes read from memory ("byte equivalents"):
//
//   cost(path) = sum over the weight rows the path reads of
//                row_bytes * (1 + gather if the rows are gathered) * max(1, rho * t_r)
//
// where t_r is the number of tokens the kernel computes on row r. A row costs at least one read
// from DRAM (decode is memory-bound); when many tokens use it the dot products dominate, each
// costing rho row reads (rho: time of one row x token dot from cache / time to stream the row
// from DRAM, measured per weight type). The paths:
//
//   Lists  per-token row lists (cpu::matvec_rows_batch): each 64-token group reads the union of
//          its tokens' rows once and computes a row only for the tokens that list it:
//          t_r = tokens of the group that list r; gathered.
//   Union  the union of all tokens' lists for every token (cpu::matvec_rows_union), then
//          per-token masking (entries a token did not list are never read): t_r = m; gathered.
//   Dense  every row for every token (cpu::matmul), then per-token masking: t_r = m; streamed.
//
// Running the tokens one by one costs sum_i |L_i| * row_bytes * (1 + gather) (each token
// streams its rows; its single dot per row hides behind the read). With rho <= 1 the Lists cost
// never exceeds that (max(1, rho k) <= k for k >= 1), and the chosen path is the cheapest of the
// three, so a batch is never costed above its tokens one by one. The choice depends only on the
// row lists and the weight type, never on the thread count, and every path produces the same
// entries for the listed (row, token) pairs, so results do not depend on it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace pi::sparse {

enum class RowsPath { Lists = 0, Union = 1, Dense = 2 };
inline constexpr int kNumRowsPaths = 3;
const char* rows_path_name(RowsPath p);

struct CostParams {
  double rho_lists = 0.25;  // masked kernel: one row x token dot, in DRAM row reads
  double rho_dense = 0.20;  // unmasked kernels (union, dense)
  double gather = 0.05;     // extra cost of reading listed rows instead of streaming them all
};

// Measured defaults for weight type t (see docs/BENCHMARKS.md, "Sparse decode").
CostParams default_cost_params(DType t);

struct PathCosts {
  double lists = 0, union_rows = 0, dense = 0;  // byte equivalents
  double one_by_one = 0;                        // the tokens run one at a time
  int64_t union_size = 0;                       // rows listed by any token
  int64_t group_rows = 0;  // rows the Lists path reads: union sizes summed over 64-token groups
  RowsPath best = RowsPath::Lists;
};

// Costs of the three paths for per-token lists in CSR form (token i's rows are
// idx[offsets[i] .. offsets[i+1]), no duplicates, values in [0, n_rows)) of m tokens over a
// matrix of n_rows rows of row_bytes bytes. `counts` is scratch [n_rows], all zero on entry
// and left all zero. Ties prefer Lists, then Union.
PathCosts batch_costs(const CostParams& p, int64_t n_rows, size_t row_bytes, const int32_t* idx,
                      const int64_t* offsets, int64_t m, int32_t* counts);

// Rows a per-token-lists kernel reads (matvec_rows_batch, axpy_rows_batch): the sizes of the
// unions of each 64-token group's lists, summed. `counts` as for batch_costs.
int64_t group_union_rows(const int32_t* idx, const int64_t* offsets, int64_t m, int32_t* counts);

}  // namespace pi::sparse
