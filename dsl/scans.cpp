#include "dsl/scans.h"

#include <fmt/format.h>

namespace tessera {

namespace {

// The axis as a dim of `v` (negative counts from the end); `v` must be a numeric block with that dim.
int64_t checked_axis(const Value& v, int axis, const char* api, SourceLoc loc) {
  if (v.is_scalar() || !(is_int(v.dtype()) || is_float(v.dtype())))
    throw UserError(fmt::format("{} needs a numeric block", api), detail::describe(v),
                    "pass an integer or float block (cast bools with .astype(pl::i32))", loc);
  const int64_t rank = v.rank();
  if (axis < -rank || axis >= rank)
    throw UserError(fmt::format("{}: axis {} is out of range", api, axis), detail::describe(v),
                    fmt::format("use an axis in [-{}, {})", rank, rank), loc);
  const int64_t a = axis < 0 ? axis + rank : axis;
  if (v.shape()[static_cast<size_t>(a)] == 0)
    throw UserError(fmt::format("{} of an empty axis", api), detail::describe(v),
                    "reduce over an axis with at least one element (jnp raises here too)", loc);
  return a;
}

Value arg_extreme(const Value& v, int axis, bool largest, const char* api, SourceLoc loc) {
  const int64_t a = checked_axis(v, axis, api, loc);
  const int ax = static_cast<int>(a);
  // The reductions propagate NaN, so where a NaN is present the extreme is NaN, which equals
  // nothing: the NaNs themselves are the hits then (v != v holds only for NaN).
  Value extreme = largest ? v.max(ax, true) : v.min(ax, true);
  Value hit = (v == extreme) | (v != v);
  const int64_t n = v.shape()[static_cast<size_t>(a)];
  // The first hit: the smallest index among the hits (the others stand at n).
  return where(hit, iota(v.shape(), ax, DType::i32), static_cast<int32_t>(n)).min(ax);
}

}  // namespace

Value argmax(const Value& v, int axis, std::source_location loc) { return arg_extreme(v, axis, true, "pl::argmax", loc); }
Value argmin(const Value& v, int axis, std::source_location loc) { return arg_extreme(v, axis, false, "pl::argmin", loc); }

Value cumsum(const Value& v, int axis, std::source_location loc) {
  const size_t a = static_cast<size_t>(checked_axis(v, axis, "pl::cumsum", loc));
  const Shape s = v.shape();
  // pairs[..., j, i, ...] = v[..., i, ...]; summing it over i <= j gives output element j.
  Shape with_j = s, pairs = s;
  with_j.insert(with_j.begin() + static_cast<std::ptrdiff_t>(a), 1);
  pairs.insert(pairs.begin() + static_cast<std::ptrdiff_t>(a), s[a]);
  Value spread = broadcast_to(v.reshape(with_j), pairs);
  const int j = static_cast<int>(a), i = j + 1;
  Value upto = iota(pairs, i) <= iota(pairs, j);
  // Masked-off elements add zero, which changes no running sum: the sum starts from +0 (the
  // reduction's rule), so it is never the -0 that adding +0 would turn positive.
  return where(upto, spread, zeros({}, v.dtype())).sum(i);
}

}  // namespace tessera
