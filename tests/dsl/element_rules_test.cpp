// Edge values through every element op x dtype: NaN (with payloads and signs), +-inf, -0, subnormals,
// INT_MIN, -1, zero divisors, overflow and bf16/f16 rounding ties, as arrays through pallas_call
// compiled and interpreted, and as literals through the constant folder. Every result must match
// the other backend bit for bit and the rule of runtime/element_rules.h (evaluated here, element by
// element, in the compute type and rounded into the dtype once).
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "runtime/element_rules.h"
#include "runtime/numeric.h"
#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;

namespace {

enum class Op {
  Add, Sub, Mul, Div, Rem, Pow, Max, Min, FloorDiv, Mod, And, Or, Xor, Eq, Ne, Lt, Le, Gt, Ge,
  Neg, Abs, Not, Exp, Log, Tanh, Sqrt, Rsqrt, Sigmoid, Sin, Cos, Floor, Ceil
};

struct OpInfo {
  Op op;
  const char* name;
  bool ints, floats;  // which dtypes it applies to
};

const std::vector<OpInfo> kBinary = {
    {Op::Add, "add", true, true},        {Op::Sub, "sub", true, true},   {Op::Mul, "mul", true, true},
    {Op::Div, "div", true, true},        {Op::Rem, "rem", true, true},   {Op::Pow, "pow", true, true},
    {Op::Max, "maximum", true, true},    {Op::Min, "minimum", true, true}, {Op::FloorDiv, "floor_divide", true, true},
    {Op::Mod, "mod", true, true},        {Op::And, "and", true, false},  {Op::Or, "or", true, false},
    {Op::Xor, "xor", true, false},       {Op::Eq, "eq", true, true},     {Op::Ne, "ne", true, true},
    {Op::Lt, "lt", true, true},          {Op::Le, "le", true, true},     {Op::Gt, "gt", true, true},
    {Op::Ge, "ge", true, true}};
const std::vector<OpInfo> kUnary = {
    {Op::Neg, "neg", true, true},      {Op::Abs, "abs", true, true},     {Op::Not, "not", true, false},
    {Op::Exp, "exp", false, true},     {Op::Log, "log", false, true},    {Op::Tanh, "tanh", false, true},
    {Op::Sqrt, "sqrt", false, true},   {Op::Rsqrt, "rsqrt", false, true}, {Op::Sigmoid, "sigmoid", false, true},
    {Op::Sin, "sin", false, true},     {Op::Cos, "cos", false, true},    {Op::Floor, "floor", false, true},
    {Op::Ceil, "ceil", false, true}};

const std::vector<pl::DType> kNumericTypes = {pl::i8,  pl::i16,  pl::i32, pl::i64, pl::u8,  pl::u16,
                                             pl::u32, pl::u64,  pl::bf16, pl::f16, pl::f32, pl::f64};
const std::vector<pl::DType> kAllTypes = {pl::bool_, pl::i8,  pl::i16,  pl::i32, pl::i64, pl::u8,  pl::u16,
                                          pl::u32,   pl::u64, pl::bf16, pl::f16, pl::f32, pl::f64};

bool is_comparison(Op op) { return op >= Op::Eq && op <= Op::Ge; }

pl::Value apply(Op op, const pl::Value& a, const pl::Value& b) {
  switch (op) {
    case Op::Add: return a + b;
    case Op::Sub: return a - b;
    case Op::Mul: return a * b;
    case Op::Div: return a / b;
    case Op::Rem: return a % b;
    case Op::Pow: return pl::pow(a, b);
    case Op::Max: return pl::maximum(a, b);
    case Op::Min: return pl::minimum(a, b);
    case Op::FloorDiv: return pl::floor_divide(a, b);
    case Op::Mod: return pl::mod(a, b);
    case Op::And: return a & b;
    case Op::Or: return a | b;
    case Op::Xor: return a ^ b;
    case Op::Eq: return a == b;
    case Op::Ne: return a != b;
    case Op::Lt: return a < b;
    case Op::Le: return a <= b;
    case Op::Gt: return a > b;
    case Op::Ge: return a >= b;
    default: break;
  }
  FAIL("not a binary op");
  return a;
}
pl::Value apply(Op op, const pl::Value& a) {
  switch (op) {
    case Op::Neg: return -a;
    case Op::Abs: return pl::abs(a);
    case Op::Not: return ~a;
    case Op::Exp: return pl::exp(a);
    case Op::Log: return pl::log(a);
    case Op::Tanh: return pl::tanh(a);
    case Op::Sqrt: return pl::sqrt(a);
    case Op::Rsqrt: return pl::rsqrt(a);
    case Op::Sigmoid: return pl::sigmoid(a);
    case Op::Sin: return pl::sin(a);
    case Op::Cos: return pl::cos(a);
    case Op::Floor: return pl::floor(a);
    case Op::Ceil: return pl::ceil(a);
    default: break;
  }
  FAIL("not a unary op");
  return a;
}

// ---- the rules, element by element (the reference) ----

template <class C> C ref_binary(Op op, C x, C y) {
  if constexpr (std::is_floating_point_v<C>) {
    switch (op) {
      case Op::Add: return x + y;
      case Op::Sub: return x - y;
      case Op::Mul: return x * y;
      case Op::Div: return x / y;
      case Op::Rem: return rules::float_rem(x, y);
      case Op::Pow: return rules::float_pow(x, y);
      case Op::Max: return rules::float_max(x, y);
      case Op::Min: return rules::float_min(x, y);
      case Op::FloorDiv: return rules::float_floor_div(x, y);
      case Op::Mod: return rules::float_mod(x, y);
      default: break;
    }
  } else {
    switch (op) {
      case Op::Add: return rules::wrap_add(x, y);
      case Op::Sub: return rules::wrap_sub(x, y);
      case Op::Mul: return rules::wrap_mul(x, y);
      case Op::Div: return rules::int_div(x, y);
      case Op::Rem: return rules::int_rem(x, y);
      case Op::Pow: return rules::int_pow(x, y);
      case Op::Max: return rules::int_max(x, y);
      case Op::Min: return rules::int_min(x, y);
      case Op::FloorDiv: return rules::int_floor_div(x, y);
      case Op::Mod: return rules::int_mod(x, y);
      case Op::And: return static_cast<C>(x & y);
      case Op::Or: return static_cast<C>(x | y);
      case Op::Xor: return static_cast<C>(x ^ y);
      default: break;
    }
  }
  FAIL("no reference");
  return x;
}
template <class C> bool ref_compare(Op op, C x, C y) {
  switch (op) {
    case Op::Eq: return x == y;
    case Op::Ne: return x != y;
    case Op::Lt: return x < y;
    case Op::Le: return x <= y;
    case Op::Gt: return x > y;
    default: return x >= y;
  }
}
template <class C> C ref_unary(Op op, C x) {
  if constexpr (std::is_floating_point_v<C>) {
    switch (op) {
      case Op::Neg: return -x;
      case Op::Abs: return std::abs(x);
      case Op::Exp: return rules::float_exp(x);
      case Op::Log: return rules::float_log(x);
      case Op::Tanh: return rules::float_tanh(x);
      case Op::Sqrt: return std::sqrt(x);
      case Op::Rsqrt: return C(1) / std::sqrt(x);
      case Op::Sigmoid: return rules::float_logistic(x);
      case Op::Sin: return rules::float_sin(x);
      case Op::Cos: return rules::float_cos(x);
      case Op::Floor: return std::floor(x);
      case Op::Ceil: return std::ceil(x);
      default: break;
    }
  } else {
    switch (op) {
      case Op::Neg: return rules::int_neg(x);
      case Op::Abs: return rules::int_abs(x);
      case Op::Not: return static_cast<C>(~x);
      default: break;
    }
  }
  FAIL("no reference");
  return x;
}

// ---- edge values ----

// One element's bits, zero-extended.
uint64_t bits_at(const pl::Array& a, int64_t i) {
  uint64_t u = 0;
  const int64_t es = pl::dtype_size(a.dtype());
  std::memcpy(&u, a.data() + i * es, static_cast<size_t>(es));
  return u;
}
void set_bits(pl::Array& a, int64_t i, uint64_t u) {
  const int64_t es = pl::dtype_size(a.dtype());
  std::memcpy(a.mutable_data() + i * es, &u, static_cast<size_t>(es));
}
std::string show(const pl::Array& a, int64_t i) {
  return fmt::format("{} (0x{:x})", a.reshape({a.size()}).at<double>({i}), bits_at(a, i));
}

// The edge values of a dtype, as a 1-d array.
pl::Array edges(pl::DType d) {
  if (d == pl::bool_) return pl::Array::from_vector<bool>({false, true}, {2});
  if (!pl::is_float(d)) {
    return dispatch_dtype(d, [&]<class T>() {
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        constexpr T lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
        // Negative values wrap into an unsigned type (-1 is its largest value); 127 .. 65536 are
        // the limits of the narrower types, and wrap in them.
        std::vector<T> v;
        for (int64_t k : {0, 1, -1, 2, -2, 3, -3, 7, -7, 100, -100, 127, 128, 255, 256, 32767, 32768, 65535, 65536})
          v.push_back(static_cast<T>(k));
        for (T k : {lo, T(lo + 1), hi, T(hi - 1)}) v.push_back(k);
        // Just above a bf16 tie that rounding to f32 first would hide (2^24 + 2^16 + 1).
        if constexpr (sizeof(T) >= 4) v.push_back(T(16842753));
        // 2^63 (INT64_MIN's bits, the first u64 an i64 cannot hold), one past it, and 2^53 + 1, the
        // first integer a double cannot hold (u64 -> f64 rounds it).
        if constexpr (sizeof(T) == 8)
          for (uint64_t k : {uint64_t{1} << 63, (uint64_t{1} << 63) + 1, (uint64_t{1} << 53) + 1})
            v.push_back(static_cast<T>(k));
        return pl::Array::from_vector<T>(v, {static_cast<int64_t>(v.size())});
      } else {
        return pl::Array();
      }
    });
  }
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> v = {0.0, -0.0, 1, -1, 0.1, -0.1, 0.5, -0.5, 1.5, -2.5, 2.5, 3, -7, 1.0 / 3,
                           1 + std::ldexp(1.0, -8), 1 + 3 * std::ldexp(1.0, -8),      // bf16 ties
                           1 + std::ldexp(1.0, -11), 1 + 3 * std::ldexp(1.0, -11),    // f16 ties
                           // just above a bf16 / f16 tie, by less than an f32 unit
                           1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30), 1 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40),
                           65504, 65520, 1e10, 16777217, 2147483520, 2147483648.0, -2147483904.0,
                           9.3e18, -9.3e18, 1.8e19, std::ldexp(1.0, 64), std::ldexp(1.0, 64) - std::ldexp(1.0, 11),
                           3.0e38, -3.4e38, 1e300, 1e-40, std::ldexp(1.0, -24),
                           std::ldexp(1.0, -14), inf, -inf, std::nan("")};
  pl::Array a = pl::Array::from_vector<double>(v, {static_cast<int64_t>(v.size())}, d);
  // Bit patterns that no double literal gives: NaNs with a sign or a payload, the smallest and the
  // largest subnormal.
  std::vector<uint64_t> raw;
  switch (d) {
    case pl::DType::bf16: raw = {0xffc0, 0x7fc1, 0x7f81, 0x0001, 0x807f}; break;
    case pl::DType::f16: raw = {0xfe00, 0x7e01, 0x7c01, 0x0001, 0x83ff}; break;
    case pl::DType::f32: raw = {0xffc00000, 0x7fc00001, 0x7f800001, 0x00000001, 0x807fffff}; break;
    default: raw = {0xfff8000000000000ull, 0x7ff8000000000001ull, 0x7ff0000000000001ull, 1, 0x800fffffffffffffull}; break;
  }
  pl::Array out(d, {a.size() + static_cast<int64_t>(raw.size())});
  std::memcpy(out.mutable_data(), a.data(), static_cast<size_t>(a.size() * pl::dtype_size(d)));
  for (size_t i = 0; i < raw.size(); ++i) set_bits(out, a.size() + static_cast<int64_t>(i), raw[i]);
  return out;
}

