// pl::GridDim: one dim of a grid, a number known when tracing or a traced integer scalar known only
// when the kernel runs (Pallas: a grid dim that is a traced value, e.g. a block count read from a
// scalar-prefetch ref). Both convert implicitly, so `{.grid = {m / bm, n / bn}}` and
// `{.grid = {num_blocks[g]}}` read alike.
//
// A pallas_call grid is written before any kernel is traced, so its run-time dims name where their
// size comes from instead: pl::from_prefetch(k), the value of scalar-prefetch argument k (a rank-0
// integer array), read on the host at every call (docs/design.md §4.1). A pallas_call grid dim may
// carry a name, pl::GridDim("rows", pl::from_prefetch(0)) or pl::GridDim("cols", 4), read in the
// kernel with pl::axis_index("rows") and pl::num_programs("rows") (the call's size).
//
// Front-end layer (dsl/).
#pragma once

#include <concepts>
#include <optional>
#include <source_location>
#include <string>
#include <utility>

#include "dsl/value.h"

namespace tessera {

class GridDim {
 public:
  template <std::integral I>
  GridDim(I size) : size_(static_cast<int64_t>(size)) {}  // NOLINT: implicit, as a plain number
  // A traced value; `loc` is the line that wrote it in the grid, blamed when it is no integer scalar.
  GridDim(const Value& size, std::source_location loc = std::source_location::current())  // NOLINT: implicit
      : value_(size), loc_(loc) {}
  // A named pallas_call grid dim (Pallas grid=(("rows", n), ...)): `size` a number or pl::from_prefetch(k).
  GridDim(std::string name, GridDim size) : GridDim(std::move(size)) { name_ = std::move(name); }

  bool is_static() const { return !value_.has_value() && !prefetch_.has_value(); }
  int64_t size() const { return size_; }              // a static dim's size
  const Value& value() const { return *value_; }      // a traced dim's value
  // A pallas_call dim given by a scalar-prefetch argument: its index.
  const std::optional<int>& prefetch() const { return prefetch_; }
  SourceLoc loc() const { return loc_; }
  // Its name in a named grid; empty when unnamed.
  const std::optional<std::string>& name() const { return name_; }

 private:
  friend GridDim from_prefetch(int k, std::source_location loc);
  GridDim() = default;

  int64_t size_ = 0;
  std::optional<Value> value_;
  std::optional<int> prefetch_;
  std::optional<std::string> name_;
  SourceLoc loc_;
};

// A pallas_call grid dim whose size is scalar-prefetch argument `k` (a rank-0 integer array), read
// when the call runs: `.grid = {pl::from_prefetch(0), n / bn}`. One traced and compiled kernel then
// serves every size; program_id / num_programs see the size of each call.
inline GridDim from_prefetch(int k, std::source_location loc = std::source_location::current()) {
  GridDim d;
  d.prefetch_ = k;
  d.loc_ = loc;
  return d;
}

}  // namespace tessera
