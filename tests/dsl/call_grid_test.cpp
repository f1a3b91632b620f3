// A pallas_call grid sized at call time (docs/design.md §4.1): a grid dim given by a scalar-prefetch
// argument (pl::from_prefetch), read on the host at every call, so that one traced and compiled
// kernel serves every size. Both backends (compiled, checked against the interpreter; interpreted
// with race detection), parallel dims split over two threads or cores, the golden IR, and what is
// rejected: at tracing (UserError) and at the call (RuntimeError).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "jit/ir/parser.h"
#include "jit/ir/printer.h"
#include "tests/support/golden.h"
#include "tests/support/kernels.h"
#include "tests/support/user_error.h"

using namespace tessera;
namespace pl = tessera;

namespace {

// Compiled, checked against the interpreter; interpreted with race detection, copies completed at
// their waits and the parallel points in a random order.
template <class F>
void for_each_checked_backend(F body) {
  pl::InterpretParams p;
  p.dma_execution_mode = pl::DmaExecutionMode::on_wait;
  p.random_parallel_order = true;
  p.random_seed = 7;
  testing::for_each_checked_backend(body, p);
}

pl::Array size_arg(int64_t n, pl::DType dtype = pl::i32) { return pl::Array::scalar(static_cast<double>(n), dtype); }

constexpr int64_t kRows = 20, kCols = 32, kBm = 8, kBn = 16;  // the last row block is partial

// The first `pl::from_prefetch(0)` row blocks of x, visited last block first (the index map reads
// num_programs), two column blocks each: o = 2 x + 100 * num_programs(0) + 10 * program_id(0) +
// program_id(1). The output aliases `init`, so rows past the grid keep init's values in both
// backends. `traces` counts the kernel's traces (each is compiled once).
auto ragged_call(const pl::CallOptions& options, int* traces = nullptr) {
  auto kernel = [traces](pl::Ref, pl::Ref x, pl::Ref, pl::Ref o) {
    if (traces) ++*traces;
    const pl::Value tag = pl::num_programs(0) * 100 + pl::program_id(0) * 10 + pl::program_id(1);
    o() = x() * 2.0f + tag.astype(pl::f32);
  };
  auto reversed = [](pl::Value i, pl::Value j, pl::Ref) { return pl::idx(pl::num_programs(0) - 1 - i, j); };
  pl::CallOptions o = options;
  o.input_output_aliases = {{2, 0}};
  o.compiler_params.dimension_semantics = {pl::parallel, pl::arbitrary};
  return pl::pallas_call(kernel,
                         pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1,
                                                    .grid = {pl::from_prefetch(0), kCols / kBn},
                                                    .in_specs = {pl::BlockSpec({kBm, kBn}, reversed),
                                                                 pl::BlockSpec(pl::ANY)},
                                                    .out_specs = {pl::BlockSpec({kBm, kBn}, reversed)}},
                         pl::ShapeDtype({kRows, kCols}, pl::f32), o);
}

