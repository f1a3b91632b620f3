// Kernel-visible memory: buffers (an HBM array, a VMEM block buffer, scratch, an SMEM table), strided
// views of them (what a ref is at run time), and the loads, stores and block copies on views. Every
// access is bounds-checked; a violation throws Fault, which the executing backend turns into a
// RuntimeError with the device, core, grid point and source line.
//
// Runtime layer.
#pragma once

#include <algorithm>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "jit/ir/ir.h"
#include "runtime/array.h"

namespace tessera::rt {

// A failed check while a kernel runs; the backend adds where it happened (at()).
class Fault : public std::exception {
 public:
  explicit Fault(std::string message, std::shared_ptr<const Deadlock> deadlock = nullptr)
      : message_(std::move(message)), deadlock_(std::move(deadlock)) {}
  const char* what() const noexcept override { return message_.c_str(); }
  // The failure where it happened; a deadlock report stays one (RuntimeError::deadlock).
  RuntimeError at(ExecutionPoint where, SourceLoc loc) const { return RuntimeError(message_, std::move(where), loc, deadlock_); }

 private:
  std::string message_;
  std::shared_ptr<const Deadlock> deadlock_;
};

class Buffer {
 public:
  // Over the array's elements. A writable buffer has storage of its own (the array is copied if it
  // is shared, so a caller's array never changes); a read-only one reads the array in place and
  // faults on writes.
  Buffer(std::string name, Array array, MemorySpace space, bool writable);
  // Over memory someone else owns (a compiled kernel's operand).
  Buffer(std::string name, DType dtype, Shape shape, MemorySpace space, std::byte* external, bool writable);
  // Refs point into a buffer, so it never moves.
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  std::string name;  // "input 0", "scratch 1", "block of input 0": used in errors
  DType dtype;
  Shape shape;
  MemorySpace space;

  const std::byte* data() const { return data_; }
  std::byte* writable_data();
  // The elements as an array (shares storage; valid after the kernel finished writing).
  const Array& array() const { return storage_; }

 private:
  Array storage_;
  std::byte* data_ = nullptr;
  bool read_only_ = false;
};

// A writable buffer of this type whose elements are the poison value (or zero; semaphores: zero).
std::unique_ptr<Buffer> make_buffer(std::string name, DType dtype, Shape shape, MemorySpace space, bool zero_fill);

// A ref at run time: a strided window of a buffer.
struct RefView {
  Buffer* buffer = nullptr;
  int64_t offset = 0;             // elements from the start of the buffer
  Shape shape;
  std::vector<int64_t> strides;   // in elements, one per dim

