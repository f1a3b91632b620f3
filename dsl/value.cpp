#include "dsl/value.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <set>

#include "dsl/ref.h"
#include "jit/ir/bitcast.h"
#include "runtime/numeric.h"

namespace tessera {

using ir::OpKind;

Type Value::type() const {
  if (!ctx_)
    throw UserError("an empty pl::Value is used", "a default-constructed pl::Value",
                    "initialise values from DSL calls (loads, constants, arithmetic) before using them", SourceLoc{});
  return ctx_->type(id_);
}

Value Value::astype(DType dtype, std::source_location loc) const { return detail::cast_to(*this, dtype, loc); }

Operand::Operand(const Value& v, std::source_location loc) : value_(v), loc_(loc) { detail::check_live(v, loc_); }
Operand::Operand(const Value& v, SourceLoc loc) : value_(v), loc_(loc) { detail::check_live(v, loc_); }

namespace {
// A C++ number as a scalar constant: of `type`, or its natural one (bool, i32, f32).
Value literal_constant(const ir::Literal& literal, bool is_bool, std::optional<DType> type, std::string_view api,
                       SourceLoc loc) {
  auto& ctx = detail::TraceContext::current(api, loc);
  const DType t = type ? *type : is_bool ? DType::i1 : literal.is_float ? DType::f32 : DType::i32;
  if (!literal.is_float && !is_bool) detail::check_int_literal(literal.i, t, loc);
  return detail::constant(ctx, literal, Type::scalar(t), loc);
}
}  // namespace

namespace detail {
void unsigned_literal_too_large(uint64_t literal, SourceLoc loc) {
  throw UserError(fmt::format("the integer literal {} is beyond the largest integer literal, {}", literal,
                              std::numeric_limits<int64_t>::max()),
                  fmt::format("{} (a C++ unsigned literal; tessera's integer literals are int64_t)", literal),
                  fmt::format("build the u64 from its i64 bits: pl::full({{}}, int64_t({}), pl::i64).astype(pl::u64)",
                              static_cast<int64_t>(literal)),
                  loc);
}

void check_int_literal(int64_t literal, DType dtype, SourceLoc loc) {
  if (!is_int(dtype)) return;
  const std::string_view name = dtype_name(dtype);
  // Every int64_t is below u64's top (larger C++ literals never get here: detail::literal_of), so
  // only a negative literal is out of its range, and no wider dtype holds it.
  if (dtype == DType::u64) {
    if (literal >= 0) return;
    throw UserError(fmt::format("the integer literal {} is out of range of u64", literal),
                    fmt::format("{} as u64, whose values are [0, {}]", literal, std::numeric_limits<uint64_t>::max()),
                    "use a value >= 0 (x - 1 rather than x + -1), or compute in i64 (.astype(pl::i64)) and cast back "
                    "with .astype(pl::u64)",
                    loc);
  }
  const auto [lo, hi] = dispatch_dtype(dtype, []<class T>() -> std::pair<int64_t, int64_t> {
    if constexpr (std::is_integral_v<T>)
      return {static_cast<int64_t>(std::numeric_limits<T>::min()), static_cast<int64_t>(std::numeric_limits<T>::max())};
    else
      return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  });
  if (literal >= lo && literal <= hi) return;
  throw UserError(fmt::format("the integer literal {} is out of range of {}", literal, name),
                  fmt::format("{} as {}, whose values are [{}, {}]", literal, name, lo, hi),
                  fmt::format("use a value in [{}, {}], or compute in a wider dtype (.astype(pl::i32)) and cast back "
                              "with .astype(pl::{})",
                              lo, hi, name),
                  loc);
}
}  // namespace detail

Value Operand::materialize(std::optional<DType> literal_type) const {
  if (!literal_) return value_;
  return literal_constant(*literal_, is_bool_, literal_type, "a literal operand", loc_);
}

Value Value::of_literal(const ir::Literal& literal, bool is_bool, SourceLoc loc) {
  return literal_constant(literal, is_bool, std::nullopt, "pl::Value", loc);
}

namespace detail {

std::string describe(const Value& v) {
  const Type t = v.type();
  if (t.is_scalar()) {
    // "an i32", "an f32", but "a u8", "a bf16": the article of the name as it is read out.
    const std::string_view name = dtype_name(t.dtype);
    return fmt::format("{} {} scalar", name[0] == 'u' || name[0] == 'b' ? "a" : "an", name);
  }
  return fmt::format("a {} block of {}", shape_tuple_str(t.shape), dtype_name(t.dtype));
}

void check_live(const Value& v, SourceLoc loc) {
  if (!v.valid())
    throw UserError("an empty pl::Value is used", "a default-constructed pl::Value",
                    "initialise values from DSL calls (loads, constants, arithmetic) before using them", loc);
  TraceContext* active = TraceContext::active();
  if (active != v.context() || active->serial() != v.serial())
    throw UserError("a value from another kernel's trace is used", "a pl::Value kept after its kernel was traced",
                    "values live only while their own kernel is traced; do not keep them across pallas_calls", loc);
}

Value emit(TraceContext& ctx, OpKind kind, const std::vector<Value>& operands, Type result, ir::Attr attr,
           SourceLoc loc) {
  std::vector<ir::ValueId> ids;
  for (const Value& v : operands) {
    check_live(v, loc);
    ids.push_back(v.id());
  }
  return Value::wrap(ctx, ctx.emit_value(kind, std::move(ids), std::move(result), std::move(attr), loc));
}

Value constant(TraceContext& ctx, const ir::Literal& value, Type type, SourceLoc loc) {
  return Value::wrap(ctx, ctx.emit_value(OpKind::Constant, {}, std::move(type), value, loc));
}

SourceLoc loc_of(const Value& v) {
  const ir::Op* def = v.context()->builder().function().def(v.id());
  return def ? def->loc : SourceLoc{};
}

Value i32_scalar(const Operand& o, const char* api, const char* what, const char* example, SourceLoc loc) {
  if (o.is_literal() && o.literal().is_float)
    throw UserError(fmt::format("{}: {} must be an integer", api, what), fmt::format("{}", o.literal().f),
                    fmt::format("pass an integer, e.g. {}", example), loc);
  Value v = o.materialize(DType::i32);
  if (!v.is_scalar() || !is_int(v.dtype()))
    throw UserError(fmt::format("{}: {} must be an integer scalar", api, what), describe(v),
                    fmt::format("pass an i32 scalar, e.g. {} (cast with .astype(pl::i32))", example), loc);
  // An i64, u32 or u64 value may lie past i32, and casting it here would wrap it silently into another
  // (2^32 + 1 signals as 1; a device 2^31 + 5 as a negative one): the caller casts, knowing it fits,
  // as Pallas's lowering takes only i32 there. Narrower integers always fit.
  if (v.dtype() == DType::i64 || v.dtype() == DType::u32 || v.dtype() == DType::u64)
    throw UserError(fmt::format("{}: {} must be an i32 scalar, and {} may not fit one", api, what, describe(v)),
                    describe(v),
                    fmt::format("cast it with .astype(pl::i32) where its value is known to fit, or compute it in "
                                "i32, e.g. {}",
                                example),
                    loc);
  return cast_to(v, DType::i32, loc);
}

Value widen_index(const Value& v, SourceLoc loc) {
  if (v.dtype() == DType::u32) return cast_to(v, DType::i64, loc);
  if (v.dtype() != DType::u64) return v;
  auto& ctx = TraceContext::current("an index", loc);
  const Value max = constant(ctx, ir::Literal::of_int(std::numeric_limits<int64_t>::max()), v.type(), loc);
  return cast_to(emit(ctx, OpKind::Min, {v, max}, v.type(), {}, loc), DType::i64, loc);
}

Value cast_to(const Value& v, DType dtype, SourceLoc loc) {
  if (v.dtype() == dtype) return v;
  auto& ctx = TraceContext::current("astype", loc);
  return emit(ctx, OpKind::Cast, {v}, Type::tensor(dtype, v.shape()), {}, loc);
}

std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()));
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[out.size() - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

Value broadcast_value(const Value& v, const Shape& shape, std::string_view api, SourceLoc loc) {
  if (v.shape() == shape) return v;
  auto bs = broadcast_shapes(v.shape(), shape);
  if (!bs || *bs != shape)
    throw UserError(fmt::format("{}: cannot broadcast {} to shape {}", api, describe(v), shape_tuple_str(shape)),
                    fmt::format("shape {} -> {}", shape_tuple_str(v.shape()), shape_tuple_str(shape)),
                    "dims are aligned from the right and must be equal or 1; reshape the value first", loc);
  auto& ctx = TraceContext::current(api, loc);
  return emit(ctx, OpKind::BroadcastTo, {v}, Type::tensor(v.dtype(), shape), {}, loc);
}

std::pair<Value, Value> unify(const Operand& a, const Operand& b, std::string_view api) {
  const SourceLoc loc = a.loc().known() ? a.loc() : b.loc();
  Value va, vb;
  if (a.is_literal() && b.is_literal()) {
    va = a.materialize();
    vb = b.materialize();
  } else if (a.is_literal()) {
    vb = b.value();
    va = a.materialize(weak_literal_type(a.literal().is_float, vb.dtype()));
  } else if (b.is_literal()) {
    va = a.value();
    vb = b.materialize(weak_literal_type(b.literal().is_float, va.dtype()));
  } else {
    va = a.value();
    vb = b.value();
  }
  DType t = promote(va.dtype(), vb.dtype());
  va = cast_to(va, t, loc);
  vb = cast_to(vb, t, loc);
  auto shape = broadcast_shapes(va.shape(), vb.shape());
  if (!shape)
    throw UserError(fmt::format("{}: operand shapes do not broadcast", api),
                    fmt::format("{} and {}", describe(va), describe(vb)),
                    "use equal shapes, or 1 in the dims to stretch (numpy broadcasting aligns dims from the right)", loc);
  return {broadcast_value(va, *shape, api, loc), broadcast_value(vb, *shape, api, loc)};
}

}  // namespace detail

