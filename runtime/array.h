// pl::Array: a host array with a static shape and a dtype — what pallas_call takes and returns.
//
// The functions that check what they are given (a shape no array can have, a wrong element count, an
// index out of range, an allocation the machine refuses) take the caller's line as a defaulted
// std::source_location, as the DSL functions do, and their UserErrors point at it.
//
// Arrays have value semantics and share their storage when copied; the storage is never changed
// while shared (mutable_data() copies first). Small arrays (<= 8 bytes, e.g. scalars) live inline,
// which keeps the interpreter's scalar arithmetic allocation-free. Runtime layer; users see it as
// pl::Array.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "jit/ir/diagnostics.h"
#include "jit/ir/type.h"
#include "runtime/numeric.h"

namespace tessera {

namespace detail {
template <class T> constexpr bool is_element_v =
    std::is_same_v<T, bool> || std::is_same_v<T, int8_t> || std::is_same_v<T, int16_t> || std::is_same_v<T, int32_t> ||
    std::is_same_v<T, int64_t> || std::is_same_v<T, uint8_t> || std::is_same_v<T, uint16_t> ||
    std::is_same_v<T, uint32_t> || std::is_same_v<T, uint64_t> || std::is_same_v<T, bfloat16> || std::is_same_v<T, float16> ||
    std::is_same_v<T, float> || std::is_same_v<T, double>;
template <class T> constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, bool>) return DType::i1;
  else if constexpr (std::is_same_v<T, int8_t>) return DType::i8;
  else if constexpr (std::is_same_v<T, int16_t>) return DType::i16;
  else if constexpr (std::is_same_v<T, int32_t>) return DType::i32;
  else if constexpr (std::is_same_v<T, int64_t>) return DType::i64;
  else if constexpr (std::is_same_v<T, uint8_t>) return DType::u8;
  else if constexpr (std::is_same_v<T, uint16_t>) return DType::u16;
  else if constexpr (std::is_same_v<T, uint32_t>) return DType::u32;
  else if constexpr (std::is_same_v<T, uint64_t>) return DType::u64;
  else if constexpr (std::is_same_v<T, bfloat16>) return DType::bf16;
  else if constexpr (std::is_same_v<T, float16>) return DType::f16;
  else if constexpr (std::is_same_v<T, float>) return DType::f32;
  else return DType::f64;
}
}  // namespace detail

class Array {
 public:
  // An f32 scalar holding 0.
  Array();
  // An array of this dtype and shape whose elements are all zero.
  Array(DType dtype, Shape shape, std::source_location loc = std::source_location::current());

  static Array zeros(Shape shape, DType dtype, std::source_location loc = std::source_location::current()) {
    return Array(dtype, std::move(shape), loc);
  }
  // An array whose elements are whatever the memory held (jnp.empty): for buffers about to be filled.
  static Array empty(Shape shape, DType dtype, std::source_location loc = std::source_location::current());
  static Array full(Shape shape, double value, DType dtype, std::source_location loc = std::source_location::current());
  // 0, 1, ..., n-1 (n >= 0).
  static Array arange(int64_t n, DType dtype = DType::i32, std::source_location loc = std::source_location::current());
  // Seeded pseudo-random values: element i depends only on (seed, i), on every machine.
  static Array random_normal(Shape shape, DType dtype, uint64_t seed,
                             std::source_location loc = std::source_location::current());
  static Array random_uniform(Shape shape, DType dtype, uint64_t seed, double lo = 0.0, double hi = 1.0,
                              std::source_location loc = std::source_location::current());
  // Elements in row-major order; the dtype follows T (float -> f32, int32_t -> i32, bfloat16 -> bf16, ...).
  template <class T>
  static Array from_vector(const std::vector<T>& data, Shape shape,
                           std::source_location loc = std::source_location::current());
  // Elements given as T, converted to `dtype`.
  template <class T>
  static Array from_vector(const std::vector<T>& data, Shape shape, DType dtype,
                           std::source_location loc = std::source_location::current());
  // (A scalar always exists and lives inline: nothing to report.)
  static Array scalar(double value, DType dtype) { return full({}, value, dtype); }

  // The elements converted to T, in row-major order.
  template <class T> std::vector<T> to_vector() const;
  // Element at `index` (one entry per dim), converted to T.
  template <class T = double>
  T at(const std::vector<int64_t>& index, std::source_location loc = std::source_location::current()) const;
  // The only element of a scalar or one-element array, as a double / int64 (an error for any other size).
  double item(std::source_location loc = std::source_location::current()) const;
  int64_t item_int(std::source_location loc = std::source_location::current()) const;

  Array astype(DType dtype, std::source_location loc = std::source_location::current()) const;
  // Same elements, new shape (shares storage).
  Array reshape(Shape shape, std::source_location loc = std::source_location::current()) const;

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size() const { return size_; }
  int64_t nbytes() const { return size_ * dtype_size(dtype_); }
  // For 2-D arrays: `auto [m, k] = x.shape2();`
  std::array<int64_t, 2> shape2(std::source_location loc = std::source_location::current()) const;

