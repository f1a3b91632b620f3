// Types of IR values: tensors (a scalar is a rank-0 tensor, a block has a static shape) and refs
// (a window of memory with a shape, an element type and a memory space).
//
// Part of the IR; depends only on dtype.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "jit/ir/dtype.h"

namespace tessera {

// Static shapes: every dimension is known when a kernel is traced.
using Shape = std::vector<int64_t>;

int64_t num_elements(const Shape& s);
// Why a shape of elements of `element_bytes` bytes each cannot exist: a negative dim, or an element
// count or a byte size that does not fit in int64_t (where num_elements would wrap). Empty when it
// can. The one rule every shape a user gives is checked against (arrays, output shapes, scratch;
// docs/design.md §4.14); the message names the dim or the product, not the shape's origin.
std::string shape_error(const Shape& s, int64_t element_bytes);
// The byte size of a shape, or INT64_MAX where it does not fit: for budgets that must not wrap.
int64_t saturating_nbytes(const Shape& s, int64_t element_bytes);
// "128x128", "" for a scalar.
std::string shape_str(const Shape& s);
// "(128, 128)"
std::string shape_tuple_str(const Shape& s);

// Where a ref's memory lives (docs/design.md §4.7).
enum class MemorySpace : uint8_t {
  ANY,   // wherever the array is (HBM); reachable only by DMA
  HBM,   // device memory; reachable only by DMA
  VMEM,  // per-core vector memory: the default for blocks; loaded and stored directly
  SMEM,  // per-core scalar memory: scalar loads and stores only
  SEMAPHORE,  // per-core semaphores (dtype sem or dma_sem): signalled, waited and read, never loaded
};

std::string_view memory_space_name(MemorySpace s);  // "any", "hbm", "vmem", "smem", "semaphore"
// ANY and HBM hold arrays that kernels may reach only through copies.
inline bool is_dma_only(MemorySpace s) { return s == MemorySpace::ANY || s == MemorySpace::HBM; }

enum class TypeKind : uint8_t {
  Tensor,  // an immutable value: a scalar (rank 0) or a block
  Ref,     // a mutable window of memory
};

struct Type {
  TypeKind kind = TypeKind::Tensor;
  DType dtype = DType::f32;
  Shape shape;                              // empty for scalars and rank-0 refs
  MemorySpace space = MemorySpace::VMEM;    // meaningful for refs only

  static Type scalar(DType t) { return Type{TypeKind::Tensor, t, {}, MemorySpace::VMEM}; }
  static Type tensor(DType t, Shape s) { return Type{TypeKind::Tensor, t, std::move(s), MemorySpace::VMEM}; }
  static Type ref(DType t, Shape s, MemorySpace m) { return Type{TypeKind::Ref, t, std::move(s), m}; }

  bool is_tensor() const { return kind == TypeKind::Tensor; }
  bool is_scalar() const { return kind == TypeKind::Tensor && shape.empty(); }
  bool is_block() const { return kind == TypeKind::Tensor && !shape.empty(); }
  bool is_ref() const { return kind == TypeKind::Ref; }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t num_elements() const { return tessera::num_elements(shape); }
  // The tensor a load of this ref yields, or the tensor type itself.
  Type value_type() const { return tensor(dtype, shape); }

  bool operator==(const Type&) const = default;
};

// "f32", "128x128xbf16", "ref<128x128xf32, vmem>"
std::string type_str(const Type& t);

}  // namespace tessera