using detail::describe;
using detail::emit;
using detail::unify;

namespace {

bool is_comparison(OpKind k) {
  switch (k) {
    TESSERA_COMPARISON_OPS(TESSERA_OP_CASE) return true;
    default: return false;
  }
}

// Emits an element-wise binary op on operands already of one type and shape.
Value emit_binary(OpKind kind, const Value& va, const Value& vb, SourceLoc loc) {
  auto& ctx = detail::TraceContext::current(ir::mnemonic(kind), loc);
  Type result = is_comparison(kind) ? Type::tensor(DType::i1, va.shape()) : va.type();
  return emit(ctx, kind, {va, vb}, result, {}, loc);
}

Value binary(OpKind kind, const Operand& a, const Operand& b, std::string_view api) {
  auto [va, vb] = unify(a, b, api);
  const SourceLoc loc = a.loc();
  const DType t = va.dtype();
  if (kind == OpKind::And || kind == OpKind::Or || kind == OpKind::Xor) {
    if (is_float(t))
      throw UserError(fmt::format("{} needs bool or integer operands", api), describe(va),
                      "compare first (x > 0) or cast with .astype(pl::i32)", loc);
  } else if (!is_comparison(kind) && is_bool(t)) {
    throw UserError(fmt::format("{} needs numeric operands, not bool", api), describe(va),
                    "cast with .astype(pl::i32) or .astype(pl::f32), or use &, |, ^ for logic", loc);
  }
  return emit_binary(kind, va, vb, loc);
}

Value zeros_of_type(const Value& v, SourceLoc loc) {
  auto& ctx = detail::TraceContext::current("constant", loc);
  return detail::constant(ctx, ir::Literal::of_int(0), v.type(), loc);
}

// Whether the truncated remainder r of x / y needs the floored correction: r != 0 and sign(r) != sign(y).
Value needs_floor_fix(const Value& r, const Value& y, SourceLoc loc) {
  Value zero = zeros_of_type(r, loc);
  Value nonzero = emit_binary(OpKind::Ne, r, zero, loc);
  Value signs_differ = emit_binary(OpKind::Ne, emit_binary(OpKind::Lt, r, zero, loc), emit_binary(OpKind::Lt, y, zero, loc), loc);
  return emit_binary(OpKind::And, nonzero, signs_differ, loc);
}

Value logical(OpKind kind, const Operand& a, const Operand& b, std::string_view api) {
  auto [va, vb] = unify(a, b, api);
  if (!is_bool(va.dtype()))
    throw UserError(fmt::format("{} needs bool operands", api), describe(va),
                    "compare first (x != 0), or use &, |, ^ for bitwise integer logic", a.loc());
  auto& ctx = detail::TraceContext::current(api, a.loc());
  return emit(ctx, kind, {va, vb}, va.type(), {}, a.loc());
}

// Transcendental ops on integers promote to f32, as in jnp.
// Emits a unary op whose result has the operand's type (every unary op in the IR).
Value emit_unary(OpKind kind, const Value& v, std::string_view api, SourceLoc loc) {
  auto& ctx = detail::TraceContext::current(api, loc);
  return emit(ctx, kind, {v}, v.type(), {}, loc);
}

Value float_unary(OpKind kind, const Operand& x, std::string_view api) {
  Value v = x.materialize(x.is_literal() ? std::optional<DType>(DType::f32) : std::nullopt);
  if (!is_float(v.dtype())) v = detail::cast_to(v, DType::f32, x.loc());
  return emit_unary(kind, v, api, x.loc());
}

// Negation and pl::abs: any numeric operand; a bool is refused, with `fix` as the advice.
Value numeric_unary(OpKind kind, const Operand& x, std::string_view api, std::string_view fix) {
  Value v = x.materialize();
  if (is_bool(v.dtype()))
    throw UserError(fmt::format("{} needs a numeric operand, not bool", api), describe(v), std::string(fix), x.loc());
  return emit_unary(kind, v, api, x.loc());
}

}  // namespace

