// pl::Value: a traced scalar or block inside a kernel, with C++ operators and jnp-like math
// (element-wise ops, comparisons, where/select, iota, broadcast_to, reshape, transpose,
// astype, zeros/full, reductions, dot and dot_general; element rules: docs/design.md §4.13).
//
// Values are handles into the IR being traced; they exist only while pallas_call traces a kernel.
// Arithmetic promotes like JAX (bool < ints < floats; a C++ literal adopts the other operand's type)
// and broadcasts like numpy. Integer `/` and `%` truncate like C++ (lax.div / lax.rem); use
// pl::floor_divide / pl::mod for Python's `//` and `%`. Every DSL call records the user's source line.
//
// Front-end layer (dsl/).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <source_location>
#include <type_traits>
#include <utility>
#include <vector>

#include "jit/ir/ir.h"
#include "dsl/trace.h"

namespace tessera {

class Ref;
class RefSlot;
class IndexArg;
class Indexer;

namespace detail {
template <class> inline constexpr bool dependent_false = false;

// A C++ number as an IR literal. Integer literals are int64_t, as a Python int is checked against
// the dtype it takes in JAX; an unsigned 64-bit one past INT64_MAX would read back negative, so it
// is a UserError here (a u64 constant from 2^63 up is built from its i64 bits instead).
[[noreturn]] void unsigned_literal_too_large(uint64_t literal, SourceLoc loc);
template <class T> ir::Literal literal_of(T literal, SourceLoc loc) {
  if constexpr (std::is_floating_point_v<T>) {
    return ir::Literal::of_float(static_cast<double>(literal));
  } else {
    if constexpr (std::is_unsigned_v<T> && sizeof(T) == sizeof(int64_t))
      if (literal > static_cast<T>(std::numeric_limits<int64_t>::max())) unsigned_literal_too_large(literal, loc);
    return ir::Literal::of_int(static_cast<int64_t>(literal));
  }
}
}  // namespace detail

// The axes to reduce: one axis, a list, or (default) all of them. Negative axes count from the end.
class Axes {
 public:
  Axes() : all_(true) {}
  Axes(int axis) : axes_{axis} {}
  Axes(std::initializer_list<int64_t> axes) : axes_(axes) {}
  bool all() const { return all_; }
  const std::vector<int64_t>& list() const { return axes_; }

 private:
  std::vector<int64_t> axes_;
  bool all_ = false;
};

class Value {
 public:
  Value() = default;
  // A scalar constant from a C++ number (i32, f32 or bool by its type), inside a kernel being traced.
  template <class T>
    requires std::is_arithmetic_v<T>
  explicit Value(T literal, std::source_location loc = std::source_location::current())
      : Value(of_literal(detail::literal_of(literal, loc), std::is_same_v<T, bool>, loc)) {}

  // By value: the IR grows while tracing, so references into it would not stay valid.
  Type type() const;
  DType dtype() const { return type().dtype; }
  Shape shape() const { return type().shape; }
  int64_t rank() const { return type().rank(); }
  bool is_scalar() const { return type().is_scalar(); }
  bool valid() const { return ctx_ != nullptr; }

  // The value converted to `dtype` (jnp's astype).
  Value astype(DType dtype, std::source_location loc = std::source_location::current()) const;
  // A jax array's methods: the same as pl::reshape, pl::sum, pl::max, pl::min and pl::transpose; T()
  // reverses the dims (x.T).
  Value reshape(const Shape& shape, std::source_location loc = std::source_location::current()) const;
  Value sum(Axes axes = {}, bool keepdims = false, std::source_location loc = std::source_location::current()) const;
  Value max(Axes axes = {}, bool keepdims = false, std::source_location loc = std::source_location::current()) const;
  Value min(Axes axes = {}, bool keepdims = false, std::source_location loc = std::source_location::current()) const;
  Value transpose(std::vector<int64_t> perm = {}, std::source_location loc = std::source_location::current()) const;
  Value T(std::source_location loc = std::source_location::current()) const;

