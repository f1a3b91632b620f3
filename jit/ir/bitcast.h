// The bitcast rule (lax.bitcast_convert_type): which dtypes a value's bits may be read as, and the
// shape that gives. One statement of it for the front end (dsl/value.cpp, whose errors quote it)
// and the verifier.
//
// Part of the IR; depends only on type.h.
#pragma once

#include <string>

#include "jit/ir/type.h"

namespace tessera::ir {

// A bitcast's result shape, or why there is none (`error` and `fix` set, `shape` empty).
struct BitcastShape {
  Shape shape;
  std::string error;  // what is wrong, e.g. "the last dim is 3, not 4"
  std::string fix;    // how to make it right
  bool ok() const { return error.empty(); }
};

// Reading a value of `from` with shape `shape` as `to`, by the bytes in memory order (little-endian):
// - the same width keeps the shape;
// - a wider `from` gives each element a new trailing dim of size(from) / size(to) parts, the first
//   part the lowest-addressed bytes (f32 (4,) -> u8 (4, 4); a scalar gives a (ratio,) value);
// - a narrower `from` needs a trailing dim of exactly size(to) / size(from), which the result
//   consumes (u8 (4, 4) -> f32 (4,)).
// Every value dtype but bool and index takes part: i8, i16, i32, i64, u8, u16, u32, u64, bf16, f16,
// f32, f64 (jax rejects bool too; index is a lowering type).
BitcastShape bitcast_shape(DType from, DType to, const Shape& shape);

}  // namespace tessera::ir