Value operator+(const Operand& a, const Operand& b) { return binary(OpKind::Add, a, b, "operator+"); }
Value operator-(const Operand& a, const Operand& b) { return binary(OpKind::Sub, a, b, "operator-"); }
Value operator*(const Operand& a, const Operand& b) { return binary(OpKind::Mul, a, b, "operator*"); }
Value operator/(const Operand& a, const Operand& b) { return binary(OpKind::Div, a, b, "operator/"); }
Value operator%(const Operand& a, const Operand& b) { return binary(OpKind::Rem, a, b, "operator%"); }
Value operator&(const Operand& a, const Operand& b) { return binary(OpKind::And, a, b, "operator&"); }
Value operator|(const Operand& a, const Operand& b) { return binary(OpKind::Or, a, b, "operator|"); }
Value operator^(const Operand& a, const Operand& b) { return binary(OpKind::Xor, a, b, "operator^"); }
Value operator&&(const Operand& a, const Operand& b) { return logical(OpKind::And, a, b, "operator&&"); }
Value operator||(const Operand& a, const Operand& b) { return logical(OpKind::Or, a, b, "operator||"); }
Value operator==(const Operand& a, const Operand& b) { return binary(OpKind::Eq, a, b, "operator=="); }
Value operator!=(const Operand& a, const Operand& b) { return binary(OpKind::Ne, a, b, "operator!="); }
Value operator<(const Operand& a, const Operand& b) { return binary(OpKind::Lt, a, b, "operator<"); }
Value operator<=(const Operand& a, const Operand& b) { return binary(OpKind::Le, a, b, "operator<="); }
Value operator>(const Operand& a, const Operand& b) { return binary(OpKind::Gt, a, b, "operator>"); }
Value operator>=(const Operand& a, const Operand& b) { return binary(OpKind::Ge, a, b, "operator>="); }
Value maximum(const Operand& a, const Operand& b) { return binary(OpKind::Max, a, b, "pl::maximum"); }
Value minimum(const Operand& a, const Operand& b) { return binary(OpKind::Min, a, b, "pl::minimum"); }
Value pow(const Operand& a, const Operand& b) { return binary(OpKind::Pow, a, b, "pl::pow"); }

