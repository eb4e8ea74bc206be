// The cost model that picks, per layer and weight matrix, how a row-sparse product over a
// prompt batch of m tokens is computed. Costs are times measured in one unit: the time the
// one-token kernel (cpu::matvec_rows) takes to stream one listed weight row from memory and
// dot it with one token; multiplied by the row size this is a byte count ("bytes the one-token
// kernel would read in that time"). The paths and their costs, with L_i the rows listed for
// token i, S = sum_i |L_i|, U the union of the lists, U_g that of 64-token group g, n the rows:
//
//   PerToken  each token alone through the one-token kernel:     S
//   Lists     cpu::matvec_rows_batch; each 64-token group reads U_g once and dots a row only
//             with the tokens listing it:                        list_row sum_g |U_g| + list_dot S
//   Union     cpu::matvec_rows_union, every row of U with every token:
//                                                                |U| (1 + gather) max(1, many_dot m)
//   Dense     cpu::matmul over all n rows:                       n max(1, many_dot m)
//
// (Union and Dense compute entries a token did not list; they are never read: per-token masking.)
// A row is read at least once (cost 1); beyond that the many-token kernels cost many_dot per
// row x token dot. The constants are fitted per weight type to measured times of the paths on
// a real prompt (docs/BENCHMARKS.md, "Sparse decode"). On the development machine the batched
// kernels' dot costs more than the one-token kernel's streamed row for Q4_0 and Q8_0
// (list_dot 1.6: token by token wins; rows shared by consecutive tokens stay in L3), about the
// same for F16, and less for F32 (list_dot 0.63: the batched lists win); Union and Dense only
// pay for dense masks of F32 weights. PerToken is the cost of running the tokens one by one,
// and the chosen path is the cheapest, so a batch is never costed above its tokens one by one.
// The choice depends only on the lists and the weight type (never on the thread count), and
// all paths produce the same listed entries.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace pi::sparse {

enum class RowsPath { PerToken = 0, Lists = 1, Union = 2, Dense = 3 };
inline constexpr int kNumRowsPaths = 4;
const char* rows_path_name(RowsPath p);

// Costs relative to one row x token of the one-token kernel (see above).
struct CostParams {
  double list_row = 0.3;   // Lists: one row of a group's union
  double list_dot = 1.6;   // Lists: one listed row x token dot
  double many_dot = 1.5;   // Union, Dense: one row x token dot
  double gather = 0.03;    // Union: reading listed rows instead of streaming all rows
};

// Measured constants for weight type t.
CostParams default_cost_params(DType t);

struct PathCosts {
  double per_token = 0, lists = 0, union_rows = 0, dense = 0;
  int64_t union_size = 0;  // |U|
  int64_t group_rows = 0;  // sum over 64-token groups of |U_g|: rows the Lists path reads
  RowsPath best = RowsPath::PerToken;
};

// Costs of the paths for per-token lists in CSR form (token i's rows are
// idx[offsets[i] .. offsets[i+1]), no duplicates, values in [0, n_rows)) of m tokens.
// `counts` is scratch [n_rows], all zero on entry and left all zero. A single token always
// takes PerToken. Ties (within rounding) prefer the earlier path in the order above.
PathCosts batch_costs(const CostParams& p, int64_t n_rows, const int32_t* idx,
                      const int64_t* offsets, int64_t m, int32_t* counts);

// Rows a per-token-lists kernel reads: the sizes of the unions of each 64-token group's lists,
// summed. `counts` as for batch_costs.
int64_t group_union_rows(const int32_t* idx, const int64_t* offsets, int64_t m, int32_t* counts);

// The Union path's rows: the ascending union of the n_idx listed rows idx[0..n_idx) (values in
// [0, n_rows)) written to `out` [n_rows]; returns its size. `counts` as for batch_costs.
int64_t union_rows(const int32_t* idx, int64_t n_idx, int64_t n_rows, int32_t* counts, int32_t* out);

}  // namespace pi::sparse
