#include "runtime/array_ops.h"

#include <algorithm>

#include "runtime/memory.h"

namespace tessera::rt {

namespace {

// Starts moved inside so that a window of `sizes` fits in `shape`.
std::vector<int64_t> clamp(const Shape& shape, std::span<const int64_t> starts, const Shape& sizes) {
  std::vector<int64_t> out(starts.begin(), starts.end());
  for (size_t d = 0; d < out.size(); ++d) out[d] = std::clamp<int64_t>(out[d], 0, shape[d] - sizes[d]);
  return out;
}

int64_t offset_of(const Shape& shape, std::span<const int64_t> at) {
  int64_t off = 0;
  std::vector<int64_t> st = row_major_strides(shape);
  for (size_t d = 0; d < at.size(); ++d) off += at[d] * st[d];
  return off;
}

}  // namespace

Array slice(const Array& a, std::span<const int64_t> starts, const Shape& sizes) {
  const std::vector<int64_t> at = clamp(a.shape(), starts, sizes);
  Array out = Array::empty(sizes, a.dtype());
  const int64_t es = dtype_size(a.dtype());
  copy_box(out.mutable_data(), row_major_strides(sizes), a.data() + offset_of(a.shape(), at) * es, row_major_strides(a.shape()), sizes, es);
  return out;
}

Array update_slice(const Array& a, const Array& update, std::span<const int64_t> starts) {
  const std::vector<int64_t> at = clamp(a.shape(), starts, update.shape());
  Array out = a;
  const int64_t es = dtype_size(a.dtype());
  Array u = update.astype(a.dtype());
  copy_box(out.mutable_data() + offset_of(a.shape(), at) * es, row_major_strides(a.shape()), u.data(), row_major_strides(u.shape()),
           u.shape(), es);
  return out;
}

Array concatenate(const std::vector<Array>& arrays, int64_t axis) {
  Shape shape = arrays.at(0).shape();
  shape[axis] = 0;
  for (const Array& x : arrays) shape[axis] += x.shape()[axis];
  Array out = Array::empty(shape, arrays[0].dtype());
  std::vector<int64_t> at(shape.size(), 0);
  for (const Array& x : arrays) {
    out = update_slice(out, x, at);
    at[axis] += x.shape()[axis];
  }
  return out;
}

std::vector<Array> split(const Array& a, int64_t sections, int64_t axis) {
  Shape part = a.shape();
  part[axis] /= sections;
  std::vector<Array> out;
  std::vector<int64_t> at(part.size(), 0);
  for (int64_t s = 0; s < sections; ++s) {
    at[axis] = s * part[axis];
    out.push_back(slice(a, at, part));
  }
  return out;
}

}  // namespace tessera::rt
