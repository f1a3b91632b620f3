// pl::Ref: a kernel's handle to memory — an input or output block, scratch, a scalar-prefetch table
// in SMEM, or a whole array in ANY/HBM. Reading and writing follow Pallas:
//
//   x()                    x_ref[...]            (a RefSlot: the loaded value, and a target for =, +=)
//   x(i, pl::ds(s, 8))     x_ref[i, pl.ds(s, 8)] (integer indices drop the dim; fewer indices than
//                                                 dims leave the rest whole)
//   ids[i]                 ids_ref[i]            (one index)
//   x.at(pl::ds(s, 8), pl::all)   x_ref.at[...]  (a view: a Ref of the window, nothing loaded)
//   pl::load(x, mask, other), pl::store(x, v, mask)   masked access
//
// Stores must match the window's shape and dtype exactly (a scalar broadcasts; a C++ literal takes
// the ref's dtype). ANY/HBM refs are reachable only through copies; SMEM holds scalars only.
//
// Front-end layer (dsl/).
#pragma once

#include <optional>
#include <source_location>
#include <string_view>
#include <type_traits>
#include <vector>

#include "dsl/value.h"

namespace tessera {

// pl::ds(start, size[, stride]): `size` elements from `start` (dynamic), every `stride`-th.
struct Slice {
  Operand start;
  int64_t size;
  int64_t stride = 1;
};
Slice ds(const Operand& start, int64_t size, int64_t stride = 1);

// pl::all: the whole dimension (Python's `:`).
struct AllTag {};
inline constexpr AllTag all{};

// One index of a ref access: an integer (drops the dim), a slice, or all.
class Indexer {
 public:
  enum class Kind { Index, Slice, All };
  Indexer(const Value& index, std::source_location loc = std::source_location::current())
      : kind_(Kind::Index), index_(index, loc), loc_(loc) {}
  Indexer(const IndexArg& index, std::source_location loc = std::source_location::current())
      : kind_(Kind::Index), index_(index, loc), loc_(loc) {}
  template <class T>
    requires std::is_integral_v<T>
  Indexer(T index, std::source_location loc = std::source_location::current())
      : kind_(Kind::Index), index_(static_cast<int64_t>(index), loc), loc_(loc) {}
  Indexer(const Slice& s, std::source_location loc = std::source_location::current())
      : kind_(Kind::Slice), index_(s.start), size_(s.size), stride_(s.stride), loc_(s.start.loc().known() ? s.start.loc() : SourceLoc(loc)) {}
  Indexer(AllTag, std::source_location loc = std::source_location::current()) : kind_(Kind::All), index_(0, loc), loc_(loc) {}

  Kind kind() const { return kind_; }
  const Operand& start() const { return index_; }
  int64_t size() const { return size_; }
  int64_t stride() const { return stride_; }
  SourceLoc loc() const { return loc_; }

 private:
  Kind kind_;
  Operand index_;
  int64_t size_ = 1;
  int64_t stride_ = 1;
  SourceLoc loc_;
};

class RefSlot;

class Ref {
 public:
  Ref() = default;

  Shape shape() const;  // by value, like Value::shape()
  DType dtype() const;
  MemorySpace memory_space() const;
  int64_t rank() const { return static_cast<int64_t>(shape().size()); }
  bool valid() const { return ctx_ != nullptr; }

  // Load / store the whole ref, or a window of it.
  RefSlot operator()(std::source_location loc = std::source_location::current()) const;
  RefSlot operator()(Indexer i0, std::source_location loc = std::source_location::current()) const;
  RefSlot operator()(Indexer i0, Indexer i1, std::source_location loc = std::source_location::current()) const;
  RefSlot operator()(Indexer i0, Indexer i1, Indexer i2, std::source_location loc = std::source_location::current()) const;
  RefSlot operator()(Indexer i0, Indexer i1, Indexer i2, Indexer i3,
                     std::source_location loc = std::source_location::current()) const;
  RefSlot operator()(Indexer i0, Indexer i1, Indexer i2, Indexer i3, Indexer i4,
                     std::source_location loc = std::source_location::current()) const;
  RefSlot operator[](Indexer i) const;

  // A view of a window (Pallas's ref.at[...]): nothing is loaded.
  Ref at(Indexer i0, std::source_location loc = std::source_location::current()) const;
  Ref at(Indexer i0, Indexer i1, std::source_location loc = std::source_location::current()) const;
  Ref at(Indexer i0, Indexer i1, Indexer i2, std::source_location loc = std::source_location::current()) const;
  Ref at(Indexer i0, Indexer i1, Indexer i2, Indexer i3, std::source_location loc = std::source_location::current()) const;
  Ref at(Indexer i0, Indexer i1, Indexer i2, Indexer i3, Indexer i4,
         std::source_location loc = std::source_location::current()) const;