// What ragged_call computes for `blocks` row blocks, written plainly.
std::vector<float> ragged_reference(const pl::Array& x, const pl::Array& init, int64_t blocks) {
  std::vector<float> out = init.to_vector<float>();
  for (int64_t i = 0; i < blocks; ++i)
    for (int64_t j = 0; j < kCols / kBn; ++j) {
      const int64_t b = blocks - 1 - i;
      for (int64_t r = b * kBm; r < std::min(kRows, (b + 1) * kBm); ++r)
        for (int64_t c = j * kBn; c < (j + 1) * kBn; ++c)
          out[static_cast<size_t>(r * kCols + c)] =
              x.at<float>({r, c}) * 2.0f + static_cast<float>(blocks * 100 + i * 10 + j);
    }
  return out;
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("call grid: ragged row counts, 0 and 1 steps and a partial last block run through one compiled kernel") {
    const pl::Array x = testing::ramp(kRows, kCols);
    const pl::Array init = pl::Array::full({kRows, kCols}, -1.0, pl::f32);
    for_each_checked_backend([&](const pl::CallOptions& options) {
      int traces = 0;
      auto call = ragged_call(options, &traces);
      // 3 blocks cover the rows (the last one partial), 0 runs no step, 1 one step of each column.
      for (int64_t blocks : {3, 0, 1, 2, 3}) {
        INFO("row blocks: " << blocks);
        const pl::Array out = call(size_arg(blocks), x, init);
        CHECK(out.to_vector<float>() == ragged_reference(x, init, blocks));
      }
      // The row count is a value of the call, not of its signature: one trace (one compiled
      // program) served every count.
      CHECK(traces == 1);
    });
  }

  TEST_CASE("call grid: any integer dtype sizes a dim, and other signatures are programs of their own") {
    const pl::Array x = testing::ramp(kRows, kCols);
    const pl::Array init = pl::Array::zeros({kRows, kCols}, pl::f32);
    int traces = 0;
    auto call = ragged_call({}, &traces);
    for (pl::DType dtype : {pl::i32, pl::i64, pl::u8})
      CHECK(call(size_arg(2, dtype), x, init).to_vector<float>() == ragged_reference(x, init, 2));
    CHECK(traces == 3);  // the size's dtype is part of the signature, its value is not
  }

  TEST_CASE("call grid: a dynamic arbitrary dim accumulates into an output block revisited across it") {
    // Row sums of the first k column blocks of a (20, 32) array in (8, 8) blocks: the row dim is
    // static and parallel, the column dim dynamic and arbitrary (random_parallel_order shuffles the
    // row points, each with its k steps).
    auto kernel = [](pl::Ref, pl::Ref x, pl::Ref o) {
      pl::when(pl::program_id(1) == 0, [&] { o() = pl::zeros_like(o); });
      o() += pl::reshape(pl::sum(x(), 1), {8, 1});
    };
    const pl::Array x = testing::ramp(20, 32);
    for_each_checked_backend([&](const pl::CallOptions& options) {
      pl::CallOptions o = options;
      o.compiler_params.dimension_semantics = {pl::parallel, pl::arbitrary};
      auto call = pl::pallas_call(
          kernel,
          pl::PrefetchScalarGridSpec{
              .num_scalar_prefetch = 1,
              .grid = {3, pl::from_prefetch(0)},
              .in_specs = {pl::BlockSpec({8, 8}, [](pl::Value i, pl::Value k, pl::Ref) { return pl::idx(i, k); })},
              .out_specs = {pl::BlockSpec({8, 1}, [](pl::Value i, pl::Value, pl::Ref) { return pl::idx(i, 0); })}},
          pl::ShapeDtype({20, 1}, pl::f32), o);
      for (int64_t k : {1, 4, 3}) {
        INFO("k: " << k);
        const pl::Array out = call(size_arg(k), x);
        for (int64_t r = 0; r < 20; ++r) {
          float expected = 0;
          for (int64_t c = 0; c < 8 * k; ++c) expected += x.at<float>({r, c});
          CHECK(out.at<float>({r, 0}) == expected);
        }
      }
    });
  }

  TEST_CASE("call grid: a dynamic parallel dim splits over two threads and two simulated cores") {
    // Each row block is its own parallel point; the recorder sees every point of the call's grid.
    // The output aliases `init`: rows past the grid keep its values.
    auto kernel = [](pl::Ref, pl::Ref x, pl::Ref, pl::Ref o) { o() = x() + pl::program_id(0).astype(pl::f32); };
    const pl::Array x = testing::ramp(64, 8), init = pl::Array::full({64, 8}, -1.0, pl::f32);
    auto make = [&](pl::CallOptions o) {
      o.compiler_params.dimension_semantics = {pl::parallel};
      o.input_output_aliases = {{2, 0}};
      auto map = [](pl::Value i, pl::Ref) { return pl::idx(i, 0); };
      return pl::pallas_call(kernel,
                             pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1,
                                                        .grid = {pl::from_prefetch(0)},
                                                        .in_specs = {pl::BlockSpec({8, 8}, map), pl::BlockSpec(pl::ANY)},
                                                        .out_specs = {pl::BlockSpec({8, 8}, map)}},
                             pl::ShapeDtype({64, 8}, pl::f32), o);
    };
    auto expected = [&](int64_t blocks, const pl::Array& out) {
      for (int64_t r = 0; r < 64; ++r)
        for (int64_t c = 0; c < 8; ++c)
          CHECK(out.at<float>({r, c}) == (r < blocks * 8 ? x.at<float>({r, c}) + static_cast<float>(r / 8) : -1.0f));
    };
    SUBCASE("compiled on two threads") {
      pl::set_num_threads(2);
      auto call = make(pl::CallOptions{.check_against_interpreter = true});
      for (int64_t blocks : {8, 5, 1}) {
        INFO("blocks: " << blocks);
        expected(blocks, call(size_arg(blocks), x, init));
      }
      pl::set_num_threads(0);  // back to the default
    }
    SUBCASE("interpreted on two cores") {
      std::mutex mutex;
      std::set<std::pair<int64_t, int64_t>> seen;  // (grid point, core)
      pl::InterpretParams p;
      p.num_cores_or_threads = 2;
      p.detect_races = true;
      p.grid_point_recorder = [&](std::vector<int64_t> point, int64_t core) {
        std::lock_guard lock(mutex);
        seen.insert({point.at(0), core});
      };
      auto call = make(testing::interpret(p));
      for (int64_t blocks : {5, 2}) {
        INFO("blocks: " << blocks);
        seen.clear();
        expected(blocks, call(size_arg(blocks), x, init));
        // The first ceil(blocks / 2) points on core 0, the rest on core 1: the split of the
        // call's grid, not of any grid known when compiling.
        std::set<std::pair<int64_t, int64_t>> split;
        for (int64_t i = 0; i < blocks; ++i) split.insert({i, i < (blocks + 1) / 2 ? 0 : 1});
        CHECK(seen == split);
        for (const pl::RaceReport& r : pl::race_reports()) FAIL_CHECK(r.message);
      }
    }
  }

  TEST_CASE("call grid: a negative, too large or overflowing size is a RuntimeError at the grid's line") {
    auto kernel = [](pl::Ref, pl::Ref, pl::Ref x, pl::Ref o) { o() = x(); };
    auto map = [](pl::Value, pl::Value, pl::Value, pl::Ref, pl::Ref) { return pl::idx(0); };
    for_each_checked_backend([&](const pl::CallOptions& options) {
      pl::CallOptions o = options;
      o.name = "sized";
      const int line = __LINE__ + 3;
      auto call = pl::pallas_call(kernel,
                                  pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 2,
                                                             .grid = {pl::from_prefetch(0), pl::from_prefetch(1), pl::from_prefetch(1)},
                                                             .in_specs = {pl::BlockSpec({8}, map)},
                                                             .out_specs = {pl::BlockSpec({8}, map)}},
                                  pl::ShapeDtype({8}, pl::f32), o);
      const pl::Array x = pl::Array::arange(8, pl::f32);
      auto check = [&](int64_t a, int64_t b, const std::string& problem) {
        INFO("sizes: " << a << ", " << b);
        try {
          call(size_arg(a, pl::i64), size_arg(b, pl::i64), x);
          FAIL("expected a RuntimeError");
        } catch (const RuntimeError& e) {
          CHECK_MESSAGE(e.problem().find(problem) != std::string::npos, e.problem());
          CHECK(std::string(e.loc().file).find("call_grid_test.cpp") != std::string::npos);
          CHECK(e.loc().line == static_cast<uint32_t>(line));
        }
      };
      check(2, -3, "pallas_call `sized`: grid dim 1 is -3 (grid (2, -3, -3)), but grid dims must be >= 0");
      check(int64_t{1} << 31, 1,
            "pallas_call `sized`: grid dim 0 is 2147483648 (grid (2147483648, 1, 1)), which does not fit pl::program_id");
      check(INT32_MAX, INT32_MAX,
            "pallas_call `sized`: the grid (2147483647, 2147483647, 2147483647) has more steps than a 64-bit count holds");
      // The same kernel runs a valid grid afterwards, and a zero dim runs no step.
      CHECK(call(size_arg(1, pl::i64), size_arg(1, pl::i64), x).to_vector<float>() == x.to_vector<float>());
    });
  }

  TEST_CASE("call grid: what is rejected when tracing") {
    auto kernel = [](pl::Ref, pl::Ref x, pl::Ref o) { o() = x(); };
    auto map = [](pl::Value, pl::Ref) { return pl::idx(0); };
    auto call_with = [&](pl::Array size, pl::GridDim dim) {
      pl::pallas_call(kernel,
                      pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1,
                                                 .grid = {dim},
                                                 .in_specs = {pl::BlockSpec({8}, map)},
                                                 .out_specs = {pl::BlockSpec({8}, map)}},
                      pl::ShapeDtype({8}, pl::f32))(size, pl::Array::zeros({8}, pl::f32));
    };
    testing::check_user_error([&] { call_with(size_arg(2, pl::f32), pl::from_prefetch(0)); },
                              "pallas_call `kernel`: grid dim 0 is sized by scalar-prefetch argument 0, which is not an "
                              "integer scalar",
                              "an array of dtype f32 and shape ()",
                              "pass the size as a rank-0 integer array, e.g. pl::Array::scalar(n, pl::i32)",
                              "call_grid_test.cpp");
    testing::check_user_error([&] { call_with(pl::Array::zeros({2}, pl::i32), pl::from_prefetch(0)); },
                              "pallas_call `kernel`: grid dim 0 is sized by scalar-prefetch argument 0, which is not an "
                              "integer scalar",
                              "an array of dtype i32 and shape (2,)",
                              "pass the size as a rank-0 integer array, e.g. pl::Array::scalar(n, pl::i32)",
                              "call_grid_test.cpp");
    testing::check_user_error([&] { call_with(size_arg(2), pl::from_prefetch(1)); },
                              "pallas_call `kernel`: grid dim 0 is sized by scalar-prefetch argument 1, which the call "
                              "does not have",
                              "pl::from_prefetch(1) with num_scalar_prefetch = 1",
                              "name one of the scalar-prefetch arguments (0 to num_scalar_prefetch - 1) in a "
                              "pl::PrefetchScalarGridSpec",
                              "call_grid_test.cpp");
    // Inside a kernel a pipeline's size is a traced value: from_prefetch sizes pallas_call grids only.
    testing::check_user_error(
        [&] {
          pl::pallas_call(
              [](pl::Ref, pl::Ref x, pl::Ref o) {
                pl::emit_pipeline([](pl::Ref a, pl::Ref b) { b() = a(); },
                                  {.grid = {pl::from_prefetch(0)},
                                   .in_specs = {pl::BlockSpec({8}, [](pl::Value i) { return pl::idx(i); })},
                                   .out_specs = {pl::BlockSpec({8}, [](pl::Value i) { return pl::idx(i); })}})(x, o);
              },
              pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1,
                                         .in_specs = {pl::BlockSpec(pl::ANY)},
                                         .out_specs = {pl::BlockSpec(pl::ANY)}},
              pl::ShapeDtype({8}, pl::f32))(size_arg(1), pl::Array::zeros({8}, pl::f32));
        },
        "pl::emit_pipeline: grid dim 0 is pl::from_prefetch(0), which sizes a pallas_call grid",
        "pl::from_prefetch(0) in dim 0",
        "read the size from the scalar-prefetch ref inside the kernel and pass that value, e.g. counts[g]",
        "call_grid_test.cpp");
  }

  TEST_CASE("call grid: a grid sized at call time traces and lowers to its golden IR") {
    auto kernel = [](pl::Ref, pl::Ref x, pl::Ref o) { o() = x() + pl::num_programs(0).astype(pl::f32); };
    auto map = [](pl::Value i, pl::Value j, pl::Ref) { return pl::idx(i * 2 + j); };
    auto call = pl::pallas_call(kernel,
                                pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1,
                                                           .grid = {pl::from_prefetch(0), 2},
                                                           .in_specs = {pl::BlockSpec({8}, map)},
                                                           .out_specs = {pl::BlockSpec({8}, map)}},
                                pl::ShapeDtype({32}, pl::f32), pl::CallOptions{.name = "call_grid"});
    const std::vector<pl::Array> args{size_arg(2), pl::Array::zeros({32}, pl::f32)};
    testing::check_golden("call_grid.traced.ir", ir::print(call.traced(args)));
    testing::check_golden("call_grid.lowered.ir", ir::print(call.lowered(args)));
    const ir::Function traced = call.traced(args);
    CHECK(ir::print(ir::parse(ir::print(traced))) == ir::print(traced));
  }
}

