// Host array operations that move data (no arithmetic): slices, updates, concatenation, splits,
// transposes. The numerics of computing ops live in block_ops.h; the front end builds the JAX-like
// host API (pl::dynamic_slice, pl::concatenate, ...) on these.
//
// Runtime layer.
#pragma once

#include <span>
#include <vector>

#include "runtime/array.h"

namespace tessera::rt {

// The window of `a` at `starts` with `sizes` (as jax.lax.dynamic_slice: starts are clamped so that
// the window fits).
Array slice(const Array& a, std::span<const int64_t> starts, const Shape& sizes);
// `a` with the window at `starts` replaced by `update` (starts clamped as dynamic_update_slice).
Array update_slice(const Array& a, const Array& update, std::span<const int64_t> starts);
// The arrays joined along `axis`; every other dim must agree.
Array concatenate(const std::vector<Array>& arrays, int64_t axis);
// `a` cut into `sections` equal parts along `axis`.
std::vector<Array> split(const Array& a, int64_t sections, int64_t axis);

}  // namespace tessera::rt
