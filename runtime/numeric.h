// Element storage types and conversions: bfloat16 and float16 (storage-only types whose arithmetic
// happens in f32), the C++ type behind each DType, the poison value of uninitialised memory, and a
// dispatcher from a runtime DType to a template over its C++ type.
//
// Runtime layer; also used by the front end for host arrays.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "jit/ir/dtype.h"

namespace tessera {

// bfloat16: the top 16 bits of an f32. Conversion from float rounds to nearest-even; NaN stays NaN.
struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  explicit bfloat16(float f) : bits(from_float(f)) {}
  explicit operator float() const { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }
  static uint16_t from_float(float f) {
    uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  }
};

// IEEE binary16. Conversion from float rounds to nearest-even, overflows to infinity, keeps subnormals.
struct float16 {
  uint16_t bits = 0;
  float16() = default;
  explicit float16(float f) : bits(from_float(f)) {}
  explicit operator float() const {
    uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
    uint32_t exp = (bits >> 10) & 0x1fu;
    uint32_t man = bits & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
      u = sign | 0x7f800000u | (man << 13);
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
  static uint16_t from_float(float f) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
    if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: infinity
    if (a < 0x38800000u) {  // below the smallest normal half: subnormal or zero
      if (a < 0x33000000u) return sign;  // rounds to zero (below half of the smallest subnormal)
      uint32_t exp = a >> 23;
      uint32_t man = (a & 0x7fffffu) | 0x800000u;
      uint32_t shift = 126 - exp;  // 14 - (exp - 112)
      uint32_t half = man >> shift;
      uint32_t rem = man & ((1u << shift) - 1u);
      uint32_t mid = 1u << (shift - 1);
      if (rem > mid || (rem == mid && (half & 1u))) ++half;
      return static_cast<uint16_t>(sign | half);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);
    return static_cast<uint16_t>(sign | (r >> 13));
  }
};

// The C++ type that stores one element of each dtype.
template <DType D> struct storage_of;
template <> struct storage_of<DType::i1> { using type = bool; };
template <> struct storage_of<DType::i8> { using type = int8_t; };
template <> struct storage_of<DType::i32> { using type = int32_t; };
template <> struct storage_of<DType::i64> { using type = int64_t; };
template <> struct storage_of<DType::index> { using type = int64_t; };
template <> struct storage_of<DType::bf16> { using type = bfloat16; };
template <> struct storage_of<DType::f16> { using type = float16; };
template <> struct storage_of<DType::f32> { using type = float; };
template <> struct storage_of<DType::f64> { using type = double; };

// The type arithmetic happens in: f32 for the 16-bit floats, the storage type otherwise.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>, float, T>;

template <class T> inline compute_t<T> widen(T v) { return static_cast<compute_t<T>>(v); }
template <class T> inline T narrow(compute_t<T> v) { return static_cast<T>(v); }

// Calls f.template operator()<T, D>() with T the storage type of `d`.
template <class F>
decltype(auto) dispatch_dtype(DType d, F&& f) {
  switch (d) {
    case DType::i1: return f.template operator()<bool>();
    case DType::i8: return f.template operator()<int8_t>();
    case DType::i32: return f.template operator()<int32_t>();
    case DType::i64:
    case DType::index:
    case DType::sem:  // a semaphore's counter
    case DType::dma_sem: return f.template operator()<int64_t>();
    case DType::bf16: return f.template operator()<bfloat16>();
    case DType::f16: return f.template operator()<float16>();
    case DType::f32: return f.template operator()<float>();
    case DType::f64: return f.template operator()<double>();
  }
  return f.template operator()<float>();
}

template <class T> constexpr bool is_float_storage_v =
    std::is_floating_point_v<T> || std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;

// The value of uninitialised memory: NaN for floats, the largest value for integers, true for bool
// (as Pallas's TPU interpreter does), or zero when asked.
template <class T>
T poison_value(bool zero) {
  if (zero) return T(compute_t<T>(0));
  if constexpr (std::is_same_v<T, bool>) return true;
  else if constexpr (is_float_storage_v<T>) return T(std::numeric_limits<float>::quiet_NaN());
  else return std::numeric_limits<T>::max();
}

// Converts a double (from a literal or a host value) to storage type T: floats round, integers
// truncate and saturate (NaN -> 0), bool is x != 0.
template <class T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, bool>) return v != 0;
  else if constexpr (is_float_storage_v<T>) return T(static_cast<compute_t<T>>(v));
  else {
    if (std::isnan(v)) return 0;
    if (v <= static_cast<double>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
    if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  }
}
template <class T> double to_double(T v) { return static_cast<double>(widen(v)); }

}  // namespace tessera
