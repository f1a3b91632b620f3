// What every row-wise kernel of ops/norms shares: the checks of its operands (the api's name leads
// every message), the row blocking, the masks of partial edge blocks, the column sum that finishes
// dgamma / dbeta, and the memoised pallas_calls.
//
// Library layer (ops/), over the front end.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dsl/pallas_call.h"
#include "dsl/ref.h"
#include "dsl/value.h"
#include "ops/norms/norms.h"

namespace tessera::norms::detail {

// x as [rows, width] with its row blocks (br) and, for the ops that block the row, column blocks (bc).
struct Rows {
  int64_t rows = 0, width = 0;
  int64_t br = 0, bc = 0;
  Shape lead;  // x's leading dims: the shape of a per-row statistic
  DType dtype = DType::f32;

  int64_t row_blocks() const { return (rows + br - 1) / br; }
  int64_t col_blocks() const { return (width + bc - 1) / bc; }
  // A key naming the specialisation (memo key, call name).
  std::string key(const char* kernel, float eps = 0) const;
};

// Checks x (f32 or bf16, rank >= 1, a non-empty last axis) and the options, and blocks its rows.
// `block_row` blocks the row too (softmax, cross-entropy); otherwise bc is the whole width.
Rows plan_rows(const char* api, const Array& x, const char* name, const Options& o, bool block_row, std::source_location loc);
// x as the [rows, width] matrix the kernels see (a view).
Array as_matrix(const Rows& r, const Array& x);
// A per-row statistic of x's leading dims (f32), checked against them, as the [rows] vector kernels see.
Array as_row_vector(const char* api, const Rows& r, const Array& stat, const char* name, DType dtype, std::source_location loc);
// A [width] parameter (gamma, beta): f32 or bf16.
void check_parameter(const char* api, const Rows& r, const Array& p, const char* name, std::source_location loc);
// An operand that must match x's shape and dtype (dy).
void check_like(const char* api, const Array& x, const char* x_name, const Array& a, const char* name, std::source_location loc);
// The norms' epsilon, checked (> 0, finite).
float checked_eps(const char* api, double eps, std::source_location loc);

// (br, cols) mask of the rows of row block i that lie in the array: the rows of a partial edge block
// past the end hold whatever the memory held (NaN in the interpreter), so a sum over rows masks them.
Value rows_in_bounds(const Rows& r, const Value& i, int64_t cols);
// (br, bc) column index of each element of column block j.
Value column_index(const Rows& r, const Value& j);
// x's column block j in f32, the padding of a partial last block set to `pad`.
Value masked_columns(const Rows& r, const Value& x, const Value& j, float pad);

// The sum over rows of partials [n, width] f32, as [width] in `dtype`: a grid over column blocks
// (parallel) and row chunks (arbitrary, accumulating in f32 scratch). The per-block partials keep
// the main kernel's row blocks parallel; this kernel's parallel dim is the columns.
Array sum_partials(const Array& partials, DType dtype, const Options& o, const std::string& name, std::source_location loc);

// pallas_call options: the dimension semantics, the backend, the name and cost.
CallOptions call_options(const Options& o, std::vector<DimensionSemantics> dims, const std::string& name,
                         const CostEstimate& cost);

// The memoised call of a specialisation (compiled calls only; interpreted calls carry their own
// parameters and are made afresh), so a training loop traces each shape once.
PallasCall<std::vector<Array>> cached_call(const std::string& key, const Options& o, std::source_location loc,
                                           const std::function<PallasCall<std::vector<Array>>()>& make);

// The block of a [rows] statistic at row block i, and of a [rows, width] matrix at (i, 0).
BlockSpec row_stat_spec(const Rows& r);
BlockSpec row_spec(const Rows& r);
// The whole [width] parameter, the same block at every step (fetched once per core).
BlockSpec parameter_spec(const Rows& r);
// Row block i's partial sums: row i of a [row_blocks, width] array.
BlockSpec partial_spec(const Rows& r);

}  // namespace tessera::norms::detail
