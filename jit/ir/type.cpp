#include "jit/ir/type.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>

namespace tessera {

int64_t num_elements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_error(const Shape& s, int64_t element_bytes) {
  for (size_t d = 0; d < s.size(); ++d)
    if (s[d] < 0) return fmt::format("dim {} is {}; dims must be >= 0", d, s[d]);
  if (std::find(s.begin(), s.end(), 0) != s.end()) return {};  // no elements, however large the other dims
  int64_t n = 1;
  for (int64_t d : s)
    if (__builtin_mul_overflow(n, d, &n))
      return fmt::format("its element count, the product of its dims, exceeds {} (2^63 - 1)", INT64_MAX);
  if (int64_t bytes; __builtin_mul_overflow(n, element_bytes, &bytes))
    return fmt::format("its size, {} elements of {} bytes, exceeds {} bytes (2^63 - 1)", n, element_bytes, INT64_MAX);
  return {};
}

int64_t saturating_nbytes(const Shape& s, int64_t element_bytes) {
  if (std::find(s.begin(), s.end(), 0) != s.end()) return 0;
  int64_t n = element_bytes;
  for (int64_t d : s)
    if (__builtin_mul_overflow(n, d, &n)) return INT64_MAX;
  return n;
}

std::string shape_str(const Shape& s) { return fmt::format("{}", fmt::join(s, "x")); }

std::string shape_tuple_str(const Shape& s) {
  if (s.size() == 1) return fmt::format("({},)", s[0]);
  return fmt::format("({})", fmt::join(s, ", "));
}

std::string_view memory_space_name(MemorySpace s) {
  switch (s) {
    case MemorySpace::ANY: return "any";
    case MemorySpace::HBM: return "hbm";
    case MemorySpace::VMEM: return "vmem";
    case MemorySpace::SMEM: return "smem";
    case MemorySpace::SEMAPHORE: return "semaphore";
  }
  return "?";
}

static std::string tensor_str(DType t, const Shape& s) {
  if (s.empty()) return std::string(dtype_name(t));
  return fmt::format("{}x{}", shape_str(s), dtype_name(t));
}

std::string type_str(const Type& t) {
  switch (t.kind) {
    case TypeKind::Tensor: return tensor_str(t.dtype, t.shape);
    case TypeKind::Ref: return fmt::format("ref<{}, {}>", tensor_str(t.dtype, t.shape), memory_space_name(t.space));
  }
  return "?";
}

}  // namespace tessera
