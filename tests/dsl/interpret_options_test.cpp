// Pallas's interpret options beyond the defaults (pl::InterpretParams): the grid point recorder,
// skipping floating-point work, exploring schedules of the copies with exact replay,
// TESSERA_DETECT_RACES, out-of-bounds reads giving uninitialised values, HBM buffers in run_scoped,
// and a random order of the parallel grid points.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <utility>

#include "dsl/races.h"
#include "tests/support/kernels.h"
#include "tests/support/scoped_env.h"

using namespace tessera;
namespace pl = tessera;

namespace {

using testing::ScopedEnv;

// Reads a copy's destination before waiting for the copy: a race, which detection reports.
auto reads_before_wait(const pl::CallOptions& options) {
  auto kernel = [](pl::Ref x, pl::Ref o, pl::Ref buf, pl::Ref sem) {
    auto copy = pl::make_async_copy(x, buf, sem);
    copy.start();
    o() = buf() + 1.0f;
    copy.wait();
  };
  return pl::pallas_call(kernel,
                         pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                                      .scratch_shapes = {pl::VMEM({8}, pl::f32), pl::SemaphoreType::DMA}},
                         pl::ShapeDtype({8}, pl::f32), options);
}

}  // namespace

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

  // Two copies into one buffer, both waited for before it is read: which lands last depends on the
  // order copies complete, a race the schedules expose.
  auto racing_copies(pl::InterpretParams params) {
    auto kernel = [](pl::Ref x, pl::Ref o, pl::Ref buf, pl::Ref sem) {
      auto a = pl::make_async_copy(x.at(pl::ds(0, 8)), buf, sem);
      auto b = pl::make_async_copy(x.at(pl::ds(8, 8)), buf, sem);
      a.start();
      b.start();
      a.wait();
      b.wait();
      o() = buf();
    };
    return pl::pallas_call(kernel,
                           pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                                        .scratch_shapes = {pl::VMEM({8}, pl::f32), pl::SemaphoreType::DMA}},
                           pl::ShapeDtype({8}, pl::f32), {.interpret = params});
  }

  pl::InterpretParams schedules(int64_t n, uint64_t seed) {
    pl::InterpretParams p;
    p.dma_execution_mode = pl::DmaExecutionMode::on_wait;
    p.random_seed = seed;
    p.num_schedules = n;
    return p;
  }

  TEST_CASE("interpret options: schedules that give different results name the seed, and the seed replays it") {
    const pl::Array x = pl::Array::arange(16, pl::f32);
    std::string msg;
    try {
      racing_copies(schedules(16, 100))(x);
      FAIL("no RuntimeError");
    } catch (const RuntimeError& e) {
      msg = e.what();
    }
    INFO(msg);
    CHECK(msg.find("output 0 depends on the schedule") != std::string::npos);
    CHECK(msg.find("or two copies write the same memory") != std::string::npos);
    std::smatch found;
    REQUIRE(std::regex_search(msg, found, std::regex(R"(under random_seed=(\d+) but)")));
    const uint64_t seed = std::stoull(found[1]);
    CHECK(msg.find(fmt::format(".random_seed = {}, .num_schedules = 1", seed)) != std::string::npos);
    // Replays: that schedule alone, and the first one, give the two results the message compared.
    const pl::Array replayed = racing_copies(schedules(1, seed))(x), first = racing_copies(schedules(1, 100))(x);
    CHECK(replayed.to_vector<float>() != first.to_vector<float>());
    CHECK(racing_copies(schedules(1, seed))(x).to_vector<float>() == replayed.to_vector<float>());
    for (const pl::Array& r : {replayed, first})
      CHECK((r.at<float>({0}) == 0.0f || r.at<float>({0}) == 8.0f));
  }

  TEST_CASE("interpret options: a kernel whose copies are ordered by their waits passes every schedule") {
    // Double-buffered: each slot's copy is waited for before the slot is read or refilled.
    auto kernel = [](pl::Ref x, pl::Ref o, pl::Ref buf, pl::Ref sem) {
      auto copy = [&](pl::Value i) {
        return pl::make_async_copy(x.at(pl::ds(i * 4, 4)), buf.at(i % 2), sem.at(i % 2));
      };
      pl::loop(0, 4, [&](pl::Value i) {
        pl::when(i == 0, [&] { copy(i).start(); });
        pl::when(i + 1 < 4, [&] { copy(i + 1).start(); });
        copy(i).wait();
        o(pl::ds(i * 4, 4)) = buf.at(i % 2)() * 2.0f;
      });
    };
    auto call = pl::pallas_call(kernel,
                                pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                                             .scratch_shapes = {pl::VMEM({2, 4}, pl::f32), pl::SemaphoreType::DMA({2})}},
                                pl::ShapeDtype({16}, pl::f32), {.interpret = schedules(12, 0)});
    const pl::Array x = pl::Array::random_normal({16}, pl::f32, 9);
    const pl::Array o = call(x);
    for (int64_t i = 0; i < 16; ++i) CHECK(o.at<float>({i}) == x.at<float>({i}) * 2.0f);
  }

  TEST_CASE("interpret options: a failing schedule names its seed, and bad num_schedules are user errors") {
    auto leaves_signal = pl::pallas_call([](pl::Ref o, pl::Ref sem) {
      pl::semaphore_signal(sem);
      o() = pl::zeros_like(o);
    }, pl::GridSpec{.scratch_shapes = {pl::SemaphoreType::REGULAR}}, pl::ShapeDtype({4}, pl::f32), {.interpret = schedules(3, 40)});
    CHECK_THROWS_WITH_AS(leaves_signal(), doctest::Contains("schedule: random_seed=40 (1 of 3 explored)"), RuntimeError);
    auto copy = [](pl::Ref x, pl::Ref o) { o() = x(); };
    CHECK_THROWS_WITH_AS(pl::pallas_call(copy, pl::GridSpec{}, pl::ShapeDtype({4}, pl::f32), {.interpret = schedules(0, 0)})(
                             pl::Array::zeros({4}, pl::f32)),
                         doctest::Contains("InterpretParams::num_schedules must be >= 1"), UserError);
    pl::InterpretParams eager = schedules(4, 0);
    eager.dma_execution_mode = pl::DmaExecutionMode::eager;
    CHECK_THROWS_WITH_AS(pl::pallas_call(copy, pl::GridSpec{}, pl::ShapeDtype({4}, pl::f32), {.interpret = eager})(
                             pl::Array::zeros({4}, pl::f32)),
                         doctest::Contains("set .dma_execution_mode = pl::DmaExecutionMode::on_wait"), UserError);
    // An mpmd_map checks num_schedules as a pallas_call does (tests/dsl/mpmd_schedules_test.cpp explores).
    auto mpmd = pl::mpmd_map({{pl::CoreMesh("c", 1), copy}}, pl::ShapeDtype({4}, pl::f32), {}, {.interpret = eager});
    CHECK_THROWS_WITH_AS(mpmd(pl::Array::zeros({4}, pl::f32)),
                         doctest::Contains("mpmd_map `kernel`: InterpretParams::num_schedules explores the order in which "
                                           "copies complete, which eager copies do not have"),
                         UserError);
  }

  TEST_CASE("interpret options: TESSERA_DETECT_RACES=1 turns race detection on for interpreted calls") {
    const pl::Array x = pl::Array::arange(8, pl::f32);
    ScopedEnv detect("TESSERA_DETECT_RACES", nullptr);
    reads_before_wait(testing::interpret())(x);
    CHECK_FALSE(pl::races_found());
    detect.set("1");
    reads_before_wait(testing::interpret())(x);
    CHECK(pl::races_found());
    {  // also for calls TESSERA_INTERPRET makes interpreted
      ScopedEnv interpret("TESSERA_INTERPRET", "1");
      reads_before_wait({})(x);
      CHECK(pl::races_found());
    }
    // Compiled calls have nothing to detect with: it does not apply to them.
    reads_before_wait({})(x);
    CHECK_FALSE(pl::races_found());
    detect.set("0");
    reads_before_wait(testing::interpret())(x);
    CHECK_FALSE(pl::races_found());
    // A value that is neither on nor off is rejected when an interpreted call is made, naming it.
    detect.set("maybe");
    CHECK_THROWS_WITH_AS(reads_before_wait(testing::interpret()),
                         doctest::Contains("the environment variable TESSERA_DETECT_RACES has a value tessera does not "
                                           "accept\n  given: TESSERA_DETECT_RACES=maybe"),
                         UserError);
  }

  // Interpreted with out_of_bounds_reads = `reads` (and uninitialised memory `memory`).
  pl::CallOptions out_of_bounds(pl::OutOfBoundsReads reads, pl::UninitializedMemory memory = pl::UninitializedMemory::nan) {
    pl::InterpretParams p;
    p.out_of_bounds_reads = reads;
    p.uninitialized_memory = memory;
    return testing::interpret(p);
  }

  // Reads x[program_id + shift : +4] of an 8-element input (the slice is dynamic, so only running it
  // can tell it is out of bounds).
  auto shifted_read(int64_t shift, const pl::CallOptions& options) {
    return pl::pallas_call([shift](pl::Ref x, pl::Ref o) { o() = x(pl::ds(pl::program_id(0) + shift, 4)); },
                           pl::GridSpec{.grid = {1}}, pl::ShapeDtype({4}, pl::f32), options);
  }

  TEST_CASE("interpret options: out_of_bounds_reads = raise (the default) fails an out-of-bounds load") {
    const pl::Array x = pl::Array::arange(8, pl::f32);
    for (const pl::CallOptions& options : {testing::interpret(), out_of_bounds(pl::OutOfBoundsReads::raise)})
      CHECK_THROWS_WITH_AS(shifted_read(6, options)(x), doctest::Contains("out-of-bounds slice of `input 0 block`: ds(6, 4)"),
                           RuntimeError);
  }

  TEST_CASE("interpret options: out_of_bounds_reads = uninitialized gives poison past the ref, the rest as stored") {
    const pl::Array x = pl::Array::arange(8, pl::f32);
    const pl::Array past_end = shifted_read(6, out_of_bounds(pl::OutOfBoundsReads::uninitialized))(x);
    CHECK(past_end.at<float>({0}) == 6.0f);
    CHECK(past_end.at<float>({1}) == 7.0f);
    CHECK(std::isnan(past_end.at<float>({2})));
    CHECK(std::isnan(past_end.at<float>({3})));
    // Before the start, and with zeros as the uninitialised value.
    const pl::Array before = shifted_read(-2, out_of_bounds(pl::OutOfBoundsReads::uninitialized, pl::UninitializedMemory::zero))(x);
    CHECK(before.to_vector<float>() == std::vector<float>{0.0f, 0.0f, 0.0f, 1.0f});
    // Wholly outside, in 2-D through a view of a view, an index (squeezed) and integers: max-int.
    auto kernel = [](pl::Ref x, pl::Ref o) {
      pl::Value i = pl::program_id(0);
      o() = x.at(pl::ds(i + 2, 4), pl::ds(0, 3))(pl::ds(0, 4), i + 2);
    };
    const pl::Array m = pl::Array::arange(12, pl::i32).reshape({4, 3});
    const pl::Array got = pl::pallas_call(kernel, pl::GridSpec{.grid = {1}}, pl::ShapeDtype({4}, pl::i32),
                                          out_of_bounds(pl::OutOfBoundsReads::uninitialized))(m);
    const int32_t poison = std::numeric_limits<int32_t>::max();
    CHECK(got.to_vector<int32_t>() == std::vector<int32_t>{8, 11, poison, poison});
  }

  TEST_CASE("interpret options: out_of_bounds_reads = uninitialized still fails writes out of bounds") {
    const pl::Array x = pl::Array::arange(8, pl::f32);
    const pl::CallOptions options = out_of_bounds(pl::OutOfBoundsReads::uninitialized);
    auto store = pl::pallas_call([](pl::Ref x, pl::Ref o) { o(pl::ds(pl::program_id(0) + 6, 4)) = x(pl::ds(0, 4)); },
                                 pl::GridSpec{.grid = {1}}, pl::ShapeDtype({8}, pl::f32), options);
    CHECK_THROWS_WITH_AS(store(x), doctest::Contains("out-of-bounds slice of `output 0 block`: ds(6, 4)"), RuntimeError);
    // A window both read and written is a write: it fails too, even though the read comes first.
    auto update = pl::pallas_call(
        [](pl::Ref x, pl::Ref o) {
          pl::Ref w = o.at(pl::ds(pl::program_id(0) + 6, 4));
          o(pl::ds(0, 8)) = x();
          w() = w() + 1.0f;
        },
        pl::GridSpec{.grid = {1}}, pl::ShapeDtype({8}, pl::f32), options);
    CHECK_THROWS_WITH_AS(update(x), doctest::Contains("out-of-bounds slice of `output 0 block`: ds(6, 4)"), RuntimeError);
  }

  std::vector<float> plus_one(const pl::Array& x) {
    std::vector<float> v = x.to_vector<float>();
    for (float& e : v) e += 1.0f;
    return v;
  }

  // Interpreted with buffer_bounds = `bounds` (and uninitialised memory `memory`).
  pl::CallOptions with_bounds(pl::BufferBounds bounds, pl::UninitializedMemory memory = pl::UninitializedMemory::nan,
                              bool detect_races = false) {
    pl::InterpretParams p;
    p.buffer_bounds = bounds;
    p.uninitialized_memory = memory;
    p.detect_races = detect_races;
    return testing::interpret(p);
  }

  // Loads the (rows, 128) window at the corner of a (5, 100) input's block into the output, and
  // stores that window plus one back into the same window of a second (5, 100) output (the starts
  // come from program_id, so only running it can tell they reach past the refs).
  auto padded_window(int64_t rows, pl::DType dtype, const pl::CallOptions& options) {
    auto kernel = [rows](pl::Ref x, pl::Ref window, pl::Ref plus_one) {
      pl::Value i = pl::program_id(0);
      window() = x(pl::ds(i, rows), pl::ds(i, 128));
      plus_one(pl::ds(i, rows), pl::ds(i, 128)) = x(pl::ds(i, rows), pl::ds(i, 128)) + 1;
    };
    return pl::pallas_call(kernel, pl::GridSpec{.grid = {1}},
                           std::vector<pl::ShapeDtype>{pl::ShapeDtype({rows, 128}, dtype), pl::ShapeDtype({5, 100}, dtype)},
                           options);
  }

  TEST_CASE("interpret options: buffer_bounds = padded lets loads and stores reach into a TPU buffer's padding") {
    const pl::Array x = pl::Array::arange(500, pl::f32).reshape({5, 100});
    // Logical bounds (the default, also spelled exact): past the (5, 100) ref is out of bounds.
    CHECK(pl::BufferBounds::exact == pl::BufferBounds::logical);
    for (const pl::CallOptions& options : {testing::interpret(), with_bounds(pl::BufferBounds::exact)})
      CHECK_THROWS_WITH_AS(padded_window(8, pl::f32, options)(x),
                           doctest::Contains("out-of-bounds slice of `input 0 block`: ds(0, 8) in dimension 0"), RuntimeError);
    // Padded: f32 rows pad to 8 and lanes to 128. The padding reads as uninitialised; what a store
    // puts there is dropped, the rest lands.
    for (pl::UninitializedMemory memory : {pl::UninitializedMemory::nan, pl::UninitializedMemory::zero}) {
      const std::vector<pl::Array> out = padded_window(8, pl::f32, with_bounds(pl::BufferBounds::padded, memory))(x);
      for (int64_t r = 0; r < 8; ++r)
        for (int64_t c = 0; c < 128; ++c) {
          const float got = out[0].at<float>({r, c});
          if (r < 5 && c < 100) CHECK(got == x.at<float>({r, c}));
          else if (memory == pl::UninitializedMemory::nan) CHECK(std::isnan(got));
          else CHECK(got == 0.0f);
        }
      CHECK(out[1].to_vector<float>() == plus_one(x));
    }
    // bf16 rows pad to 16.
    const pl::Array xb = x.astype(pl::bf16);
    const std::vector<pl::Array> out = padded_window(16, pl::bf16, with_bounds(pl::BufferBounds::padded))(xb);
    CHECK(out[0].astype(pl::f32).at<float>({4, 99}) == xb.astype(pl::f32).at<float>({4, 99}));
    CHECK(std::isnan(out[0].astype(pl::f32).at<float>({15, 0})));
  }

  TEST_CASE("interpret options: buffer_bounds = padded still fails past the padding, and copies check the logical shape") {
    const pl::Array x = pl::Array::arange(500, pl::f32).reshape({5, 100});
    CHECK_THROWS_WITH_AS(padded_window(16, pl::f32, with_bounds(pl::BufferBounds::padded))(x),
                         doctest::Contains("out-of-bounds slice of `input 0 block`: ds(0, 16) in dimension 0"), RuntimeError);
    // A copy out of the same padded window is out of bounds: DMAs move the logical array.
    auto copy = pl::pallas_call(
        [](pl::Ref x, pl::Ref o, pl::Ref buf, pl::Ref sem) {
          pl::Value i = pl::program_id(0);
          auto c = pl::make_async_copy(x.at(pl::ds(i, 8), pl::ds(i, 128)), buf, sem);
          c.start();
          c.wait();
          o() = buf();
        },
        pl::GridSpec{.grid = {1}, .scratch_shapes = {pl::VMEM({8, 128}, pl::f32), pl::SemaphoreType::DMA}},
        pl::ShapeDtype({8, 128}, pl::f32), with_bounds(pl::BufferBounds::padded));
    CHECK_THROWS_WITH_AS(copy(x), doctest::Contains("out-of-bounds slice of `input 0 block`: ds(0, 8)"), RuntimeError);
  }

  TEST_CASE("interpret options: under buffer_bounds = padded, race detection sees the ref's own part accessed") {
    // The window's accesses are of the (5, 100) refs, not of their padding: a race-free kernel reports none.
    const pl::Array x = pl::Array::arange(500, pl::f32).reshape({5, 100});
    const std::vector<pl::Array> out = padded_window(8, pl::f32, with_bounds(pl::BufferBounds::padded, pl::UninitializedMemory::nan, true))(x);
    CHECK_FALSE(pl::races_found());
    CHECK(out[1].to_vector<float>() == plus_one(x));
  }

  TEST_CASE("interpret options: an out-of-bounds read is checked for races as a read of its in-bounds part") {
    // Reads part of a copy's destination before waiting for the copy: a race on the in-bounds part.
    // Read wholly past the buffer, it touches no memory and races with nothing.
    auto make = [](int64_t shift) {
      pl::InterpretParams p;
      p.out_of_bounds_reads = pl::OutOfBoundsReads::uninitialized;
      p.detect_races = true;
      auto kernel = [shift](pl::Ref x, pl::Ref o, pl::Ref buf, pl::Ref sem) {
        auto copy = pl::make_async_copy(x, buf, sem);
        copy.start();
        o() = buf(pl::ds(pl::program_id(0) + shift, 4));
        copy.wait();
      };
      return pl::pallas_call(kernel,
                             pl::GridSpec{.grid = {1},
                                          .in_specs = {pl::BlockSpec(pl::ANY)},
                                          .scratch_shapes = {pl::VMEM({8}, pl::f32), pl::SemaphoreType::DMA}},
                             pl::ShapeDtype({4}, pl::f32), testing::interpret(p));
    };
    const pl::Array x = pl::Array::arange(8, pl::f32);
    make(6)(x);
    REQUIRE(pl::races_found());
    CHECK(pl::race_reports()[0].message.find("read of scratch 0[6:8]") != std::string::npos);
    make(8)(x);
    CHECK_FALSE(pl::races_found());
  }

  // Copies x into an HBM buffer run_scoped allocates and from there to the output (both ANY).
  auto through_hbm(const pl::CallOptions& options) {
    auto kernel = [](pl::Ref x, pl::Ref o) {
      pl::run_scoped(
          [&](pl::Ref hbm, pl::Ref sem) {
            auto in = pl::make_async_copy(x, hbm, sem);
            in.start();
            in.wait();
            auto out = pl::make_async_copy(hbm, o, sem);
            out.start();
            out.wait();
          },
          pl::HBM({8, 16}, pl::f32), pl::SemaphoreType::DMA);
    };
    return pl::pallas_call(kernel, pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)}, .out_specs = {pl::BlockSpec(pl::ANY)}},
                           pl::ShapeDtype({8, 16}, pl::f32), options);
  }

  TEST_CASE("interpret options: allow_hbm_allocation_in_run_scoped lets run_scoped allocate HBM in the interpreter") {
    const pl::Array x = pl::Array::random_normal({8, 16}, pl::f32, 4);
    pl::InterpretParams allowed;
    allowed.allow_hbm_allocation_in_run_scoped = true;
    CHECK(through_hbm(testing::interpret(allowed))(x).to_vector<float>() == x.to_vector<float>());
    // Without it, interpreted or compiled, a UserError naming the buffer and how to allow it.
    const std::string problem = "pallas_call `kernel`: pl::run_scoped allocates `run_scoped 0` in HBM, which only the "
                                "interpreter can, when asked to";
    CHECK_THROWS_WITH_AS(through_hbm(testing::interpret())(x),
                         doctest::Contains((problem + "\n  given: run_scoped 0 of shape (8, 16) f32 (interpreted without "
                                                      "allow_hbm_allocation_in_run_scoped)").c_str()),
                         UserError);
    CHECK_THROWS_WITH_AS(through_hbm({})(x), doctest::Contains((problem + "\n  given: run_scoped 0 of shape (8, 16) f32 (compiled)").c_str()),
                         UserError);
    CHECK_THROWS_WITH_AS(through_hbm({})(x), doctest::Contains("pl::InterpretParams{.allow_hbm_allocation_in_run_scoped = true}"),
                         UserError);
  }

  // Interpreted with the parallel grid points in the order of `seed`, on `cores` cores.
  pl::InterpretParams shuffled(uint64_t seed, int cores = 1) {
    pl::InterpretParams p;
    p.random_parallel_order = true;
    p.random_seed = seed;
    p.num_cores_or_threads = cores;
    return p;
  }

  TEST_CASE("interpret options: random_parallel_order permutes each core's parallel points, arbitrary steps in order") {
    // grid (4, 3): dim 0 parallel, dim 1 arbitrary; the recorder shows the order each core visits.
    auto visits = [](pl::InterpretParams params) {
      std::map<int64_t, std::vector<std::vector<int64_t>>> seen;
      params.grid_point_recorder = [&](std::vector<int64_t> point, int64_t core) { seen[core].push_back(std::move(point)); };
      auto call = pl::pallas_call(
          [](pl::Ref x, pl::Ref o) { o() = x() * 2.0f; },
          pl::GridSpec{.grid = {4, 3},
                       .in_specs = {pl::BlockSpec({2, 4}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })},
                       .out_specs = {pl::BlockSpec({2, 4}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })}},
          pl::ShapeDtype({8, 12}, pl::f32),
          {.compiler_params = {.dimension_semantics = {pl::parallel, pl::arbitrary}}, .interpret = params});
      const pl::Array x = pl::Array::random_normal({8, 12}, pl::f32, 2);
      std::vector<float> doubled = x.to_vector<float>();
      for (float& v : doubled) v *= 2.0f;
      CHECK(call(x).to_vector<float>() == doubled);  // a correct kernel: the same result in any order
      return seen;
    };
    std::set<std::vector<int64_t>> orders;  // the parallel coordinates in visit order, per seed
    for (uint64_t seed = 0; seed < 8; ++seed) {
      auto seen = visits(shuffled(seed));
      REQUIRE(seen[0].size() == 12);
      std::vector<int64_t> order;
      for (size_t k = 0; k < 12; k += 3) {
        for (int64_t j = 0; j < 3; ++j) CHECK(seen[0][k + j] == std::vector<int64_t>{seen[0][k][0], j});
        order.push_back(seen[0][k][0]);
      }
      CHECK(std::set<int64_t>(order.begin(), order.end()) == std::set<int64_t>{0, 1, 2, 3});
      CHECK(visits(shuffled(seed))[0] == seen[0]);  // a seed replays its order
      orders.insert(order);
    }
    CHECK(orders.size() > 1);
    orders.erase({0, 1, 2, 3});
    CHECK(!orders.empty());  // not merely the row-major order
    // Two cores: each keeps its own chunk of points (core 0 rows 0-1, core 1 rows 2-3) and shuffles it.
    std::set<std::vector<int64_t>> core0_orders;
    for (uint64_t seed = 0; seed < 8; ++seed) {
      auto seen = visits(shuffled(seed, 2));
      REQUIRE(seen[0].size() == 6);
      REQUIRE(seen[1].size() == 6);
      for (const auto& point : seen[0]) CHECK(point[0] < 2);
      for (const auto& point : seen[1]) CHECK(point[0] >= 2);
      core0_orders.insert({seen[0][0][0], seen[0][3][0]});
    }
    CHECK(core0_orders.size() == 2);
    // Without the option the order is row-major.
    auto seen = visits(testing::interpret().interpret.value());
    for (size_t k = 0; k < 12; ++k) CHECK(seen[0][k] == std::vector<int64_t>{static_cast<int64_t>(k / 3), static_cast<int64_t>(k % 3)});
  }

  // A running sum over a parallel dim, carried in scratch: o[i] = x[0] + ... + x[i] in row-major order,
  // wrong since the order of a parallel dim is not defined. `fixed`: each row's sum of itself only.
  // The wrong kernel reads scratch nobody wrote when its first point is not 0: an error, unless
  // uninitialized memory reads as zero (zeroed), when its results show the order instead.
  pl::InterpretParams zeroed(pl::InterpretParams params) {
    params.uninitialized_memory = pl::UninitializedMemory::zero;
    return params;
  }
  auto running_sum(bool fixed, pl::InterpretParams params) {
    auto kernel = [fixed](pl::Ref x, pl::Ref o, pl::Ref acc) {
      pl::when(pl::program_id(0) == 0 || fixed, [&] { acc() = pl::zeros_like(acc); });
      acc() = acc() + x();
      o() = acc();
    };
    auto row = [] { return pl::BlockSpec({1, 4}, [](pl::Value i) { return pl::idx(i, 0); }); };
    return pl::pallas_call(kernel,
                           pl::GridSpec{.grid = {8}, .in_specs = {row()}, .out_specs = {row()},
                                        .scratch_shapes = {pl::VMEM({1, 4}, pl::i32)}},
                           pl::ShapeDtype({8, 4}, pl::i32),
                           {.compiler_params = {.dimension_semantics = {pl::parallel}}, .interpret = params});
  }

  TEST_CASE("interpret options: random_parallel_order shows a kernel that depends on the order of a parallel dim") {
    // Row i holds 2^i, so a sum says which rows it added.
    std::vector<int32_t> rows;
    for (int i = 0; i < 8; ++i)
      for (int k = 0; k < 4; ++k) rows.push_back(1 << i);
    const pl::Array x = pl::Array::from_vector<int32_t>(rows, {8, 4}, pl::i32);
    const pl::InterpretParams in_order = testing::interpret().interpret.value();
    CHECK(running_sum(false, in_order)(x).at<int32_t>({7, 0}) == 255);
    std::set<std::vector<int32_t>> results;
    for (uint64_t seed = 0; seed < 8; ++seed) {
      const std::vector<int32_t> got = running_sum(false, zeroed(shuffled(seed)))(x).to_vector<int32_t>();
      CHECK(running_sum(false, zeroed(shuffled(seed)))(x).to_vector<int32_t>() == got);  // a seed replays it
      results.insert(got);
    }
    CHECK(results.size() > 1);
    // With poison (the default), the seeds whose first point is not 0 read scratch nobody wrote.
    int reported = 0;
    for (uint64_t seed = 0; seed < 8; ++seed) {
      try {
        running_sum(false, shuffled(seed))(x);
      } catch (const RuntimeError& e) {
        CHECK_MESSAGE(std::string(e.what()).find("read of never-written scratch: `scratch 0`") != std::string::npos, e.what());
        ++reported;
      }
    }
    CHECK(reported > 0);
    // The fixed kernel gives the same result under every seed, the one it gives in order.
    for (uint64_t seed = 0; seed < 8; ++seed) CHECK(running_sum(true, shuffled(seed))(x).to_vector<int32_t>() == rows);
    // Under num_schedules each schedule draws its own order: the dependence is reported with its seed.
    pl::InterpretParams explore = zeroed(shuffled(0));
    explore.dma_execution_mode = pl::DmaExecutionMode::on_wait;
    explore.num_schedules = 8;
    CHECK_THROWS_WITH_AS(running_sum(false, explore)(x), doctest::Contains("output 0 depends on the schedule"), RuntimeError);
    CHECK(running_sum(true, explore)(x).to_vector<int32_t>() == rows);
  }

  TEST_CASE("interpret options: random_parallel_order reports one output block accumulated across a parallel dim") {
    // Every point of the parallel dim adds into block (0, 0): in row-major order on one core the steps
    // are consecutive and it passes; as chunks of their own, each point writes the block back.
    auto kernel = [](pl::Ref x, pl::Ref o) {
      pl::when(pl::program_id(0) == 0, [&] { o() = pl::zeros_like(o); });
      o() = o() + x();
    };
    auto make = [&](pl::InterpretParams params) {
      return pl::pallas_call(kernel,
                             pl::GridSpec{.grid = {4},
                                          .in_specs = {pl::BlockSpec({1, 4}, [](pl::Value i) { return pl::idx(i, 0); })},
                                          .out_specs = {pl::BlockSpec({1, 4}, [](pl::Value) { return pl::idx(0, 0); })}},
                             pl::ShapeDtype({1, 4}, pl::i32),
                             {.compiler_params = {.dimension_semantics = {pl::parallel}}, .interpret = params});
    };
    const pl::Array x = pl::Array::full({4, 4}, 1, pl::i32);
    CHECK(make(testing::interpret().interpret.value())(x).at<int32_t>({0, 0}) == 4);
    CHECK_THROWS_WITH_AS(make(shuffled(1))(x), doctest::Contains("output 0 is revisited non-consecutively"), RuntimeError);
  }
}
