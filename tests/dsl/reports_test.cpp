// pl::benchmark and pl::numerics::compare: their statistics and their report formats.
#include <doctest/doctest.h>

#include <cmath>

#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;
using doctest::Approx;
using doctest::Contains;

TEST_SUITE("dsl") {
  TEST_CASE("benchmark: statistics of the timed calls, numpy's percentiles") {
    pl::BenchmarkResult r = pl::BenchmarkResult::from_times({5, 1, 4, 2, 3}, 3);
    CHECK(r.iters == 5);
    CHECK(r.mean == Approx(3));
    CHECK(r.median == Approx(3));
    CHECK(r.stdev == Approx(std::sqrt(2.0)));
    CHECK(r.min == 1);
    CHECK(r.max == 5);
    CHECK(r.p95 == Approx(4.8));
    CHECK(r.p99 == Approx(4.96));
    CHECK(r.str() ==
          "BenchmarkResult (5 iters, 3 warmup)\n"
          "  mean:        3.000 ms\n"
          "  median:      3.000 ms\n"
          "  stdev:       1.414 ms\n"
          "  min:         1.000 ms\n"
          "  max:         5.000 ms\n"
          "  p95:         4.800 ms\n"
          "  p99:         4.960 ms\n");
  }

  TEST_CASE("benchmark: warms up, then times every call of a kernel") {
    auto add = pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref o) { o() = x() + y(); }, pl::GridSpec{},
                               pl::ShapeDtype({256}, pl::f32));
    pl::Array x = pl::Array::arange(256, pl::f32);
    int calls = 0;
    pl::BenchmarkResult r = pl::benchmark({.iters = 7, .warmup = 2, .print = false},
                                          [&](const pl::Array& a, const pl::Array& b) {
                                            ++calls;
                                            return add(a, b);
                                          },
                                          x, x);
    CHECK(calls == 9);
    REQUIRE(r.times_ms.size() == 7);
    CHECK(r.min > 0);
    CHECK(r.min <= r.median);
    CHECK(r.median <= r.p95);
    CHECK(r.p95 <= r.p99);
    CHECK(r.p99 <= r.max);
    CHECK_THROWS_WITH_AS(pl::benchmark({.iters = 0}, [] { return 0; }),
                         Contains("pl::benchmark needs at least one timed iteration"), UserError);
  }

  TEST_CASE("numerics: a passing comparison, in the seed's report format") {
    pl::Array ref = pl::Array::from_vector(std::vector<float>{-71, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
    pl::numerics::NumericsResult r = pl::numerics::compare(ref, ref, {.region_grid = {2, 2}, .print = false});
    CHECK(r.passed);
    CHECK(r.str() ==
          "NumericsResult(PASS)\n"
          "  shape:     (2, 4)\n"
          "  max_diff:  0.000000\n"
          "  mean_diff: 0.000000\n"
          "  median:    0.000000\n"
          "  % > 0.1: 0.00%\n"
          "  worst at (0, 0): ref=-71.0000, test=-71.0000\n"
          "  regions (2x2):\n"
          "    [0,0]: mean=0.0000, %bad=0.0%\n"
          "    [0,1]: mean=0.0000, %bad=0.0%\n"
          "    [1,0]: mean=0.0000, %bad=0.0%\n"
          "    [1,1]: mean=0.0000, %bad=0.0%\n");
  }

  TEST_CASE("numerics: a failing comparison locates the worst element and the bad region") {
    // A (4, 6) array; the result differs in the bottom-right region only (rows 2..3, cols 3..5).
    std::vector<float> a(24), b(24);
    for (int i = 0; i < 24; ++i) a[i] = b[i] = static_cast<float>(i);
    b[2 * 6 + 4] += 0.5f;   // (2, 4): bad
    b[3 * 6 + 5] += 2.0f;   // (3, 5): the worst
    b[0] += 0.001f;         // (0, 0): within atol
    pl::Array ref = pl::Array::from_vector(a, {4, 6}), test = pl::Array::from_vector(b, {4, 6});
    pl::numerics::NumericsResult r =
        pl::numerics::compare(ref, test, {.atol = 1e-2, .rtol = 0, .region_grid = {2, 2}, .print = false});
    CHECK_FALSE(r.passed);
    CHECK(r.num_bad == 2);
    CHECK(r.max_diff == Approx(2.0));
    CHECK(r.worst_index == std::vector<int64_t>{3, 5});
    CHECK(r.worst_ref == 23);
    CHECK(r.worst_test == 25);
    CHECK(r.pct_above_0_1 == Approx(100.0 * 2 / 24));
    CHECK(r.mean_diff == Approx((0.5 + 2.0 + 0.001) / 24).epsilon(1e-4));
    REQUIRE(r.regions.size() == 4);
    CHECK(r.regions[0].pct_bad == 0);
    CHECK(r.regions[1].pct_bad == 0);
    CHECK(r.regions[2].pct_bad == 0);
    CHECK(r.regions[3].pct_bad == Approx(100.0 * 2 / 6));
    CHECK(r.regions[3].mean_diff == Approx(2.5 / 6));
    CHECK(r.str().find("NumericsResult(FAIL)") == 0);
    CHECK(r.str().find("worst at (3, 5): ref=23.0000, test=25.0000") != std::string::npos);

    // NaN is bad, and the worst.
    pl::Array nan = pl::Array::from_vector(std::vector<float>{1, NAN, 3}, {3});
    pl::numerics::NumericsResult n = pl::numerics::compare(pl::Array::arange(3, pl::f32), nan, {.print = false});
    CHECK_FALSE(n.passed);
    CHECK(n.worst_index == std::vector<int64_t>{1});
  }

  TEST_CASE("numerics: misuse is a UserError") {
    pl::Array a = pl::Array::zeros({4, 4}, pl::f32);
    CHECK_THROWS_WITH_AS(pl::numerics::compare(a, pl::Array::zeros({4, 5}, pl::f32)),
                         Contains("the reference and the result differ in shape"), UserError);
    CHECK_THROWS_WITH_AS(pl::numerics::compare(a, a, {.region_grid = {0, 2}}),
                         Contains("region_grid needs at least one region along each axis"), UserError);
    CHECK_THROWS_WITH_AS(pl::numerics::compare(a, a, {.region_grid = {8, 2}}),
                         Contains("region_grid = (8, 2) for an array viewed as 4 x 4"), UserError);
  }
}
