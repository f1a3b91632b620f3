#include "jit/ir/type.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tessera {

int64_t num_elements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
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
