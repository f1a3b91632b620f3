// Rearranging a value's elements inside a kernel, as jax spells it:
//
//   v[i], v(i, pl::ds(s, n))      v[i], v[i, pl.ds(s, n)]   (Value::operator[] / operator(); a window)
//   pl::dynamic_slice(v, {s0, s1}, {n0, n1})               lax.dynamic_slice
//   pl::concatenate({a, b}, axis)                          jnp.concatenate
//   pl::repeat(v, n, axis), pl::tile(v, {r0, r1})          jnp.repeat, jnp.tile
//   pl::broadcast_in_dim(v, shape, {dims...})              lax.broadcast_in_dim
//
// repeat, tile and broadcast_in_dim are reshapes and broadcasts, which compiled code reads lazily;
// concatenate is an op of its own.
//
// Static indices are checked while tracing (out of range: a UserError, as for refs); traced starts
// are clamped into range so that the window fits, as lax.dynamic_slice clamps (docs/design.md §4.13).
//
// Front-end layer (dsl/).
#pragma once

#include <optional>
#include <source_location>
#include <vector>

#include "dsl/ref.h"
#include "dsl/value.h"

namespace tessera {

// lax.dynamic_slice: the window of `sizes` at `starts` (one per dim of x; integers or integer
// scalars), each start clamped so the window fits.
Value dynamic_slice(const Operand& x, const std::vector<Operand>& starts, const Shape& sizes);

// jnp.concatenate: the values joined along `axis` (negative counts from the end), their dtypes
// promoted to one as arithmetic promotes; every other dim must agree.
Value concatenate(const std::vector<Value>& values, int64_t axis = 0,
                  std::source_location loc = std::source_location::current());
// jnp.repeat with an integer count: every element `repeats` times in a row along `axis`
// ([a, b] -> [a, a, b, b]); without an axis the value is flattened first, as jnp does.
Value repeat(const Operand& x, int64_t repeats, std::optional<int64_t> axis = std::nullopt);
// jnp.tile: the whole value repeated reps[i] times along dim i ([a, b] -> [a, b, a, b]). With more
// reps than dims the value gains leading dims of size 1; with fewer, the reps apply to the last dims.
Value tile(const Operand& x, const std::vector<int64_t>& reps);
// lax.broadcast_in_dim: operand dim i becomes result dim broadcast_dimensions[i] (strictly
// increasing; each operand dim equal to that result dim or 1), the other result dims are new.
Value broadcast_in_dim(const Operand& x, const Shape& shape, const std::vector<int64_t>& broadcast_dimensions);

}  // namespace tessera
