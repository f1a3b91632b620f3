// Grid dims known only when the kernel runs (docs/design.md §4.1): emit_pipeline over a traced
// number of steps, e.g. the block count of a group read from a scalar-prefetch ref, in both backends
// (compiled, checked against the interpreter; interpreted with race detection), the golden IR of
// such a pipeline, and what is rejected.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <functional>
#include <string>

#include "jit/ir/parser.h"
#include "jit/ir/printer.h"
#include "tests/support/golden.h"
#include "tests/support/kernels.h"
#include "tests/support/user_error.h"

using namespace tessera;
namespace pl = tessera;
using doctest::Contains;

namespace {

// testing::for_each_checked_backend with this file's schedule seed.
template <class F>
void for_each_checked_backend(F body) {
  testing::for_each_checked_backend(body, 5);
}

constexpr int64_t kRows = 8, kCols = 16;  // block shape of the ragged tests

// Megablox-style: group g owns counts[g] consecutive row blocks starting at block starts[g]; the
// kernel's grid walks the groups and each runs an emit_pipeline over exactly its blocks, two column
// blocks per row block. o = x * (g + 1) + 100 * num_programs(0) + 10 * program_id(0) + program_id(1).
// `traces` counts the kernel's traces (each is compiled once).
auto ragged_call(const pl::CallOptions& options, int64_t groups, int64_t total_blocks, int* traces = nullptr) {
  auto kernel = [traces](pl::Ref counts, pl::Ref starts, pl::Ref x_hbm, pl::Ref o_hbm, pl::Ref steps) {
    if (traces) ++*traces;
    const pl::Value g = pl::program_id(0);
    const pl::Value first = starts[g];
    steps[g] = 0;
    pl::emit_pipeline(
        [&](pl::Ref x, pl::Ref o) {
          const pl::Value tag = pl::num_programs(0) * 100 + pl::program_id(0) * 10 + pl::program_id(1);
          o() = x() * (g + 1).astype(pl::f32) + tag.astype(pl::f32);
          steps[g] = steps[g] + 1;
        },
        {.grid = {counts[g], 2},
         .in_specs = {pl::BlockSpec({kRows, kCols}, [&](pl::Value i, pl::Value j) { return pl::idx(first + i, j); })},
         .out_specs = {pl::BlockSpec({kRows, kCols}, [&](pl::Value i, pl::Value j) { return pl::idx(first + i, j); })}})(
        x_hbm, o_hbm);
  };
  return pl::pallas_call(kernel,
                         pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 2,
                                                    .grid = {groups},
                                                    .in_specs = {pl::BlockSpec(pl::ANY)},
                                                    .out_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::SMEM)}},
                         {pl::ShapeDtype({total_blocks * kRows, 2 * kCols}, pl::f32), pl::ShapeDtype({groups}, pl::i32)},
                         options);
}