// Every ordered pair of edge values, as two arrays of n * n.
std::pair<pl::Array, pl::Array> pairs(pl::DType d) {
  pl::Array e = edges(d);
  const int64_t n = e.size();
  pl::Array x(d, {n * n}), y(d, {n * n});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      set_bits(x, i * n + j, bits_at(e, i));
      set_bits(y, i * n + j, bits_at(e, j));
    }
  return {x, y};
}

bool is_nan_at(const pl::Array& a, int64_t i) {
  return pl::is_float(a.dtype()) && std::isnan(a.reshape({a.size()}).at<double>({i}));
}

// Which NaN an arithmetic op returns when an operand is NaN is not part of the rules: the hardware
// propagates one of the operands' NaNs, and which one depends on the operand order the C++ compiler
// or LLVM picks for a commutative op. Ops whose NaN is a rule (max / min, their reductions, neg, abs,
// casts) are checked bit for bit.
enum class Nan { any, exact };

// Checks `got` bit for bit against `want`; reports the first few differences with the inputs.
void check_bits(const std::string& what, const pl::Array& got, const pl::Array& want, const std::vector<pl::Array>& inputs,
                Nan nan = Nan::exact) {
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(got.size() == want.size());
  std::string report;
  int bad = 0;
  for (int64_t i = 0; i < got.size(); ++i) {
    if (bits_at(got, i) == bits_at(want, i)) continue;
    if (nan == Nan::any && is_nan_at(want, i) && is_nan_at(got, i)) continue;
    if (++bad > 6) continue;
    std::string in;
    for (const pl::Array& x : inputs) in += (in.empty() ? "" : ", ") + show(x, i);
    report += fmt::format("\n  f({}) = {}, want {}", in, show(got, i), show(want, i));
  }
  if (bad) FAIL_CHECK(what << ": " << bad << " of " << got.size() << " elements differ" << report);
}

