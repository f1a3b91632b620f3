#include "runtime/interpreter/layout_ops.h"

#include <cstring>

#include "runtime/element_rules.h"

namespace tessera::rt {

Array slice_window(const Array& a, std::span<const int64_t> starts, const ir::ViewAttr& attr) {
  const int64_t rank = a.rank();
  // The window in the operand's dims (squeezed ones have size 1), and the source stride of each.
  Shape window(rank);
  std::vector<int64_t> first(rank), step(rank), src_strides(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d) src_strides[d] = src_strides[d + 1] * a.shape()[d + 1];
  Shape result;
  for (int64_t d = 0; d < rank; ++d) {
    const ir::ViewDim& dim = attr.dims[d];
    window[d] = dim.squeeze ? 1 : dim.size;
    const int64_t extent = dim.squeeze ? 1 : rules::slice_extent(dim.size, dim.stride);
    first[d] = rules::clamp_slice_start(starts[d], extent, a.shape()[d]);
    step[d] = dim.squeeze ? 0 : dim.stride;
    if (!dim.squeeze) result.push_back(dim.size);
  }
  Array out(a.dtype(), result);
  const int64_t es = dtype_size(a.dtype());
  const std::byte* src = a.data();
  std::byte* dst = out.mutable_data();
  std::vector<int64_t> idx(rank, 0);
  for (int64_t n = 0; n < out.size(); ++n) {
    int64_t offset = 0;
    for (int64_t d = 0; d < rank; ++d) offset += (first[d] + idx[d] * step[d]) * src_strides[d];
    std::memcpy(dst + n * es, src + offset * es, static_cast<size_t>(es));
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++idx[d] < window[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

Array bitcast(const Array& a, DType dtype, const Shape& shape) {
  // Row-major, the parts of a wider element are the trailing dim of the narrower view: the bytes
  // stay where they are.
  Array out(dtype, shape);
  std::memcpy(out.mutable_data(), a.data(), static_cast<size_t>(a.nbytes()));
  return out;
}

}  // namespace tessera::rt
