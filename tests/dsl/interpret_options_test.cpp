// Pallas's interpret options beyond the defaults (pl::InterpretParams): the grid point recorder and
// skipping floating-point work.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <utility>

#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;

TEST_SUITE("dsl") {
  TEST_CASE("interpret options: the grid point recorder sees every step with its core, in each core's order") {
    std::map<int64_t, std::vector<std::vector<int64_t>>> seen;  // core -> grid points in order
    pl::InterpretParams params;
    params.num_cores_or_threads = 2;
    params.grid_point_recorder = [&](std::vector<int64_t> point, int64_t core) { seen[core].push_back(std::move(point)); };
    auto call = pl::pallas_call(
        [](pl::Ref x, pl::Ref o) { o() = x() + 1.0f; },
        pl::GridSpec{.grid = {2, 3},
                     .in_specs = {pl::BlockSpec({4, 4}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })},
                     .out_specs = {pl::BlockSpec({4, 4}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })}},
        pl::ShapeDtype({8, 12}, pl::f32),
        {.compiler_params = {.dimension_semantics = {pl::parallel, pl::arbitrary}}, .interpret = params});
    const pl::Array x = pl::Array::random_normal({8, 12}, pl::f32, 3);
    const pl::Array o = call(x);
    CHECK(o.at<float>({7, 11}) == x.at<float>({7, 11}) + 1.0f);
    CHECK(seen.size() == 2);
    CHECK(seen[0] == std::vector<std::vector<int64_t>>{{0, 0}, {0, 1}, {0, 2}});
    CHECK(seen[1] == std::vector<std::vector<int64_t>>{{1, 0}, {1, 1}, {1, 2}});
  }

  TEST_CASE("interpret options: skip_floating_point_ops gives +inf for float work and keeps copies and integers") {
    pl::InterpretParams params;
    params.skip_floating_point_ops = true;
    auto kernel = [](pl::Ref x, pl::Ref n, pl::Ref f, pl::Ref copied, pl::Ref counted) {
      f() = pl::exp(x()) + pl::dot(x(), x());
      copied() = x();  // loads and stores move data unchanged
      counted() = n() * 2 + 1;
    };
    auto call = pl::pallas_call(kernel, pl::GridSpec{},
                                {pl::ShapeDtype({8, 8}, pl::f32), pl::ShapeDtype({8, 8}, pl::f32), pl::ShapeDtype({4}, pl::i32)},
                                {.interpret = params});
    const pl::Array x = pl::Array::random_normal({8, 8}, pl::f32, 5);
    const auto outs = call(x, pl::Array::arange(4, pl::i32));
    REQUIRE(outs.size() == 3);
    for (float v : outs[0].to_vector<float>()) CHECK(std::isinf(v));
    CHECK(outs[1].to_vector<float>() == x.to_vector<float>());
    CHECK(outs[2].to_vector<int32_t>() == std::vector<int32_t>{1, 3, 5, 7});
    // The same call without the option computes.
    auto computed = pl::pallas_call(kernel, pl::GridSpec{},
                                    {pl::ShapeDtype({8, 8}, pl::f32), pl::ShapeDtype({8, 8}, pl::f32), pl::ShapeDtype({4}, pl::i32)},
                                    testing::interpret());
    CHECK(std::isfinite(computed(x, pl::Array::arange(4, pl::i32))[0].at<float>({0, 0})));
  }
}