  const std::byte* data() const { return storage_ ? storage_.get() : inline_; }
  // Writable elements; copies the storage first if another Array shares it.
  std::byte* mutable_data();
  template <class T> const T* data_as() const { return reinterpret_cast<const T*>(data()); }
  template <class T> T* mutable_data_as() { return reinterpret_cast<T*>(mutable_data()); }
  // Whether two arrays share storage.
  bool shares_storage_with(const Array& other) const { return storage_ && storage_ == other.storage_; }

  // numpy-like text, long dims summarised with "...": "f32[2,3] [[1, 2, 3], [4, 5, 6]]".
  std::string to_string(int64_t edge_items = 3) const;
  // One element as text ("1.5", "7", "True"); flat_index in [0, size()).
  std::string element_string(int64_t flat_index, std::source_location loc = std::source_location::current()) const;

 private:
  static std::shared_ptr<std::byte[]> allocate(int64_t nbytes, bool zero);
  // allocate, where running out of memory is a UserError naming the array and its bytes, at `loc`.
  static std::shared_ptr<std::byte[]> storage(const Shape& shape, DType dtype, int64_t nbytes, bool zero, SourceLoc loc);
  // The element's text, unchecked.
  std::string element_text(int64_t flat_index) const;

  DType dtype_ = DType::f32;
  Shape shape_;
  int64_t size_ = 1;
  std::shared_ptr<std::byte[]> storage_;  // null when the elements fit inline_
  alignas(8) std::byte inline_[8] = {};
};

namespace rt {
// Where the storage of large arrays comes from first when memory must be reachable from other
// processes: the MPI transport's shared-memory segment (docs/design.md §4c) installs a source while a
// shard_map over processes runs. `source` returns storage of at least `nbytes`, or null to leave the
// array to the heap; it is asked only for arrays of at least `min_bytes`. A null source: the heap only.
using StorageSource = std::shared_ptr<std::byte[]> (*)(int64_t nbytes);
void set_storage_source(StorageSource source, int64_t min_bytes);
}  // namespace rt

// Whether |a - b| <= atol + rtol * |b| element-wise (NaN never close); shapes must match.
bool allclose(const Array& a, const Array& b, double rtol = 1e-5, double atol = 1e-8);
// The largest |a - b| over all elements (NaN if any pair involves NaN).
double max_abs_diff(const Array& a, const Array& b);

// ---- template definitions ----

namespace detail {
// The error of from_vector when `given` elements do not fill `shape` (or no array has that shape).
[[noreturn]] void array_size_mismatch(size_t given, const Shape& shape, DType dtype, SourceLoc loc);
void convert_elements(DType from, const std::byte* src, DType to, std::byte* dst, int64_t n);
}  // namespace detail

template <class T>
Array Array::from_vector(const std::vector<T>& data, Shape shape, std::source_location loc) {
  static_assert(detail::is_element_v<T>,
                "Array::from_vector<T>: T must be bool, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, bfloat16, float16, float or double");
  return from_vector(data, std::move(shape), detail::dtype_of<T>(), loc);
}

template <class T>
Array Array::from_vector(const std::vector<T>& data, Shape shape, DType dtype, std::source_location loc) {
  static_assert(detail::is_element_v<T>,
                "Array::from_vector<T>: T must be bool, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, bfloat16, float16, float or double");
  if (static_cast<int64_t>(data.size()) != num_elements(shape)) detail::array_size_mismatch(data.size(), shape, dtype, loc);
  Array a(dtype, std::move(shape), loc);
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> bytes(data.begin(), data.end());
    detail::convert_elements(DType::i1, reinterpret_cast<const std::byte*>(bytes.data()), dtype, a.mutable_data(), a.size());
  } else {
    detail::convert_elements(detail::dtype_of<T>(), reinterpret_cast<const std::byte*>(data.data()), dtype,
                             a.mutable_data(), a.size());
  }
  return a;
}

template <class T>
std::vector<T> Array::to_vector() const {
  static_assert(detail::is_element_v<T>,
                "Array::to_vector<T>: T must be bool, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, bfloat16, float16, float or double");
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> bytes(static_cast<size_t>(size_));
    detail::convert_elements(dtype_, data(), DType::i1, reinterpret_cast<std::byte*>(bytes.data()), size_);
    return std::vector<bool>(bytes.begin(), bytes.end());
  } else {
    std::vector<T> out(static_cast<size_t>(size_));
    detail::convert_elements(dtype_, data(), detail::dtype_of<T>(), reinterpret_cast<std::byte*>(out.data()), size_);
    return out;
  }
}

namespace detail {
int64_t flat_index(const Shape& shape, const std::vector<int64_t>& index, SourceLoc loc);
}

template <class T>
T Array::at(const std::vector<int64_t>& index, std::source_location loc) const {
  static_assert(detail::is_element_v<T>, "Array::at<T>: T must be an element type");
  int64_t i = detail::flat_index(shape_, index, loc);
  T out{};
  detail::convert_elements(dtype_, data() + i * dtype_size(dtype_), detail::dtype_of<T>(),
                           reinterpret_cast<std::byte*>(&out), 1);
  return out;
}

}  // namespace tessera
