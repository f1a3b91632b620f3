// Softmax over the last axis, forward and backward. A row that fits one column block is one kernel
// (max, exp, sum and the division on the block, x read once); a wider row takes two: the online
// logsumexp over its column blocks, then exp(x - lse) block by block (ops/norms/logsumexp.h). The
// backward likewise: dx = y * (dy - sum(dy * y)), the row's sum within the block or, for wide rows,
// accumulated over column blocks first.
#include <fmt/format.h>

#include "dsl/control.h"
#include "ops/norms/logsumexp.h"

namespace tessera::norms {

namespace {

using detail::Rows;

bool one_block(const Rows& r) { return r.bc == r.width; }

CostEstimate cost(const Rows& r, int64_t passes) {
  const int64_t elems = r.rows * r.width;
  return CostEstimate{.flops = 4 * elems, .transcendentals = elems, .bytes_accessed = passes * elems * dtype_size(r.dtype)};
}

// A kernel over whole rows in one block: grid (row blocks), `body` on the refs.
template <class K>
Array whole_rows(const Rows& r, const char* name, K kernel, const std::vector<Array>& args, int64_t passes,
                 const Options& o, std::source_location loc) {
  PallasCall<std::vector<Array>> call = detail::cached_call(r.key(name), o, loc, [&] {
    std::vector<BlockSpec> in_specs(args.size(), detail::row_spec(r));
    return pallas_call(kernel, GridSpec{.grid = {r.row_blocks()}, .in_specs = in_specs, .out_specs = {detail::row_spec(r)}},
                       std::vector<ShapeDtype>{ShapeDtype({r.rows, r.width}, r.dtype)},
                       detail::call_options(o, {parallel}, name, cost(r, passes)), loc);
  });
  return call(args, loc).at(0);
}

}  // namespace

Array softmax(const Array& x, const Options& o, Loc loc) {
  const Rows r = detail::plan_rows("softmax", x, "x", o, /*block_row=*/true, loc);
  const Array xm = detail::as_matrix(r, x);
  if (one_block(r)) {
    auto kernel = [](Ref xr, Ref y) {
      Value xf = xr().astype(DType::f32);
      Value e = exp(xf - xf.max(1, /*keepdims=*/true));
      y() = (e / e.sum(1, /*keepdims=*/true)).astype(y.dtype());
    };
    return whole_rows(r, "softmax_fwd", kernel, {xm}, 2, o, loc).reshape(x.shape());
  }
  const Array lse = detail::row_logsumexp(r, xm, nullptr, o, loc).at(0);
  return detail::probabilities(r, xm, lse, nullptr, nullptr, o, loc).reshape(x.shape());
}

Array softmax_bwd(const Array& y, const Array& dy, const Options& o, Loc loc) {
  const Rows r = detail::plan_rows("softmax_bwd", y, "y", o, /*block_row=*/true, loc);
  detail::check_like("softmax_bwd", y, "y", dy, "dy", loc);
  const Array ym = detail::as_matrix(r, y), dym = detail::as_matrix(r, dy);
  if (one_block(r)) {
    auto kernel = [](Ref yr, Ref dyr, Ref dx) {
      Value yf = yr().astype(DType::f32), dyf = dyr().astype(DType::f32);
      dx() = (yf * (dyf - (dyf * yf).sum(1, /*keepdims=*/true))).astype(dx.dtype());
    };
    return whole_rows(r, "softmax_bwd", kernel, {ym, dym}, 3, o, loc).reshape(y.shape());
  }
  // s = sum(dy * y) of each row over its column blocks, accumulated in the (br) output block, which
  // stays while the arbitrary column axis runs (docs/design.md §4.4).
  PallasCall<std::vector<Array>> row_dot = detail::cached_call(r.key("softmax_bwd_rowdot"), o, loc, [&] {
    auto kernel = [r](Ref yr, Ref dyr, Ref s) {
      const Value j = program_id(1);
      when(j == 0, [&] { s() = 0.0f; });
      Value prod = detail::masked_columns(r, yr().astype(DType::f32) * dyr().astype(DType::f32), j, 0.0f);
      s() += prod.sum(1);
    };
    return pallas_call(kernel,
                       GridSpec{.grid = detail::column_grid(r),
                                .in_specs = {detail::column_block_spec(r), detail::column_block_spec(r)},
                                .out_specs = {detail::column_stat_spec(r)}},
                       std::vector<ShapeDtype>{ShapeDtype({r.rows}, DType::f32)},
                       detail::call_options(o, {parallel, arbitrary}, "softmax_bwd_rowdot", cost(r, 2)), loc);
  });
  const Array s = row_dot({ym, dym}, loc).at(0);
  PallasCall<std::vector<Array>> finish = detail::cached_call(r.key("softmax_bwd"), o, loc, [&] {
    auto kernel = [r](Ref yr, Ref dyr, Ref sr, Ref dx) {
      Value yf = yr().astype(DType::f32);
      dx() = (yf * (dyr().astype(DType::f32) - sr().reshape({r.br, 1}))).astype(dx.dtype());
    };
    return pallas_call(kernel,
                       GridSpec{.grid = detail::column_grid(r),
                                .in_specs = {detail::column_block_spec(r), detail::column_block_spec(r),
                                             detail::column_stat_spec(r)},
                                .out_specs = {detail::column_block_spec(r)}},
                       std::vector<ShapeDtype>{ShapeDtype({r.rows, r.width}, r.dtype)},
                       detail::call_options(o, {parallel, parallel}, "softmax_bwd", cost(r, 3)), loc);
  });
  return finish({ym, dym, s}, loc).at(0).reshape(y.shape());
}

}  // namespace tessera::norms
