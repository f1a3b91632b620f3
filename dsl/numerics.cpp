#include "dsl/numerics.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "jit/ir/diagnostics.h"
#include "runtime/memory.h"

namespace tessera::numerics {

namespace {

std::string tuple_text(const std::vector<int64_t>& v) {
  return v.size() == 1 ? fmt::format("({},)", v[0]) : fmt::format("({})", fmt::join(v, ", "));
}

}  // namespace

NumericsResult compare(const Array& ref, const Array& test, CompareOptions options, std::source_location loc) {
  if (ref.shape() != test.shape())
    throw UserError("pl::numerics::compare: the reference and the result differ in shape",
                    fmt::format("ref {} and test {}", tuple_text(ref.shape()), tuple_text(test.shape())),
                    "compare arrays of one shape (reshape or slice one of them first)", loc);
  const auto [gr, gc] = options.region_grid;
  if (gr < 1 || gc < 1)
    throw UserError("pl::numerics::compare: region_grid needs at least one region along each axis",
                    fmt::format("region_grid = ({}, {})", gr, gc), "pass e.g. .region_grid = {2, 2}", loc);
  const int64_t cols = ref.rank() == 0 ? 1 : ref.shape().back();
  const int64_t rows = cols == 0 ? 0 : ref.size() / cols;
  if (gr > std::max<int64_t>(rows, 1) || gc > std::max<int64_t>(cols, 1))
    throw UserError("pl::numerics::compare: region_grid has more regions than the array has rows or columns",
                    fmt::format("region_grid = ({}, {}) for an array viewed as {} x {}", gr, gc, rows, cols),
                    "use at most one region per row and per column", loc);

  NumericsResult r;
  r.shape = ref.shape();
  r.region_grid = options.region_grid;
  const std::vector<double> a = ref.to_vector<double>(), b = test.to_vector<double>();
  std::vector<double> diff(a.size());
  std::vector<double> region_sum(static_cast<size_t>(gr * gc), 0.0);
  std::vector<int64_t> region_bad(region_sum.size(), 0), region_count(region_sum.size(), 0);
  int64_t worst = 0, above = 0;
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(a[i] - b[i]);
    diff[i] = d;
    const bool bad = !(d <= options.atol + options.rtol * std::abs(a[i]));  // NaN compares false
    const int64_t row = static_cast<int64_t>(i) / cols, col = static_cast<int64_t>(i) % cols;
    // Region of (row, col): nearly equal parts, the larger ones first.
    const int64_t rr = std::min(gr - 1, row * gr / std::max<int64_t>(rows, 1));
    const int64_t rc = std::min(gc - 1, col * gc / std::max<int64_t>(cols, 1));
    const size_t k = static_cast<size_t>(rr * gc + rc);
    region_sum[k] += d;
    region_bad[k] += bad;
    region_count[k] += 1;
    r.num_bad += bad;
    above += d > 0.1 || std::isnan(d);
    sum += d;
    // NaN is the worst difference of all: it is what a reader must see first.
    if (std::isnan(d) ? !std::isnan(diff[static_cast<size_t>(worst)]) : d > diff[static_cast<size_t>(worst)])
      worst = static_cast<int64_t>(i);
  }
  const double n = static_cast<double>(a.size());
  r.passed = r.num_bad == 0;
  if (!a.empty()) {
    r.max_diff = diff[static_cast<size_t>(worst)];
    r.mean_diff = sum / n;
    r.pct_above_0_1 = 100.0 * static_cast<double>(above) / n;
    std::vector<double> sorted = diff;
    auto mid = sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2);
    std::nth_element(sorted.begin(), mid, sorted.end());
    r.median_diff = *mid;
    if (sorted.size() % 2 == 0) r.median_diff = 0.5 * (r.median_diff + *std::max_element(sorted.begin(), mid));
    r.worst_index = rt::row_major_index(r.shape, worst);
    r.worst_ref = a[static_cast<size_t>(worst)];
    r.worst_test = b[static_cast<size_t>(worst)];
  }
  for (int64_t i = 0; i < gr; ++i)
    for (int64_t j = 0; j < gc; ++j) {
      const size_t k = static_cast<size_t>(i * gc + j);
      const double c = static_cast<double>(std::max<int64_t>(region_count[k], 1));
      r.regions.push_back({i, j, region_sum[k] / c, 100.0 * static_cast<double>(region_bad[k]) / c});
    }
  if (options.print) {
    std::fputs(r.str().c_str(), stdout);
    std::fflush(stdout);
  }
  return r;
}

std::string NumericsResult::str() const {
  std::string s = fmt::format(
      "NumericsResult({})\n"
      "  shape:     {}\n"
      "  max_diff:  {:.6f}\n"
      "  mean_diff: {:.6f}\n"
      "  median:    {:.6f}\n"
      "  % > 0.1: {:.2f}%\n",
      passed ? "PASS" : "FAIL", tuple_text(shape), max_diff, mean_diff, median_diff, pct_above_0_1);
  if (!worst_index.empty())
    s += fmt::format("  worst at {}: ref={:.4f}, test={:.4f}\n", tuple_text(worst_index), worst_ref, worst_test);
  s += fmt::format("  regions ({}x{}):\n", region_grid[0], region_grid[1]);
  for (const RegionStats& g : regions)
    s += fmt::format("    [{},{}]: mean={:.4f}, %bad={:.1f}%\n", g.row, g.col, g.mean_diff, g.pct_bad);
  return s;
}

}  // namespace tessera::numerics
