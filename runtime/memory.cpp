#include "runtime/memory.h"

#include "jit/ir/operands.h"

#include <cstring>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>

namespace tessera::rt {

std::vector<int64_t> row_major_strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int64_t d = static_cast<int64_t>(s.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * s[d + 1];
  return st;
}

std::vector<int64_t> row_major_index(const Shape& shape, int64_t offset) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = shape[d] == 0 ? 0 : offset % shape[d];
    offset = shape[d] == 0 ? 0 : offset / shape[d];
  }
  return index;
}

namespace {


bool is_contiguous(const RefView& r) { return r.strides == row_major_strides(r.shape); }

}  // namespace

void copy_box(std::byte* dst, std::span<const int64_t> dst_strides, const std::byte* src,
              std::span<const int64_t> src_strides, std::span<const int64_t> shape, int64_t es) {
  const size_t rank = shape.size();
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  if (count == 0) return;
  if (rank == 0) {
    std::memcpy(dst, src, static_cast<size_t>(es));
    return;
  }
  const int64_t inner = shape[rank - 1];
  const bool contiguous = dst_strides[rank - 1] == 1 && src_strides[rank - 1] == 1;
  int64_t small[16] = {};
  std::vector<int64_t> large(rank > 16 ? rank : 0, 0);
  int64_t* idx = rank > 16 ? large.data() : small;
  const int64_t rows = count / inner;
  for (int64_t row = 0; row < rows; ++row) {
    int64_t so = 0, dof = 0;
    for (size_t d = 0; d + 1 < rank; ++d) {
      so += idx[d] * src_strides[d];
      dof += idx[d] * dst_strides[d];
    }
    if (contiguous) {
      std::memcpy(dst + dof * es, src + so * es, static_cast<size_t>(inner * es));
    } else {
      for (int64_t i = 0; i < inner; ++i)
        std::memcpy(dst + (dof + i * dst_strides[rank - 1]) * es, src + (so + i * src_strides[rank - 1]) * es,
                    static_cast<size_t>(es));
    }
    for (size_t d = rank - 1; d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

int64_t window_extent(std::span<const int64_t> shape, std::span<const int64_t> strides, int64_t es) {
  int64_t last = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return 0;
    last += (shape[d] - 1) * strides[d];
  }
  return (last + 1) * es;
}

void fill_poison(const RefView& r, bool zero) {
  dispatch_dtype(r.buffer->dtype, [&]<class T>() {
    const T v = poison_value<T>(zero);
    if (is_contiguous(r)) {
      T* p = reinterpret_cast<T*>(r.address(0));
      std::fill(p, p + num_elements(r.shape), v);
      return;
    }
    // Broadcast one element over the view's box (source strides all zero).
    Array one(r.buffer->dtype, {});
    *one.mutable_data_as<T>() = v;
    copy_box(r.address(0), r.strides, one.data(), std::vector<int64_t>(r.shape.size(), 0), r.shape,
             dtype_size(r.buffer->dtype));
  });
}

Buffer::Buffer(std::string name_, Array array, MemorySpace space_, bool writable)
    : name(std::move(name_)), dtype(array.dtype()), shape(array.shape()), space(space_), storage_(std::move(array)) {
  read_only_ = !writable;
  // A writable buffer gets storage of its own (copy-on-write); a read-only one reads the array in place.
  data_ = writable ? storage_.mutable_data() : const_cast<std::byte*>(storage_.data());
}

Buffer::Buffer(std::string name_, DType dtype_, Shape shape_, MemorySpace space_, std::byte* external, bool writable)
    : name(std::move(name_)), dtype(dtype_), shape(std::move(shape_)), space(space_), data_(external), read_only_(!writable) {}

std::byte* Buffer::writable_data() {
  if (read_only_) throw Fault(fmt::format("`{}` is read-only in this kernel", name));
  return data_;
}

std::unique_ptr<Buffer> make_buffer(std::string name, DType dtype, Shape shape, MemorySpace space, bool zero_fill) {
  Array storage;
  try {
    storage = Array::empty(shape, dtype);
  } catch (const UserError& e) {  // out of memory: say for which of the kernel's buffers
    throw UserError(fmt::format("{} for `{}` in {}", e.problem(), name, memory_space_name(space)), e.given(), e.fix(), {});
  }
  auto b = std::make_unique<Buffer>(std::move(name), std::move(storage), space, true);
  fill_poison(RefView::whole(*b), zero_fill || is_semaphore(dtype));  // semaphores start at zero
  return b;
}

Shape tpu_padded_shape(const Shape& shape, DType dtype, MemorySpace space) {
  Shape padded = shape;
  if (space == MemorySpace::SMEM || is_semaphore(dtype) || padded.empty()) return padded;
  const auto round_up = [](int64_t n, int64_t m) { return (n + m - 1) / m * m; };
  padded.back() = round_up(padded.back(), 128);
  if (padded.size() >= 2) {
    const int64_t rows = 8 * std::max<int64_t>(1, 4 / dtype_size(dtype));
    padded[padded.size() - 2] = round_up(padded[padded.size() - 2], rows);
  }
  return padded;
}

RefView RefView::whole(Buffer& b) { return RefView{&b, 0, b.shape, row_major_strides(b.shape)}; }

const std::byte* RefView::read_address(int64_t element_offset) const {
  return buffer->data() + (offset + element_offset) * dtype_size(buffer->dtype);
}
std::byte* RefView::address(int64_t element_offset) const {
  return buffer->writable_data() + (offset + element_offset) * dtype_size(buffer->dtype);
}

std::string view_fault_message(const std::string& name, const Shape& shape, size_t dim, const ir::ViewDim& d,
                               int64_t start) {
  const int64_t extent = shape[dim];
  if (d.squeeze)
    return fmt::format("out-of-bounds index into `{}`: index {} in dimension {} of a ref of shape {}; valid indices are "
                       "[0, {})",
                       name, start, dim, shape_tuple_str(shape), extent);
  // The last element the window reaches, saturated where it would pass INT64_MAX.
  const int64_t reach = (d.size - 1) * d.stride;
  const int64_t last = start > std::numeric_limits<int64_t>::max() - reach ? std::numeric_limits<int64_t>::max() : start + reach;
  return fmt::format("out-of-bounds slice of `{}`: ds({}, {}{}) in dimension {} of a ref of shape {} reaches element {}; "
                     "valid elements are [0, {})",
                     name, start, d.size, d.stride == 1 ? "" : fmt::format(", {}", d.stride), dim, shape_tuple_str(shape),
                     start < 0 ? start : last, extent);
}

std::string root_buffer_name(const ir::Function& fn, ir::ValueId ref) {
  for (;;) {
    const ir::Op* def = fn.def(ref);
    if (!def) return fn.values[ref].name;
    if (def->kind == ir::OpKind::Alloc) return std::get<std::string>(def->attr);
    if (def->kind == ir::OpKind::BlockView) return std::get<ir::BlockCopyAttr>(def->attr).name + " block";
    if (def->kind != ir::OpKind::View) return fn.values[ref].name;
    ref = def->operands[0];
  }
}

RefView view_unchecked(const RefView& ref, std::span<const int64_t> starts, const ir::ViewAttr& attr) {
  RefView out{ref.buffer, ref.offset, {}, {}};
  for (size_t d = 0; d < attr.dims.size(); ++d) {
    const ir::ViewDim& dim = attr.dims[d];
    if (!dim.squeeze) {
      out.shape.push_back(dim.size);
      out.strides.push_back(ref.strides[d] * dim.stride);
    }
    // Wrapping, not signed, arithmetic: a lane-checked view may start far outside its ref (only the
    // lanes a mask selects must lie inside), and its offset is only ever used for those lanes.
    out.offset = static_cast<int64_t>(static_cast<uint64_t>(out.offset) +
                                      static_cast<uint64_t>(starts[d]) * static_cast<uint64_t>(ref.strides[d]));
  }
  return out;
}

RefView view(const RefView& ref, std::span<const int64_t> starts, const ir::ViewAttr& attr, const std::string& name) {
  for (size_t d = 0; d < attr.dims.size(); ++d) {
    const ir::ViewDim& dim = attr.dims[d];
    const int64_t start = starts[d];
    const int64_t extent = ref.shape[d];
    // start >= extent - reach rather than start + reach >= extent, which overflows near INT64_MAX.
    const bool bad = dim.squeeze ? (start < 0 || start >= extent)
                                 : (dim.size > 0 && (start < 0 || start >= extent - (dim.size - 1) * dim.stride));
    if (bad) throw Fault(view_fault_message(name, ref.shape, d, dim, start));
  }
  return view_unchecked(ref, starts, attr);
}

std::vector<bool> lane_checked_views(const ir::Function& fn) {
  std::vector<bool> out(fn.ops.size(), false);
  for (ir::OpId id = 0; id < fn.ops.size(); ++id)
    if (fn.ops[id].kind == ir::OpKind::View) out[id] = true;
  for (const ir::Op& use : fn.ops)
    for (size_t i = 0; i < use.operands.size(); ++i) {
      const ir::Op* def = fn.def(use.operands[i]);
      if (!def || def->kind != ir::OpKind::View) continue;
      // Operand 0 of a load or store is its ref; a mask follows the ref (and a store's value).
      const bool masked_access = i == 0 && ((use.kind == ir::OpKind::Load && ir::load_operands(use).mask != ir::kNone) ||
                                            (use.kind == ir::OpKind::Store && ir::store_operands(use).mask != ir::kNone));
      if (!masked_access) out[static_cast<size_t>(def - fn.ops.data())] = false;
    }
  return out;
}

std::string masked_lane_fault_message(const std::string& name, const Shape& shape, size_t dim, int64_t element,
                                      bool store) {
  return fmt::format("out-of-bounds masked {} `{}`: a lane the mask selects is at element {} in dimension {} of a ref of "
                     "shape {}; valid elements are [0, {}). Lanes the mask leaves out may lie past the ref's edge, "
                     "selected ones may not: mask that lane out, or slice within the ref",
                     store ? "store into" : "load from", name, element, dim, shape_tuple_str(shape), shape[dim]);
}

void check_masked_lanes(const Shape& shape, std::span<const int64_t> starts, const ir::ViewAttr& attr, const Array& mask,
                        const std::string& name, bool store) {
  // The window's lanes in row-major order, each dim's position in the ref moving with them.
  std::vector<int64_t> position(starts.begin(), starts.end());
  std::vector<size_t> kept;  // the ref dims the window keeps, in order
  for (size_t d = 0; d < attr.dims.size(); ++d)
    if (!attr.dims[d].squeeze) kept.push_back(d);
  std::vector<int64_t> step(attr.dims.size(), 0);  // each kept dim's lane number
  const bool* m = mask.data_as<bool>();
  for (int64_t lane = 0; lane < mask.size(); ++lane) {
    if (m[lane])
      for (size_t d = 0; d < position.size(); ++d)
        if (position[d] < 0 || position[d] >= shape[d])
          throw Fault(masked_lane_fault_message(name, shape, d, position[d], store));
    // The next lane: the last kept dim moves fastest.
    for (size_t k = kept.size(); k-- > 0;) {
      const size_t d = kept[k];
      const ir::ViewDim& dim = attr.dims[d];
      if (++step[d] < dim.size) {
        position[d] = lane_position(starts[d], step[d], dim.stride);
        break;
      }
      step[d] = 0;
      position[d] = starts[d];
    }
  }
}

int64_t lane_position(int64_t start, int64_t lane, int64_t stride) {
  constexpr int64_t max = std::numeric_limits<int64_t>::max(), min = std::numeric_limits<int64_t>::min();
  int64_t step = 0, out = 0;
  if (__builtin_mul_overflow(lane, stride, &step)) step = (lane < 0) != (stride < 0) ? min : max;
  if (__builtin_add_overflow(start, step, &out)) out = step < 0 ? min : max;
  return out;
}

Array load(const RefView& ref) {
  Array out(ref.buffer->dtype, ref.shape);
  if (is_contiguous(ref)) {
    std::memcpy(out.mutable_data(), ref.read_address(0), static_cast<size_t>(out.nbytes()));
    return out;
  }
  copy_box(out.mutable_data(), row_major_strides(ref.shape), ref.read_address(0), ref.strides, ref.shape,
           dtype_size(ref.buffer->dtype));
  return out;
}

void store(const RefView& ref, const Array& value) {
  if (is_contiguous(ref)) {
    std::memcpy(ref.address(0), value.data(), static_cast<size_t>(value.nbytes()));
    return;
  }
  copy_box(ref.address(0), ref.strides, value.data(), row_major_strides(ref.shape), ref.shape,
           dtype_size(ref.buffer->dtype));
}

Array load_masked(const RefView& ref, const Array& mask, const Array* other, bool zero_poison) {
  Array out(ref.buffer->dtype, ref.shape);
  const bool* m = mask.data_as<bool>();
  dispatch_dtype(ref.buffer->dtype, [&]<class T>() {
    const T* alt = other ? other->data_as<T>() : nullptr;
    T* dst = out.mutable_data_as<T>();
    const T poison = poison_value<T>(zero_poison);
    for_each_element(ref.shape, ref.strides, [&](int64_t i, int64_t offset) {
      if (m[i]) std::memcpy(&dst[i], ref.read_address(offset), sizeof(T));
      else dst[i] = alt ? alt[i] : poison;
    });
  });
  return out;
}

void store_masked(const RefView& ref, const Array& value, const Array& mask) {
  ref.buffer->writable_data();  // faults on a read-only buffer, whatever the mask
  const bool* m = mask.data_as<bool>();
  const int64_t es = dtype_size(ref.buffer->dtype);
  const std::byte* src = value.data();
  for_each_element(ref.shape, ref.strides, [&](int64_t i, int64_t offset) {
    if (m[i]) std::memcpy(ref.address(offset), src + i * es, static_cast<size_t>(es));
  });
}

// The block index an index map returned, recovered from a window's starts (index * block size, per
// dim) as the user wrote it; empty where a start is not a whole multiple (saturated past int64) or
// `block` is not one size per dim (a window with other dim kinds).
static std::string block_index_str(std::span<const int64_t> starts, const Shape& block) {
  if (block.size() != starts.size()) return {};
  std::vector<int64_t> index(starts.size());
  for (size_t d = 0; d < starts.size(); ++d) {
    if (block[d] <= 0 || starts[d] % block[d] != 0 || starts[d] == std::numeric_limits<int64_t>::max() ||
        starts[d] == std::numeric_limits<int64_t>::min())
      return {};
    index[d] = starts[d] / block[d];
  }
  return fmt::format(" (block index ({}) of a {} block)", fmt::join(index, ", "), shape_tuple_str(block));
}

std::optional<std::string> block_start_error(const Shape& shape, const Shape& block, std::span<const int64_t> starts,
                                             const std::string& what) {
  for (size_t d = 0; d < shape.size(); ++d)
    if (!block_start_valid(starts[d], shape[d]))
      return fmt::format("block of {} out of bounds: the window starts at element ({}){} but the array has shape {}; "
                         "dimension {} starts at {}, valid starts are [0, {}). Check the index map: it returns block "
                         "indices, which are multiplied by the block shape",
                         what, fmt::join(starts, ", "), block_index_str(starts, block), shape_tuple_str(shape), d,
                         starts[d], shape[d]) +
             // index * block size saturates rather than wrap (expand_pipelines): say so where it did.
             (starts[d] == std::numeric_limits<int64_t>::max() || starts[d] == std::numeric_limits<int64_t>::min()
                  ? fmt::format(" (a start past int64, the index's or the index times the block size, is shown "
                                "saturated at {})",
                                starts[d] > 0 ? "INT64_MAX" : "INT64_MIN")
                  : "");
  return std::nullopt;
}

std::optional<std::string> block_box(const Shape& array, const Shape& block, std::span<const int64_t> starts,
                                     const BlockWindow& window, const std::string& what, BlockBox& box) {
  const size_t rank = array.size();
  box.array_at.assign(rank, 0);
  box.block_at.assign(rank, 0);
  box.shape.assign(rank, 0);
  size_t bounded = 0;
  for (size_t d = 0; d < rank; ++d) {
    const ir::BlockDimKind kind = window.kinds.empty() ? ir::BlockDimKind::Blocked : window.kinds[d];
    const int64_t lo = window.pad_lo.empty() ? 0 : window.pad_lo[d], hi = window.pad_hi.empty() ? 0 : window.pad_hi[d];
    int64_t extent = block[d];
    if (kind == ir::BlockDimKind::Bounded) {
      extent = window.sizes[bounded++];
      if (extent < 0 || extent > block[d])
        return fmt::format("block of {}: the pl::BoundedSlice of dimension {} has bound {}, but its index map returned "
                           "pl::ds({}, {}), whose size is {}. Return a size in [0, {}], or raise the bound",
                           what, d, block[d], starts[d], extent, extent < 0 ? "negative" : "over the bound", block[d]);
      if (starts[d] < 0 || starts[d] > array[d] - extent)
        return fmt::format("block of {} out of bounds: the index map returned pl::ds({}, {}) for dimension {} (a "
                           "pl::BoundedSlice), but the array has shape {}; the slice must lie in [0, {})",
                           what, starts[d], extent, d, shape_tuple_str(array), array[d]);
    } else if (kind == ir::BlockDimKind::Element) {
      if (starts[d] < -lo || starts[d] >= std::max<int64_t>(array[d] + hi, 1 - lo))
        return fmt::format("block of {} out of bounds: dimension {} is a pl::Element dim and its index map returned "
                           "element offset {}, but the array{} has {} elements there (shape {}); valid offsets are "
                           "[0, {}). An Element dim's index map returns the offset of the window's first element "
                           "(into the padded array), not a block index",
                           what, d, starts[d] + lo, lo || hi ? fmt::format(" padded by ({}, {})", lo, hi) : "",
                           array[d] + lo + hi, shape_tuple_str(array), std::max<int64_t>(array[d] + lo + hi, 1));
    } else if (!block_start_valid(starts[d], array[d])) {
      // A block index exists only where every dim is a plain block: an Element or Bounded dim's start
      // is not one, so the message then names starts alone.
      const bool plain = std::all_of(window.kinds.begin(), window.kinds.end(),
                                     [](ir::BlockDimKind k) { return k == ir::BlockDimKind::Blocked; });
      return block_start_error(array, plain ? block : Shape{}, starts, what);
    }
    const int64_t first = std::max<int64_t>(starts[d], 0);
    const int64_t end = std::min(starts[d] + extent, array[d]);
    box.array_at[d] = first;
    box.block_at[d] = first - starts[d];
    box.shape[d] = std::max<int64_t>(end - first, 0);
  }
  return std::nullopt;
}

// The box of a window, faulting when the window is invalid.
static BlockBox checked_box(const RefView& array, const Shape& block, std::span<const int64_t> starts,
                            const BlockWindow& window, const std::string& what) {
  BlockBox box;
  if (auto error = block_box(array.shape, block, starts, window, what, box)) throw Fault(*error);
  return box;
}

static int64_t box_offset(std::span<const int64_t> at, const std::vector<int64_t>& strides) {
  int64_t offset = 0;
  for (size_t d = 0; d < at.size(); ++d) offset += at[d] * strides[d];
  return offset;
}

void fetch_block(const RefView& array, const RefView& block, std::span<const int64_t> starts, bool zero_poison,
                 const std::string& what, const BlockWindow& window) {
  const BlockBox box = checked_box(array, block.shape, starts, window, what);
  if (box.shape != block.shape) fill_poison(block, zero_poison);
  copy_box(block.address(box_offset(box.block_at, block.strides)), block.strides,
           array.read_address(box_offset(box.array_at, array.strides)), array.strides, box.shape,
           dtype_size(array.buffer->dtype));
}

RefView block_view(const RefView& array, const Shape& block, std::span<const int64_t> starts, const std::string& what) {
  if (auto error = block_start_error(array.shape, block, starts, what)) throw Fault(*error);
  RefView out{array.buffer, array.offset, block, array.strides};
  for (size_t d = 0; d < starts.size(); ++d) out.offset += starts[d] * array.strides[d];
  return out;
}

void writeback_block(const RefView& block, const RefView& array, std::span<const int64_t> starts,
                     const std::string& what, const BlockWindow& window) {
  const BlockBox box = checked_box(array, block.shape, starts, window, what);
  copy_box(array.address(box_offset(box.array_at, array.strides)), array.strides,
           block.read_address(box_offset(box.block_at, block.strides)), block.strides, box.shape,
           dtype_size(array.buffer->dtype));
}

}  // namespace tessera::rt