Value operator-(const Operand& a) { return neg(a); }

Value neg(const Operand& x) { return numeric_unary(OpKind::Neg, x, "negation", "use ! or pl::logical_not for bool"); }

Value abs(const Operand& x) { return numeric_unary(OpKind::Abs, x, "pl::abs", "cast with .astype(pl::i32) first"); }

Value operator!(const Operand& a) { return logical_not(a); }

Value logical_not(const Operand& x) {
  Value v = x.materialize();
  if (!is_bool(v.dtype())) v = emit_binary(OpKind::Ne, v, zeros_of_type(v, x.loc()), x.loc());
  return emit_unary(OpKind::Not, v, "pl::logical_not", x.loc());
}

Value operator~(const Operand& x) {
  Value v = x.materialize();
  if (is_float(v.dtype()))
    throw UserError("operator~ needs a bool or integer operand", describe(v), "for floats there is no bitwise not", x.loc());
  return emit_unary(OpKind::Not, v, "operator~", x.loc());
}

Value exp(const Operand& x) { return float_unary(OpKind::Exp, x, "pl::exp"); }
Value log(const Operand& x) { return float_unary(OpKind::Log, x, "pl::log"); }
Value tanh(const Operand& x) { return float_unary(OpKind::Tanh, x, "pl::tanh"); }
Value sqrt(const Operand& x) { return float_unary(OpKind::Sqrt, x, "pl::sqrt"); }
Value rsqrt(const Operand& x) { return float_unary(OpKind::Rsqrt, x, "pl::rsqrt"); }
Value sin(const Operand& x) { return float_unary(OpKind::Sin, x, "pl::sin"); }
Value cos(const Operand& x) { return float_unary(OpKind::Cos, x, "pl::cos"); }
Value erf(const Operand& x) { return float_unary(OpKind::Erf, x, "pl::erf"); }
Value erfc(const Operand& x) { return float_unary(OpKind::Erfc, x, "pl::erfc"); }
Value floor(const Operand& x) { return float_unary(OpKind::Floor, x, "pl::floor"); }
Value ceil(const Operand& x) { return float_unary(OpKind::Ceil, x, "pl::ceil"); }
Value sigmoid(const Operand& x) { return float_unary(OpKind::Logistic, x, "pl::sigmoid"); }

namespace {

// The operands of pl::floor_divide and pl::mod, unified to one type, which must be numeric.
std::pair<Value, Value> numeric_operands(const Operand& a, const Operand& b, std::string_view api) {
  auto [x, y] = unify(a, b, api);
  if (is_bool(x.dtype()))
    throw UserError(fmt::format("{} needs numeric operands, not bool", api), describe(x), "cast with .astype(pl::i32)",
                    a.loc());
  return {x, y};
}

}  // namespace

// pl::floor_divide and pl::mod are compositions of IR ops that compute runtime/element_rules.h's
// rules::int_floor_div / int_mod and rules::float_floor_div / float_mod step by step, so both
// backends run them with their div, rem, floor and select.
Value floor_divide(const Operand& a, const Operand& b) {
  auto [x, y] = numeric_operands(a, b, "pl::floor_divide");
  const SourceLoc loc = a.loc();
  auto& ctx = detail::TraceContext::current("pl::floor_divide", loc);
  if (is_float(x.dtype())) {
    // rules::float_floor_div, in f32 for bf16/f16 so that only the result rounds (its steps would
    // round after each op in the 16-bit type).
    const DType t = x.dtype();
    const DType c = t == DType::f64 ? DType::f64 : DType::f32;
    Value fa = detail::cast_to(x, c, loc), fb = detail::cast_to(y, c, loc);
    auto lit = [&](double v) { return detail::constant(ctx, ir::Literal::of_float(v), fa.type(), loc); };
    Value zero = lit(0.0), one = lit(1.0);
    Value r = emit_binary(OpKind::Rem, fa, fb, loc);
    Value d = emit_binary(OpKind::Div, emit_binary(OpKind::Sub, fa, r, loc), fb, loc);
    d = emit(ctx, OpKind::Select, {needs_floor_fix(r, fb, loc), emit_binary(OpKind::Sub, d, one, loc), d}, d.type(), {}, loc);
    Value f = emit(ctx, OpKind::Floor, {d}, d.type(), {}, loc);
    Value up = emit_binary(OpKind::Gt, emit_binary(OpKind::Sub, d, f, loc), lit(0.5), loc);
    Value snapped = emit(ctx, OpKind::Select, {up, emit_binary(OpKind::Add, f, one, loc), f}, d.type(), {}, loc);
    // a / b where b == 0; copysign(0, a / b) where d == 0 (a / b is finite there, so q * 0 has its sign).
    Value q = emit_binary(OpKind::Div, fa, fb, loc);
    Value signed_zero = emit_binary(OpKind::Mul, q, zero, loc);
    Value res = emit(ctx, OpKind::Select, {emit_binary(OpKind::Eq, d, zero, loc), signed_zero, snapped}, d.type(), {}, loc);
    res = emit(ctx, OpKind::Select, {emit_binary(OpKind::Eq, fb, zero, loc), q, res}, d.type(), {}, loc);
    return detail::cast_to(res, t, loc);
  }
  // rules::int_floor_div: the truncated quotient, minus one when the remainder is non-zero and its
  // sign differs from y's; never for y == 0, whose quotient stays -1.
  Value q = emit_binary(OpKind::Div, x, y, loc);
  Value fix = emit_binary(OpKind::And, needs_floor_fix(emit_binary(OpKind::Rem, x, y, loc), y, loc),
                          emit_binary(OpKind::Ne, y, zeros_of_type(y, loc), loc), loc);
  return emit_binary(OpKind::Sub, q, detail::cast_to(fix, q.dtype(), loc), loc);
}

