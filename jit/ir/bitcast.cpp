#include "jit/ir/bitcast.h"

#include <fmt/format.h>

namespace tessera::ir {

namespace {

bool bitcastable(DType t) { return !is_semaphore(t) && t != DType::index; }

}  // namespace

BitcastShape bitcast_shape(DType from, DType to, const Shape& shape) {
  // Bools are not bits in jax either: a bool converts (or compares) instead.
  if (is_bool(from)) return {{}, "i1 has no bits to read", "convert bools with .astype(pl::u8) first"};
  if (is_bool(to)) return {{}, "i1 has no bits to read", "compare instead, e.g. x != 0"};
  for (DType t : {from, to})
    if (!bitcastable(t)) return {{}, fmt::format("{} has no bits to read", dtype_name(t)), "bitcast int and float dtypes"};
  const int64_t fs = dtype_size(from), ts = dtype_size(to);
  if (fs == ts) return {shape, {}, {}};
  if (fs > ts) {
    Shape r = shape;
    r.push_back(fs / ts);
    return {r, {}, {}};
  }
  const int64_t ratio = ts / fs;
  if (shape.empty())
    return {{}, fmt::format("a scalar {} has fewer bytes than one {}", dtype_name(from), dtype_name(to)),
            fmt::format("bitcast a value whose last dim holds the {} parts of each {}", ratio, dtype_name(to))};
  if (shape.back() != ratio)
    return {{}, fmt::format("the last dim is {}, not the {} {} parts of one {}", shape.back(), ratio, dtype_name(from),
                            dtype_name(to)),
            fmt::format("reshape so that the last dim is {} (jax's bitcast_convert_type consumes it)", ratio)};
  return {Shape(shape.begin(), shape.end() - 1), {}, {}};
}

}  // namespace tessera::ir
