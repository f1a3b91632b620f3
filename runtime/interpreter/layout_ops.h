// The interpreter's ops that rearrange a value's elements without computing on them: slice (indexing
// a loaded value), bitcast. They run on whole arrays; the rules they share with the compiled backend (how a
// traced start is clamped) are in runtime/element_rules.h.
//
// Runtime layer (interpreter).
#pragma once

#include <span>

#include "jit/ir/ir.h"
#include "runtime/array.h"

namespace tessera::rt {

// slice(value, starts...): the window `attr` describes at `starts` (one per dim of `a`), each start
// clamped so that the window fits (rules::clamp_slice_start); squeezed dims are dropped.
Array slice_window(const Array& a, std::span<const int64_t> starts, const ir::ViewAttr& attr);

// bitcast: a's bytes as `dtype` in `shape`, the result shape ir::bitcast_shape gives.
Array bitcast(const Array& a, DType dtype, const Shape& shape);

}  // namespace tessera::rt