Value mod(const Operand& a, const Operand& b) {
  auto [x, y] = numeric_operands(a, b, "pl::mod");
  const SourceLoc loc = a.loc();
  auto& ctx = detail::TraceContext::current("pl::mod", loc);
  // rules::int_mod / float_mod: the truncated remainder plus y when its sign differs from y's. In
  // bf16/f16 the remainder is exact, so rounding after each op rounds only the sum, as the rule does.
  Value r = emit_binary(OpKind::Rem, x, y, loc);
  Value fixed = emit_binary(OpKind::Add, r, y, loc);
  Value m = emit(ctx, OpKind::Select, {needs_floor_fix(r, y, loc), fixed, r}, r.type(), {}, loc);
  if (!is_float(x.dtype())) return m;
  // A zero result takes y's sign (y != 0 here: x mod 0 is NaN).
  auto lit = [&](double v) { return detail::constant(ctx, ir::Literal::of_float(v), m.type(), loc); };
  Value zero = lit(0.0);
  Value signed_zero = emit(ctx, OpKind::Select, {emit_binary(OpKind::Lt, y, zero, loc), lit(-0.0), zero}, m.type(), {}, loc);
  return emit(ctx, OpKind::Select, {emit_binary(OpKind::Eq, m, zero, loc), signed_zero, m}, m.type(), {}, loc);
}

Value where(const Operand& cond, const Operand& a, const Operand& b) {
  Value c = cond.materialize();
  if (!is_bool(c.dtype()))
    throw UserError("pl::where needs a bool condition", describe(c), "compare first, e.g. pl::where(x > 0, a, b)", cond.loc());
  auto [va, vb] = unify(a, b, "pl::where");
  auto shape = detail::broadcast_shapes(c.shape(), va.shape());
  if (!shape)
    throw UserError("pl::where: the condition and the values do not broadcast to one shape",
                    fmt::format("condition {}, values {}", describe(c), describe(va)),
                    "use equal shapes, or 1 in the dims to stretch", cond.loc());
  c = detail::broadcast_value(c, *shape, "pl::where", cond.loc());
  va = detail::broadcast_value(va, *shape, "pl::where", cond.loc());
  vb = detail::broadcast_value(vb, *shape, "pl::where", cond.loc());
  auto& ctx = detail::TraceContext::current("pl::where", cond.loc());
  return emit(ctx, OpKind::Select, {c, va, vb}, va.type(), {}, cond.loc());
}

Value select(const Operand& cond, const Operand& a, const Operand& b) { return where(cond, a, b); }

Value bitcast(const Operand& x, DType dtype) {
  const Value v = x.materialize();
  if (v.dtype() == dtype) return v;
  // ir::bitcast_shape states the rule (and the verifier checks it again).
  const ir::BitcastShape r = ir::bitcast_shape(v.dtype(), dtype, v.shape());
  if (!r.ok())
    throw UserError(fmt::format("pl::bitcast cannot read {} as {}: {}", dtype_name(v.dtype()), dtype_name(dtype), r.error),
                    describe(v), r.fix + "; convert values with .astype", x.loc());
  auto& ctx = detail::TraceContext::current("pl::bitcast", x.loc());
  return emit(ctx, OpKind::Bitcast, {v}, Type::tensor(dtype, r.shape), {}, x.loc());
}

Value multiple_of(const Operand& x, int64_t n) {
  if (n <= 0)
    throw UserError("pl::multiple_of needs a positive n", fmt::format("n = {}", n), "pass the positive number x is a multiple of",
                    x.loc());
  const Value v = x.materialize();
  if (!v.is_scalar() || !is_int(v.dtype()))
    throw UserError("pl::multiple_of takes an integer scalar", describe(v), "pass a traced index, e.g. pl::program_id(0) * 8",
                    x.loc());
  auto& ctx = detail::TraceContext::current("pl::multiple_of", x.loc());
  return emit(ctx, OpKind::MultipleOf, {v}, v.type(), n, x.loc());
}

Value astype(const Operand& x, DType dtype) { return detail::cast_to(x.materialize(dtype), dtype, x.loc()); }

