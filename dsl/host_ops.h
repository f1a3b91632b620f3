// Array operations for host code around kernels (and inside pl::shard_map), named as in jax.numpy /
// jax.lax:
//
//   pl::concatenate({a, b}, axis), pl::split(a, sections, axis), pl::transpose(a, perm)
//   pl::dynamic_slice(a, starts, sizes), pl::dynamic_slice_in_dim(a, start, size, axis)
//   pl::dynamic_update_slice(a, update, starts), pl::dynamic_update_slice_in_dim(a, update, start, axis)
//   pl::matmul(a, b), pl::dot(a, b), pl::einsum("mn,kn->mk", a, b)     (compiled tessera kernels)
//   a + b, a - b, a * b                                                 element-wise, one shape
//
// Slices clamp their starts as lax.dynamic_slice does. matmul / dot / einsum accumulate in f32 (f64
// for f64) and return the promoted input dtype, or `preferred` when given.
//
// Front-end layer (dsl/).
#pragma once

#include <optional>
#include <source_location>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/array.h"

namespace tessera {

Array concatenate(const std::vector<Array>& arrays, int64_t axis = 0,
                  std::source_location loc = std::source_location::current());
std::vector<Array> split(const Array& a, int64_t sections, int64_t axis = 0,
                         std::source_location loc = std::source_location::current());
// Dims in the order `perm` gives (reversed when empty).
Array transpose(const Array& a, std::vector<int64_t> perm = {}, std::source_location loc = std::source_location::current());
Array dynamic_slice(const Array& a, const std::vector<int64_t>& starts, const Shape& sizes,
                    std::source_location loc = std::source_location::current());
Array dynamic_slice_in_dim(const Array& a, int64_t start, int64_t size, int64_t axis = 0,
                           std::source_location loc = std::source_location::current());
Array dynamic_update_slice(const Array& a, const Array& update, const std::vector<int64_t>& starts,
                           std::source_location loc = std::source_location::current());
Array dynamic_update_slice_in_dim(const Array& a, const Array& update, int64_t start, int64_t axis,
                                  std::source_location loc = std::source_location::current());
// dynamic_update_slice_in_dim for an update whose `axis` dim has size 1, placed at `index`.
Array dynamic_update_index_in_dim(const Array& a, const Array& update, int64_t index, int64_t axis,
                                  std::source_location loc = std::source_location::current());

// (m, k) @ (k, n), and (b, m, k) @ (b, k, n).
Array matmul(const Array& a, const Array& b, std::optional<DType> preferred = std::nullopt,
             std::source_location loc = std::source_location::current());
Array dot(const Array& a, const Array& b, std::optional<DType> preferred = std::nullopt,
          std::source_location loc = std::source_location::current());
// Two-operand einsum with an explicit output ("ij,jk->ik"): batch letters appear in both inputs and
// the output, contracted ones in both inputs only; a letter in one input only is summed out.
Array einsum(const std::string& subscripts, const Array& a, const Array& b, std::optional<DType> preferred = std::nullopt,
             std::source_location loc = std::source_location::current());

namespace detail {
// `axis` (negative counts from the end) checked against `rank` for `api`.
int64_t checked_axis(int64_t axis, int64_t rank, const char* api, SourceLoc loc);

// An operator's right operand with the line of the user's expression: an operator cannot take a
// defaulted std::source_location, but the default argument of this implicit conversion is evaluated
// where the user wrote `a + b`, so the operators' errors point there.
struct LocatedArray {
  LocatedArray(const Array& a, std::source_location l = std::source_location::current()) : array(a), loc(l) {}
  // What else converts to an Array (a pl::ShardedArray, gathered) is converted here and held: one
  // implicit conversion is all an operand may take, and the operators took those before.
  template <class T>
    requires(!std::is_base_of_v<Array, T> && std::is_convertible_v<const T&, Array>)
  LocatedArray(const T& x, std::source_location l = std::source_location::current())
      : converted(x), array(*converted), loc(l) {}
  LocatedArray(const LocatedArray&) = delete;  // `array` may refer to `converted`
  LocatedArray& operator=(const LocatedArray&) = delete;

  std::optional<Array> converted;
  const Array& array;
  SourceLoc loc;
};
}  // namespace detail

Array operator+(const Array& a, const detail::LocatedArray& b);
Array operator-(const Array& a, const detail::LocatedArray& b);
Array operator*(const Array& a, const detail::LocatedArray& b);
Array& operator+=(Array& a, const detail::LocatedArray& b);

}  // namespace tessera
