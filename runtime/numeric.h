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
#include "runtime/element_rules.h"

namespace tessera {

// A 16-bit storage float kept as its bits. `Narrow` rounds an f32 to nearest-even into the bits and
// `Widen` gives them back exactly, both element rules; from f64 the conversion rounds once
// (rules::f32_round_to_odd first). Arithmetic widens to f32 (compute_t below).
template <uint16_t (*Narrow)(float), float (*Widen)(uint16_t)>
struct StorageFloat16 {
  uint16_t bits = 0;
  StorageFloat16() = default;
  explicit StorageFloat16(float f) : bits(Narrow(f)) {}
  explicit StorageFloat16(double d) : bits(Narrow(rules::f32_round_to_odd(d))) {}
  explicit operator float() const { return Widen(bits); }
  static uint16_t from_float(float f) { return Narrow(f); }
};

// bfloat16: the top 16 bits of an f32; a NaN stays a NaN (rules::bf16_from_f32).
using bfloat16 = StorageFloat16<rules::bf16_from_f32, rules::f32_from_bf16>;
// IEEE binary16: overflows to infinity and keeps subnormals (rules::f16_from_f32).
using float16 = StorageFloat16<rules::f16_from_f32, rules::f32_from_f16>;

// The C++ type that stores one element of each dtype.
template <DType D> struct storage_of;
template <> struct storage_of<DType::i1> { using type = bool; };
template <> struct storage_of<DType::i8> { using type = int8_t; };
template <> struct storage_of<DType::i16> { using type = int16_t; };
template <> struct storage_of<DType::u8> { using type = uint8_t; };
template <> struct storage_of<DType::u16> { using type = uint16_t; };
template <> struct storage_of<DType::u32> { using type = uint32_t; };
template <> struct storage_of<DType::u64> { using type = uint64_t; };
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
    case DType::i16: return f.template operator()<int16_t>();
    case DType::u8: return f.template operator()<uint8_t>();
    case DType::u16: return f.template operator()<uint16_t>();
    case DType::u32: return f.template operator()<uint32_t>();
    case DType::u64: return f.template operator()<uint64_t>();
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

// Converts a double (from a literal or a host value) to storage type T: floats round once to
// nearest-even, integers truncate and saturate (NaN -> 0), bool is x != 0 (rules::float_to_int).
template <class T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, bool>) return v != 0;
  else if constexpr (std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>) return T(v);
  else if constexpr (std::is_floating_point_v<T>) return static_cast<T>(v);
  else return rules::float_to_int<T>(v);
}
template <class T> double to_double(T v) { return static_cast<double>(widen(v)); }

}  // namespace tessera