TEST_SUITE("call grid") {
  TEST_CASE("call grid: a size that is bad on one device of a communicating shard_map is that device's error, no hang") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      pl::Mesh mesh({2}, {"i"});
      // Every device signals its neighbour's barrier and waits for its own: device 1's grid size is
      // negative, so it never starts, and device 0 would wait for it.
      auto kernel = [](pl::Ref, pl::Ref o) {
        pl::Value me = pl::axis_index("i");
        pl::Ref barrier = pl::get_barrier_semaphore();
        pl::semaphore_signal(barrier, 1, pl::DeviceId({(me + 1) % 2}));
        pl::semaphore_wait(barrier, 1);
        o() = pl::zeros_like(o);
      };
      auto f = pl::shard_map(
          [&](const pl::Array& sizes) {
            pl::CallOptions options = backend;
            options.compiler_params.collective_id = 2;
            return pl::pallas_call(kernel,
                                   pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1,
                                                              .grid = {pl::from_prefetch(0)},
                                                              .out_specs = {pl::BlockSpec({1}, [](pl::Value, pl::Ref) { return pl::idx(0); })}},
                                   pl::ShapeDtype({1}, pl::f32), options)(sizes.reshape({}));
          },
          mesh, {pl::P("i")}, {pl::P("i")});
      const pl::Array sizes = pl::Array::from_vector(std::vector<int32_t>{1, -1}, {2});
      const std::string what = testing::runtime_error_of([&] { f(sizes); });
      CHECK_MESSAGE(what.find("negative") != std::string::npos, what);
    });
  }

  TEST_CASE("call grid: a named dim sized at call time is read by name, its size the call's") {
    // o[r, c] = 1000 * num_programs("rows") + 100 * axis_index("rows") + 10 * axis_index("cols") +
    // axis_index({"cols", "rows"}) (which multiplies by the call's row count) for the first `rows` row
    // blocks, 0 elsewhere (aliased from init).
    auto kernel = [](pl::Ref, pl::Ref, pl::Ref o) {
      const pl::Value tag = pl::num_programs("rows") * 1000 + pl::axis_index("rows") * 100 +
                            pl::axis_index("cols") * 10 + pl::axis_index({"cols", "rows"});
      o() = pl::broadcast_to(tag.astype(pl::f32), {kBm, kBn});
    };
    auto spec = [](pl::Value i, pl::Value j, pl::Ref) { return pl::idx(i, j); };
    const pl::Array init = pl::Array::zeros({kRows, kCols}, pl::f32);
    for_each_checked_backend([&](const pl::CallOptions& options) {
      pl::CallOptions o = options;
      o.input_output_aliases = {{1, 0}};
      auto call = pl::pallas_call(kernel,
                                  pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1,
                                                             .grid = {pl::GridDim("rows", pl::from_prefetch(0)),
                                                                      pl::axis("cols", kCols / kBn)},
                                                             .in_specs = {pl::BlockSpec(pl::ANY)},
                                                             .out_specs = {pl::BlockSpec({kBm, kBn}, spec)}},
                                  pl::ShapeDtype({kRows, kCols}, pl::f32), o);
      for (int64_t rows : {2, 3, 1}) {
        INFO("rows: " << rows);
        const pl::Array out = call(size_arg(rows), init);
        for (int64_t r = 0; r < kRows; ++r)
          for (int64_t c = 0; c < kCols; c += kBn - 1) {
            const int64_t i = r / kBm, j = c / kBn;
            const float want = i < rows ? static_cast<float>(rows * 1000 + i * 100 + j * 10 + j * rows + i) : 0.0f;
            CHECK(out.at<float>({r, c}) == want);
          }
      }
    });
  }

  TEST_CASE("call grid: a named dim sized at call time: its size is no number, and names are all or none") {
    auto kernel = [](pl::Ref, pl::Ref o) {
      o() = pl::full({kBm, kBn}, static_cast<float>(pl::axis_size("rows")), pl::f32);
    };
    auto call = pl::pallas_call(kernel,
                                pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1,
                                                           .grid = {pl::GridDim("rows", pl::from_prefetch(0))},
                                                           .out_specs = {pl::BlockSpec({kBm, kBn}, [](pl::Value i, pl::Ref) {
                                                             return pl::idx(i, 0);
                                                           })}},
                                pl::ShapeDtype({kRows, kBn}, pl::f32));
    testing::check_user_error([&] { call(size_arg(2)); },
                              "pl::axis_size: grid axis `rows` is sized when the call runs, so its size is no number",
                              "`rows` sized by pl::from_prefetch in the pallas_call's grid",
                              "read the call's size as a traced value with pl::num_programs(\"rows\")", "call_grid_test.cpp");
    // A joint name over it and a static dim: the fix spells out the product.
    auto joint = pl::pallas_call(
        [](pl::Ref, pl::Ref o) {
          o() = pl::full({kBm, kBn}, static_cast<float>(pl::axis_size({"cols", "rows"})), pl::f32);
        },
        pl::PrefetchScalarGridSpec{
            .num_scalar_prefetch = 1,
            .grid = {pl::GridDim("rows", pl::from_prefetch(0)), pl::axis("cols", 2)},
            .out_specs = {pl::BlockSpec({kBm, kBn}, [](pl::Value i, pl::Value j, pl::Ref) { return pl::idx(i, j); })}},
        pl::ShapeDtype({kRows, 2 * kBn}, pl::f32));
    testing::check_user_error([&] { joint(size_arg(2)); },
                              "pl::axis_size: grid axis `rows` is sized when the call runs, so its size is no number",
                              "`rows` sized by pl::from_prefetch in the pallas_call's grid",
                              "read the call's size as a traced value with pl::axis_size(\"cols\") * "
                              "pl::num_programs(\"rows\")",
                              "call_grid_test.cpp");
    testing::check_user_error([] { pl::Grid grid{pl::GridDim("rows", pl::from_prefetch(0)), 4}; },
                              "a grid names some of its dims and not others", "grid dim 1 without a name",
                              "name every dim (pl::GridDim(\"i\", size), pl::axis(\"i\", 4)) or none", "call_grid_test.cpp");
    testing::check_user_error([] { pl::Grid grid{pl::GridDim("rows", pl::from_prefetch(0)), pl::GridDim("rows", 2)}; },
                              "grid axis `rows` is named twice", "a grid with dims rows and another `rows`",
                              "give every grid dim its own name", "call_grid_test.cpp");
    testing::check_user_error([] { pl::Grid grid{pl::GridDim("", pl::from_prefetch(1))}; },
                              "a named grid dim needs a non-empty name", "pl::GridDim(\"\", pl::from_prefetch(1))",
                              "name every dim, e.g. pl::axis(\"i\", 4), or give the grid plain sizes", "call_grid_test.cpp");
  }
}

