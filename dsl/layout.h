// Rearranging a value's elements inside a kernel, as jax spells it:
//
//   v[i], v(i, pl::ds(s, n))      v[i], v[i, pl.ds(s, n)]   (Value::operator[] / operator(); a window)
//   pl::dynamic_slice(v, {s0, s1}, {n0, n1})               lax.dynamic_slice
//
// Static indices are checked while tracing (out of range: a UserError, as for refs); traced starts
// are clamped into range so that the window fits, as lax.dynamic_slice clamps (docs/design.md §4.13).
//
// Front-end layer (dsl/).
#pragma once

#include <vector>

#include "dsl/ref.h"
#include "dsl/value.h"

namespace tessera {

// lax.dynamic_slice: the window of `sizes` at `starts` (one per dim of x; integers or integer
// scalars), each start clamped so the window fits.
Value dynamic_slice(const Operand& x, const std::vector<Operand>& starts, const Shape& sizes);

}  // namespace tessera
