// emit_pipeline split over cores (Pallas's megacore partition, PipelineSpec::core_axis and
// ::core_axis_name): which dim is split, each core's part (equal, uneven, empty, traced), what
// program_id / num_programs / the index maps see, on both backends (compiled, checked against the
// interpreter; interpreted with race detection), and what is rejected.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <string>
#include <vector>

#include "tests/support/kernels.h"
#include "tests/support/user_error.h"

using namespace tessera;
namespace pl = tessera;
using doctest::Contains;

namespace {

template <class F>
void for_each_checked_backend(F body) {
  testing::for_each_checked_backend(body, 9);
}

constexpr int64_t kRows = 8, kCols = 16;  // the block shape

// The documented rule, written plainly: the part of `size` steps that core `c` of `cores` runs, as
// {first step, step count}.
struct Part {
  int64_t first, count;
};
Part part_of(int64_t size, int64_t cores, int64_t c) {
  const int64_t base = size / cores, rem = size % cores;
  return c < rem ? Part{c * (base + 1), base + 1} : Part{c * base + rem, base};
}

// Every element of block (i, j) of an (rows * kRows, cols * kCols) array is x + tag, tag =
// 10000 * core + 1000 * num_programs(0) + 100 * num_programs(1) + 10 * program_id(0) + program_id(1).
float tag(int64_t core, int64_t np0, int64_t np1, int64_t i, int64_t j) {
  return static_cast<float>(10000 * core + 1000 * np0 + 100 * np1 + 10 * i + j);
}

void body(const pl::Value& core, pl::Ref x, pl::Ref o) {
  const pl::Value t = core * 10000 + pl::num_programs(0) * 1000 + pl::num_programs(1) * 100 + pl::program_id(0) * 10 +
                      pl::program_id(1);
  o() = x() + t.astype(pl::f32);
}

pl::BlockSpec blocks() {
  return pl::BlockSpec({kRows, kCols}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); });
}

// Runs `spec` (blocks() in and out) with body(core, ...) and counts this core's steps in steps[0].
void counted_pipeline(const pl::Value& core, pl::Ref steps, pl::PipelineSpec spec, pl::Ref x_hbm, pl::Ref o_hbm) {
  steps[0] = 0;
  spec.in_specs = {blocks()};
  spec.out_specs = {blocks()};
  pl::emit_pipeline(
      [&](pl::Ref x, pl::Ref o) {
        body(core, x, o);
        steps[0] = steps[0] + 1;
      },
      std::move(spec))(x_hbm, o_hbm);
}

// x + tag, where dim `split` of a (rows, cols) grid is split over `cores` and the other is whole.
std::vector<float> reference(const pl::Array& x, int64_t rows, int64_t cols, int64_t cores, int split) {
  std::vector<float> out = x.to_vector<float>();
  const int64_t width = cols * kCols;
  for (int64_t c = 0; c < cores; ++c) {
    const Part p = part_of(split == 0 ? rows : cols, cores, c);
    const int64_t np0 = split == 0 ? p.count : rows, np1 = split == 1 ? p.count : cols;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t k = split == 0 ? i : j;
        if (k < p.first || k >= p.first + p.count) continue;
        for (int64_t r = 0; r < kRows; ++r)
          for (int64_t e = 0; e < kCols; ++e) out[static_cast<size_t>((i * kRows + r) * width + j * kCols + e)] += tag(c, np0, np1, i, j);
      }
  }
  return out;
}

// `options` with the kernel's one grid dim parallel (its points may run on several threads).
pl::CallOptions with_parallel_grid(pl::CallOptions options) {
  options.compiler_params.dimension_semantics = {pl::parallel};
  return options;
}