  // Indexing a value as jax indexes an array (dsl/layout.h): v[i] is v[i] (dim 0, dropped);
  // v(i, pl::ds(s, n)) is v[i, pl.ds(s, n)] and v(pl::all, j) is v[:, j]. Integer indices drop their
  // dim; dims past the last index stay whole. A static index outside the value is a UserError; a
  // traced start is clamped so that the window fits, as lax.dynamic_slice does.
  Value operator[](Indexer i) const;
  Value operator()(Indexer i0, std::source_location loc = std::source_location::current()) const;
  Value operator()(Indexer i0, Indexer i1, std::source_location loc = std::source_location::current()) const;
  Value operator()(Indexer i0, Indexer i1, Indexer i2, std::source_location loc = std::source_location::current()) const;
  Value operator()(Indexer i0, Indexer i1, Indexer i2, Indexer i3,
                   std::source_location loc = std::source_location::current()) const;

  // There is deliberately no conversion to bool: a traced value is not known while the kernel is
  // traced, so a C++ `if (v)` does not compile. Branch with pl::when, pl::cond or pl::where.

  // Internal: the IR value behind this handle.
  ir::ValueId id() const { return id_; }
  detail::TraceContext* context() const { return ctx_; }
  uint64_t serial() const { return serial_; }
  static Value wrap(detail::TraceContext& ctx, ir::ValueId id) { return Value(ctx, id); }

 protected:
  Value(detail::TraceContext& ctx, ir::ValueId id) : ctx_(&ctx), serial_(ctx.serial()), id_(id) {}

 private:
  // The scalar constant a C++ number makes (as Operand::materialize does).
  static Value of_literal(const ir::Literal& literal, bool is_bool, SourceLoc loc);

  detail::TraceContext* ctx_ = nullptr;
  uint64_t serial_ = 0;
  ir::ValueId id_ = ir::kNone;
};

// An argument of a DSL function: a Value or a C++ literal, and the user's source line where it was
// written (captured by the implicit conversion, so operators and math functions know the line).
class Operand {
 public:
  Operand(const Value& v, std::source_location loc = std::source_location::current());
  Operand(const Value& v, SourceLoc loc);
  // A ref slot (x()) loads here, so misuse of a DMA-only ref is reported as a load.
  Operand(const RefSlot& v, std::source_location loc = std::source_location::current());
  Operand(const IndexArg& v, std::source_location loc = std::source_location::current());
  template <class T>
    requires std::is_arithmetic_v<T>
  Operand(T literal, std::source_location loc = std::source_location::current())
      : literal_(detail::literal_of(literal, loc)),
        is_bool_(std::is_same_v<T, bool>),
        loc_(loc) {}

  bool is_literal() const { return literal_.has_value(); }
  const ir::Literal& literal() const { return *literal_; }
  bool is_bool_literal() const { return is_bool_; }
  const Value& value() const { return value_; }
  SourceLoc loc() const { return loc_; }

  // The operand as a Value: a literal becomes a scalar constant of `literal_type` (or its natural
  // type: i32, f32, bool).
  Value materialize(std::optional<DType> literal_type = std::nullopt) const;

