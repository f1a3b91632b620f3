#include "dsl/layout.h"

#include <fmt/format.h>

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

}  // namespace tessera