// A pallas_call over `cores` parallel grid points, each running its part of an emit_pipeline over a
// (rows, cols) grid with `semantics` (.core_axis = 0). The second output counts each core's steps (its own block).
auto core_axis_call(const pl::CallOptions& options, int64_t cores, int64_t rows, int64_t cols,
                    std::vector<pl::DimensionSemantics> semantics) {
  auto kernel = [=](pl::Ref x_hbm, pl::Ref o_hbm, pl::Ref steps) {
    counted_pipeline(pl::program_id(0), steps, {.grid = {rows, cols}, .dimension_semantics = semantics, .core_axis = 0},
                     x_hbm, o_hbm);
  };
  return pl::pallas_call(kernel,
                         pl::GridSpec{.grid = {cores},
                                      .in_specs = {pl::BlockSpec(pl::ANY)},
                                      .out_specs = {pl::BlockSpec(pl::ANY),
                                                    pl::BlockSpec({1}, [](pl::Value c) { return pl::idx(c); })}},
                         {pl::ShapeDtype({rows * kRows, cols * kCols}, pl::f32), pl::ShapeDtype({cores}, pl::i32)},
                         with_parallel_grid(options));
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("emit_pipeline over cores: the first parallel dim the cores divide is split in equal parts") {
    const pl::Array x = testing::ramp(4 * kRows, 3 * kCols);
    for_each_checked_backend([&](const pl::CallOptions& options) {
      // Both dims parallel, 3 cores: 4 rows do not divide, 3 columns do, so each core takes a column.
      const std::vector<pl::Array> out = core_axis_call(options, 3, 4, 3, {pl::parallel, pl::parallel})(x);
      CHECK(out[0].to_vector<float>() == reference(x, 4, 3, 3, 1));
      CHECK(out[1].to_vector<int32_t>() == std::vector<int32_t>{4, 4, 4});
      // 2 cores: the rows divide, each core takes two row blocks (program_id(0) is the whole grid's).
      const std::vector<pl::Array> two = core_axis_call(options, 2, 4, 3, {pl::parallel, pl::arbitrary})(x);
      CHECK(two[0].to_vector<float>() == reference(x, 4, 3, 2, 0));
      CHECK(two[0].at<float>({3 * kRows, 0}) == x.at<float>({3 * kRows, 0}) + tag(1, 2, 3, 3, 0));
      CHECK(two[1].to_vector<int32_t>() == std::vector<int32_t>{6, 6});
    });
  }

  TEST_CASE("emit_pipeline over cores: uneven parts, the first cores one step more, and an empty part") {
    for_each_checked_backend([&](const pl::CallOptions& options) {
      // 5 row blocks over 2 cores: 3 and 2.
      const pl::Array x = testing::ramp(5 * kRows, 2 * kCols);
      const std::vector<pl::Array> out = core_axis_call(options, 2, 5, 2, {pl::parallel, pl::arbitrary})(x);
      CHECK(out[0].to_vector<float>() == reference(x, 5, 2, 2, 0));
      CHECK(out[1].to_vector<int32_t>() == std::vector<int32_t>{6, 4});
      // 3 row blocks over 4 cores: the last core runs no step (and writes nothing).
      const pl::Array y = testing::ramp(3 * kRows, kCols);
      const std::vector<pl::Array> few = core_axis_call(options, 4, 3, 1, {pl::parallel, pl::parallel})(y);
      CHECK(few[0].to_vector<float>() == reference(y, 3, 1, 4, 0));
      CHECK(few[1].to_vector<int32_t>() == std::vector<int32_t>{1, 1, 1, 0});
      // The largest static parallel dim is split when none divides: 3 columns over 2 cores, not 1 row.
      const pl::Array z = testing::ramp(kRows, 3 * kCols);
      const std::vector<pl::Array> wide = core_axis_call(options, 2, 1, 3, {pl::parallel, pl::parallel})(z);
      CHECK(wide[0].to_vector<float>() == reference(z, 1, 3, 2, 1));
      CHECK(wide[1].to_vector<int32_t>() == std::vector<int32_t>{2, 1});
    });
  }

  TEST_CASE("emit_pipeline over cores: a traced parallel dim is split when the kernel runs") {
    // The row count is a scalar-prefetch value; one compiled kernel splits every count.
    auto kernel = [](pl::Ref n, pl::Ref x_hbm, pl::Ref o_hbm, pl::Ref steps) {
      counted_pipeline(pl::program_id(0), steps,
                       {.grid = {n[0], 2}, .dimension_semantics = {pl::parallel, pl::arbitrary}, .core_axis = 0}, x_hbm,
                       o_hbm);
    };
    // Rows past the count are never written: the check against the interpreter skips them.
    auto unwritten_rows = [](pl::CallOptions o) {
      o.check_unwritten = false;
      return o;
    };
    const pl::Array x = testing::ramp(5 * kRows, 2 * kCols);
    for_each_checked_backend([&](const pl::CallOptions& options) {
      auto call = pl::pallas_call(kernel,
                                  pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1,
                                                             .grid = {2},
                                                             .in_specs = {pl::BlockSpec(pl::ANY)},
                                                             .out_specs = {pl::BlockSpec(pl::ANY),
                                                                           pl::BlockSpec({1}, [](pl::Value c, pl::Ref) { return pl::idx(c); })}},
                                  {pl::ShapeDtype({5 * kRows, 2 * kCols}, pl::f32), pl::ShapeDtype({2}, pl::i32)},
                                  unwritten_rows(with_parallel_grid(options)));
      for (int32_t rows : {5, 4, 1}) {
        INFO("rows: " << rows);
        const std::vector<pl::Array> out = call(pl::Array::from_vector(std::vector<int32_t>{rows}, {1}), x);
        const std::vector<float> want = reference(x, rows, 2, 2, 0), got = out[0].to_vector<float>();
        // Rows past the count are not written: compare the written ones.
        const size_t written = static_cast<size_t>(rows * kRows * 2 * kCols);
        CHECK(std::vector<float>(got.begin(), got.begin() + written) == std::vector<float>(want.begin(), want.begin() + written));
        const Part p0 = part_of(rows, 2, 0), p1 = part_of(rows, 2, 1);
        CHECK(out[1].to_vector<int32_t>() ==
              std::vector<int32_t>{static_cast<int32_t>(2 * p0.count), static_cast<int32_t>(2 * p1.count)});
      }
    });
  }

  TEST_CASE("emit_pipeline over cores: core_axis_name splits over a CoreMesh's cores") {
    auto kernel = [](pl::Ref x_hbm, pl::Ref o_hbm) {
      const pl::Value core = pl::axis_index("core");
      pl::emit_pipeline([&](pl::Ref x, pl::Ref o) { body(core, x, o); },
                        {.grid = {5, 2},
                         .in_specs = {blocks()},
                         .out_specs = {blocks()},
                         .dimension_semantics = {pl::parallel, pl::arbitrary},
                         .core_axis_name = "core"})(x_hbm, o_hbm);
    };
    const pl::Array x = testing::ramp(5 * kRows, 2 * kCols);
    testing::for_each_backend([&](const pl::CallOptions& options) {
      auto call = pl::mpmd_map({{pl::CoreMesh("core", 2), kernel}}, pl::ShapeDtype({5 * kRows, 2 * kCols}, pl::f32), {},
                               options);
      CHECK(call(x).to_vector<float>() == reference(x, 5, 2, 2, 0));
    });
  }
}

