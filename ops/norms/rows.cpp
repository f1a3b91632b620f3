#include "ops/norms/rows.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>

#include "dsl/control.h"
#include "ops/library_call.h"

namespace tessera::norms::detail {

namespace {

std::string shape_text(const Shape& s) { return fmt::format("({})", fmt::join(s, ", ")); }

// Elements a block aims for when block_rows is 0: 32k (128 KiB of f32) keeps a block and its f32
// temporaries in L2 while making the per-step overhead small against the row's work.
constexpr int64_t kBlockElements = 32768;

void check_block(const char* api, const char* name, int64_t v, bool zero_is_auto, std::source_location loc) {
  if (v > 0 || (v == 0 && zero_is_auto)) return;
  throw UserError(fmt::format("{}: {} must be positive{}", api, name, zero_is_auto ? " (or 0: chosen from the width)" : ""),
                  fmt::format("{} = {}", name, v), fmt::format("pass e.g. {} = {}", name, zero_is_auto ? 8 : 2048), loc);
}

}  // namespace

std::string Rows::key(const char* kernel, float eps) const {
  return fmt::format("{} rows={} width={} blocks=({},{}) {} eps={}", kernel, rows, width, br, bc, dtype_name(dtype), eps);
}

Rows plan_rows(const char* api, const Array& x, const char* name, const Options& o, bool block_row, std::source_location loc) {
  if (x.rank() < 1 || x.shape().back() == 0)
    throw UserError(fmt::format("{}: '{}' must have a non-empty last axis (the one normalised)", api, name),
                    fmt::format("'{}' of shape {}", name, shape_text(x.shape())),
                    fmt::format("pass '{}' as [..., width] with width >= 1", name), loc);
  if (x.dtype() != DType::f32 && x.dtype() != DType::bf16)
    throw UserError(fmt::format("{}: '{}' must be f32 or bf16", api, name), fmt::format("dtype {}", dtype_name(x.dtype())),
                    fmt::format("convert it first: {}.astype(pl::f32)", name), loc);
  check_block(api, "block_rows", o.block_rows, /*zero_is_auto=*/true, loc);
  check_block(api, "block_cols", o.block_cols, /*zero_is_auto=*/false, loc);
  Rows r;
  r.width = x.shape().back();
  r.lead.assign(x.shape().begin(), x.shape().end() - 1);
  r.rows = x.size() / r.width;
  r.dtype = x.dtype();
  r.bc = block_row ? std::min(o.block_cols, r.width) : r.width;
  int64_t br = o.block_rows;
  if (br == 0) br = std::clamp<int64_t>(static_cast<int64_t>(std::bit_floor(static_cast<uint64_t>(std::max<int64_t>(1, kBlockElements / r.bc)))), 8, 512);
  // A block no taller than the array (an empty array keeps one row: a grid of zero steps).
  r.br = std::max<int64_t>(1, std::min(br, r.rows));
  return r;
}

Array as_matrix(const Rows& r, const Array& x) { return x.reshape({r.rows, r.width}); }

Array as_row_vector(const char* api, const Rows& r, const Array& stat, const char* name, DType dtype, std::source_location loc) {
  if (stat.shape() != r.lead || stat.dtype() != dtype)
    throw UserError(fmt::format("{}: '{}' must be {} of shape {} (one per row)", api, name, dtype_name(dtype), shape_text(r.lead)),
                    fmt::format("dtype {}, shape {}", dtype_name(stat.dtype()), shape_text(stat.shape())),
                    fmt::format("pass the '{}' the forward returned for the same input", name), loc);
  return stat.reshape({r.rows});
}

void check_parameter(const char* api, const Rows& r, const Array& p, const char* name, std::source_location loc) {
  if (p.shape() != Shape{r.width} || (p.dtype() != DType::f32 && p.dtype() != DType::bf16))
    throw UserError(fmt::format("{}: '{}' must be f32 or bf16 of shape ({}), the normalised axis", api, name, r.width),
                    fmt::format("'{}' of dtype {}, shape {}", name, dtype_name(p.dtype()), shape_text(p.shape())),
                    fmt::format("pass a '{}' with one element per column of x ({})", name, r.width), loc);
}

void check_like(const char* api, const Array& x, const char* x_name, const Array& a, const char* name, std::source_location loc) {
  if (a.shape() != x.shape() || a.dtype() != x.dtype())
    throw UserError(fmt::format("{}: '{}' must have the shape and dtype of '{}'", api, name, x_name),
                    fmt::format("'{}' {} {}, '{}' {} {}", x_name, dtype_name(x.dtype()), shape_text(x.shape()), name,
                                dtype_name(a.dtype()), shape_text(a.shape())),
                    fmt::format("pass a '{}' of dtype {} and shape {}", name, dtype_name(x.dtype()), shape_text(x.shape())),
                    loc);
}

float checked_eps(const char* api, double eps, std::source_location loc) {
  if (!(eps > 0) || !std::isfinite(eps))
    throw UserError(fmt::format("{}: eps must be positive and finite", api), fmt::format("eps = {}", eps),
                    "pass e.g. eps = 1e-6", loc);
  return static_cast<float>(eps);
}

Value rows_in_bounds(const Rows& r, const Value& i, int64_t cols) {
  return iota({r.br, cols}, 0) + i * static_cast<int32_t>(r.br) < static_cast<int32_t>(r.rows);
}

Value column_index(const Rows& r, const Value& j) { return iota({r.br, r.bc}, 1) + j * static_cast<int32_t>(r.bc); }

Value masked_columns(const Rows& r, const Value& x, const Value& j, float pad) {
  Value xf = x.astype(DType::f32);
  if (r.width % r.bc == 0) return xf;  // no partial block: nothing to mask
  return where(column_index(r, j) < static_cast<int32_t>(r.width), xf, pad);
}

Array sum_partials(const Array& partials, DType dtype, const Options& o, const std::string& name, std::source_location loc) {
  const int64_t n = partials.shape()[0], width = partials.shape()[1];
  // Column blocks of up to 512 and row chunks of up to 256 (512 KiB of f32 a block).
  const int64_t bc = std::min<int64_t>(width, 512), bn = std::min<int64_t>(n, 256);
  Rows r{.rows = n, .width = width, .br = bn, .bc = bc};
  const int64_t chunks = r.row_blocks();
  auto kernel = [r, chunks](Ref part, Ref out, Ref acc) {
    const Value k = program_id(1);
    when(k == 0, [&] { acc() = 0.0f; });
    // The rows of a partial last chunk past the end are not partial sums: masked out.
    Value p = r.rows % r.br == 0 ? part() : where(rows_in_bounds(r, k, r.bc), part(), 0.0f);
    acc() += p.sum(0, /*keepdims=*/true);
    when(k == static_cast<int32_t>(chunks - 1), [&] { out() = acc().reshape({r.bc}).astype(out.dtype()); });
  };
  const std::string key = fmt::format("{} n={} width={} {}", name, n, width, dtype_name(dtype));
  PallasCall<std::vector<Array>> call = cached_call(key, o, loc, [&] {
    return pallas_call(kernel,
                       GridSpec{.grid = {(width + bc - 1) / bc, chunks},
                                .in_specs = {BlockSpec({bn, bc}, [](Value j, Value k) { return idx(k, j); })},
                                .out_specs = {BlockSpec({bc}, [](Value j, Value) { return idx(j); })},
                                .scratch_shapes = {VMEM({1, bc}, DType::f32)}},
                       std::vector<ShapeDtype>{ShapeDtype({width}, dtype)},
                       call_options(o, {parallel, arbitrary}, name, CostEstimate{.flops = n * width, .bytes_accessed = n * width * 4}),
                       loc);
  });
  return call({partials}, loc).at(0);
}

CallOptions call_options(const Options& o, std::vector<DimensionSemantics> dims, const std::string& name,
                         const CostEstimate& cost) {
  return ops::library_call_options(std::move(dims), o.interpret, o.check_against_interpreter, name, cost);
}

PallasCall<std::vector<Array>> cached_call(const std::string& key, const Options& o, std::source_location loc,
                                           const std::function<PallasCall<std::vector<Array>>()>& make) {
  return ops::memoised_call(key, o.interpret, o.check_against_interpreter, loc, make);
}

BlockSpec row_stat_spec(const Rows& r) {
  return BlockSpec({r.br}, [](Value i) { return idx(i); });
}
BlockSpec row_spec(const Rows& r) {
  return BlockSpec({r.br, r.width}, [](Value i) { return idx(i, 0); });
}
BlockSpec parameter_spec(const Rows& r) {
  return BlockSpec({r.width}, [](Value) { return idx(0); });
}
BlockSpec partial_spec(const Rows& r) {
  return BlockSpec({squeezed, r.width}, [](Value i) { return idx(i, 0); });
}

}  // namespace tessera::norms::detail