namespace {

void check_full_shape(const Shape& shape, SourceLoc loc) {
  for (int64_t d : shape)
    if (d < 0)
      throw UserError("pl::full: shape dims must be >= 0", shape_tuple_str(shape), "use non-negative dims", loc);
}

Value full_at(const Shape& shape, double value, DType dtype, SourceLoc loc) {
  check_full_shape(shape, loc);
  auto& ctx = detail::TraceContext::current("pl::full", loc);
  // An integer fill converts as every double does (truncate, saturate, NaN -> 0: rt from_double),
  // so a kernel's pl::full agrees with the host's pl::Array::full (-1.0 into u8 is 0 in both).
  ir::Literal lit = ir::Literal::of_float(value);
  if (!is_float(dtype))
    dispatch_dtype(dtype, [&]<class T>() {
      if constexpr (std::is_integral_v<T>) lit = ir::Literal::of_int(static_cast<int64_t>(from_double<T>(value)));
    });
  return emit(ctx, OpKind::Constant, {}, Type::tensor(dtype, shape), lit, loc);
}

// An integer fill: it must fit an integer dtype; into a float or bool dtype it converts as a double.
Value full_int_at(const Shape& shape, int64_t value, DType dtype, SourceLoc loc) {
  if (!is_int(dtype)) return full_at(shape, static_cast<double>(value), dtype, loc);
  check_full_shape(shape, loc);
  auto& ctx = detail::TraceContext::current("pl::full", loc);
  detail::check_int_literal(value, dtype, loc);
  return emit(ctx, OpKind::Constant, {}, Type::tensor(dtype, shape), ir::Literal::of_int(value), loc);
}

// A traced scalar fill, converted and broadcast.
Value full_at(const Shape& shape, const Value& fill, DType dtype, SourceLoc loc) {
  detail::check_live(fill, loc);
  if (!fill.is_scalar())
    throw UserError("pl::full: the fill value must be a scalar", describe(fill),
                    "reduce it to a scalar first, or use pl::broadcast_to for a block", loc);
  check_full_shape(shape, loc);
  return broadcast_to(Operand(detail::cast_to(fill, dtype, loc), loc), shape);
}

}  // namespace

Value full(const Shape& shape, double value, DType dtype, std::source_location loc) { return full_at(shape, value, dtype, loc); }
namespace detail {
Value full_int(const Shape& shape, int64_t value, DType dtype, std::source_location loc) {
  return full_int_at(shape, value, dtype, loc);
}
}  // namespace detail
Value full(const Shape& shape, const Value& fill, DType dtype, std::source_location loc) {
  return full_at(shape, fill, dtype, loc);
}
Value zeros(const Shape& shape, DType dtype, std::source_location loc) { return full(shape, 0, dtype, loc); }
Value ones(const Shape& shape, DType dtype, std::source_location loc) { return full(shape, 1, dtype, loc); }
Value zeros_like(const Value& x, std::source_location loc) { return full(x.shape(), 0, x.dtype(), loc); }
Value ones_like(const Value& x, std::source_location loc) { return full(x.shape(), 1, x.dtype(), loc); }

Value full_like(const Value& x, const Operand& fill) {
  if (fill.is_literal() && !fill.literal().is_float && !fill.is_bool_literal())
    return full_int_at(x.shape(), fill.literal().i, x.dtype(), fill.loc());
  if (fill.is_literal()) return full_at(x.shape(), fill.literal().as_double(), x.dtype(), fill.loc());
  return full_at(x.shape(), fill.value(), x.dtype(), fill.loc());
}

Value clamp(const Operand& lo, const Operand& x, const Operand& hi) { return minimum(maximum(x, lo), hi); }
Value clip(const Operand& x, const Operand& lo, const Operand& hi) { return clamp(lo, x, hi); }

namespace {

// Keeps x where `keep(column - row, k)` holds for the last two dims, zero elsewhere.
template <class Keep>
Value triangle(const Operand& x, int64_t k, Keep keep, const char* api) {
  const Value v = x.materialize();
  if (v.rank() < 2)
    throw UserError(fmt::format("{}: the value needs at least two dims", api), describe(v),
                    "apply it to a matrix (or a batch of matrices)", x.loc());
  auto& ctx = detail::TraceContext::current(api, x.loc());
  const Type index = Type::tensor(DType::i32, v.shape());
  const Value rows = emit(ctx, OpKind::Iota, {}, index, int64_t{v.rank() - 2}, x.loc());
  const Value cols = emit(ctx, OpKind::Iota, {}, index, int64_t{v.rank() - 1}, x.loc());
  const Value diagonal = detail::constant(ctx, ir::Literal::of_int(k), Type::scalar(DType::i32), x.loc());
  return where(Operand(keep(Operand(cols - rows, x.loc()), Operand(diagonal, x.loc())), x.loc()), Operand(v, x.loc()),
               Operand(full_at(v.shape(), 0, v.dtype(), x.loc()), x.loc()));
}

}  // namespace

Value tril(const Operand& x, int64_t k) {
  return triangle(x, k, [](const Operand& d, const Operand& k) { return d <= k; }, "pl::tril");
}
Value triu(const Operand& x, int64_t k) {
  return triangle(x, k, [](const Operand& d, const Operand& k) { return d >= k; }, "pl::triu");
}

Value iota(const Shape& shape, int dimension, DType dtype, std::source_location loc) {
  if (shape.empty() || dimension < 0 || dimension >= static_cast<int>(shape.size()))
    throw UserError("pl::iota: the dimension must be one of the shape's dims",
                    fmt::format("dimension {} for shape {}", dimension, shape_tuple_str(shape)),
                    "pass a block shape and a dimension in [0, rank)", loc);
  if (is_bool(dtype))
    throw UserError("pl::iota: the dtype must be numeric", "bool", "use pl::i32 (the default) or a float type", loc);
  auto& ctx = detail::TraceContext::current("pl::iota", loc);
  return emit(ctx, OpKind::Iota, {}, Type::tensor(dtype, shape), int64_t{dimension}, loc);
}

Value broadcast_to(const Operand& x, const Shape& shape) {
  return detail::broadcast_value(x.materialize(), shape, "pl::broadcast_to", x.loc());
}

