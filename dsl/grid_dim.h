// pl::GridDim: one dim of a grid, a number known when tracing or a traced integer scalar known only
// when the kernel runs (Pallas: a grid dim that is a traced value, e.g. a block count read from a
// scalar-prefetch ref). Both convert implicitly, so `{.grid = {m / bm, n / bn}}` and
// `{.grid = {num_blocks[g]}}` read alike.
//
// Front-end layer (dsl/).
#pragma once

#include <concepts>
#include <optional>
#include <source_location>

#include "dsl/value.h"

namespace tessera {

class GridDim {
 public:
  template <std::integral I>
  GridDim(I size) : size_(static_cast<int64_t>(size)) {}  // NOLINT: implicit, as a plain number
  // A traced value; `loc` is the line that wrote it in the grid, blamed when it is no integer scalar.
  GridDim(const Value& size, std::source_location loc = std::source_location::current())  // NOLINT: implicit
      : value_(size), loc_(loc) {}

  bool is_static() const { return !value_.has_value(); }
  int64_t size() const { return size_; }              // a static dim's size
  const Value& value() const { return *value_; }      // a dynamic dim's value
  SourceLoc loc() const { return loc_; }

 private:
  int64_t size_ = 0;
  std::optional<Value> value_;
  SourceLoc loc_;
};

}  // namespace tessera