  // The window described by `indexers` (as many as or fewer than the dims).
  Ref view(const std::vector<Indexer>& indexers, SourceLoc loc) const;
  RefSlot slot(const std::vector<Indexer>& indexers, SourceLoc loc) const;

  // Internal.
  ir::ValueId id() const { return id_; }
  detail::TraceContext* context() const { return ctx_; }
  uint64_t serial() const { return serial_; }
  static Ref wrap(detail::TraceContext& ctx, ir::ValueId id) { return Ref(ctx, id); }
  std::string describe() const;  // "ref `input 0` of (128, 128) f32 in VMEM"
  Type type() const;

 private:
  Ref(detail::TraceContext& ctx, ir::ValueId id) : ctx_(&ctx), serial_(ctx.serial()), id_(id) {}
  detail::TraceContext* ctx_ = nullptr;
  uint64_t serial_ = 0;
  ir::ValueId id_ = ir::kNone;
};

// The result of x(...): the value loaded from the window, which can also be assigned to (a store)
// or updated in place (+=, -=, *=, /=). It is a Value, so `pl::Value v = x();` loads once.
class RefSlot : public Value {
 public:
  // `loaded` is empty for refs that cannot be loaded directly (ANY/HBM, SMEM blocks): using such a
  // slot as a value reports the load error, assigning to it the store error.
  // `loc`: the line of x(...), where a load error of an unloadable slot is reported.
  RefSlot(const Ref& view, const Value& loaded, SourceLoc loc = {}) : Value(loaded), view_(view), loc_(loc) {}
  RefSlot(const RefSlot&) = default;

  const Ref& ref() const { return view_; }
  SourceLoc loc() const { return loc_; }
  bool loaded() const { return valid(); }
  Shape shape() const { return view_.shape(); }
  DType dtype() const { return view_.dtype(); }
  Value astype(DType dtype, std::source_location loc = std::source_location::current()) const;

  RefSlot& operator=(const Operand& v) &&;
  RefSlot& operator=(const RefSlot& v) &&;
  RefSlot& operator=(const RefSlot&) & = delete;  // write `pl::Value v = x();` to keep a loaded value
  RefSlot& operator+=(const Operand& v) &&;
  RefSlot& operator-=(const Operand& v) &&;
  RefSlot& operator*=(const Operand& v) &&;
  RefSlot& operator/=(const Operand& v) &&;

 private:
  Ref view_;
  SourceLoc loc_;
};

// Masked load: where mask is false the result is `other` (or unspecified — poison in the
// interpreter — without it). Masked store: writes only where mask is true.
Value load(const Ref& ref, const Operand& mask, std::source_location loc = std::source_location::current());
Value load(const Ref& ref, const Operand& mask, const Operand& other,
           std::source_location loc = std::source_location::current());
void store(const Ref& ref, const Operand& value, std::source_location loc = std::source_location::current());
void store(const Ref& ref, const Operand& value, const Operand& mask,
           std::source_location loc = std::source_location::current());

namespace detail {
// The trace `ref` belongs to; a UserError naming `api` when it is from another kernel's trace.
TraceContext& trace_of(const Ref& ref, std::string_view api, SourceLoc loc);
// Checks that `ref` may be loaded / stored directly (not ANY/HBM, not a semaphore; SMEM: scalars only).
void check_direct_access(const Ref& ref, bool is_store, SourceLoc loc);
// Checks that `api` may write through `ref`: it is not (a view of) an input that no output aliases.
void check_writable(const Ref& ref, std::string_view api, SourceLoc loc);
// Checks that `ref` is one semaphore (of `kind` when given), for `api`.
void check_semaphore(const Ref& ref, std::optional<DType> kind, std::string_view api, SourceLoc loc);
// The value to store into `ref`: dtype and shape checked, literals typed, scalars broadcast.
Value value_for_store(const Ref& ref, const Operand& v, SourceLoc loc);
// The window `indexers` pick from an object of `shape` (as many indexers as dims or fewer; the rest
// are whole): one start per dim, the view attribute and the window's shape, checked the same way for
// refs and values. `noun` ("ref", "value") and `what` (its description) name the object in errors.
struct Window {
  ir::ViewAttr attr;
  std::vector<Value> starts;
  Shape shape;
  bool whole = true;  // every dim whole: the object itself
};
Window window_of(TraceContext& ctx, const Shape& shape, const std::vector<Indexer>& indexers, std::string_view noun,
                 const std::string& what, SourceLoc loc);
}  // namespace detail

}  // namespace tessera