// The rule's result for every element of the inputs, in `out` dtype.
pl::Array reference_binary(Op op, const pl::Array& x, const pl::Array& y) {
  const pl::DType d = x.dtype();
  pl::Array r(is_comparison(op) ? pl::bool_ : d, x.shape());
  dispatch_dtype(d, [&]<class T>() {
    using C = compute_t<T>;
    const T* a = x.data_as<T>();
    const T* b = y.data_as<T>();
    for (int64_t i = 0; i < x.size(); ++i) {
      if (is_comparison(op)) r.mutable_data_as<bool>()[i] = ref_compare<C>(op, widen(a[i]), widen(b[i]));
      else if constexpr (!std::is_same_v<T, bool>) r.mutable_data_as<T>()[i] = narrow<T>(ref_binary<C>(op, widen(a[i]), widen(b[i])));
    }
  });
  return r;
}
pl::Array reference_unary(Op op, const pl::Array& x) {
  pl::Array r(x.dtype(), x.shape());
  dispatch_dtype(x.dtype(), [&]<class T>() {
    using C = compute_t<T>;
    if constexpr (!std::is_same_v<T, bool>) {
      const T* a = x.data_as<T>();
      for (int64_t i = 0; i < x.size(); ++i) r.mutable_data_as<T>()[i] = narrow<T>(ref_unary<C>(op, widen(a[i])));
    }
  });
  return r;
}