Value reshape(const Operand& x, const Shape& shape) {
  Value v = x.materialize();
  if (num_elements(shape) != v.type().num_elements())
    throw UserError("pl::reshape: the new shape has a different number of elements",
                    fmt::format("{} to {}", describe(v), shape_tuple_str(shape)),
                    "keep the product of the dims unchanged", x.loc());
  if (shape == v.shape()) return v;
  auto& ctx = detail::TraceContext::current("pl::reshape", x.loc());
  return emit(ctx, OpKind::Reshape, {v}, Type::tensor(v.dtype(), shape), {}, x.loc());
}

Value transpose(const Operand& x, std::vector<int64_t> perm) {
  Value v = x.materialize();
  const int64_t r = v.rank();
  if (perm.empty())
    for (int64_t i = r - 1; i >= 0; --i) perm.push_back(i);
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  bool ok = static_cast<int64_t>(perm.size()) == r;
  for (int64_t i = 0; ok && i < r; ++i) ok = sorted[i] == i;
  if (!ok)
    throw UserError("pl::transpose: perm must list every dim exactly once",
                    fmt::format("perm ({}) for {}", fmt::join(perm, ", "), describe(v)),
                    fmt::format("pass a permutation of 0..{}", r - 1), x.loc());
  Shape s;
  for (int64_t p : perm) s.push_back(v.shape()[p]);
  bool identity = true;
  for (int64_t i = 0; i < r; ++i) identity &= perm[i] == i;
  if (identity) return v;
  auto& ctx = detail::TraceContext::current("pl::transpose", x.loc());
  return emit(ctx, OpKind::Transpose, {v}, Type::tensor(v.dtype(), s), perm, x.loc());
}

Value swapaxes(const Operand& x, int64_t a, int64_t b) {
  Value v = x.materialize();
  const int64_t r = v.rank();
  if (a < 0) a += r;
  if (b < 0) b += r;
  if (a < 0 || a >= r || b < 0 || b >= r)
    throw UserError("pl::swapaxes: axis out of range", fmt::format("axes {} and {} of {}", a, b, describe(v)),
                    fmt::format("use axes in [-{}, {})", r, r), x.loc());
  std::vector<int64_t> perm(static_cast<size_t>(r));
  for (int64_t i = 0; i < r; ++i) perm[i] = i;
  std::swap(perm[a], perm[b]);
  return transpose(v, perm);
}

namespace {

Value reduce(OpKind kind, const Operand& x, const Axes& axes, bool keepdims, std::string_view api) {
  Value v = x.materialize();
  const int64_t r = v.rank();
  std::vector<int64_t> list;
  if (axes.all()) {
    for (int64_t i = 0; i < r; ++i) list.push_back(i);
  } else {
    for (int64_t a : axes.list()) {
      int64_t n = a < 0 ? a + r : a;
      if (n < 0 || n >= r)
        throw UserError(fmt::format("{}: axis out of range", api), fmt::format("axis {} of {}", a, describe(v)),
                        fmt::format("use axes in [-{}, {})", r, r), x.loc());
      list.push_back(n);
    }
  }
  std::set<int64_t> unique(list.begin(), list.end());
  if (unique.size() != list.size())
    throw UserError(fmt::format("{}: an axis is listed twice", api), fmt::format("axes ({})", fmt::join(axes.list(), ", ")),
                    "list each axis once", x.loc());
  if (list.empty()) return v;
  if (is_bool(v.dtype())) {
    if (kind == OpKind::ReduceSum) v = detail::cast_to(v, DType::i32, x.loc());  // counts, as jnp.sum does
  }
  list.assign(unique.begin(), unique.end());
  Shape s;
  for (int64_t i = 0; i < r; ++i)
    if (!unique.count(i)) s.push_back(v.shape()[i]);
  auto& ctx = detail::TraceContext::current(api, x.loc());
  const Value reduced = emit(ctx, kind, {v}, Type::tensor(v.dtype(), s), list, x.loc());
  if (!keepdims) return reduced;
  Shape kept = v.shape();
  for (int64_t a : list) kept[a] = 1;
  return reshape(Operand(reduced, x.loc()), kept);
}

}  // namespace

Value sum(const Operand& x, Axes axes, bool keepdims) { return reduce(OpKind::ReduceSum, x, axes, keepdims, "pl::sum"); }
Value max(const Operand& x, Axes axes, bool keepdims) { return reduce(OpKind::ReduceMax, x, axes, keepdims, "pl::max"); }
Value min(const Operand& x, Axes axes, bool keepdims) { return reduce(OpKind::ReduceMin, x, axes, keepdims, "pl::min"); }

Value Value::reshape(const Shape& shape, std::source_location loc) const { return tessera::reshape(Operand(*this, loc), shape); }
Value Value::sum(Axes axes, bool keepdims, std::source_location loc) const {
  return tessera::sum(Operand(*this, loc), std::move(axes), keepdims);
}
Value Value::max(Axes axes, bool keepdims, std::source_location loc) const {
  return tessera::max(Operand(*this, loc), std::move(axes), keepdims);
}
Value Value::min(Axes axes, bool keepdims, std::source_location loc) const {
  return tessera::min(Operand(*this, loc), std::move(axes), keepdims);
}
Value Value::transpose(std::vector<int64_t> perm, std::source_location loc) const {
  return tessera::transpose(Operand(*this, loc), std::move(perm));
}
Value Value::T(std::source_location loc) const { return tessera::transpose(Operand(*this, loc)); }