TEST_SUITE("errors") {
  TEST_CASE("errors: emit_pipeline over cores without a parallel dim, with two core axes, or a core axis that is none") {
    auto call_with = [](pl::PipelineSpec spec, pl::GridSpec outer) {
      auto kernel = [spec](pl::Ref x_hbm, pl::Ref o_hbm) {
        pl::emit_pipeline([](pl::Ref x, pl::Ref o) { o() = x(); }, spec)(x_hbm, o_hbm);
      };
      outer.in_specs = {pl::BlockSpec(pl::ANY)};
      outer.out_specs = {pl::BlockSpec(pl::ANY)};
      return pl::pallas_call(kernel, outer, pl::ShapeDtype({4 * kRows, kCols}, pl::f32))(testing::ramp(4 * kRows, kCols));
    };
    auto spec = [](std::vector<pl::DimensionSemantics> semantics) {
      return pl::PipelineSpec{.grid = {4, 1}, .in_specs = {blocks()}, .out_specs = {blocks()},
                              .dimension_semantics = std::move(semantics)};
    };
    const pl::GridSpec two_cores{.grid = {2}};
    try {
      pl::PipelineSpec s = spec({pl::arbitrary, pl::arbitrary});
      s.core_axis = 0;
      call_with(s, two_cores);
      FAIL("no error");
    } catch (const UserError& e) {
      CHECK(e.problem() == "pl::emit_pipeline: the grid cannot be split over 2 cores: none of its dims is parallel");
      CHECK(e.given() == "grid of 2 dim(s), dimension_semantics (2 entries, none pl::parallel)");
      CHECK(e.fix().find("mark the dim to split pl::parallel") != std::string::npos);
    }
    // Without dimension_semantics every dim is arbitrary.
    pl::PipelineSpec plain = spec({});
    plain.core_axis = 0;
    CHECK_THROWS_WITH_AS(call_with(plain, two_cores), Contains("none of its dims is parallel"), UserError);
    pl::PipelineSpec both = spec({pl::parallel, pl::arbitrary});
    both.core_axis = 0;
    both.core_axis_name = "core";
    CHECK_THROWS_WITH_AS(call_with(both, two_cores), Contains("only one of core_axis and core_axis_name may be set"),
                         UserError);
    pl::PipelineSpec far = spec({pl::parallel, pl::arbitrary});
    far.core_axis = 1;
    CHECK_THROWS_WITH_AS(call_with(far, two_cores), Contains("core_axis 1 is not an axis of the enclosing grid"), UserError);
    // One core: nothing to split, whatever the semantics.
    pl::PipelineSpec one = spec({pl::arbitrary, pl::arbitrary});
    one.core_axis = 0;
    CHECK(call_with(one, pl::GridSpec{.grid = {1}}).to_vector<float>() == testing::ramp(4 * kRows, kCols).to_vector<float>());
  }

  TEST_CASE("errors: emit_pipeline over cores: several traced parallel dims, a core count known at run time, no grid") {
    // Two traced parallel dims and no static one the cores divide.
    const int line = __LINE__ + 2;
    auto traced = [](pl::Ref n, pl::Ref x_hbm, pl::Ref o_hbm) {
      pl::emit_pipeline([](pl::Ref x, pl::Ref o) { o() = x(); },
                        {.grid = {n[0], n[1]},
                         .in_specs = {blocks()},
                         .out_specs = {blocks()},
                         .dimension_semantics = {pl::parallel, pl::parallel},
                         .core_axis = 0})(x_hbm, o_hbm);
    };
    try {
      pl::pallas_call(traced,
                      pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1, .grid = {2}, .in_specs = {pl::BlockSpec(pl::ANY)},
                                                 .out_specs = {pl::BlockSpec(pl::ANY)}},
                      pl::ShapeDtype({kRows, kCols}, pl::f32))(pl::Array::from_vector(std::vector<int32_t>{1, 1}, {2}),
                                                               testing::ramp(kRows, kCols));
      FAIL("no error");
    } catch (const UserError& e) {
      CHECK(e.problem() == "pl::emit_pipeline: the grid cannot be split over 2 cores: it has several traced parallel dims");
      CHECK(e.loc().line == static_cast<uint32_t>(line));
    }
    // The enclosing grid's core dim sized at call time.
    auto by_call = [](pl::Ref, pl::Ref x_hbm, pl::Ref o_hbm) {
      pl::emit_pipeline([](pl::Ref x, pl::Ref o) { o() = x(); },
                        {.grid = {2}, .in_specs = {blocks()}, .out_specs = {blocks()},
                         .dimension_semantics = {pl::parallel}, .core_axis = 0})(x_hbm, o_hbm);
    };
    CHECK_THROWS_WITH_AS(
        pl::pallas_call(by_call,
                        pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1, .grid = {pl::from_prefetch(0)},
                                                   .in_specs = {pl::BlockSpec(pl::ANY)}, .out_specs = {pl::BlockSpec(pl::ANY)}},
                        pl::ShapeDtype({2 * kRows, kCols}, pl::f32))(pl::Array::scalar(2, pl::i32), testing::ramp(2 * kRows, kCols)),
        Contains("the grid cannot be split over a number of cores known only when the kernel runs"), UserError);
    // An mpmd_map kernel has no grid: its cores are named by a mesh axis.
    auto no_grid = [](pl::Ref x_hbm, pl::Ref o_hbm) {
      pl::emit_pipeline([](pl::Ref x, pl::Ref o) { o() = x(); },
                        {.grid = {2}, .in_specs = {blocks()}, .out_specs = {blocks()},
                         .dimension_semantics = {pl::parallel}, .core_axis = 0})(x_hbm, o_hbm);
    };
    CHECK_THROWS_WITH_AS(pl::mpmd_map({{pl::CoreMesh("core", 2), no_grid}}, pl::ShapeDtype({2 * kRows, kCols}, pl::f32))(
                             testing::ramp(2 * kRows, kCols)),
                         Contains("core_axis 0 names a grid axis, but the enclosing kernel has no grid"), UserError);
    // The next call works.
    CHECK_NOTHROW(pl::mpmd_map({{pl::CoreMesh("core", 1), [](pl::Ref x, pl::Ref o) { pl::sync_copy(x, o); }}},
                               pl::ShapeDtype({kRows, kCols}, pl::f32))(testing::ramp(kRows, kCols)));
  }
}