// What ragged_call computes, written plainly.
std::vector<float> ragged_reference(const pl::Array& x, const std::vector<int32_t>& counts, const std::vector<int32_t>& starts) {
  std::vector<float> out(static_cast<size_t>(x.shape()[0] * x.shape()[1]), 0.0f);
  const int64_t width = x.shape()[1];
  for (size_t g = 0; g < counts.size(); ++g)
    for (int64_t i = 0; i < counts[g]; ++i)
      for (int64_t j = 0; j < 2; ++j)
        for (int64_t r = 0; r < kRows; ++r)
          for (int64_t c = 0; c < kCols; ++c) {
            const int64_t row = (starts[g] + i) * kRows + r, col = j * kCols + c;
            out[static_cast<size_t>(row * width + col)] =
                x.at<float>({row, col}) * static_cast<float>(g + 1) + static_cast<float>(counts[g] * 100 + i * 10 + j);
          }
  return out;
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("dynamic grid: a ragged emit_pipeline runs each group's block count from scalar prefetch") {
    // Groups of 3, 0, 1 and 4 blocks: a group of zero steps fetches and writes nothing, one of one
    // step is its own first and last step.
    const std::vector<int32_t> counts{3, 0, 1, 4}, starts{0, 3, 3, 4};
    const pl::Array x = testing::ramp(8 * kRows, 2 * kCols);
    for_each_checked_backend([&](const pl::CallOptions& options) {
      auto call = ragged_call(options, 4, 8);
      const std::vector<pl::Array> out = call(pl::Array::from_vector(counts, {4}), pl::Array::from_vector(starts, {4}), x);
      CHECK(out[0].to_vector<float>() == ragged_reference(x, counts, starts));
      // Two column blocks per row block: the body ran 2 * counts[g] times for group g.
      CHECK(out[1].to_vector<int32_t>() == std::vector<int32_t>{6, 0, 2, 8});
    });
  }

  TEST_CASE("dynamic grid: one compiled kernel serves every block count") {
    for_each_checked_backend([&](const pl::CallOptions& options) {
      int traces = 0;
      auto call = ragged_call(options, 2, 5, &traces);
      const pl::Array x = testing::ramp(5 * kRows, 2 * kCols);
      for (const std::vector<int32_t>& counts : {std::vector<int32_t>{5, 0}, {2, 3}, {0, 5}, {1, 4}}) {
        INFO("counts: " << counts[0] << ", " << counts[1]);
        const std::vector<int32_t> starts{0, counts[0]};
        const std::vector<pl::Array> out = call(pl::Array::from_vector(counts, {2}), pl::Array::from_vector(starts, {2}), x);
        CHECK(out[0].to_vector<float>() == ragged_reference(x, counts, starts));
        CHECK(out[1].to_vector<int32_t>() == std::vector<int32_t>{2 * counts[0], 2 * counts[1]});
      }
      // The counts are values of the kernel, not of its signature: one trace (one compiled program)
      // served them all.
      CHECK(traces == 1);
    });
  }

  TEST_CASE("dynamic grid: a partial last block and an output revisited across a dynamic dim") {
    // Row sums of the first k column blocks of a (20, 32) array in (8, 8) blocks: the row count is
    // not a multiple of the block (the last row block is partial), and the output block of a row
    // block stays while the dynamic dim k walks its columns, written back once.
    auto kernel = [](pl::Ref sizes, pl::Ref x_hbm, pl::Ref o_hbm) {
      const pl::Value row_blocks = (sizes[0] + 7) / 8;
      pl::emit_pipeline(
          [&](pl::Ref x, pl::Ref o) {
            pl::when(pl::program_id(1) == 0, [&] { o() = pl::zeros_like(o); });
            o() += pl::reshape(pl::sum(x(), 1), {8, 1});
          },
          {.grid = {row_blocks, sizes[1].astype(pl::i64)},  // an i32 and an i64 dim
           .in_specs = {pl::BlockSpec({8, 8}, [](pl::Value i, pl::Value k) { return pl::idx(i, k); })},
           .out_specs = {pl::BlockSpec({8, 1}, [](pl::Value i, pl::Value) { return pl::idx(i, 0); })}})(x_hbm, o_hbm);
    };
    const pl::Array x = testing::ramp(20, 32);
    for_each_checked_backend([&](const pl::CallOptions& options) {
      auto call = pl::pallas_call(kernel,
                                  pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1,
                                                             .in_specs = {pl::BlockSpec(pl::ANY)},
                                                             .out_specs = {pl::BlockSpec(pl::ANY)}},
                                  pl::ShapeDtype({20, 1}, pl::f32), options);
      for (int32_t k : {1, 3, 4}) {
        INFO("k: " << k);
        const pl::Array out = call(pl::Array::from_vector(std::vector<int32_t>{20, k}, {2}), x);
        for (int64_t r = 0; r < 20; ++r) {
          float expected = 0;
          for (int64_t c = 0; c < 8 * k; ++c) expected += x.at<float>({r, c});
          CHECK(out.at<float>({r, 0}) == expected);
        }
      }
    });
  }

  TEST_CASE("dynamic grid: a negative dim is a RuntimeError naming the dim and the pipeline's line") {
    for_each_checked_backend([&](const pl::CallOptions& options) {
      int line = 0;
      auto call = pl::pallas_call(
          [&](pl::Ref n, pl::Ref x_hbm, pl::Ref o_hbm) {
            line = __LINE__ + 1;
            pl::emit_pipeline([](pl::Ref x, pl::Ref o) { o() = x(); },
                              {.grid = {1, n[0]},
                               .in_specs = {pl::BlockSpec({8}, [](pl::Value, pl::Value j) { return pl::idx(j); })},
                               .out_specs = {pl::BlockSpec({8}, [](pl::Value, pl::Value j) { return pl::idx(j); })}})(x_hbm, o_hbm);
          },
          pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1, .in_specs = {pl::BlockSpec(pl::ANY)}, .out_specs = {pl::BlockSpec(pl::ANY)}},
          pl::ShapeDtype({16}, pl::f32), options);
      try {
        call(pl::Array::from_vector(std::vector<int32_t>{-3}, {1}), pl::Array::zeros({16}, pl::f32));
        FAIL("expected a RuntimeError");
      } catch (const RuntimeError& e) {
        CHECK_MESSAGE(e.problem().find("pl::emit_pipeline: grid dim 1 is -3 (grid (1, -3)), but grid dims must be >= 0") !=
                          std::string::npos,
                      e.problem());
        CHECK(std::string(e.loc().file).find("dynamic_grid_test.cpp") != std::string::npos);
        CHECK(e.loc().line == static_cast<uint32_t>(line));
      }
      // The same kernel runs with a valid count afterwards.
      const pl::Array out = call(pl::Array::from_vector(std::vector<int32_t>{2}, {1}), pl::Array::arange(16, pl::f32));
      CHECK(out.to_vector<float>() == pl::Array::arange(16, pl::f32).to_vector<float>());
    });
  }

  TEST_CASE("dynamic grid: an emit_pipeline with a traced dim lowers to its golden IR") {
    auto kernel = [](pl::Ref n, pl::Ref x_hbm, pl::Ref o_hbm) {
      pl::emit_pipeline([](pl::Ref x, pl::Ref o) { o() = x() + pl::num_programs(1).astype(pl::f32); },
                        {.grid = {2, n[0]},
                         .in_specs = {pl::BlockSpec({8}, [](pl::Value i, pl::Value j) { return pl::idx(i * 2 + j); })},
                         .out_specs = {pl::BlockSpec({8}, [](pl::Value i, pl::Value j) { return pl::idx(i * 2 + j); })}})(
          x_hbm, o_hbm);
    };
    auto call = pl::pallas_call(
        kernel,
        pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1, .in_specs = {pl::BlockSpec(pl::ANY)}, .out_specs = {pl::BlockSpec(pl::ANY)}},
        pl::ShapeDtype({32}, pl::f32), pl::CallOptions{.name = "dynamic_grid"});
    const std::vector<pl::Array> args{pl::Array::from_vector(std::vector<int32_t>{2}, {1}), pl::Array::zeros({32}, pl::f32)};
    testing::check_golden("dynamic_grid.traced.ir", ir::print(call.traced(args)));
    testing::check_golden("dynamic_grid.lowered.ir", ir::print(call.lowered(args)));
    // The printed IR parses back to the same function.
    const ir::Function traced = call.traced(args);
    CHECK(ir::print(ir::parse(ir::print(traced))) == ir::print(traced));
  }

  TEST_CASE("dynamic grid: what is rejected when tracing") {
    // Runs `kernel` over an i32 scalar-prefetch operand and an f32 array in ANY.
    auto trace = [](std::function<void(pl::Ref, pl::Ref, pl::Ref)> kernel) {
      pl::pallas_call(kernel,
                      pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1,
                                                 .in_specs = {pl::BlockSpec(pl::ANY)},
                                                 .out_specs = {pl::BlockSpec(pl::ANY)}},
                      pl::ShapeDtype({16}, pl::f32))(pl::Array::zeros({1}, pl::i32), pl::Array::zeros({16}, pl::f32));
    };
    auto spec = [](std::vector<pl::GridDim> grid) {
      auto map = [](pl::Value i) { return pl::idx(i); };
      return pl::PipelineSpec{.grid = std::move(grid), .in_specs = {pl::BlockSpec({8}, map)}, .out_specs = {pl::BlockSpec({8}, map)}};
    };
    auto copy = [](pl::Ref x, pl::Ref o) { o() = x(); };
    // A static zero dim: rejected as in Pallas (a traced one may be 0).
    testing::check_user_error([&] { trace([&](pl::Ref, pl::Ref x, pl::Ref o) { pl::emit_pipeline(copy, spec({0}))(x, o); }); },
                              "pl::emit_pipeline: a grid dim of 0 runs no step, which emit_pipeline rejects",
                              "grid (0,) has 0 in dim 0",
                              "skip the pipeline (pl::when) when there is nothing to do; a traced grid dim may be 0 and then "
                              "runs no step",
                              "dynamic_grid_test.cpp");
    // A float scalar and an integer block are no grid dims; the error points at the grid's line.
    testing::check_user_error(
        [&] { trace([&](pl::Ref n, pl::Ref x, pl::Ref o) { pl::emit_pipeline(copy, spec({n[0].astype(pl::f32)}))(x, o); }); },
        "pl::emit_pipeline: grid dim 0 must be an integer scalar", "an f32 scalar in dim 0",
        "pass a number or a traced i32/i64 scalar, e.g. a block count read from a scalar-prefetch ref",
        "dynamic_grid_test.cpp");
    testing::check_user_error(
        [&] { trace([&](pl::Ref, pl::Ref x, pl::Ref o) { pl::emit_pipeline(copy, spec({pl::iota({4}, 0, pl::i32)}))(x, o); }); },
        "pl::emit_pipeline: grid dim 0 must be an integer scalar", "a (4,) block of i32 in dim 0",
        "pass a number or a traced i32/i64 scalar, e.g. a block count read from a scalar-prefetch ref",
        "dynamic_grid_test.cpp");
  }
}