namespace {

Value dot_general_at(const Value& va, const Value& vb, const DotDimensionNumbers& dims,
                     std::optional<DType> preferred_element_type, SourceLoc loc) {
  auto fail = [&](const std::string& what, const std::string& fix) {
    throw UserError(fmt::format("pl::dot_general: {}", what),
                    fmt::format("lhs {}, rhs {}, contracting ({}) x ({}), batch ({}) x ({})", describe(va), describe(vb),
                                fmt::join(dims.contracting.first, ", "), fmt::join(dims.contracting.second, ", "),
                                fmt::join(dims.batch.first, ", "), fmt::join(dims.batch.second, ", ")),
                    fix, loc);
  };
  if (is_bool(va.dtype()) || is_bool(vb.dtype())) fail("operands must be numeric", "cast bool operands first");
  // The matmul kernels (jit/llvm/gemm.*) and the interpreter's accumulators cover i8, i32, i64 and
  // the floats; i16 and the unsigned types are not implemented there yet.
  for (DType d : {va.dtype(), vb.dtype(), preferred_element_type.value_or(DType::f32)})
    if (d == DType::i16 || is_unsigned(d))
      fail(fmt::format("{} operands and results are not supported", dtype_name(d)),
           "cast to i32 (or f32) first, e.g. pl::dot(a.astype(pl::i32), b.astype(pl::i32))");
  const auto& [lc, rc] = dims.contracting;
  const auto& [lb, rb] = dims.batch;
  if (lc.size() != rc.size() || lb.size() != rb.size())
    fail("the lhs and rhs dimension lists have different lengths", "pair every lhs dim with one rhs dim");
  auto check_dims = [&](const std::vector<int64_t>& c, const std::vector<int64_t>& bt, int64_t rank, const char* side) {
    std::set<int64_t> seen;
    for (int64_t d : c)
      if (d < 0 || d >= rank || !seen.insert(d).second)
        fail(fmt::format("{} dimension {} is out of range or repeated", side, d), "name each dim once, in [0, rank)");
    for (int64_t d : bt)
      if (d < 0 || d >= rank || !seen.insert(d).second)
        fail(fmt::format("{} dimension {} is out of range or repeated", side, d), "name each dim once, in [0, rank)");
  };
  check_dims(lc, lb, va.rank(), "lhs");
  check_dims(rc, rb, vb.rank(), "rhs");
  for (size_t i = 0; i < lc.size(); ++i)
    if (va.shape()[lc[i]] != vb.shape()[rc[i]])
      fail(fmt::format("contracting dims differ in size: lhs dim {} has {}, rhs dim {} has {}", lc[i], va.shape()[lc[i]],
                       rc[i], vb.shape()[rc[i]]),
           "contract dims of equal size (transpose an operand if needed)");
  for (size_t i = 0; i < lb.size(); ++i)
    if (va.shape()[lb[i]] != vb.shape()[rb[i]])
      fail(fmt::format("batch dims differ in size: lhs dim {} has {}, rhs dim {} has {}", lb[i], va.shape()[lb[i]], rb[i],
                       vb.shape()[rb[i]]),
           "batch dims must have equal sizes");
  Shape s;
  for (int64_t d : lb) s.push_back(va.shape()[d]);
  for (int64_t d = 0; d < va.rank(); ++d)
    if (std::find(lc.begin(), lc.end(), d) == lc.end() && std::find(lb.begin(), lb.end(), d) == lb.end())
      s.push_back(va.shape()[d]);
  for (int64_t d = 0; d < vb.rank(); ++d)
    if (std::find(rc.begin(), rc.end(), d) == rc.end() && std::find(rb.begin(), rb.end(), d) == rb.end())
      s.push_back(vb.shape()[d]);
  DType out = preferred_element_type.value_or(promote(va.dtype(), vb.dtype()));
  auto& ctx = detail::TraceContext::current("pl::dot_general", loc);
  return emit(ctx, OpKind::DotGeneral, {va, vb}, Type::tensor(out, s), ir::DotAttr{lc, rc, lb, rb}, loc);
}

}  // namespace

Value dot_general(const Operand& a, const Operand& b, const DotDimensionNumbers& dims,
                  std::optional<DType> preferred_element_type) {
  return dot_general_at(a.materialize(), b.materialize(), dims, preferred_element_type, a.loc());
}

Value dot(const Operand& a, const Operand& b, std::optional<DType> preferred_element_type) {
  Value va = a.materialize(), vb = b.materialize();
  if (va.rank() < 1 || vb.rank() < 1)
    throw UserError("pl::dot needs operands of rank >= 1", fmt::format("{} and {}", describe(va), describe(vb)),
                    "multiply scalars with operator*", a.loc());
  const int64_t lc = va.rank() - 1;
  const int64_t rc = vb.rank() == 1 ? 0 : vb.rank() - 2;
  if (va.shape()[lc] != vb.shape()[rc])
    throw UserError("pl::dot: the contracting dims differ in size",
                    fmt::format("{} and {}: dim {} of a has {} elements, dim {} of b has {}", describe(va), describe(vb),
                                lc, va.shape()[lc], rc, vb.shape()[rc]),
                    "the last dim of a must equal the first (rank 1) or second-to-last dim of b", a.loc());
  return dot_general_at(va, vb, DotDimensionNumbers{{{lc}, {rc}}, {{}, {}}}, preferred_element_type, a.loc());
}

}  // namespace tessera
