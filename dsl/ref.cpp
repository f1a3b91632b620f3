#include "dsl/ref.h"

#include <limits>

#include <fmt/format.h>

namespace tessera {

using ir::OpKind;

Slice ds(const Operand& start, int64_t size, int64_t stride) { return Slice{start, size, stride}; }

Type Ref::type() const {
  if (!ctx_)
    throw UserError("an empty pl::Ref is used", "a default-constructed pl::Ref",
                    "use the refs pallas_call passes to the kernel", SourceLoc{});
  return ctx_->type(id_);
}
Shape Ref::shape() const { return type().shape; }
DType Ref::dtype() const { return type().dtype; }
MemorySpace Ref::memory_space() const { return type().space; }

std::string Ref::describe() const {
  const std::string& name = ctx_->builder().function().values[id_].name;
  if (is_semaphore(dtype())) {
    const char* kind = dtype() == DType::dma_sem ? "DMA semaphore" : "regular semaphore";
    return fmt::format("{}{}{}", shape().empty() ? kind : fmt::format("array of {}s", kind),
                       name.empty() ? "" : fmt::format(" `{}`", name),
                       shape().empty() ? "" : fmt::format(" of shape {}", shape_tuple_str(shape())));
  }
  std::string space(memory_space_name(memory_space()));
  for (char& c : space) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return fmt::format("ref{} of {} {} in {}", name.empty() ? "" : fmt::format(" `{}`", name),
                     shape().empty() ? "scalar" : shape_tuple_str(shape()), dtype_name(dtype()), space);
}

namespace detail {

TraceContext& trace_of(const Ref& ref, std::string_view api, SourceLoc loc) {
  auto& ctx = TraceContext::current(api, loc);
  if (ref.context() != &ctx || ref.serial() != ctx.serial())
    throw UserError(fmt::format("{}: a ref from another kernel's trace (or an empty pl::Ref) is used", api),
                    "a stale pl::Ref", "use the refs pallas_call passes to the kernel being traced", loc);
  return ctx;
}

}  // namespace detail

namespace detail {

Window window_of(TraceContext& ctx, const Shape& s, const std::vector<Indexer>& indexers, std::string_view noun,
                 const std::string& what, SourceLoc loc) {
  if (indexers.size() > s.size())
    throw UserError(fmt::format("too many indices for the {}", noun), fmt::format("{} indices for {}", indexers.size(), what),
                    fmt::format("index at most {} dims", s.size()), loc);
  Window w;
  for (size_t d = 0; d < s.size(); ++d) {
    const Indexer* ix = d < indexers.size() ? &indexers[d] : nullptr;
    ir::ViewDim dim;
    Value start;
    const SourceLoc iloc = ix && ix->loc().known() ? ix->loc() : loc;
    if (!ix || ix->kind() == Indexer::Kind::All) {
      dim = {false, s[d], 1};
      start = constant(ctx, ir::Literal::of_int(0), Type::scalar(DType::i32), iloc);
    } else {
      const Operand& st = ix->start();
      if (st.is_literal() && st.literal().is_float)
        throw UserError(fmt::format("a {} index must be an integer", noun), fmt::format("{} in dim {} of {}", st.literal().f, d, what),
                        "index with integers or integer pl::Values", iloc);
      // Indices are 64-bit where they need to be: a literal beyond i32 becomes an i64 constant and an
      // i64 value stays i64 (both backends widen view starts to 64 bits), so an index of 2^32 or
      // more is bounds-checked as itself, never truncated into range.
      const bool wide = st.is_literal() ? st.literal().i != static_cast<int32_t>(st.literal().i) : false;
      start = st.materialize(wide ? DType::i64 : DType::i32);
      if (!is_int(start.dtype()) || !start.is_scalar())
        throw UserError(fmt::format("a {} index must be an integer scalar", noun),
                        fmt::format("{} in dim {} of {}", describe(start), d, what),
                        "index with an i32 or i64 scalar (cast with .astype(pl::i32))", iloc);
      // u32 and u64 widen by their value (widen_index, shared with index maps); 2^63 and above fail
      // the bounds check, reported as 9223372036854775807.
      start = widen_index(start, iloc);
      if (start.dtype() != DType::i64 && start.dtype() != DType::index) start = cast_to(start, DType::i32, iloc);
      if (ix->kind() == Indexer::Kind::Index) {
        dim = {true, 1, 1};
      } else {
        if (ix->size() < 0 || ix->stride() < 1)
          throw UserError("pl::ds needs a size >= 0 and a stride >= 1",
                          fmt::format("ds(start, {}, {}) in dim {} of {}", ix->size(), ix->stride(), d, what),
                          "use a non-negative size and a positive stride", iloc);
        dim = {false, ix->size(), ix->stride()};
      }
      // Static starts are checked now (Pallas rejects static out-of-bound slices while tracing).
      if (st.is_literal()) {
        const int64_t first = st.literal().i;
        const int64_t last = first + (dim.squeeze ? 0 : (dim.size - 1) * dim.stride);
        if (first < 0 || (dim.size > 0 && last >= s[d]))
          throw UserError("a static index or slice is out of bounds",
                          fmt::format("{} reaches element {} of dim {}, which has {} elements ({})",
                                      dim.squeeze ? fmt::format("index {}", first)
                                                  : fmt::format("ds({}, {}{})", first, dim.size,
                                                                dim.stride == 1 ? "" : fmt::format(", {}", dim.stride)),
                                      first < 0 ? first : last, d, s[d], what),
                          fmt::format("keep the window inside [0, {})", s[d]), iloc);
      }
      w.whole = false;
    }
    w.attr.dims.push_back(dim);
    w.starts.push_back(start);
    if (!dim.squeeze) w.shape.push_back(dim.size);
  }
  return w;
}

}  // namespace detail

Ref Ref::view(const std::vector<Indexer>& indexers, SourceLoc loc) const {
  auto& ctx = detail::trace_of(*this, "ref indexing", loc);
  const detail::Window w = detail::window_of(ctx, shape(), indexers, "ref", describe(), loc);
  if (w.whole) return *this;
  std::vector<ir::ValueId> operands{id_};
  for (const Value& v : w.starts) operands.push_back(v.id());
  for (ir::ValueId v : operands) ctx.check_visible(v, "ref indexing", loc);
  ir::ValueId out = ctx.emit_value(OpKind::View, operands, Type::ref(dtype(), w.shape, memory_space()), w.attr, loc);
  return Ref(ctx, out);
}

namespace detail {

void check_direct_access(const Ref& ref, bool is_store, SourceLoc loc) {
  const char* verb = is_store ? "store to" : "load from";
  if (ref.memory_space() == MemorySpace::SEMAPHORE)
    throw UserError(fmt::format("cannot {} a semaphore", verb), ref.describe(),
                    is_store ? "change a semaphore with pl::semaphore_signal / pl::semaphore_wait"
                             : "read its value with pl::semaphore_read(sem)",
                    loc);
  if (is_dma_only(ref.memory_space()))
    throw UserError(fmt::format("cannot {} a ref in memory space {}", verb,
                                ref.memory_space() == MemorySpace::ANY ? "ANY" : "HBM"),
                    ref.describe(),
                    "ANY/HBM refs are reachable only by DMA: copy the window into VMEM with an async copy, or give "
                    "the operand a VMEM BlockSpec so the pipeline brings blocks in",
                    loc);
  if (ref.memory_space() == MemorySpace::SMEM && !ref.shape().empty())
    throw UserError(fmt::format("cannot {} a block in SMEM: SMEM holds scalars only", verb), ref.describe(),
                    "index down to one element, e.g. ids[i] or table(i, j)", loc);
}

void check_writable(const Ref& ref, std::string_view api, SourceLoc loc) {
  auto& ctx = trace_of(ref, api, loc);
  const ir::Function& fn = ctx.builder().function();
  ir::ValueId root = ref.id();
  for (const ir::Op* d = fn.def(root); d && d->kind == OpKind::View; d = fn.def(root)) root = d->operands[0];
  if (ctx.read_only.count(root))
    throw UserError(fmt::format("{} would write into `{}`, an input of the call", api, fn.values[root].name), ref.describe(),
                    "inputs are read-only: alias the input to an output (input_output_aliases) and write the output, "
                    "or write into an output or scratch",
                    loc);
}

void check_semaphore(const Ref& ref, std::optional<DType> kind, std::string_view api, SourceLoc loc) {
  trace_of(ref, api, loc);
  if (ref.memory_space() != MemorySpace::SEMAPHORE)
    throw UserError(fmt::format("{} needs a semaphore", api), ref.describe(),
                    "pass a semaphore: scratch or run_scoped of pl::SemaphoreType::DMA / ::REGULAR", loc);
  if (!ref.shape().empty())
    throw UserError(fmt::format("{} needs one semaphore, not an array of them", api), ref.describe(),
                    "pick one with sems.at(i)", loc);
  if (kind == DType::dma_sem && ref.dtype() != DType::dma_sem)
    throw UserError(fmt::format("{} needs a DMA semaphore, but got a regular semaphore", api), ref.describe(),
                    "copies count bytes on a pl::SemaphoreType::DMA semaphore; wait on a regular semaphore with "
                    "pl::semaphore_wait",
                    loc);
  if (kind == DType::sem && ref.dtype() != DType::sem)
    throw UserError(fmt::format("{} needs a regular semaphore, but got a DMA semaphore", api), ref.describe(),
                    "a DMA semaphore counts the bytes of copies: wait for a copy with its descriptor's .wait(); use a "
                    "pl::SemaphoreType::REGULAR semaphore for signals",
                    loc);
}

Value value_for_store(const Ref& ref, const Operand& v, SourceLoc loc) {
  Value value = v.is_literal() ? v.materialize(ref.dtype()) : v.value();
  if (v.is_literal() && v.literal().is_float && !is_float(ref.dtype()))
    throw UserError("storing a float literal into an integer ref",
                    fmt::format("{} into {}", v.literal().f, ref.describe()), "store an integer value", loc);
  if (value.dtype() != ref.dtype())
    throw UserError("the stored value's dtype differs from the ref's",
                    fmt::format("{} into {}", detail::describe(value), ref.describe()),
                    fmt::format("convert it first: value.astype(pl::{})", dtype_name(ref.dtype())), loc);
  if (value.shape() != ref.shape()) {
    if (!value.is_scalar())
      throw UserError("the stored value's shape differs from the ref window's",
                      fmt::format("{} into {}", detail::describe(value), ref.describe()),
                      "store a value of exactly the window's shape (or a scalar, which is broadcast); "
                      "reshape or index the ref with pl::ds to match",
                      loc);
    value = detail::broadcast_value(value, ref.shape(), "store", loc);
  }
  return value;
}

}  // namespace detail

static bool directly_accessible(const Ref& r) {
  return !is_dma_only(r.memory_space()) && r.memory_space() != MemorySpace::SEMAPHORE &&
         !(r.memory_space() == MemorySpace::SMEM && !r.shape().empty());
}

RefSlot Ref::slot(const std::vector<Indexer>& indexers, SourceLoc loc) const {
  Ref v = view(indexers, loc);
  if (!directly_accessible(v)) return RefSlot(v, Value(), loc);
  auto& ctx = detail::TraceContext::current("ref load", loc);
  // Loading eagerly gives Pallas's meaning to `auto v = x();`; an unused load is removed later.
  Value loaded = Value::wrap(ctx, ctx.emit_value(OpKind::Load, {v.id()}, v.type().value_type(), {}, loc));
  return RefSlot(v, loaded);
}

RefSlot Ref::operator()(std::source_location loc) const { return slot({}, loc); }
RefSlot Ref::operator()(Indexer i0, std::source_location loc) const { return slot({i0}, loc); }
RefSlot Ref::operator()(Indexer i0, Indexer i1, std::source_location loc) const { return slot({i0, i1}, loc); }
RefSlot Ref::operator()(Indexer i0, Indexer i1, Indexer i2, std::source_location loc) const {
  return slot({i0, i1, i2}, loc);
}
RefSlot Ref::operator()(Indexer i0, Indexer i1, Indexer i2, Indexer i3, std::source_location loc) const {
  return slot({i0, i1, i2, i3}, loc);
}
RefSlot Ref::operator()(Indexer i0, Indexer i1, Indexer i2, Indexer i3, Indexer i4, std::source_location loc) const {
  return slot({i0, i1, i2, i3, i4}, loc);
}
RefSlot Ref::operator[](Indexer i) const { return slot({i}, i.loc()); }

Ref Ref::at(Indexer i0, std::source_location loc) const { return view({i0}, loc); }
Ref Ref::at(Indexer i0, Indexer i1, std::source_location loc) const { return view({i0, i1}, loc); }
Ref Ref::at(Indexer i0, Indexer i1, Indexer i2, std::source_location loc) const { return view({i0, i1, i2}, loc); }
Ref Ref::at(Indexer i0, Indexer i1, Indexer i2, Indexer i3, std::source_location loc) const {
  return view({i0, i1, i2, i3}, loc);
}
Ref Ref::at(Indexer i0, Indexer i1, Indexer i2, Indexer i3, Indexer i4, std::source_location loc) const {
  return view({i0, i1, i2, i3, i4}, loc);
}

static void emit_store(const Ref& ref, const Value& value, const Value* mask, SourceLoc loc) {
  auto& ctx = detail::TraceContext::current("ref store", loc);
  std::vector<ir::ValueId> operands{ref.id(), value.id()};
  if (mask) operands.push_back(mask->id());
  ctx.emit(OpKind::Store, operands, {}, {}, loc);
}

Operand::Operand(const RefSlot& s, std::source_location loc) : loc_(loc) {
  if (!s.loaded()) detail::check_direct_access(s.ref(), false, loc_);
  value_ = s;
  detail::check_live(value_, loc_);
}

Value RefSlot::astype(DType dtype, std::source_location loc) const { return Operand(*this, loc).value().astype(dtype, loc); }

RefSlot& RefSlot::operator=(const Operand& v) && {
  const SourceLoc loc = v.loc();
  detail::check_direct_access(view_, true, loc);
  emit_store(view_, detail::value_for_store(view_, v, loc), nullptr, loc);
  return *this;
}
RefSlot& RefSlot::operator=(const RefSlot& v) && {
  if (!v.loaded()) detail::check_direct_access(v.ref(), false, v.loc());  // o() = x(): blame x()'s line
  return std::move(*this) = Operand(static_cast<const Value&>(v), detail::loc_of(v));
}

// x() op= v is x() = x() op v, attributed to the line of v.
template <class F>
static RefSlot& update(RefSlot&& slot, const Operand& v, F op) {
  if (!slot.loaded()) detail::check_direct_access(slot.ref(), false, v.loc());
  Operand current(static_cast<const Value&>(slot), v.loc());
  return std::move(slot) = Operand(op(current, v), v.loc());
}
RefSlot& RefSlot::operator+=(const Operand& v) && { return update(std::move(*this), v, [](auto& a, auto& b) { return a + b; }); }
RefSlot& RefSlot::operator-=(const Operand& v) && { return update(std::move(*this), v, [](auto& a, auto& b) { return a - b; }); }
RefSlot& RefSlot::operator*=(const Operand& v) && { return update(std::move(*this), v, [](auto& a, auto& b) { return a * b; }); }
RefSlot& RefSlot::operator/=(const Operand& v) && { return update(std::move(*this), v, [](auto& a, auto& b) { return a / b; }); }

static Value checked_mask(const Ref& ref, const Operand& mask, SourceLoc loc) {
  Value m = mask.materialize();
  if (!is_bool(m.dtype()))
    throw UserError("a mask must be bool", detail::describe(m), "build masks with comparisons, e.g. pl::iota(...) < n", loc);
  return detail::broadcast_value(m, ref.shape(), "mask", loc);
}

Value load(const Ref& ref, const Operand& mask, std::source_location loc) {
  detail::check_direct_access(ref, false, loc);
  auto& ctx = detail::TraceContext::current("pl::load", loc);
  Value m = checked_mask(ref, mask, loc);
  ir::ValueId out = ctx.emit_value(OpKind::Load, {ref.id(), m.id()}, Type::tensor(ref.dtype(), ref.shape()), {}, loc);
  return Value::wrap(ctx, out);
}

Value load(const Ref& ref, const Operand& mask, const Operand& other, std::source_location loc) {
  detail::check_direct_access(ref, false, loc);
  auto& ctx = detail::TraceContext::current("pl::load", loc);
  Value m = checked_mask(ref, mask, loc);
  Value o = detail::value_for_store(ref, other, loc);
  ir::ValueId out =
      ctx.emit_value(OpKind::Load, {ref.id(), m.id(), o.id()}, Type::tensor(ref.dtype(), ref.shape()), {}, loc);
  return Value::wrap(ctx, out);
}

void store(const Ref& ref, const Operand& value, std::source_location loc) {
  detail::check_direct_access(ref, true, loc);
  emit_store(ref, detail::value_for_store(ref, value, loc), nullptr, loc);
}

void store(const Ref& ref, const Operand& value, const Operand& mask, std::source_location loc) {
  detail::check_direct_access(ref, true, loc);
  Value m = checked_mask(ref, mask, loc);
  emit_store(ref, detail::value_for_store(ref, value, loc), &m, loc);
}

Value zeros_like(const Ref& x, std::source_location loc) { return zeros(x.shape(), x.dtype(), loc); }

}  // namespace tessera
