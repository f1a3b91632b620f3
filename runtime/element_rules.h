// The element rules: what every element-wise op, cast and reduction step computes on one element of
// each dtype, including the edge values (NaN, infinities, -0, INT_MIN, zero divisors, overflow,
// subnormals, rounding ties). This header is the single statement of those rules:
//
// - runtime/numeric.h converts to and from bf16/f16 with them, and runtime/array.cpp casts with them,
// - runtime/block_ops.cpp (the interpreter, host array operations and the constant folder of
//   jit/lowering/canonicalize.cpp) calls them element by element,
// - the LLVM code generator (jit/llvm/codegen_elements.cpp, codegen_support.cpp) emits IR that
//   mirrors them; the comment at each emission names the rule it mirrors (rules::int_div, ...), and
//   it uses the constants below (kCanonicalNaN32/64, kIntDivByZero, kBf16QuietBit32),
// - dsl/value.cpp composes pl::floor_divide and pl::mod from IR ops so that they compute
//   int_floor_div / int_mod and float_floor_div / float_mod,
// - tests/dsl/element_rules_test.cpp feeds edge values through both backends and checks them
//   against these functions bit for bit (only which NaN an arithmetic op returns is left open).
//
// exp, log, tanh and logistic on f32 are tessera's own algorithms, in runtime/element_math.h
// (included below), written once for both backends.
//
// Rules are stated on the compute type: integers in their own width, bf16/f16 in f32 (one rounding
// to nearest-even into the 16-bit type after every op), f32 and f64 in themselves. No LLVM here.
//
// Runtime layer; header-only, usable from every layer.
#pragma once

#include <bit>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "runtime/element_math.h"