  static RefView whole(Buffer& b);
  const std::byte* read_address(int64_t element_offset) const;
  std::byte* address(int64_t element_offset) const;  // faults on read-only buffers
};

// The shape a TPU lays a buffer of `shape` out in, which InterpretParams::buffer_bounds = padded
// checks loads and stores against: the last dim rounded up to 128 lanes, the one before it to 8 rows
// of 32 bits (16 of a 16-bit dtype, 32 of an 8-bit one). SMEM and semaphores are not padded.
Shape tpu_padded_shape(const Shape& shape, DType dtype, MemorySpace space);

// The strides (in elements) of a row-major array of `shape`.
std::vector<int64_t> row_major_strides(const Shape& shape);

// f(linear, offset) for every element of a strided window of `shape`, in row-major order: its number
// in the window and its element offset from the window's first element. An f that returns bool
// stops the walk by returning true.
template <class F>
void for_each_element(const Shape& shape, std::span<const int64_t> strides, F f) {
  const int64_t count = num_elements(shape);
  std::vector<int64_t> index(shape.size(), 0);
  int64_t offset = 0;
  for (int64_t linear = 0; linear < count; ++linear) {
    if constexpr (std::is_same_v<std::invoke_result_t<F&, int64_t, int64_t>, bool>) {
      if (f(linear, offset)) return;
    } else {
      f(linear, offset);
    }
    for (size_t d = shape.size(); d-- > 0;) {
      offset += strides[d];
      if (++index[d] < shape[d]) break;
      offset -= index[d] * strides[d];
      index[d] = 0;
    }
  }
}
// The index in a row-major array of `shape` of the element at `offset` (zeros along an empty dim).
std::vector<int64_t> row_major_index(const Shape& shape, int64_t offset);

// Copies a box of `shape` elements of `es` bytes between two strided layouts (strides in elements).
void copy_box(std::byte* dst, std::span<const int64_t> dst_strides, const std::byte* src,
              std::span<const int64_t> src_strides, std::span<const int64_t> shape, int64_t es);

// How many bytes a strided window spans from its first element (strides are positive): 0 when empty.
int64_t window_extent(std::span<const int64_t> shape, std::span<const int64_t> strides, int64_t es);

// Fills the window with the poison value of its dtype (or zero).
void fill_poison(const RefView& r, bool zero);

// The name of the buffer a ref value of `fn` points into, for messages: "input 0", "scratch 1",
// "input 0 block" (a pipeline's block, copied or read in place).
std::string root_buffer_name(const ir::Function& fn, ir::ValueId ref);

// The window `attr` of `ref` at these starts (one per dim of ref). Faults when out of range, naming
// the ref `name`.
RefView view(const RefView& ref, std::span<const int64_t> starts, const ir::ViewAttr& attr, const std::string& name);
// The message of a failed view: `name` of `shape`, dim `dim` indexed or sliced by `d` from `start`.
std::string view_fault_message(const std::string& name, const Shape& shape, size_t dim, const ir::ViewDim& d,
                               int64_t start);
Array load(const RefView& ref);
// Elements where mask is false come from `other`, or are the poison value when other is null. Only
// the masked-in elements are read or written: the others may lie outside the buffer (a lane-checked
// view, below).
Array load_masked(const RefView& ref, const Array& mask, const Array* other, bool zero_poison);
void store(const RefView& ref, const Array& value);
void store_masked(const RefView& ref, const Array& value, const Array& mask);

// Masked accesses are bounds-checked lane by lane (docs/design.md §4.5): a view whose every use is a
// masked load or store of it may reach past its ref, and only the lanes a mask selects must lie
// inside. The one rule both backends apply: which view ops of `fn` are such views (by op id).
std::vector<bool> lane_checked_views(const ir::Function& fn);
// The window `attr` of `ref` at `starts`, unchecked: a lane-checked view's lanes may lie outside `ref`.
RefView view_unchecked(const RefView& ref, std::span<const int64_t> starts, const ir::ViewAttr& attr);
// Faults, naming the first, when a lane `mask` selects of the window `attr` at `starts` of a ref of
// `shape` (named `name`) lies outside it.
void check_masked_lanes(const Shape& shape, std::span<const int64_t> starts, const ir::ViewAttr& attr, const Array& mask,
                        const std::string& name, bool store);
// The position in its dim of lane `lane` of a window starting at `start` with `stride`: start + lane *
// stride, saturated to INT64_MIN / INT64_MAX where it would overflow (so a far-off lane stays far off,
// reported as the saturated value). The compiled backend computes the same with llvm.sadd.sat.
int64_t lane_position(int64_t start, int64_t lane, int64_t stride);
// The message of a masked-in lane outside its ref: at `element` in dim `dim` of a ref of `shape`.
std::string masked_lane_fault_message(const std::string& name, const Shape& shape, size_t dim, int64_t element,
                                      bool store);

// A block window may start at 0 <= start < dim, so that at least one element is in bounds; in a
// zero-size dim (an empty array) only at 0, where the whole block is padding. The compiled
// backend's block_view check (jit/llvm/codegen_memory.cpp) mirrors this rule.
inline bool block_start_valid(int64_t start, int64_t dim) { return start >= 0 && start < std::max<int64_t>(dim, 1); }
// Whether a block window of shape `block` at `starts` begins inside an array of `shape`
// (block_start_valid in every dim); otherwise the error message, naming `what`, the element starts
// and the block index the index map returned (when `block` has one size per dim). One message for
// both backends.
std::optional<std::string> block_start_error(const Shape& shape, const Shape& block, std::span<const int64_t> starts,
                                             const std::string& what);

// How a pipeline block copy places its window besides its starts (docs/design.md §4.2): the dim
// kinds and pl::Element padding of its BlockCopyAttr, and the run-time sizes of its Bounded dims
// (pl::BoundedSlice). Empty: every dim a plain block.
struct BlockWindow {
  std::vector<ir::BlockDimKind> kinds;  // empty or one per dim
  std::vector<int64_t> pad_lo, pad_hi;  // empty or one per dim
  std::vector<int64_t> sizes;           // one per Bounded dim, in dim order
  BlockWindow() = default;
  BlockWindow(const ir::BlockCopyAttr& attr, std::span<const int64_t> bounded_sizes)
      : kinds(attr.kinds), pad_lo(attr.pad_lo), pad_hi(attr.pad_hi), sizes(bounded_sizes.begin(), bounded_sizes.end()) {}
};
// The part of a window at `starts` that a copy moves: per dim, its first element in the array and in
// the block, and how many. A Blocked dim copies the block's size, a Bounded one its run-time size;
// the box is clipped to the array (for an Element dim, a start in the padding before it is negative).
// The error message (naming `what`) when the window is invalid: a Blocked dim must start inside the
// array (0 <= start < dim: at least one element in bounds), an Element dim inside the padded array
// (-pad_lo <= start < dim + pad_hi), and a Bounded dim's slice must lie in the array with
// 0 <= size <= the block's size.
struct BlockBox {
  std::vector<int64_t> array_at, block_at;
  Shape shape;
};
std::optional<std::string> block_box(const Shape& array, const Shape& block, std::span<const int64_t> starts,
                                     const BlockWindow& window, const std::string& what, BlockBox& box);

// Block copies of the pipeline (docs/design.md §4.2-5): `block` has the window's full-rank shape.
// fetch: array window at `starts` -> block, elements outside the box poisoned; faults on an invalid
// window (block_box).
void fetch_block(const RefView& array, const RefView& block, std::span<const int64_t> starts, bool zero_poison,
                 const std::string& what, const BlockWindow& window = {});
// block_view: the whole block at `starts` as a view of the array; faults like fetch_block.
RefView block_view(const RefView& array, const Shape& block, std::span<const int64_t> starts, const std::string& what);
// writeback: block -> array window at `starts`, elements outside the box dropped.
void writeback_block(const RefView& block, const RefView& array, std::span<const int64_t> starts,
                     const std::string& what, const BlockWindow& window = {});

}  // namespace tessera::rt
