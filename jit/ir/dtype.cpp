#include "jit/ir/dtype.h"

#include <algorithm>

namespace tessera {

int64_t dtype_size(DType t) {
  switch (t) {
    case DType::i1:
    case DType::i8:
    case DType::u8: return 1;
    case DType::i16:
    case DType::u16:
    case DType::bf16:
    case DType::f16: return 2;
    case DType::i32:
    case DType::u32:
    case DType::f32: return 4;
    case DType::i64:
    case DType::u64:
    case DType::index:
    case DType::f64:
    case DType::sem:
    case DType::dma_sem: return 8;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::i1: return "i1";
    case DType::i8: return "i8";
    case DType::i16: return "i16";
    case DType::u8: return "u8";
    case DType::u16: return "u16";
    case DType::u32: return "u32";
    case DType::u64: return "u64";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::index: return "index";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::sem: return "sem";
    case DType::dma_sem: return "dma_sem";
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (DType t : kAllDTypes)
    if (dtype_name(t) == name) return t;
  if (name == "bool") return DType::i1;
  return std::nullopt;
}

// Position in the promotion lattice; equal ranks that differ need special handling (bf16 vs f16,
// and signed vs unsigned integers, which promote() settles before it compares ranks).
static int rank(DType t) {
  switch (t) {
    case DType::i1: return 0;
    case DType::i8:
    case DType::u8: return 1;
    case DType::i16:
    case DType::u16: return 2;
    case DType::i32:
    case DType::u32: return 3;
    case DType::i64:
    case DType::u64: return 4;
    case DType::index: return 5;
    case DType::bf16:
    case DType::f16: return 6;
    case DType::f32: return 7;
    case DType::f64: return 8;
    case DType::sem:
    case DType::dma_sem: return -1;  // never promoted: semaphores are not values
  }
  return 0;
}

// The signed integer of `bytes` bytes (1, 2, 4 or 8).
static DType signed_of_size(int64_t bytes) {
  switch (bytes) {
    case 1: return DType::i8;
    case 2: return DType::i16;
    case 4: return DType::i32;
    default: return DType::i64;
  }
}

DType promote(DType a, DType b) {
  if (a == b) return a;
  if ((a == DType::bf16 && b == DType::f16) || (a == DType::f16 && b == DType::bf16)) return DType::f32;
  // Unsigned with signed (index counts as signed): the narrowest signed type wider than the unsigned
  // one and at least as wide as the signed one, as JAX's lattice has it (u32 with i32 gives i64).
  if (is_unsigned(a) != is_unsigned(b) && is_int(a) && is_int(b)) {
    const DType u = is_unsigned(a) ? a : b, s = is_unsigned(a) ? b : a;
    if (s == DType::index) return DType::index;
    // No integer type holds u64 and a signed one: JAX joins them at the weak float, f64 with x64.
    if (u == DType::u64) return DType::f64;
    return signed_of_size(std::max(dtype_size(s), 2 * dtype_size(u)));
  }
  return rank(a) >= rank(b) ? a : b;
}

DType weak_literal_type(bool literal_is_float, DType other) {
  if (literal_is_float && !is_float(other)) return DType::f32;
  return other;
}

}  // namespace tessera