namespace tessera::rules {

// ---- integers: two's complement, never undefined behaviour ----------------------------------------

// Every integer rule holds for the signed (i8, i16, i32, i64) and the unsigned (u8, u16, u32, u64) types
// alike: T's signedness decides comparisons, division and the sign tests below, as it does in C++.

// The unsigned type integer arithmetic wraps in: T's own, but at least unsigned int, because C++
// promotes narrower operands to (signed) int, where 65535 * 65535 would overflow.
template <std::integral T>
using wrap_t = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

// add / sub / mul / neg wrap around (as XLA does); computed in the unsigned type to avoid UB.
template <std::integral T> constexpr T wrap_add(T a, T b) {
  return static_cast<T>(static_cast<wrap_t<T>>(a) + static_cast<wrap_t<T>>(b));
}
template <std::integral T> constexpr T wrap_sub(T a, T b) {
  return static_cast<T>(static_cast<wrap_t<T>>(a) - static_cast<wrap_t<T>>(b));
}
template <std::integral T> constexpr T wrap_mul(T a, T b) {
  return static_cast<T>(static_cast<wrap_t<T>>(a) * static_cast<wrap_t<T>>(b));
}
// Whether a is below zero: never for an unsigned type.
template <std::integral T> constexpr bool is_negative(T a) {
  if constexpr (std::is_signed_v<T>) return a < 0;
  else return false;
}
// neg(MIN) = MIN and abs(MIN) = MIN: they wrap like add. An unsigned neg wraps too (neg(1) = MAX),
// and an unsigned abs is the value itself.
template <std::integral T> constexpr T int_neg(T a) { return wrap_sub(T(0), a); }
template <std::integral T> constexpr T int_abs(T a) { return is_negative(a) ? int_neg(a) : a; }

// What an integer division by zero gives: -1 (all bits set, so the largest value of an unsigned type),
// as XLA defines it; the remainder is then the dividend, so that a == (a / b) * b + a % b still holds.
inline constexpr int64_t kIntDivByZero = -1;

// div: truncates toward zero (C++, lax.div). x / 0 = -1 (MAX unsigned); MIN / -1 = MIN (the quotient
// wraps; unsigned types have no such case).
template <std::integral T> constexpr T int_div(T a, T b) {
  if (b == 0) return static_cast<T>(kIntDivByZero);
  if (std::is_signed_v<T> && a == std::numeric_limits<T>::min() && b == T(-1)) return a;
  return static_cast<T>(a / b);
}
// rem: the sign of the dividend (C++, lax.rem). x % 0 = x; MIN % -1 = 0.
template <std::integral T> constexpr T int_rem(T a, T b) {
  if (b == 0) return a;
  if (std::is_signed_v<T> && a == std::numeric_limits<T>::min() && b == T(-1)) return T(0);
  return static_cast<T>(a % b);
}
// Whether a truncated remainder r of a / b needs the floored correction: r != 0 and its sign differs
// from b's. Never true for b == 0 (r is then a, and the quotient stays kIntDivByZero).
// Never true for unsigned types, whose floor_div and mod are div and rem.
template <std::integral T> constexpr bool int_floor_fix(T r, T b) {
  return b != 0 && r != 0 && (is_negative(r) != is_negative(b));
}
// floor_div: Python's // (jnp.floor_divide), rounding toward -inf. x // 0 = -1 like div;
// MIN // -1 = MIN. (numpy gives 0 for x // 0 with a warning; jnp gives -1 or -2 depending on the
// signs; tessera keeps div's rule so that the identity below holds.)
template <std::integral T> constexpr T int_floor_div(T a, T b) {
  const T q = int_div(a, b);
  return int_floor_fix(int_rem(a, b), b) ? wrap_sub(q, T(1)) : q;
}
// mod: Python's % (jnp.remainder), the sign of the divisor; x mod 0 = x. Always
// a == floor_div(a, b) * b + mod(a, b) in wrap-around arithmetic.
template <std::integral T> constexpr T int_mod(T a, T b) {
  const T r = int_rem(a, b);
  return int_floor_fix(r, b) ? wrap_add(r, b) : r;
}
// pow: repeated squaring in wrap-around arithmetic; a negative exponent gives 0 unless |a| = 1
// (1 ** -n = 1, (-1) ** -n = +-1), as XLA does. Unsigned exponents are never negative.
template <std::integral T> constexpr T int_pow(T base, T exp) {
  if (is_negative(exp)) return base == 1 ? T(1) : base == T(-1) ? ((exp & 1) ? T(-1) : T(1)) : T(0);
  T result = 1;
  while (exp > 0) {
    if (exp & 1) result = wrap_mul(result, base);
    base = wrap_mul(base, base);
    exp = static_cast<T>(exp >> 1);
  }
  return result;
}
// max / min compare as T does: unsigned values as unsigned (max(u8 255, u8 1) = 255).
template <std::integral T> constexpr T int_max(T a, T b) { return a < b ? b : a; }
template <std::integral T> constexpr T int_min(T a, T b) { return b < a ? b : a; }

// ---- floats (f32 and f64; bf16/f16 compute in f32) -------------------------------------------------

// The NaN that max/min (and their reductions) return when an operand is NaN: the positive quiet NaN
// with an empty payload (std::numeric_limits<>::quiet_NaN(), LLVM's ConstantFP::getNaN). Other ops
// return whatever NaN the hardware produces; the tests compare NaN results as "both NaN".
inline constexpr uint32_t kCanonicalNaN32 = 0x7fc00000u;
inline constexpr uint64_t kCanonicalNaN64 = 0x7ff8000000000000ull;
template <std::floating_point C> constexpr C canonical_nan() {
  if constexpr (std::is_same_v<C, float>) return std::bit_cast<float>(kCanonicalNaN32);
  else return std::bit_cast<double>(kCanonicalNaN64);
}

// max / min: NaN-propagating (jnp.maximum / jnp.minimum, IEEE 754-2019 maximum / minimum): NaN if
// either operand is NaN, and -0 counts as less than +0 (max(-0, +0) = +0, min(-0, +0) = -0),
// whatever the operand order.
template <std::floating_point C> constexpr C float_max(C a, C b) {
  if (a != a || b != b) return canonical_nan<C>();
  // Picks b when a < b, or when they compare equal and a is -0 (b is then +0 or -0).
  return (a < b || (a == b && std::signbit(a))) ? b : a;
}
template <std::floating_point C> constexpr C float_min(C a, C b) {
  if (a != a || b != b) return canonical_nan<C>();
  return (b < a || (a == b && std::signbit(b))) ? b : a;
}

// pow: libm's pow, except that pow(x, +-0) = 1 and pow(1, y) = 1 for every x and y, signalling NaNs
// included (IEEE 754, XLA). glibc returns NaN there for a signalling NaN, while LLVM rewrites
// pow(x, 0.0) and pow(1.0, y) with a literal operand to 1, so the rule settles it.
template <std::floating_point C> inline C float_pow(C a, C b) {
  if (b == 0 || a == 1) return C(1);
  return std::pow(a, b);
}

// rem: fmod (C, lax.rem): exact, the sign of the dividend; x rem 0 = NaN, x rem inf = x.
template <std::floating_point C> inline C float_rem(C a, C b) { return std::fmod(a, b); }

// mod: Python's % on floats (numpy.remainder): the result has the sign of b and |result| < |b|;
// a zero result is +0 for b > 0 and -0 for b < 0; x mod 0 = NaN; -1 mod inf = inf, 1 mod inf = 1.
// Steps (each one an IR op in pl::mod): r = fmod(a, b); if r != 0 and (r < 0) != (b < 0): r += b;
// if r == 0: r = copysign(0, b).
template <std::floating_point C> inline C float_mod(C a, C b) {
  C r = std::fmod(a, b);
  if (b == 0) return r;
  if (r != 0) {
    if ((r < 0) != (b < 0)) r += b;
  } else {
    r = std::copysign(C(0), b);
  }
  return r;
}
// floor_div: Python's // on floats (numpy.floor_divide, jnp.floor_divide): the quotient of the
// floored division whose remainder is float_mod, snapped to an integer. It is not floor(a / b):
// floor_div(1.0, 0.1) = 9, because 0.1 is slightly more than 1/10 and 1 = 9 * 0.1 + 0.0999...
// x // 0 = x / 0 (inf, -inf or NaN); x // inf = 0 or -1; inf // x = NaN; a zero quotient takes the
// sign of a / b. Steps (each one an IR op in pl::floor_divide):
//   r = fmod(a, b); d = (a - r) / b; if r != 0 and (r < 0) != (b < 0): d -= 1;
//   if b == 0: a / b; else if d == 0: copysign(0, a / b); else f = floor(d), f + 1 if d - f > 0.5.
template <std::floating_point C> inline C float_floor_div(C a, C b) {
  if (b == 0) return a / b;
  const C r = std::fmod(a, b);
  C d = (a - r) / b;
  if (r != 0 && ((r < 0) != (b < 0))) d -= C(1);
  if (d == 0) return std::copysign(C(0), a / b);
  C f = std::floor(d);
  if (d - f > C(0.5)) f += C(1);
  return f;
}

// ---- casts -----------------------------------------------------------------------------------------

// float -> integer: truncates toward zero and saturates; NaN -> 0 (LLVM's fptosi.sat, fptoui.sat for
// the unsigned types, where every negative value gives 0; jnp on CPU gives the same for in-range
// values, and unspecified results outside). For u64 the top is 2^64, which a float holds exactly:
// 2^64 and above give 2^64 - 1, while the largest float below it converts as itself.
template <std::integral T, std::floating_point C> inline T float_to_int(C v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else {
    if (v != v) return T(0);
    if (v <= static_cast<C>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
    if (v >= static_cast<C>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  }
}
// x -> bool is x != 0 (NaN -> true); integer -> integer wraps (keeps the low bits; a wider result
// sign-extends a signed source and zero-extends an unsigned one: i8 -1 -> u32 0xffffffff, u8 255 ->
// i32 255, i32 256 -> u8 0, as a C++ cast does).
// float -> float rounds to nearest-even once (f64 -> bf16/f16 through f32_round_to_odd below);
// integers (unsigned ones by their unsigned value) reach f32/f64 with one rounding, and bf16/f16
// through f64: exactly once up to 32 bits, while i64 beyond 2^53 has rounded once into f64 already.

// ---- bf16 and f16: round to nearest-even, NaN stays NaN ---------------------------------------------

// f32 -> bf16 bits: round to nearest-even on the bit pattern; a NaN keeps its sign and the top of its
// payload and is made quiet (bit 6 of the bf16 set), so it can never round to infinity.
inline constexpr uint32_t kBf16QuietBit32 = 0x00400000u;  // the f32 quiet bit, bit 6 of the bf16 half
constexpr uint16_t bf16_from_f32(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u | kBf16QuietBit32) >> 16);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
constexpr float f32_from_bf16(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

// f32 -> f16 bits (IEEE binary16): round to nearest-even, overflow to infinity (from 65520 on), keeps
// subnormals; a NaN keeps its sign and the top 10 bits of its payload and is made quiet, as LLVM's
// fptrunc, x86's F16C and the compiler runtime's __truncsfhf2 do.
constexpr uint16_t f16_from_f32(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: infinity
  if (a < 0x38800000u) {                                                // below the smallest normal half
    if (a < 0x33000000u) return sign;  // at most half the smallest subnormal: rounds to (signed) zero
    const uint32_t exp = a >> 23;
    const uint32_t man = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14 - (exp - 112)
    uint32_t half = man >> shift;
    const uint32_t rem = man & ((1u << shift) - 1u);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  const uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);
  return static_cast<uint16_t>(sign | (r >> 13));
}
// f16 bits -> f32: exact, except that a signalling NaN is made quiet (payload kept), as x86's F16C
// (what LLVM's fpext from half becomes) does. bf16 -> f32 is a shift and keeps every NaN as it is.
constexpr float f32_from_f16(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1fu;
  uint32_t man = bits & 0x3ffu;
  uint32_t u = 0;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13) | (man != 0 ? 0x00400000u : 0u);
  } else if (exp != 0) {
    u = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    u = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while ((man & 0x400u) == 0);
    u = sign | (static_cast<uint32_t>(112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(u);
}

// f64 -> f32 rounding to odd: the f32 nearest-even result, moved one unit toward the exact value
// when it is inexact and its last bit is even. A value rounded to odd in f32 (24 bits) then to
// nearest-even in bf16 (8 bits) or f16 (11 bits) rounds exactly once, so an f64 (or an integer, via
// f64) converts to bf16/f16 as if directly; rounding to nearest twice could land on the wrong side of
// a tie. Used by the f64 -> bf16/f16 casts.
inline float f32_round_to_odd(double d) {
  const float f = static_cast<float>(d);
  if (static_cast<double>(f) == d || d != d) return f;
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 1u) == 0) u = std::abs(static_cast<double>(f)) > std::abs(d) ? u - 1 : u + 1;
  return std::bit_cast<float>(u);
}

// ---- windows of values ----------------------------------------------------------------------------

// slice (indexing a loaded value with a traced start): the start clamped into [0, dim - extent], so a
// window of `extent` elements always lies inside a dim of `dim`, as lax.dynamic_slice clamps. Static
// starts never reach this: the front end rejects an out-of-range static index while tracing.
// Written once over index arithmetic `ops` (constant, less, select), as element_math.h's rules are:
// int64_t in the interpreter (ScalarIndexOps), IR instructions in compiled code.
template <class Ops, class I>
constexpr I clamp_slice_start(const Ops& ops, I start, int64_t extent, int64_t dim) {
  const I zero = ops.constant(0), hi = ops.constant(dim - extent);
  const I lo = ops.select(ops.less(start, zero), zero, start);
  return ops.select(ops.less(hi, lo), hi, lo);
}
struct ScalarIndexOps {
  static constexpr int64_t constant(int64_t v) { return v; }
  static constexpr bool less(int64_t a, int64_t b) { return a < b; }
  static constexpr int64_t select(bool c, int64_t a, int64_t b) { return c ? a : b; }
};
constexpr int64_t clamp_slice_start(int64_t start, int64_t extent, int64_t dim) {
  return clamp_slice_start(ScalarIndexOps{}, start, extent, dim);
}
// The elements a slice dim spans: (size - 1) * stride + 1, or 0 for an empty one.
constexpr int64_t slice_extent(int64_t size, int64_t stride) { return size == 0 ? 0 : (size - 1) * stride + 1; }

}  // namespace tessera::rules
