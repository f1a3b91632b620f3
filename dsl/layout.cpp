#include "dsl/layout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace tessera {

using ir::OpKind;

namespace {

// The window `indexers` pick from `v`: a slice op, or v itself when every dim is whole.
Value index_value(const Value& v, const std::vector<Indexer>& indexers, std::string_view api, SourceLoc loc) {
  detail::check_live(v, loc);
  auto& ctx = detail::TraceContext::current(api, loc);
  const detail::Window w = detail::window_of(ctx, v.shape(), indexers, "value", detail::describe(v), loc);
  if (w.whole) return v;
  std::vector<Value> operands{v};
  operands.insert(operands.end(), w.starts.begin(), w.starts.end());
  return detail::emit(ctx, OpKind::Slice, operands, Type::tensor(v.dtype(), w.shape), w.attr, loc);
}

}  // namespace

Value Value::operator[](Indexer i) const { return index_value(*this, {i}, "value indexing", i.loc()); }
Value Value::operator()(Indexer i0, std::source_location loc) const {
  return index_value(*this, {i0}, "value indexing", loc);
}
Value Value::operator()(Indexer i0, Indexer i1, std::source_location loc) const {
  return index_value(*this, {i0, i1}, "value indexing", loc);
}
Value Value::operator()(Indexer i0, Indexer i1, Indexer i2, std::source_location loc) const {
  return index_value(*this, {i0, i1, i2}, "value indexing", loc);
}
Value Value::operator()(Indexer i0, Indexer i1, Indexer i2, Indexer i3, std::source_location loc) const {
  return index_value(*this, {i0, i1, i2, i3}, "value indexing", loc);
}

Value dynamic_slice(const Operand& x, const std::vector<Operand>& starts, const Shape& sizes) {
  const Value v = x.materialize();
  if (starts.size() != static_cast<size_t>(v.rank()) || sizes.size() != static_cast<size_t>(v.rank()))
    throw UserError("pl::dynamic_slice needs one start and one size per dim",
                    fmt::format("{} starts and {} sizes for {}", starts.size(), sizes.size(), detail::describe(v)),
                    fmt::format("pass {} starts and {} sizes", v.rank(), v.rank()), x.loc());
  std::vector<Indexer> indexers;
  for (size_t d = 0; d < starts.size(); ++d) {
    if (sizes[d] > v.shape()[d])
      throw UserError("pl::dynamic_slice: a size is larger than its dim",
                      fmt::format("size {} for dim {} of {}", sizes[d], d, detail::describe(v)),
                      fmt::format("use a size of at most {}", v.shape()[d]), x.loc());
    // Even a number start is clamped, not checked: dynamic_slice's starts are all treated as traced.
    const Operand start(starts[d].materialize(DType::i32), starts[d].loc());
    indexers.emplace_back(Slice{start, sizes[d]}, std::source_location::current());
  }
  return index_value(v, indexers, "pl::dynamic_slice", x.loc());
}

Value concatenate(const std::vector<Value>& values, int64_t axis, std::source_location loc) {
  if (values.empty())
    throw UserError("pl::concatenate needs at least one value", "an empty list", "pass the values to join, e.g. {a, b}", loc);
  DType dtype = values[0].dtype();
  for (const Value& v : values) {
    detail::check_live(v, loc);
    dtype = promote(dtype, v.dtype());
  }
  const Value& first = values[0];
  if (first.is_scalar())
    throw UserError("pl::concatenate cannot join scalars", detail::describe(first),
                    "join blocks, or make scalars blocks first with .reshape({1})", loc);
  const int64_t rank = first.rank();
  const int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    throw UserError("pl::concatenate: the axis is out of range", fmt::format("axis {} for {}", axis, detail::describe(first)),
                    fmt::format("pass an axis in [{}, {})", -rank, rank), loc);
  std::vector<Value> parts;
  Shape shape = first.shape();
  shape[a] = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const Value& v = values[i];
    Shape s = v.shape();
    if (v.rank() == rank) s[a] = 0;  // the axis may differ
    if (s != shape)
      throw UserError("pl::concatenate: the values differ in a dim other than the axis",
                      fmt::format("value {} is {} and value 0 is {}, joined along axis {}", i, detail::describe(v),
                                  detail::describe(first), a),
                      "make every dim but the axis equal (reshape or broadcast first)", loc);
    parts.push_back(detail::cast_to(v, dtype, loc));
  }
  for (const Value& v : parts) shape[a] += v.shape()[a];
  if (parts.size() == 1) return parts[0];
  auto& ctx = detail::TraceContext::current("pl::concatenate", loc);
  return detail::emit(ctx, OpKind::Concatenate, parts, Type::tensor(dtype, shape), int64_t{a}, loc);
}