 private:
  Value value_;
  std::optional<ir::Literal> literal_;
  bool is_bool_ = false;
  SourceLoc loc_;
};

// ---- operators ----
Value operator+(const Operand& a, const Operand& b);
Value operator-(const Operand& a, const Operand& b);
Value operator*(const Operand& a, const Operand& b);
Value operator/(const Operand& a, const Operand& b);
Value operator%(const Operand& a, const Operand& b);
Value operator&(const Operand& a, const Operand& b);
Value operator|(const Operand& a, const Operand& b);
Value operator^(const Operand& a, const Operand& b);
Value operator&&(const Operand& a, const Operand& b);
Value operator||(const Operand& a, const Operand& b);
Value operator==(const Operand& a, const Operand& b);
Value operator!=(const Operand& a, const Operand& b);
Value operator<(const Operand& a, const Operand& b);
Value operator<=(const Operand& a, const Operand& b);
Value operator>(const Operand& a, const Operand& b);
Value operator>=(const Operand& a, const Operand& b);
Value operator-(const Operand& a);
Value operator!(const Operand& a);
Value operator~(const Operand& a);

// ---- element-wise math (jnp names) ----
Value maximum(const Operand& a, const Operand& b);
Value minimum(const Operand& a, const Operand& b);
Value pow(const Operand& a, const Operand& b);
// Python's `//` and `%` on integers (floored); for floats floor(a / b) and a - floor(a/b)*b.
Value floor_divide(const Operand& a, const Operand& b);
Value mod(const Operand& a, const Operand& b);
Value exp(const Operand& x);
Value log(const Operand& x);
Value tanh(const Operand& x);
Value sqrt(const Operand& x);
Value rsqrt(const Operand& x);
Value abs(const Operand& x);
Value neg(const Operand& x);
Value sin(const Operand& x);
Value cos(const Operand& x);
// The error function (jax.lax.erf / jax.scipy.special.erf), as exact GELU uses it.
Value erf(const Operand& x);
// The complementary error function 1 - erf(x) (jax.lax.erfc / jax.scipy.special.erfc), accurate in
// the tail where 1 - erf(x) rounds to 0.
Value erfc(const Operand& x);
Value floor(const Operand& x);
Value ceil(const Operand& x);
Value sigmoid(const Operand& x);  // logistic
Value logical_not(const Operand& x);
// cond ? a : b element-wise, broadcasting all three (jnp.where); lax.select's spelling too.
Value where(const Operand& cond, const Operand& a, const Operand& b);
Value select(const Operand& cond, const Operand& a, const Operand& b);
Value astype(const Operand& x, DType dtype);
// lax.bitcast_convert_type: x's bits read as `dtype`, any int or float dtype (not bool). The same
// width keeps the shape; a narrower dtype adds a trailing dim of the width ratio (f32 (8,) -> u8
// (8, 4)); a wider one consumes a trailing dim of that size (u16 (8, 2) -> f32 (8,)); the parts are
// in memory order, lowest address first (jit/ir/bitcast.h).
Value bitcast(const Operand& x, DType dtype);
// pl.multiple_of: x (an integer scalar, e.g. a traced index) promised to be a multiple of n. The
// interpreter checks the promise at run time and fails naming the value; compiled code uses x as is.
Value multiple_of(const Operand& x, int64_t n);
// lax.clamp(lo, x, hi) and jnp.clip(x, lo, hi): x limited to [lo, hi], element-wise.
Value clamp(const Operand& lo, const Operand& x, const Operand& hi);
Value clip(const Operand& x, const Operand& lo, const Operand& hi);
// jnp.tril / jnp.triu over the last two dims: the elements on and below (tril) or on and above
// (triu) diagonal k (0: the main one; k > 0 above it) are kept, the others are zero.
Value tril(const Operand& x, int64_t k = 0);
Value triu(const Operand& x, int64_t k = 0);

// ---- constructors ----
Value zeros(const Shape& shape, DType dtype, std::source_location loc = std::source_location::current());
Value ones(const Shape& shape, DType dtype, std::source_location loc = std::source_location::current());
Value full(const Shape& shape, double value, DType dtype, std::source_location loc = std::source_location::current());
namespace detail {
Value full_int(const Shape& shape, int64_t value, DType dtype, std::source_location loc);
}
// An integer fill must fit an integer dtype: 70000 into i16 is a UserError (as JAX's OverflowError),
// never a silent wrap; into a float or bool dtype it converts as the double above does.
template <class T>
  requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
Value full(const Shape& shape, T value, DType dtype, std::source_location loc = std::source_location::current()) {
  return detail::full_int(shape, static_cast<int64_t>(value), dtype, loc);
}
// A block whose elements equal their index along `dimension` (lax.broadcasted_iota).
Value iota(const Shape& shape, int dimension, DType dtype = DType::i32,
           std::source_location loc = std::source_location::current());
// A block of `shape` whose every element is the traced scalar `fill`, converted to `dtype`.
Value full(const Shape& shape, const Value& fill, DType dtype, std::source_location loc = std::source_location::current());
Value zeros_like(const Value& x, std::source_location loc = std::source_location::current());
Value zeros_like(const Ref& x, std::source_location loc = std::source_location::current());
Value ones_like(const Value& x, std::source_location loc = std::source_location::current());
// x's shape and dtype, filled with `fill` (a number or a traced scalar).
Value full_like(const Value& x, const Operand& fill);

// ---- shape ----
Value broadcast_to(const Operand& x, const Shape& shape);
Value reshape(const Operand& x, const Shape& shape);
// Reverses the dims when perm is empty.
Value transpose(const Operand& x, std::vector<int64_t> perm = {});
Value swapaxes(const Operand& x, int64_t a, int64_t b);

// ---- reductions ----
// keepdims: the reduced axes stay, with size 1 (jnp's keepdims=True), so the result broadcasts
// against x: `x - pl::max(x, 1, /*keepdims=*/true)`.
Value sum(const Operand& x, Axes axes = {}, bool keepdims = false);
Value max(const Operand& x, Axes axes = {}, bool keepdims = false);
Value min(const Operand& x, Axes axes = {}, bool keepdims = false);

// ---- contractions ----
// jnp.dot: contracts the last dim of a with the only / second-to-last dim of b. The product is
// accumulated in f32 (ints: i32) and converted to `preferred_element_type`, or to the promoted
// operand type when it is absent.
Value dot(const Operand& a, const Operand& b, std::optional<DType> preferred_element_type = std::nullopt);
// lax.dot_general dimension numbers: ((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch)).
struct DotDimensionNumbers {
  std::pair<std::vector<int64_t>, std::vector<int64_t>> contracting;
  std::pair<std::vector<int64_t>, std::vector<int64_t>> batch;
};
Value dot_general(const Operand& a, const Operand& b, const DotDimensionNumbers& dims,
                  std::optional<DType> preferred_element_type = std::nullopt);

namespace detail {
// Shared by the DSL files: emit one op producing one Value, and a UserError helper.
Value emit(TraceContext& ctx, ir::OpKind kind, const std::vector<Value>& operands, Type result, ir::Attr attr,
           SourceLoc loc);
// Checks that a handle belongs to the kernel being traced now (not empty, not from an earlier trace).
void check_live(const Value& v, SourceLoc loc);
// Brings both operands to one dtype (JAX promotion, weak literals) and one shape (numpy broadcasting).
std::pair<Value, Value> unify(const Operand& a, const Operand& b, std::string_view api);
Value cast_to(const Value& v, DType dtype, SourceLoc loc);
// An integer scalar argument `what` of `api` as i32 (literals too, range-checked); a UserError otherwise,
// suggesting `example`, also for an i64, u32 or u64 value, which may not fit i32 (never wrapped).
Value i32_scalar(const Operand& o, const char* api, const char* what, const char* example, SourceLoc loc);
// The one rule for an integer index whose value must survive as itself (ref indices, the block
// indices and slices index maps return): a u32 widens to i64 (as i32, 3e9 would wrap negative); a
// u64 is clamped to INT64_MAX, which no dim reaches, before it becomes i64 (2^63 and above would
// wrap negative), so it fails its bounds check instead of wrapping into range. Other dtypes are
// returned as they are.
Value widen_index(const Value& v, SourceLoc loc);
Value broadcast_value(const Value& v, const Shape& shape, std::string_view api, SourceLoc loc);
// numpy broadcasting of two shapes, or nullopt when they do not broadcast.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);
std::string describe(const Value& v);  // "a (128, 128) block of f32"
// A constant op of this type (a scalar, or a splat block).
Value constant(TraceContext& ctx, const ir::Literal& value, Type type, SourceLoc loc);
// An integer literal must fit the integer dtype it takes (JAX raises OverflowError for a Python int
// out of range): `x + 300` on an i8 is a UserError naming the literal, the dtype and the line, not
// a silent wrap to 44. Float and bool dtypes take any integer.
void check_int_literal(int64_t literal, DType dtype, SourceLoc loc);
// The source line of the op that made `v`.
SourceLoc loc_of(const Value& v);
}  // namespace detail

}  // namespace tessera
