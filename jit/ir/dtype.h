// Element types of tessera values and arrays, with their sizes, names and promotion rules.
//
// Part of the IR (innermost layer); used everywhere. Users spell them pl::f32, pl::bf16, ...
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tessera {

enum class DType : uint8_t {
  i1,     // bool, stored as one byte holding 0 or 1
  i8,
  i32,
  i64,
  index,  // a 64-bit integer for step counts and offsets in lowered IR
  bf16,   // storage type: arithmetic happens in f32 and rounds to nearest-even on the way back
  f16,    // storage type, like bf16
  f32,
  f64,
  sem,      // a regular semaphore (pl::SemaphoreType::REGULAR): a counter, only in refs of space SEMAPHORE
  dma_sem,  // a DMA semaphore (pl::SemaphoreType::DMA): counts the bytes of finished copies
  // Added after the semaphores so that the earlier dtypes keep their numbers.
  i16,
  u8,
  u16,
  u32,
  u64,
};

inline constexpr DType bool_ = DType::i1;
inline constexpr DType i1 = DType::i1;
inline constexpr DType i8 = DType::i8;
inline constexpr DType i16 = DType::i16;
inline constexpr DType i32 = DType::i32;
inline constexpr DType i64 = DType::i64;
inline constexpr DType u8 = DType::u8;
inline constexpr DType u16 = DType::u16;
inline constexpr DType u32 = DType::u32;
inline constexpr DType u64 = DType::u64;
inline constexpr DType index = DType::index;
inline constexpr DType bf16 = DType::bf16;
inline constexpr DType f16 = DType::f16;
inline constexpr DType f32 = DType::f32;
inline constexpr DType f64 = DType::f64;
// numpy's spellings of the integer dtypes (pl::int8 is jnp.int8). The floats keep their short names:
// tessera::bfloat16 and tessera::float16 are the host element types (runtime/numeric.h).
inline constexpr DType int8 = DType::i8;
inline constexpr DType int16 = DType::i16;
inline constexpr DType int32 = DType::i32;
inline constexpr DType int64 = DType::i64;
inline constexpr DType uint8 = DType::u8;
inline constexpr DType uint16 = DType::u16;
inline constexpr DType uint32 = DType::u32;
inline constexpr DType uint64 = DType::u64;

// The dtypes of values (semaphores are not values: they live in refs and are read with semaphore_read).
inline constexpr DType kAllDTypes[] = {DType::i1,  DType::i8,   DType::i16,   DType::i32,  DType::i64,
                                       DType::u8,  DType::u16,  DType::u32,   DType::u64,  DType::index,
                                       DType::bf16, DType::f16, DType::f32,   DType::f64};

// Size of one element in bytes (a semaphore's counter takes 8).
int64_t dtype_size(DType t);
// "f32", "bf16", "i1", ...
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);

inline bool is_float(DType t) { return t == DType::bf16 || t == DType::f16 || t == DType::f32 || t == DType::f64; }
inline bool is_bool(DType t) { return t == DType::i1; }
// The unsigned integers: they compare, divide, shift right, widen and convert to floats as unsigned.
inline bool is_unsigned(DType t) {
  return t == DType::u8 || t == DType::u16 || t == DType::u32 || t == DType::u64;
}
// Integers proper (not bool), signed and unsigned.
inline bool is_int(DType t) {
  return t == DType::i8 || t == DType::i16 || t == DType::i32 || t == DType::i64 || t == DType::index || is_unsigned(t);
}
inline bool is_semaphore(DType t) { return t == DType::sem || t == DType::dma_sem; }

// The type arithmetic on two operands of these types produces, following JAX's lattice:
// bool < ints < floats (by width); bf16 with f16 gives f32; index with any int gives index. Among the
// integers, signed with signed and unsigned with unsigned give the wider; unsigned with signed gives
// the narrowest signed type that holds both (u8 with i8 gives i16, u32 with i32 gives i64, u8 with
// i32 gives i32); no integer type holds u64 and a signed one, so u64 with i8..i64 gives f64 (JAX's
// lattice with x64: both reach only the weak float, which is f64).
DType promote(DType a, DType b);

// The type a DSL scalar literal adopts next to a value of type `other` (JAX "weak" typing): an int
// literal takes the other type, a float literal next to an integer or bool gives f32.
DType weak_literal_type(bool literal_is_float, DType other);

}  // namespace tessera