namespace {

// v reshaped to `with_units` (its dims with size-1 dims inserted), broadcast to `broadcast` (those
// dims stretched) and reshaped to `result`: the steps repeat and tile share.
Value spread(const Value& v, const Shape& with_units, const Shape& broadcast, const Shape& result, std::string_view api,
             SourceLoc loc) {
  const Value wide = detail::broadcast_value(reshape(Operand(v, loc), with_units), broadcast, api, loc);
  return reshape(Operand(wide, loc), result);
}

}  // namespace

Value repeat(const Operand& x, int64_t repeats, std::optional<int64_t> axis) {
  Value v = x.materialize();
  const SourceLoc loc = x.loc();
  if (repeats < 0)
    throw UserError("pl::repeat needs a count >= 0", fmt::format("repeats = {}", repeats), "pass a non-negative count", loc);
  if (!axis) {
    v = reshape(Operand(v, loc), {v.type().num_elements()});
    axis = 0;
  }
  const int64_t rank = v.rank();
  const int64_t a = *axis < 0 ? *axis + rank : *axis;
  if (a < 0 || a >= rank)
    throw UserError("pl::repeat: the axis is out of range", fmt::format("axis {} for {}", *axis, detail::describe(v)),
                    fmt::format("pass an axis in [{}, {})", -rank, rank), loc);
  // (..., n, ...) -> (..., n, 1, ...) -> (..., n, repeats, ...) -> (..., n * repeats, ...).
  Shape with_units = v.shape(), broadcast = v.shape(), result = v.shape();
  with_units.insert(with_units.begin() + a + 1, 1);
  broadcast.insert(broadcast.begin() + a + 1, repeats);
  result[a] *= repeats;
  return spread(v, with_units, broadcast, result, "pl::repeat", loc);
}

Value tile(const Operand& x, const std::vector<int64_t>& reps) {
  Value v = x.materialize();
  const SourceLoc loc = x.loc();
  for (int64_t r : reps)
    if (r < 0)
      throw UserError("pl::tile needs counts >= 0", fmt::format("reps ({})", fmt::join(reps, ", ")), "pass non-negative counts",
                      loc);
  // Align the value and the reps from the right, as jnp.tile does.
  const size_t rank = std::max(reps.size(), static_cast<size_t>(v.rank()));
  const Shape shape = v.shape();
  Shape dims(rank - shape.size(), 1), counts(rank - reps.size(), 1);
  dims.insert(dims.end(), shape.begin(), shape.end());
  counts.insert(counts.end(), reps.begin(), reps.end());
  // (d0, d1) -> (1, d0, 1, d1) -> (r0, d0, r1, d1) -> (r0 * d0, r1 * d1).
  Shape with_units, broadcast, result;
  for (size_t d = 0; d < rank; ++d) {
    with_units.insert(with_units.end(), {1, dims[d]});
    broadcast.insert(broadcast.end(), {counts[d], dims[d]});
    result.push_back(counts[d] * dims[d]);
  }
  return spread(v, with_units, broadcast, result, "pl::tile", loc);
}

Value broadcast_in_dim(const Operand& x, const Shape& shape, const std::vector<int64_t>& broadcast_dimensions) {
  const Value v = x.materialize();
  const SourceLoc loc = x.loc();
  const auto given = [&] {
    return fmt::format("{} to shape {} with broadcast_dimensions ({})", detail::describe(v), shape_tuple_str(shape),
                       fmt::join(broadcast_dimensions, ", "));
  };
  if (broadcast_dimensions.size() != static_cast<size_t>(v.rank()))
    throw UserError("pl::broadcast_in_dim needs one broadcast dimension per operand dim", given(),
                    fmt::format("list {} result dims, one for each operand dim", v.rank()), loc);
  // The operand's dims at their result positions, 1 elsewhere: a reshape (the order is kept, since
  // the positions increase), then a numpy broadcast of equal rank.
  Shape placed(shape.size(), 1);
  for (size_t i = 0; i < broadcast_dimensions.size(); ++i) {
    const int64_t d = broadcast_dimensions[i];
    const bool increasing = i == 0 || d > broadcast_dimensions[i - 1];
    if (d < 0 || d >= static_cast<int64_t>(shape.size()) || !increasing)
      throw UserError("pl::broadcast_in_dim: broadcast_dimensions must be strictly increasing result dims", given(),
                      fmt::format("list distinct dims in [0, {}) in increasing order", shape.size()), loc);
    if (v.shape()[i] != 1 && v.shape()[i] != shape[d])
      throw UserError("pl::broadcast_in_dim: an operand dim is neither 1 nor its result dim", given(),
                      fmt::format("make operand dim {} ({}) equal to result dim {} ({}), or 1", i, v.shape()[i], d, shape[d]),
                      loc);
    placed[d] = v.shape()[i];
  }
  return detail::broadcast_value(reshape(Operand(v, loc), placed), shape, "pl::broadcast_in_dim", loc);
}

}  // namespace tessera