// Runs `kernel` compiled and interpreted; both must equal `want` bit for bit.
template <class Kernel, class... Args>
void check_backends(const std::string& what, Nan nan, Kernel kernel, const pl::Array& want, const std::vector<pl::Array>& inputs,
                    const Args&... args) {
  for (const testing::Backend& backend : testing::backends()) {
    pl::Array got = pl::pallas_call(kernel, pl::GridSpec{}, pl::ShapeDtype(want.shape(), want.dtype()), backend.options)(args...);
    check_bits(what + " (" + backend.name + ")", got, want, inputs, nan);
  }
}
Nan nan_rule(Op op) { return op == Op::Max || op == Op::Min || op == Op::Neg || op == Op::Abs ? Nan::exact : Nan::any; }

std::string name_of(const OpInfo& info, pl::DType d) { return fmt::format("{} {}", info.name, pl::dtype_name(d)); }

// The rule's sum (which 0), max (1) or min (2) of every row of `in`, folded in order.
pl::Array reference_reduce(const pl::Array& in, int which) {
  const pl::DType d = in.dtype();
  pl::Array want(d, {in.shape()[0]});
  dispatch_dtype(d, [&]<class T>() {
    using C = compute_t<T>;
    const T* p = in.data_as<T>();
    for (int64_t r = 0; r < in.shape()[0]; ++r) {
      C acc;
      if constexpr (std::is_floating_point_v<C>)
        acc = which == 0 ? C(0) : which == 1 ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
      else
        acc = which == 0 ? C(0) : which == 1 ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
      for (int64_t c = 0; c < in.shape()[1]; ++c) {
        const C v = widen(p[r * in.shape()[1] + c]);
        if constexpr (std::is_floating_point_v<C>) {
          acc = which == 0 ? acc + v : which == 1 ? rules::float_max(acc, v) : rules::float_min(acc, v);
        } else if constexpr (std::is_same_v<C, bool>) {
          acc = which == 1 ? (acc || v) : (acc && v);
        } else {
          acc = which == 0 ? rules::wrap_add(acc, v) : which == 1 ? rules::int_max(acc, v) : rules::int_min(acc, v);
        }
      }
      want.mutable_data_as<T>()[r] = narrow<T>(acc);
    }
  });
  return want;
}

