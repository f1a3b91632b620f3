// Grid semantics (docs/design.md §4.1-6, 11), in both backends: every case runs compiled and interpreted.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>

#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;

namespace {
pl::BlockSpec rows(int64_t n, int64_t width) {
  return pl::BlockSpec({n, width}, [](pl::Value i) { return pl::idx(i, 0); });
}
}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("grid: programs run in row-major order, last axis fastest") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      testing::PrintCapture capture;
      auto kernel = [](pl::Ref o) {
        pl::debug_print("{} {} of {} {}", pl::program_id(0), pl::program_id(1), pl::num_programs(0), pl::num_programs(1));
        o() = pl::zeros_like(o);
      };
      pl::pallas_call(kernel, pl::GridSpec{.grid = {2, 3}}, pl::ShapeDtype({1}, pl::f32), backend)();
      std::vector<std::string> expected;
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 3; ++j)
          expected.push_back(fmt::format("[device 0, core 0, grid point ({}, {})] {} {} of 2 3", i, j, i, j));
      CHECK(capture.lines == expected);
    });
  }

  TEST_CASE("grid: an input block is fetched only when its index changes, so kernel writes to it persist") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      // The input's block index is always 0: it is fetched once, and each step sees the previous
      // step's increment (Pallas's test_correct_number_of_stores).
      auto kernel = [](pl::Ref x, pl::Ref o) {
        x() = x() + 1.0f;
        o() = x();
      };
      auto call = pl::pallas_call(kernel,
                                  pl::GridSpec{.grid = {4},
                                               .in_specs = {pl::BlockSpec({1, 4}, [](pl::Value) { return pl::idx(0, 0); })},
                                               .out_specs = {rows(1, 4)}},
                                  pl::ShapeDtype({4, 4}, pl::f32), backend);
      pl::Array x = pl::Array::zeros({1, 4}, pl::f32);
      pl::Array out = call(x);
      for (int64_t i = 0; i < 4; ++i) CHECK(out.at<float>({i, 0}) == static_cast<float>(i + 1));
      CHECK(x.at<float>({0, 0}) == 0.0f);  // the caller's array is unchanged
    });
  }

  TEST_CASE("grid: consecutive revisits of an output block accumulate and it is written back once") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      // Sum over the grid axis into one output block: the reduction example.
      auto kernel = [](pl::Ref x, pl::Ref o) {
        pl::when(pl::program_id(0) == 0, [&] { o() = pl::zeros_like(o); });
        o() += x();
      };
      auto call = pl::pallas_call(
          kernel,
          pl::GridSpec{.grid = {4}, .in_specs = {rows(2, 3)},
                       .out_specs = {pl::BlockSpec({2, 3}, [](pl::Value) { return pl::idx(0, 0); })}},
          pl::ShapeDtype({2, 3}, pl::f32), backend);
      pl::Array x = pl::Array::arange(24, pl::f32).reshape({8, 3});
      pl::Array out = call(x);
      for (int64_t r = 0; r < 2; ++r)
        for (int64_t c = 0; c < 3; ++c) {
          float want = 0;
          for (int64_t b = 0; b < 4; ++b) want += x.at<float>({b * 2 + r, c});
          CHECK(out.at<float>({r, c}) == want);
        }
    });
  }

  TEST_CASE("grid: parallel steps on two cores writing the same output block are reported as a race") {
    pl::InterpretParams two_cores;
    two_cores.num_cores_or_threads = 2;
    pl::set_num_threads(2);
    testing::for_each_backend(
        [&](pl::CallOptions backend) {
          // Both points of the parallel dim write block 0: one per core.
          backend.compiler_params.dimension_semantics = {pl::parallel};
          auto call = pl::pallas_call([](pl::Ref o) { o() = pl::program_id(0).astype(pl::f32) + pl::zeros_like(o); },
                                      pl::GridSpec{.grid = {2}, .out_specs = {pl::BlockSpec({2}, [](pl::Value) { return pl::idx(0); })}},
                                      pl::ShapeDtype({2}, pl::f32), backend);
          try {
            call();
            FAIL("no RuntimeError");
          } catch (const RuntimeError& e) {
            const std::string msg = e.what();
            INFO(msg);
            CHECK(msg.find("output 0 is written by two cores") != std::string::npos);
            CHECK(msg.find("a race") != std::string::npos);
            // Whichever core wrote second reports it, naming the other (core c runs grid point c).
            const int second = e.where().core, first = 1 - second;
            CHECK(e.where().grid_point == std::vector<int64_t>{second});
            CHECK(msg.find(fmt::format("written back by core {} at grid point ({})", first, first)) != std::string::npos);
          }
        },
        two_cores);
    pl::set_num_threads(0);
  }

  TEST_CASE("grid: of two cores that fail, the one that failed first is the error") {
    // Core 1 reads out of bounds at once; core 0 does the same after a loop of about 0.3 s, long
    // enough for core 1 (on a pool thread) to have started and failed even on a loaded machine.
    auto kernel = [](pl::Ref x, pl::Ref o) {
      pl::when(pl::program_id(0) == 0, [&] {
        pl::Value start = pl::fori_loop(0, 3000000, 0, [](pl::Value, pl::Value a) { return a + 1; });
        o() = x(pl::ds(start, 4));
      });
      pl::when(pl::program_id(0) == 1, [&] { o() = x(pl::ds(pl::program_id(0) * 200, 4)); });
    };
    pl::InterpretParams two_cores;
    two_cores.num_cores_or_threads = 2;
    auto call = pl::pallas_call(kernel,
                                pl::GridSpec{.grid = {2}, .out_specs = {pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i); })}},
                                pl::ShapeDtype({8}, pl::f32),
                                {.compiler_params = {.dimension_semantics = {pl::parallel}}, .interpret = two_cores});
    try {
      call(pl::Array::zeros({8}, pl::f32));
      FAIL("no RuntimeError");
    } catch (const RuntimeError& e) {
      INFO(e.what());
      CHECK(e.where().core == 1);
      CHECK(std::string(e.what()).find("ds(200, 4)") != std::string::npos);
    }
  }

  TEST_CASE("grid: a non-consecutive revisit of an output block is an error naming the output and the step") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      // Output index j over grid (2, 2) visits blocks 0, 1, 0, 1.
      auto kernel = [](pl::Ref o) { o() = pl::program_id(0).astype(pl::f32) + pl::zeros_like(o); };
      auto call = pl::pallas_call(
          kernel, pl::GridSpec{.grid = {2, 2}, .out_specs = {pl::BlockSpec({2}, [](pl::Value, pl::Value j) { return pl::idx(j); })}},
          pl::ShapeDtype({4}, pl::f32), backend);
      // The step that revisits (1, 0) and the step that wrote the block first (0, 0), each by its grid point.
      CHECK_THROWS_WITH_AS(call(),
                           doctest::Contains("output 0 is revisited non-consecutively: its block at element offset (0) "
                                             "was written back at grid point (0, 0) and is written back again at grid "
                                             "point (1, 0), after the grid moved on to other blocks in between"),
                           RuntimeError);
      try {
        call();
      } catch (const RuntimeError& e) {
        CHECK(e.where().grid_point == std::vector<int64_t>{1, 0});
        CHECK(e.where().device == 0);
      }
      // The failure does not poison later calls.
      auto fine = pl::pallas_call(kernel, pl::GridSpec{.grid = {1, 2}, .out_specs = {pl::BlockSpec({2}, [](pl::Value, pl::Value j) {
                                                                                    return pl::idx(j);
                                                                                  })}},
                                  pl::ShapeDtype({4}, pl::f32), backend);
      CHECK(fine().to_vector<float>() == std::vector<float>{0, 0, 0, 0});
    });
  }

  TEST_CASE("grid: interpreted, an output block a step skips writing is poison, not the previous block") {
    // Step 2 of 4 writes nothing: its block holds memory nobody wrote, whichever buffer it lands in
    // (Buffered(2) outputs alternate two) and whichever copy mode and core runs it.
    for (pl::DmaExecutionMode dma : {pl::DmaExecutionMode::eager, pl::DmaExecutionMode::on_wait})
      for (int cores : {1, 2})
        for (int64_t buffers : {1, 2})
          for (pl::UninitializedMemory fill : {pl::UninitializedMemory::nan, pl::UninitializedMemory::zero}) {
            INFO("on_wait: " << (dma == pl::DmaExecutionMode::on_wait) << ", cores: " << cores << ", buffers: " << buffers);
            pl::InterpretParams params;
            params.dma_execution_mode = dma;
            params.num_cores_or_threads = cores;
            params.uninitialized_memory = fill;
            pl::CallOptions options = testing::interpret(params);
            options.compiler_params.dimension_semantics = {pl::parallel};
            auto map = [](pl::Value i) { return pl::idx(i); };
            const pl::BlockSpec spec = buffers == 2 ? pl::BlockSpec({2}, map, pl::Buffered(2)) : pl::BlockSpec({2}, map);
            auto call = pl::pallas_call(
                [](pl::Ref o) { pl::when(pl::program_id(0) != 2, [&] { o() = pl::full({2}, 1.0f, pl::f32) + pl::program_id(0).astype(pl::f32); }); },
                pl::GridSpec{.grid = {4}, .out_specs = {spec}}, pl::ShapeDtype({8}, pl::f32), options);
            const std::vector<float> out = call().to_vector<float>();
            for (int64_t k : {0, 1, 6, 7}) CHECK(out[static_cast<size_t>(k)] == static_cast<float>(1 + k / 2));
            for (int64_t k : {4, 5}) {
              if (fill == pl::UninitializedMemory::nan) CHECK(std::isnan(out[static_cast<size_t>(k)]));
              else CHECK(out[static_cast<size_t>(k)] == 0.0f);
            }
          }
  }

  TEST_CASE("grid: a revisit on the second core names that core's steps, with either copy mode") {
    for (pl::DmaExecutionMode dma : {pl::DmaExecutionMode::eager, pl::DmaExecutionMode::on_wait}) {
      pl::InterpretParams two_cores;
      two_cores.num_cores_or_threads = 2;
      two_cores.dma_execution_mode = dma;
      testing::for_each_backend(
          [&](const pl::CallOptions& backend) {
            pl::CallOptions options = backend;
            options.compiler_params.dimension_semantics = {pl::parallel, pl::arbitrary, pl::arbitrary};
            // Core 1 runs i = 1: blocks 2, 3, 2, 3 over (j, k), so (1, 1, 0) comes back to block 2 of (1, 0, 0).
            auto call = pl::pallas_call(
                [](pl::Ref o) { o() = pl::zeros_like(o); },
                pl::GridSpec{.grid = {2, 2, 2},
                             .out_specs = {pl::BlockSpec({2}, [](pl::Value i, pl::Value, pl::Value k) { return pl::idx(i * 2 + k); })}},
                pl::ShapeDtype({8}, pl::f32), options);
            try {
              call();
              FAIL("no RuntimeError");
            } catch (const RuntimeError& e) {
              INFO(e.what());
              const std::string what = e.what();
              const bool core0 = what.find("output 0 is revisited non-consecutively: its block at element offset (0) "
                                           "was written back at grid point (0, 0, 0) and is written back again at "
                                           "grid point (0, 1, 0)") != std::string::npos;
              const bool core1 = what.find("output 0 is revisited non-consecutively: its block at element offset (4) "
                                           "was written back at grid point (1, 0, 0) and is written back again at "
                                           "grid point (1, 1, 0)") != std::string::npos;
              CHECK((core0 || core1));
            }
          },
          two_cores);
    }
  }

  TEST_CASE("grid: partial edge blocks read poison past the edge, and writes past it are dropped") {
    auto kernel = [](pl::Ref x, pl::Ref o, pl::Ref sums) {
      o() = x() * 2.0f;
      sums() = pl::broadcast_to(pl::sum(x()), {1});
    };
    auto spec = pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i); });
    auto make = [&](const pl::CallOptions& options) {
      return pl::pallas_call(
          kernel,
          pl::GridSpec{.grid = {3}, .in_specs = {spec},
                       .out_specs = {spec, pl::BlockSpec({1}, [](pl::Value i) { return pl::idx(i); })}},
          std::vector<pl::ShapeDtype>{pl::ShapeDtype({10}, pl::f32), pl::ShapeDtype({3}, pl::f32)}, options);
    };
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      std::vector<pl::Array> out = make(backend)(pl::Array::arange(10, pl::f32));
      std::vector<float> doubled = out[0].to_vector<float>();
      for (int i = 0; i < 10; ++i) CHECK(doubled[i] == 2.0f * static_cast<float>(i));
      CHECK(out[1].at<float>({0}) == 6.0f);
      CHECK(std::isnan(out[1].at<float>({2})));  // the last block's padding is NaN
    });
    // The interpreter can fill uninitialised memory with zeros instead: the padding reads 0.
    auto zero = make(testing::interpret({.uninitialized_memory = pl::UninitializedMemory::zero}));
    CHECK(zero(pl::Array::arange(10, pl::f32))[1].at<float>({2}) == 17.0f);
  }

  TEST_CASE("grid: a block index whose block lies outside the array is a runtime error") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      auto kernel = [](pl::Ref x, pl::Ref o) { o() = x(); };
      auto call = pl::pallas_call(kernel,
                                  pl::GridSpec{.grid = {2},
                                               .in_specs = {pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i + 2); })},
                                               .out_specs = {pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i); })}},
                                  pl::ShapeDtype({8}, pl::f32), backend);
      CHECK_THROWS_WITH_AS(call(pl::Array::zeros({8}, pl::f32)), doctest::Contains("block of input 0 out of bounds"), RuntimeError);
      CHECK_THROWS_WITH_AS(call(pl::Array::zeros({8}, pl::f32)), doctest::Contains("grid point (0)"), RuntimeError);
    });
  }

  TEST_CASE("grid: an output block index outside the output array is a runtime error at the index map's line") {
    // Blocks of 4 of an 8-element output over a grid of 2: shifted by 1, grid point (1) maps to block 2
    // (element 8, past the end); shifted by -1, grid point (0) maps to block -1.
    struct Case {
      int shift;
      const char* start;
      const char* point;
    };
    for (const Case c : {Case{1, "(8) (block index (2) of a (4,) block)", "grid point (1)"},
                         Case{-1, "(-4) (block index (-1) of a (4,) block)", "grid point (0)"}}) {
      testing::for_each_backend([&](const pl::CallOptions& backend) {
        INFO(c.shift);
        const int map_line = __LINE__ + 1;
        auto out_spec = pl::BlockSpec({4}, [shift = c.shift](pl::Value i) { return pl::idx(i + shift); });
        auto call = pl::pallas_call([](pl::Ref x, pl::Ref o) { o() = x(); },
                                    pl::GridSpec{.grid = {2},
                                                 .in_specs = {pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i); })},
                                                 .out_specs = {out_spec}},
                                    pl::ShapeDtype({8}, pl::f32), backend);
        try {
          call(pl::Array::arange(8, pl::f32));
          FAIL("expected a RuntimeError");
        } catch (const RuntimeError& e) {
          const std::string what = e.what();
          INFO(what);
          CHECK(what.find(fmt::format("block of output 0 out of bounds: the window starts at element {}", c.start)) !=
                std::string::npos);
          CHECK(what.find(c.point) != std::string::npos);
          CHECK(what.find(fmt::format("grid_test.cpp:{}", map_line)) != std::string::npos);
          CHECK(e.loc().line == map_line);
        }
        // The next call works.
        auto fine = pl::pallas_call([](pl::Ref x, pl::Ref o) { o() = x(); },
                                    pl::GridSpec{.grid = {2},
                                                 .in_specs = {pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i); })},
                                                 .out_specs = {pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i); })}},
                                    pl::ShapeDtype({8}, pl::f32), backend);
        CHECK(fine(pl::Array::arange(8, pl::f32)).to_vector<float>() == pl::Array::arange(8, pl::f32).to_vector<float>());
      });
    }
  }

  TEST_CASE("grid: a window with a pl::Element dim out of bounds in its block dim names starts, not a block index") {
    // Dim 0 is an element offset (4 here), so the starts (4, 8) are no block index: only a window of
    // plain blocks has one to name.
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      auto spec = pl::BlockSpec({pl::Element(2), 4}, [](pl::Value i) { return pl::idx(i * 4, i + 2); });
      auto call = pl::pallas_call([](pl::Ref x, pl::Ref o) { o() = x(); },
                                  pl::GridSpec{.grid = {2}, .in_specs = {spec},
                                               .out_specs = {pl::BlockSpec({2, 4}, [](pl::Value i) { return pl::idx(i, 0); })}},
                                  pl::ShapeDtype({4, 4}, pl::f32), backend);
      try {
        call(pl::Array::zeros({8, 12}, pl::f32));
        FAIL("expected a RuntimeError");
      } catch (const RuntimeError& e) {
        const std::string what = e.what();
        INFO(what);
        CHECK(what.find("block of input 0 out of bounds: the window starts at element (4, 12) but") != std::string::npos);
        CHECK(what.find("block index") == std::string::npos);
        CHECK(what.find("grid point (1)") != std::string::npos);
      }
    });
  }

  TEST_CASE("grid: out-of-bounds indexing inside the kernel names the buffer, index, range, step and line") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      int line = 0;
      auto kernel = [&](pl::Ref x, pl::Ref o) {
        line = __LINE__ + 1;
        o() = x(pl::ds(pl::program_id(0) * 4, 4));
      };
      auto call = pl::pallas_call(kernel,
                                  pl::GridSpec{.grid = {3}, .out_specs = {pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i); })}},
                                  pl::ShapeDtype({12}, pl::f32), backend);
      pl::Array x = pl::Array::zeros({8}, pl::f32);
      CHECK_THROWS_WITH_AS(call(x), doctest::Contains("out-of-bounds slice of `input 0 block`: ds(8, 4)"), RuntimeError);
      CHECK_THROWS_WITH_AS(call(x), doctest::Contains("valid elements are [0, 8)"), RuntimeError);
      CHECK_THROWS_WITH_AS(call(x), doctest::Contains("grid point (2)"), RuntimeError);
      CHECK_THROWS_WITH_AS(call(x), doctest::Contains(fmt::format("grid_test.cpp:{}", line).c_str()), RuntimeError);
    });
  }

  TEST_CASE("grid: running out of memory is a RuntimeError, not a crash") {
    testing::for_each_backend([](const pl::CallOptions& backend) {
      auto kernel = [](pl::Ref x, pl::Ref o, pl::Ref huge) {
        huge(0) = 1.0f;
        o() = x();
      };
      pl::CallOptions options = backend;
      options.compiler_params.vmem_limit_bytes = int64_t{1} << 62;
      auto call = pl::pallas_call(kernel, pl::GridSpec{.scratch_shapes = {pl::VMEM({int64_t{1} << 42}, pl::f32)}},
                                  pl::ShapeDtype({4}, pl::f32), options);
      // Under a sanitizer only the part before the allocation can run: the kernel traces and lowers.
      CHECK(call.lowered({pl::Array::zeros({4}, pl::f32)}).ops.size() > 0);
      if (testing::kRefusedAllocationsThrow)
        CHECK_THROWS_WITH_AS(call(pl::Array::zeros({4}, pl::f32)), doctest::Contains("out of memory"), RuntimeError);
    });
  }

  TEST_CASE("grid: squeezed dims disappear from the kernel's ref and index by element") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      auto kernel = [](pl::Ref x, pl::Ref o) {
        CHECK(x.shape() == pl::Shape{2, 3});
        o() = x() + 1.0f;
      };
      auto spec = pl::BlockSpec({pl::squeezed, 2, 3}, [](pl::Value i) { return pl::idx(i, 0, 0); });
      pl::Array x = pl::Array::arange(18, pl::f32).reshape({3, 2, 3});
      pl::Array out = pl::pallas_call(kernel, pl::GridSpec{.grid = {3}, .in_specs = {spec}, .out_specs = {spec}},
                                      pl::ShapeDtype({3, 2, 3}, pl::f32), backend)(x);
      for (int64_t i = 0; i < 18; ++i) CHECK(out.to_vector<float>()[i] == static_cast<float>(i + 1));
    });
  }

  TEST_CASE("grid: BlockSpec forms — whole array, fixed block, ANY and SMEM") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      auto kernel = [](pl::Ref table, pl::Ref whole, pl::Ref raw, pl::Ref fixed, pl::Ref o) {
        CHECK(table.memory_space() == pl::MemorySpace::SMEM);
        CHECK(whole.shape() == pl::Shape{2, 4});
        CHECK(raw.memory_space() == pl::MemorySpace::ANY);
        CHECK(raw.shape() == pl::Shape{16});
        CHECK(fixed.shape() == pl::Shape{1, 4});
        o() = whole() + fixed() * table[1].astype(pl::f32);
      };
      auto call = pl::pallas_call(kernel,
                                  pl::GridSpec{.grid = {1},
                                               .in_specs = {pl::BlockSpec(pl::SMEM), pl::BlockSpec(), pl::BlockSpec(pl::ANY),
                                                            pl::BlockSpec({1, 4})}},
                                  pl::ShapeDtype({2, 4}, pl::f32), backend);
      pl::Array out = call(pl::Array::from_vector<int32_t>({5, 10}, {2}), pl::Array::arange(8, pl::f32).reshape({2, 4}),
                           pl::Array::zeros({16}, pl::f32), pl::Array::full({3, 4}, 1, pl::f32));
      CHECK(out.to_vector<float>() == std::vector<float>{10, 11, 12, 13, 14, 15, 16, 17});
    });
  }

  TEST_CASE("grid: scalar prefetch drives index maps (a block gather) and is readable in the kernel") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      auto kernel = [](pl::Ref ids, pl::Ref x, pl::Ref o) { o() = x() + ids[pl::program_id(0)].astype(pl::f32) * 1000.0f; };
      auto call = pl::pallas_call(
          kernel,
          pl::PrefetchScalarGridSpec{
              .num_scalar_prefetch = 1,
              .grid = {4},
              .in_specs = {pl::BlockSpec({2, 3}, [](pl::Value i, pl::Ref ids) { return pl::idx(ids[i], 0); })},
              .out_specs = {pl::BlockSpec({2, 3}, [](pl::Value i, pl::Ref) { return pl::idx(i, 0); })}},
          pl::ShapeDtype({8, 3}, pl::f32), backend);
      pl::Array ids = pl::Array::from_vector<int32_t>({3, 0, 2, 0}, {4});
      pl::Array x = pl::Array::arange(24, pl::f32).reshape({8, 3});
      pl::Array out = call(ids, x);
      for (int64_t b = 0; b < 4; ++b)
        for (int64_t r = 0; r < 2; ++r)
          for (int64_t c = 0; c < 3; ++c) {
            const int64_t src = ids.at<int32_t>({b});
            CHECK(out.at<float>({b * 2 + r, c}) == x.at<float>({src * 2 + r, c}) + 1000.0f * static_cast<float>(src));
          }
    });
  }

  TEST_CASE("grid: each core has its own copy of the scalar-prefetch operands") {
    // Every step records the counter in its prefetch table, then counts it up: with a table of its
    // own, each core counts 100, 101, ... over its steps; a shared one would show the other core's.
    const int previous_threads = pl::num_threads();
    pl::set_num_threads(2);  // compiled code: one core per thread
    for (pl::DmaExecutionMode dma : {pl::DmaExecutionMode::eager, pl::DmaExecutionMode::on_wait}) {
      pl::InterpretParams two_cores;
      two_cores.num_cores_or_threads = 2;
      two_cores.dma_execution_mode = dma;
      for (bool detect_races : {false, true}) {
        two_cores.detect_races = detect_races;
        testing::for_each_backend(
            [&](const pl::CallOptions& backend) {
              if (detect_races && !backend.interpret) return;
              pl::CallOptions options = backend;
              options.compiler_params.dimension_semantics = {pl::parallel, pl::arbitrary};
              auto call = pl::pallas_call(
                  [](pl::Ref counter, pl::Ref o) {
                    o[0] = counter[0];
                    counter[0] = counter[0] + 1;
                  },
                  pl::PrefetchScalarGridSpec{
                      .num_scalar_prefetch = 1,
                      .grid = {2, 64},
                      .out_specs = {pl::BlockSpec({pl::squeezed, pl::squeezed, 1},
                                                  [](pl::Value i, pl::Value j, pl::Ref) { return pl::idx(i, j, 0); })}},
                  pl::ShapeDtype({2, 64, 1}, pl::i32), options);
              const pl::Array counter = pl::Array::from_vector<int32_t>({100}, {1});
              const pl::Array out = call(counter);
              for (int64_t i = 0; i < 2; ++i)
                for (int64_t j = 0; j < 64; ++j) CHECK(out.at<int32_t>({i, j, 0}) == 100 + j);
              CHECK(counter.at<int32_t>({0}) == 100);  // the caller's array never changes
              if (detect_races) CHECK(pl::race_reports().empty());
            },
            two_cores);
      }
    }
    pl::set_num_threads(previous_threads);
  }

  TEST_CASE("grid: input_output_aliases start the output as the input, counting prefetch operands") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      // Only block 1 of 3 is written; the others keep the aliased input's values.
      auto kernel = [](pl::Ref which, pl::Ref x, pl::Ref o) {
        (void)which;
        o() = x() * -1.0f;
      };
      auto spec = pl::BlockSpec({2}, [](pl::Value, pl::Ref which) { return pl::idx(which[0]); });
      auto call = pl::pallas_call(kernel,
                                  pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1, .grid = {1}, .in_specs = {spec},
                                                             .out_specs = {spec}},
                                  pl::ShapeDtype({6}, pl::f32), testing::with_backend({.input_output_aliases = {{1, 0}}}, backend));
      pl::Array x = pl::Array::arange(6, pl::f32);
      pl::Array out = call(pl::Array::from_vector<int32_t>({1}, {1}), x);
      CHECK(out.to_vector<float>() == std::vector<float>{0, 1, -2, -3, 4, 5});
      CHECK(x.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5});
    });
  }

  TEST_CASE("grid: several outputs, scratch that persists across steps and starts as poison") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      auto kernel = [](pl::Ref x, pl::Ref total, pl::Ref first, pl::Ref acc, pl::Ref untouched) {
        pl::when(pl::program_id(0) == 0, [&] {
          acc() = pl::zeros_like(acc);
          first() = untouched();  // never written: poison
        });
        acc() += x();
        total() = acc();
      };
      auto whole = pl::BlockSpec({2}, [](pl::Value) { return pl::idx(0); });
      auto call = pl::pallas_call(kernel,
                                  pl::GridSpec{.grid = {3},
                                               .in_specs = {pl::BlockSpec({2}, [](pl::Value i) { return pl::idx(i); })},
                                               .out_specs = {whole, whole},
                                               .scratch_shapes = {pl::VMEM({2}, pl::f32), pl::VMEM({2}, pl::f32)}},
                                  std::vector<pl::ShapeDtype>{pl::ShapeDtype({2}, pl::f32), pl::ShapeDtype({2}, pl::f32)},
                                  backend);
      // The interpreter reports the read of never-written scratch; compiled code reads the poison.
      if (backend.interpret) {
        CHECK_THROWS_WITH_AS(call(pl::Array::arange(6, pl::f32)), doctest::Contains("never-written scratch: `scratch 1`"),
                             RuntimeError);
        return;
      }
      std::vector<pl::Array> out = call(pl::Array::arange(6, pl::f32));
      CHECK(out[0].to_vector<float>() == std::vector<float>{6, 9});
      CHECK(std::isnan(out[1].at<float>({0})));
    });
  }

  TEST_CASE("grid: parallel dims split over cores, each with its own scratch, same results as one core") {
    // A per-row running sum over the arbitrary axis, kept in scratch.
    auto kernel = [](pl::Ref x, pl::Ref o, pl::Ref acc) {
      pl::when(pl::program_id(1) == 0, [&] { acc() = pl::zeros_like(acc); });
      acc() += x();
      o() = acc();
    };
    auto make = [&](const pl::CallOptions& backend) {
      pl::CallOptions options = backend;
      options.compiler_params.dimension_semantics = {pl::parallel, pl::arbitrary};
      return pl::pallas_call(
          kernel,
          pl::GridSpec{.grid = {4, 3},
                       .in_specs = {pl::BlockSpec({1, 2}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })},
                       .out_specs = {pl::BlockSpec({1, 2}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })},
                       .scratch_shapes = {pl::VMEM({1, 2}, pl::f32)}},
          pl::ShapeDtype({4, 6}, pl::f32), options);
    };
    pl::Array x = pl::Array::random_normal({4, 6}, pl::f32, 3);
    const pl::Array one = make(testing::interpret({.num_cores_or_threads = 1}))(x);
    CHECK(one.at<float>({2, 5}) == doctest::Approx(x.at<float>({2, 1}) + x.at<float>({2, 3}) + x.at<float>({2, 5})));
    for (int cores : {2, 3}) {
      INFO(cores << " cores");
      CHECK(pl::allclose(make(testing::interpret({.num_cores_or_threads = cores}))(x), one, 0, 0));
      // Compiled kernels run one core per thread.
      pl::set_num_threads(cores);
      CHECK(pl::num_threads() == cores);
      CHECK(pl::allclose(make(pl::CallOptions{})(x), one, 0, 0));
    }
    pl::set_num_threads(0);
  }

  TEST_CASE("grid: an empty grid runs nothing and leaves outputs uninitialised") {
    testing::for_each_backend([](const pl::CallOptions& backend) {
      int runs = 0;
      auto kernel = [&](pl::Ref o) {
        ++runs;  // traced once, never executed
        o() = pl::zeros_like(o);
      };
      pl::Array out = pl::pallas_call(kernel, pl::GridSpec{.grid = {0}}, pl::ShapeDtype({2}, pl::f32), backend)();
      CHECK(runs == 1);
      CHECK(out.shape() == pl::Shape{2});
      // The interpreter poisons what no block writes; compiled code leaves it as it is, as a TPU does.
      if (backend.interpret) CHECK(std::isnan(out.at<float>({0})));
    });
  }
}
