// pl::numerics::compare: how far a result is from a reference, the report the seeds' notebooks print
// after each kernel.
//
//   pl::numerics::compare(ref, test, {.atol = 1e-2, .rtol = 1e-2, .region_grid = {2, 2}});
//
// prints (unless .print = false) and returns:
//   NumericsResult(PASS)
//     shape:     (2048, 1024)
//     max_diff:  0.000000
//     mean_diff: 0.000000
//     median:    0.000000
//     % > 0.1: 0.00%
//     worst at (0, 0): ref=-71.0000, test=-71.0000
//     regions (2x2):
//       [0,0]: mean=0.0000, %bad=0.0%
//       ...
// An element is bad when |test - ref| > atol + rtol * |ref| (numpy.allclose; a NaN in either is
// bad); the result passes when no element is bad. Regions split the array viewed as 2-D (rows: all
// dims but the last; a 1-D array is one row) into region_grid[0] x region_grid[1] nearly equal parts,
// so where the errors sit (one device's shard, one tile) shows at a glance.
//
// Front-end layer (dsl/).
#pragma once

#include <array>
#include <cstdint>
#include <source_location>
#include <string>
#include <vector>

#include "runtime/array.h"

namespace tessera::numerics {

struct CompareOptions {
  double atol = 1e-2;
  double rtol = 1e-2;
  std::array<int64_t, 2> region_grid = {1, 1};
  bool print = true;
};

struct RegionStats {
  int64_t row = 0, col = 0;
  double mean_diff = 0;
  double pct_bad = 0;  // percent of the region's elements that are bad
};

struct NumericsResult {
  bool passed = false;
  Shape shape;
  double max_diff = 0, mean_diff = 0, median_diff = 0;
  double pct_above_0_1 = 0;  // percent of elements with |diff| > 0.1
  std::vector<int64_t> worst_index;  // where |diff| is largest (the first such element)
  double worst_ref = 0, worst_test = 0;
  int64_t num_bad = 0;
  std::array<int64_t, 2> region_grid = {1, 1};
  std::vector<RegionStats> regions;  // row-major over region_grid

  std::string str() const;
};

NumericsResult compare(const Array& ref, const Array& test, CompareOptions options = {},
                       std::source_location loc = std::source_location::current());

}  // namespace tessera::numerics