// Reduces every row of `in` on both backends and checks the rule's result (a sum's NaN is any NaN).
void check_reduction(const pl::Array& in, int which) {
  const char* names[] = {"sum", "max", "min"};
  auto kernel = [which](pl::Ref a, pl::Ref o) {
    o() = which == 0 ? pl::sum(a(), 1) : which == 1 ? pl::max(a(), 1) : pl::min(a(), 1);
  };
  check_backends(fmt::format("{} {} over {}", names[which], pl::dtype_name(in.dtype()), in.shape()[1]),
                 which == 0 ? Nan::any : Nan::exact, kernel, reference_reduce(in, which), {}, in);
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("element rules: binary ops on every pair of edge values, both backends") {
    for (const OpInfo& info : kBinary)
      for (pl::DType d : kNumericTypes) {
        if (pl::is_float(d) ? !info.floats : !info.ints) continue;
        auto [x, y] = pairs(d);
        const Op op = info.op;
        auto kernel = [op](pl::Ref a, pl::Ref b, pl::Ref o) { o() = apply(op, a(), b()); };
        check_backends(name_of(info, d), nan_rule(op), kernel, reference_binary(op, x, y), {x, y}, x, y);
      }
  }

  TEST_CASE("element rules: unary ops on every edge value, both backends") {
    for (const OpInfo& info : kUnary)
      for (pl::DType d : kNumericTypes) {
        if (pl::is_float(d) ? !info.floats : !info.ints) continue;
        pl::Array x = edges(d);
        const Op op = info.op;
        auto kernel = [op](pl::Ref a, pl::Ref o) { o() = apply(op, a()); };
        check_backends(name_of(info, d), nan_rule(op), kernel, reference_unary(op, x), {x}, x);
      }
  }

  TEST_CASE("element rules: exp, log, tanh and logistic over a sweep of each float type, both backends") {
    // tessera's own algorithms (runtime/element_math.h): the compiled steps, vectorised, must give
    // the interpreter's bits. f32: every 65537th bit pattern plus the 64 floats either side of each
    // threshold of the four functions; bf16 and f16: every bit pattern.
    for (pl::DType d : {pl::f32, pl::bf16, pl::f16}) {
      std::vector<uint64_t> raw;
      if (d == pl::f32) {
        for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 65537) raw.push_back(u);
        for (float t : {88.7228394f, -87.3365479f, -103.972076f, 0.0f, 1.0f, 0.70710677f, 1.41421354f, 0.625f, -0.625f,
                        9.01091290f, 16.6355324f, std::numeric_limits<float>::min()}) {
          float lo = t, hi = t;
          for (int i = 0; i < 64; ++i) {
            lo = std::nextafter(lo, -std::numeric_limits<float>::infinity());
            hi = std::nextafter(hi, std::numeric_limits<float>::infinity());
            raw.push_back(std::bit_cast<uint32_t>(lo));
            raw.push_back(std::bit_cast<uint32_t>(hi));
          }
        }
      } else {
        for (uint64_t u = 0; u < 65536; ++u) raw.push_back(u);
      }
      pl::Array x(d, {static_cast<int64_t>(raw.size())});
      for (size_t i = 0; i < raw.size(); ++i) set_bits(x, static_cast<int64_t>(i), raw[i]);
      for (const OpInfo& info : kUnary) {
        const Op op = info.op;
        if (op != Op::Exp && op != Op::Log && op != Op::Tanh && op != Op::Sigmoid) continue;
        auto kernel = [op](pl::Ref a, pl::Ref o) { o() = apply(op, a()); };
        check_backends(name_of(info, d) + " sweep", Nan::any, kernel, reference_unary(op, x), {x}, x);
      }
    }
  }

  TEST_CASE("element rules: pow with a literal exponent or base, which LLVM may rewrite, both backends") {
    for (pl::DType d : {pl::bf16, pl::f16, pl::f32, pl::f64})
      for (double c : {0.5, -0.5, 2.0, -1.0, 3.0, 0.0, 1.0, 1.5}) {
        pl::Array x = edges(d);
        pl::Array want(d, x.shape());
        dispatch_dtype(d, [&]<class T>() {
          using C = compute_t<T>;
          if constexpr (std::is_floating_point_v<C>)
            for (int64_t i = 0; i < x.size(); ++i)
              want.mutable_data_as<T>()[i] = narrow<T>(rules::float_pow(widen(x.data_as<T>()[i]), static_cast<C>(c)));
        });
        auto kernel = [c](pl::Ref a, pl::Ref o) { o() = pl::pow(a(), c); };
        check_backends(fmt::format("pow(x, {}) {}", c, pl::dtype_name(d)), Nan::any, kernel, want, {x}, x);
        // And the literal as the base.
        dispatch_dtype(d, [&]<class T>() {
          using C = compute_t<T>;
          if constexpr (std::is_floating_point_v<C>)
            for (int64_t i = 0; i < x.size(); ++i)
              want.mutable_data_as<T>()[i] = narrow<T>(rules::float_pow(static_cast<C>(widen(from_double<T>(c))), widen(x.data_as<T>()[i])));
        });
        auto base_kernel = [c, d](pl::Ref a, pl::Ref o) { o() = pl::pow(pl::full({}, c, d), a()); };
        check_backends(fmt::format("pow({}, x) {}", c, pl::dtype_name(d)), Nan::any, base_kernel, want, {x}, x);
      }
  }

  TEST_CASE("element rules: pow with a power-of-two base is libm's pow in compiled code too") {
    // As a builtin, LLVM rewrote powf(8, y) into exp2f(3 * y), rounding 3 * y first: the fuzzer found
    // 8^3.96 off by 5 ulp. Ordinary exponents show it; the edge values do not.
    for (pl::DType d : {pl::f32, pl::f64})
      for (double base : {8.0, 32.0, 0.125}) {
        std::vector<double> exponents;
        for (double e = -4.0; e < 4.0; e += 0.37) exponents.push_back(e);
        pl::Array x = pl::Array::from_vector(exponents, {static_cast<int64_t>(exponents.size())}, d);
        pl::Array want(d, x.shape());
        dispatch_dtype(d, [&]<class T>() {
          using C = compute_t<T>;
          if constexpr (std::is_floating_point_v<C>)
            for (int64_t i = 0; i < x.size(); ++i)
              want.mutable_data_as<T>()[i] = narrow<T>(rules::float_pow(static_cast<C>(base), widen(x.data_as<T>()[i])));
        });
        auto kernel = [base, d](pl::Ref a, pl::Ref o) { o() = pl::pow(pl::full({}, base, d), a()); };
        check_backends(fmt::format("pow({}, x) {}", base, pl::dtype_name(d)), Nan::any, kernel, want, {x}, x);
      }
  }

  TEST_CASE("element rules: binary ops with one literal operand, which LLVM may rewrite, both backends") {
    // Row k of the output is f(x, c_k), row L + k is f(c_k, x): a literal operand lets LLVM's
    // instruction combiner rewrite the op (x * 2 to x + x, x / -1 to -x, ...), which must not
    // change a result.
    // Arithmetic only (comparisons and bitwise ops have nothing to rewrite that could differ), and
    // i64 shares i32's code paths, and i16 and u16 those of i8 and u8: the kernels here are the slowest of
    // the suite to compile.
    for (const OpInfo& info : kBinary)
      for (pl::DType d : {pl::i8, pl::i32, pl::u8, pl::u32, pl::bf16, pl::f16, pl::f32, pl::f64}) {
        if (pl::is_float(d) ? !info.floats : !info.ints) continue;
        if (is_comparison(info.op) || info.op == Op::And || info.op == Op::Or || info.op == Op::Xor) continue;
        // Unsigned types take 200 where the others take -1: a negative fill has no unsigned value.
        const std::vector<double> lits = pl::is_float(d)      ? std::vector<double>{0.0, -0.0, 1, -1, 2, std::nan("")}
                                         : pl::is_unsigned(d) ? std::vector<double>{0, 1, 200, 2}
                                                              : std::vector<double>{0, 1, -1, 2};
        const int64_t nl = static_cast<int64_t>(lits.size());
        pl::Array x = edges(d);
        const int64_t n = x.size();
        pl::Array lx(d, {2 * nl, n}), ly(d, {2 * nl, n});
        for (int64_t k = 0; k < nl; ++k) {
          pl::Array c = pl::Array::full({1}, lits[k], d);
          for (int64_t i = 0; i < n; ++i) {
            set_bits(lx, k * n + i, bits_at(x, i));
            set_bits(ly, k * n + i, bits_at(c, 0));
            set_bits(lx, (nl + k) * n + i, bits_at(c, 0));
            set_bits(ly, (nl + k) * n + i, bits_at(x, i));
          }
        }
        const Op op = info.op;
        auto kernel = [op, lits, d](pl::Ref a, pl::Ref o) {
          const int64_t count = static_cast<int64_t>(lits.size());
          for (int64_t k = 0; k < count; ++k) {
            o(k, pl::all) = apply(op, a(), pl::full({}, lits[k], d));
            o(count + k, pl::all) = apply(op, pl::full({}, lits[k], d), a());
          }
        };
        check_backends(name_of(info, d) + " with a literal", nan_rule(op), kernel,
                       reference_binary(op, lx, ly).reshape({2 * nl, n}), {lx.reshape({2 * nl * n}), ly.reshape({2 * nl * n})}, x);
      }
  }

  TEST_CASE("element rules: logic and comparisons on bool, both backends") {
    auto [x, y] = pairs(pl::bool_);
    for (Op op : {Op::And, Op::Or, Op::Xor, Op::Eq, Op::Ne, Op::Lt, Op::Le, Op::Gt, Op::Ge}) {
      pl::Array want(pl::bool_, x.shape());
      for (int64_t i = 0; i < x.size(); ++i) {
        const bool a = x.data_as<bool>()[i], b = y.data_as<bool>()[i];
        want.mutable_data_as<bool>()[i] = op == Op::And ? (a && b) : op == Op::Or ? (a || b) : op == Op::Xor ? a != b
                                                                                               : ref_compare(op, a, b);
      }
      auto kernel = [op](pl::Ref a, pl::Ref b, pl::Ref o) { o() = apply(op, a(), b()); };
      check_backends(fmt::format("op {} on bool", static_cast<int>(op)), Nan::exact, kernel, want, {x, y}, x, y);
    }
    pl::Array e = edges(pl::bool_);
    pl::Array want = pl::Array::from_vector<bool>({true, false}, {2});
    check_backends("not bool", Nan::exact, [](pl::Ref a, pl::Ref o) { o() = ~a(); }, want, {e}, e);
  }

  TEST_CASE("element rules: the constant folder casts and negates by the same rules") {
    // A literal cast (or negated) in the kernel folds at compile time through Array::astype.
    struct Case {
      pl::DType from, to;
      double v;
      bool negate;
    };
    const std::vector<Case> cases = {
        {pl::f64, pl::bf16, 1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30), false},
        {pl::f64, pl::f16, 1 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40), false},
        {pl::i32, pl::bf16, 16842753, false},
        {pl::f32, pl::i32, 3e9, false},
        {pl::f32, pl::i8, -1e9, false},
        {pl::f32, pl::i32, std::nan(""), false},
        {pl::f64, pl::i64, 1e300, false},
        {pl::f64, pl::u64, 1.8e19, false},
        {pl::f32, pl::u64, -1e9, false},
        {pl::f64, pl::u64, std::ldexp(1.0, 64), false},
        {pl::u64, pl::f32, 1.8e19, false},
        {pl::u64, pl::u64, 5, true},
        {pl::f32, pl::bool_, std::nan(""), false},
        {pl::f32, pl::f32, 0.0, true},
        {pl::i8, pl::i8, -128, true}};
    for (const Case& c : cases) {
      pl::Array x = pl::Array::full({1}, c.v, c.from);
      pl::Array want = c.negate ? reference_unary(Op::Neg, x) : x.astype(c.to);
      auto kernel = [c](pl::Ref o) {
        pl::Value v = pl::full({1}, c.v, c.from);
        o() = c.negate ? -v : v.astype(c.to);
      };
      check_backends(fmt::format("folded {}({}) {} -> {}", c.negate ? "neg" : "astype", c.v, pl::dtype_name(c.from),
                                 pl::dtype_name(c.to)),
                     Nan::exact, kernel, want, {x});
    }
  }

  TEST_CASE("element rules: casts between every pair of dtypes, both backends") {
    for (pl::DType from : kAllTypes) {
      pl::Array x = edges(from);
      for (pl::DType to : kAllTypes) {
        // The rule: runtime/element_rules.h through Array::astype (rules::float_to_int, bf16/f16
        // rounding once, x != 0 for bool, wrap-around between integers).
        pl::Array want = x.astype(to);
        auto kernel = [to](pl::Ref a, pl::Ref o) { o() = a().astype(to); };
        check_backends(fmt::format("astype {} -> {}", pl::dtype_name(from), pl::dtype_name(to)), Nan::exact, kernel, want, {x}, x);
      }
    }
  }

  TEST_CASE("element rules: reductions over edge values, both backends") {
    for (pl::DType d : kAllTypes) {
      // Every ordered pair as a row of two (max/min order and signed zeros), then each edge value
      // alone, then the whole edge set as one row (overflow, inf - inf, NaN anywhere).
      auto [x, y] = pairs(d);
      const int64_t n = x.size();
      pl::Array rows(d, {n, 2});
      for (int64_t i = 0; i < n; ++i) {
        set_bits(rows, 2 * i, bits_at(x, i));
        set_bits(rows, 2 * i + 1, bits_at(y, i));
      }
      pl::Array e = edges(d);
      pl::Array whole = e.reshape({1, e.size()});
      for (const pl::Array& in : {rows, whole}) {
        for (int which = 0; which < 3; ++which) {
          if (d == pl::bool_ && which == 0) continue;  // sum over bool is not a DSL op
          check_reduction(in, which);
        }
      }
    }
  }

  TEST_CASE("element rules: reductions over long rows, which compiled code vectorises, both backends") {
    // Rows of 1000, far beyond a vector loop's width and unrolling: each row holds small integers
    // and one edge value at a position that moves from row to row, so it lands in every lane,
    // unrolled copy and the loop's remainder; plus rows of signed zeros only, where max must find
    // +0 and min -0 whatever their order. Sums may be grouped differently in compiled code
    // (§4.14), so their rows take only the edge values whose sum with small integers is exact in
    // any order: the non-finite ones and halves up to 1024.
    const int64_t cols = 1000;
    for (pl::DType d : {pl::f32, pl::f64, pl::bf16, pl::f16}) {
      const pl::Array e = edges(d);
      const int64_t rows = e.size() * 4 + 3;
      std::vector<double> v(static_cast<size_t>(rows * cols));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t i = r * cols + c;
          if (r == rows - 3) v[i] = (c * 5 + 3) % 7 ? -0.0 : 0.0;  // mixed signed zeros
          else v[i] = r == rows - 2 ? -0.0 : r == rows - 1 ? 0.0 : static_cast<double>((r * 7 + c * 13) % 17) - 8;
        }
      for (int which = 0; which < 3; ++which) {
        pl::Array in = pl::Array::from_vector<double>(v, {rows, cols}, d);
        for (int64_t r = 0; r < rows - 3; ++r) {
          const int64_t k = r % e.size();
          const double x = e.reshape({e.size()}).at<double>({k});
          if (which == 0 && std::isfinite(x) && !(std::abs(x) <= 1024 && std::round(2 * x) == 2 * x)) continue;
          set_bits(in, r * cols + (r * 131) % cols, bits_at(e, k));
        }
        check_reduction(in, which);
      }
    }
  }

  TEST_CASE("element rules: the constant folder computes the same rules") {
    // Literal operands: canonicalize folds the op at compile time (runtime/block_ops.cpp), and
    // compiled code bakes the result in.
    struct Case {
      Op op;
      pl::DType d;
      double a, b;
    };
    const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
    const std::vector<Case> cases = {
        {Op::FloorDiv, pl::f32, 1.0, 0.1}, {Op::Mod, pl::f32, 1.0, 0.1},     {Op::FloorDiv, pl::f64, 1.0, 0.1},
        {Op::FloorDiv, pl::f32, -1.0, inf}, {Op::Mod, pl::f32, -1.0, inf},    {Op::Mod, pl::f32, -0.0, 3},
        {Op::Mod, pl::f32, 0.0, -3},        {Op::FloorDiv, pl::f32, 1, 0},    {Op::FloorDiv, pl::f32, -0.0, 5},
        {Op::Max, pl::f32, -0.0, 0.0},      {Op::Max, pl::f32, 0.0, -0.0},    {Op::Min, pl::f32, 0.0, -0.0},
        {Op::Max, pl::bf16, nan, 1},        {Op::Min, pl::f64, 1, nan},       {Op::Add, pl::bf16, 1, std::ldexp(1.0, -8)},
        {Op::Div, pl::i32, -2147483648.0, -1}, {Op::Rem, pl::i32, -2147483648.0, -1}, {Op::Div, pl::i32, 7, 0},
        {Op::Rem, pl::i32, -7, 0},          {Op::FloorDiv, pl::i32, -7, 0},   {Op::Mod, pl::i32, -7, 0},
        {Op::FloorDiv, pl::i8, -128, -1},   {Op::Mod, pl::i8, -7, 2},         {Op::Mul, pl::i8, 100, 3},
        {Op::Pow, pl::i32, -1, -3},         {Op::Pow, pl::i32, 3, 40},        {Op::Div, pl::f16, 1, 3},
        {Op::Div, pl::u64, 1.8e19, 7},      {Op::Div, pl::u64, 1.8e19, 0},    {Op::Rem, pl::u64, 1.8e19, 0},
        {Op::Max, pl::u64, 1.8e19, 1},      {Op::Pow, pl::u64, 3, 41},        {Op::Sub, pl::u64, 0, 1}};
    for (const Case& c : cases) {
      pl::Array x = pl::Array::full({1}, c.a, c.d), y = pl::Array::full({1}, c.b, c.d);
      const pl::DType d = c.d;
      const double a = c.a, b = c.b;
      const Op op = c.op;
      auto kernel = [=](pl::Ref o) { o() = apply(op, pl::full({1}, a, d), pl::full({1}, b, d)); };
      std::string what;
      for (const OpInfo& i : kBinary)
        if (i.op == op) what = fmt::format("folded {}({}, {}) in {}", i.name, a, b, pl::dtype_name(d));
      check_backends(what, nan_rule(op), kernel, reference_binary(op, x, y), {x, y});
    }
  }

  TEST_CASE("element rules: spot values of the header's rules") {
    CHECK(rules::float_floor_div(1.0, 0.1) == 9.0);
    CHECK(rules::float_floor_div(1.0f, 0.1f) == 9.0f);
    CHECK(rules::float_mod(1.0, 0.1) == std::fmod(1.0, 0.1));
    CHECK(rules::float_floor_div(-1.0, std::numeric_limits<double>::infinity()) == -1.0);
    CHECK(rules::float_mod(-1.0, std::numeric_limits<double>::infinity()) == std::numeric_limits<double>::infinity());
    CHECK(std::signbit(rules::float_mod(0.0, -3.0)));
    CHECK(!std::signbit(rules::float_mod(-0.0, 3.0)));
    CHECK(std::signbit(rules::float_floor_div(-0.0, 5.0)));
    CHECK(std::isinf(rules::float_floor_div(1.0, 0.0)));
    CHECK(std::isnan(rules::float_mod(1.0, 0.0)));
    CHECK(rules::int_floor_div<int32_t>(-7, 2) == -4);
    CHECK(rules::int_mod<int32_t>(-7, 2) == 1);
    CHECK(rules::int_floor_div<int32_t>(-7, 0) == -1);
    CHECK(rules::int_mod<int32_t>(-7, 0) == -7);
    CHECK(rules::int_div<int8_t>(-128, -1) == -128);
    CHECK(rules::int_rem<int8_t>(-128, -1) == 0);
    CHECK(!std::signbit(rules::float_max(-0.0f, 0.0f)));
    CHECK(!std::signbit(rules::float_max(0.0f, -0.0f)));
    CHECK(std::signbit(rules::float_min(0.0f, -0.0f)));
    CHECK(std::bit_cast<uint32_t>(rules::float_max(1.0f, std::nanf(""))) == rules::kCanonicalNaN32);
    CHECK(rules::float_to_int<int32_t>(3e9) == std::numeric_limits<int32_t>::max());
    CHECK(rules::float_to_int<int32_t>(std::nan("")) == 0);
    // u64 saturates at 2^64 - 1 from 2^64 on; the largest double below 2^64 converts as itself.
    CHECK(rules::float_to_int<uint64_t>(std::ldexp(1.0, 64)) == std::numeric_limits<uint64_t>::max());
    CHECK(rules::float_to_int<uint64_t>(std::ldexp(1.0, 64) - std::ldexp(1.0, 11)) == 0xfffffffffffff800ull);
    CHECK(rules::float_to_int<uint64_t>(-1.0) == 0);
    CHECK(rules::float_to_int<uint64_t>(std::nan("")) == 0);
    CHECK(rules::bf16_from_f32(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);  // tie to even
    CHECK(rules::bf16_from_f32(std::bit_cast<float>(0x7f800001u)) == 0x7fc0);  // a NaN never becomes inf
    // f64 -> bf16 rounds once: 1 + 2^-8 + 2^-30 is just above a tie, which rounding to f32 first
    // would hide.
    CHECK(bfloat16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30)).bits == 0x3f81);
    CHECK(float16(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)).bits == 0x3c01);
  }
}
