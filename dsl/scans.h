// Index-valued reductions and scans over one axis of a block, as jnp spells them:
//
//   pl::argmax(v, axis), pl::argmin(v, axis)   jnp.argmax / jnp.argmin: i32 indices, the first on ties,
//                                              a NaN counts as the extreme (the first NaN wins)
//   pl::cumsum(v, axis)                        jnp.cumsum: running sums in index order, v's dtype
//
// They are made of existing ops (reductions, comparisons, iota, where), so both backends run them
// with the rules those ops already share (docs/design.md §4.19).
//
// Front-end layer (dsl/).
#pragma once

#include <source_location>

#include "dsl/value.h"

namespace tessera {

Value argmax(const Value& v, int axis, std::source_location loc = std::source_location::current());
Value argmin(const Value& v, int axis, std::source_location loc = std::source_location::current());
// cumsum's block is O(n^2) in the axis's size n for a moment (a masked sum per output element).
Value cumsum(const Value& v, int axis, std::source_location loc = std::source_location::current());

}  // namespace tessera
