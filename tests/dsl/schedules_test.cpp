// Schedule exploration across cores and devices (docs/design.md §4.15): under a seed, the threads of
// an interpreted launch group take turns at DMA and semaphore points in the seed's order, so an
// ordering bug between devices or cores is found by exploring seeds and replays exactly.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <numeric>
#include <regex>
#include <set>

#include "examples/collective_matmul.h"
#include "examples/double_buffering.h"
#include "examples/seed_distributed.h"
#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;

namespace {

constexpr int64_t kRows = 8, kCols = 128;

pl::InterpretParams seeded(uint64_t seed, int64_t schedules) {
  return pl::InterpretParams{
      .dma_execution_mode = pl::DmaExecutionMode::on_wait, .random_seed = seed, .num_schedules = schedules};
}

// The seed a schedule-exploration error names first: the schedule that failed.
uint64_t failing_seed(const std::string& message) {
  std::smatch m;
  REQUIRE(std::regex_search(message, m, std::regex("random_seed=([0-9]+)")));
  return std::stoull(m[1].str());
}

// `kernel` on a mesh of two devices, each with its half of `x`'s rows in HBM, its output a block of
// the same shape, and `scratch`; the devices' outputs gathered.
template <class Kernel>
pl::Array on_two_devices(Kernel kernel, std::vector<pl::ScratchShape> scratch, const pl::Array& x, const pl::CallOptions& options) {
  auto f = pl::shard_map(
      [&](const pl::Array& block) {
        return pl::pallas_call(kernel,
                               pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                                            .out_specs = {pl::BlockSpec(pl::ANY)},
                                            .scratch_shapes = scratch},
                               pl::ShapeDtype(block.shape(), block.dtype()), options)(block);
      },
      pl::Mesh({2}, {"x"}), {pl::P("x")}, {pl::P("x")});
  return f(x).gather();
}

// Two devices put different rows into device 0's output without ordering them: device 0 copies its
// own block there (a local copy), device 1 a remote copy of its block. Which one lands last depends
// on how the devices interleave. Both wait for what they started, so no schedule fails; only the
// result of device 0 depends on the schedule. With `ordered`, device 1 sends only after device 0
// signalled that its own copy is done, so device 1's rows always win.
pl::Array unordered_puts(const pl::Array& x, const pl::CallOptions& options, bool ordered = false) {
  auto kernel = [ordered](pl::Ref in, pl::Ref out, pl::Ref local, pl::Ref send, pl::Ref recv, pl::Ref done) {
    const pl::Value me = pl::axis_index("x");
    auto own = pl::make_async_copy(in, out, local);
    pl::when(me == 0, [&] {
      own.start();
      own.wait();
      if (ordered) pl::semaphore_signal(done, 1, pl::DeviceId({{"x", 1}}));
      pl::make_async_copy(in, out, recv).wait();  // device 1's rows arrived
    });
    pl::when(me == 1, [&] {
      own.start();
      own.wait();
      if (ordered) pl::semaphore_wait(done, 1);
      auto put = pl::make_async_remote_copy(in, out, send, recv, pl::DeviceId({{"x", 0}}));
      put.start();
      put.wait_send();
    });
  };
  return on_two_devices(kernel, {pl::SemaphoreType::DMA, pl::SemaphoreType::DMA, pl::SemaphoreType::DMA, pl::SemaphoreType::REGULAR},
                        x, options);
}

// Both devices copy their own rows into their output and send them into the other's, unordered:
// under some schedules each device's output ends with the other's rows, under others with its own.
pl::Array crossed_puts(const pl::Array& x, const pl::CallOptions& options) {
  auto kernel = [](pl::Ref in, pl::Ref out, pl::Ref local, pl::Ref send, pl::Ref recv) {
    const pl::Value other = 1 - pl::axis_index("x");
    auto own = pl::make_async_copy(in, out, local);
    auto put = pl::make_async_remote_copy(in, out, send, recv, pl::DeviceId({{"x", other}}));
    own.start();
    put.start();
    own.wait();
    put.wait_send();
    put.wait_recv();
  };
  return on_two_devices(kernel, {pl::SemaphoreType::DMA, pl::SemaphoreType::DMA, pl::SemaphoreType::DMA}, x, options);
}

// Device 1 signals device 0, which takes the signal only if it has already arrived when it looks
// (semaphore_read): a missing wait. When device 0 looks too early, the signal lands after it
// stopped waiting (the semaphore is left non-zero) or after its kernel ended (the signal has no
// target): an error under some schedules only.
pl::Array racy_signal(const pl::CallOptions& options) {
  const pl::Mesh mesh({2}, {"x"});
  auto kernel = [](pl::Ref o, pl::Ref sem) {
    const pl::Value me = pl::axis_index("x");
    pl::when(me == 1, [&] { pl::semaphore_signal(sem, 1, pl::DeviceId({{"x", 0}})); });
    pl::when(me == 0, [&] {
      pl::when(pl::semaphore_read(sem) > 0, [&] { pl::semaphore_wait(sem, 1); });
    });
    o() = pl::zeros_like(o);
  };
  auto f = pl::shard_map(
      [&](const pl::Array&) {
        return pl::pallas_call(kernel, pl::GridSpec{.scratch_shapes = {pl::SemaphoreType::REGULAR}},
                               pl::ShapeDtype({8}, pl::f32), options)();
      },
      mesh, {pl::P("x")}, {pl::P("x")});
  return f(pl::Array::zeros({2, 2}, pl::f32)).gather();
}

std::string error_of(const std::function<void()>& run) { return testing::runtime_error_of(run); }

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("schedules: unordered remote and local copies into one buffer are found and replayed exactly") {
    const pl::Array x = testing::ramp(2 * kRows, kCols);
    // Exploration finds a schedule whose result differs from the first one's, and names its seed.
    const std::string m = error_of([&] { unordered_puts(x, testing::interpret(seeded(0, 16))); });
    CHECK(m.find("output 0 depends on the schedule") != std::string::npos);
    CHECK(m.find("interleaving of cores and devices") != std::string::npos);
    CHECK(m.find(".random_seed = ") != std::string::npos);
    const uint64_t k = failing_seed(m);
    CHECK(k > 0);
    // Replaying that seed gives the same result every time, and not the first schedule's.
    const pl::Array first = unordered_puts(x, testing::interpret(seeded(0, 1)));
    const pl::Array again = unordered_puts(x, testing::interpret(seeded(k, 1)));
    const pl::Array third = unordered_puts(x, testing::interpret(seeded(k, 1)));
    CHECK(again.to_vector<float>() == third.to_vector<float>());
    CHECK(again.to_vector<float>() != first.to_vector<float>());
    // Each result is one of the two blocks, whole: device 0's rows or device 1's.
    const std::vector<float> rows0 = pl::dynamic_slice(first, {0, 0}, {kRows, kCols}).to_vector<float>();
    const std::vector<float> rows1 = pl::dynamic_slice(again, {0, 0}, {kRows, kCols}).to_vector<float>();
    const std::set<std::vector<float>> blocks = {pl::dynamic_slice(x, {0, 0}, {kRows, kCols}).to_vector<float>(),
                                                 pl::dynamic_slice(x, {kRows, 0}, {kRows, kCols}).to_vector<float>()};
    CHECK(blocks.count(rows0) == 1);
    CHECK(blocks.count(rows1) == 1);
    // Ordered by a signal, every schedule agrees: device 1's rows win.
    const pl::Array ordered = unordered_puts(x, testing::interpret(seeded(0, 16)), /*ordered=*/true);
    CHECK(pl::dynamic_slice(ordered, {0, 0}, {kRows, kCols}).to_vector<float>() ==
          pl::dynamic_slice(x, {kRows, 0}, {kRows, kCols}).to_vector<float>());
  }

  TEST_CASE("schedules: when every device's output depends on the schedule, the first device's report is the error") {
    // Both devices find their outputs differ after the same collective launch: neither finding is a
    // consequence of the other, so the first device's is the error (the other's a note), whichever
    // device's thread got there first, and a replay gives the same text every time.
    const pl::Array x = testing::ramp(2 * kRows, kCols);
    std::set<std::string> errors;
    for (int run = 0; run < 200; ++run) errors.insert(error_of([&] { crossed_puts(x, testing::interpret(seeded(0, 16))); }));
    REQUIRE(errors.size() == 1);
    const std::string& m = *errors.begin();
    CHECK(m.find("output 0 depends on the schedule") != std::string::npos);
    CHECK(m.find("device 0") != std::string::npos);
    CHECK(m.find("note:") != std::string::npos);
    CHECK(m.find("note:  device 1") != std::string::npos);
  }

  TEST_CASE("schedules: a missing wait between devices fails under some seeds, and a seed replays its error bit for bit") {
    // Some schedules fail, some do not: the seeds tell which, the same way every time.
    std::vector<std::string> outcomes;
    for (uint64_t seed = 0; seed < 8; ++seed) {
      try {
        racy_signal(testing::interpret(seeded(seed, 1)));
        outcomes.push_back("ok");
      } catch (const RuntimeError& e) {
        outcomes.push_back(e.what());
      }
    }
    CHECK(std::count(outcomes.begin(), outcomes.end(), "ok") > 0);
    CHECK(std::count(outcomes.begin(), outcomes.end(), "ok") < 8);
    // Exploration reports the first failing seed; replaying it twice gives the same error text.
    const std::string explored = error_of([&] { racy_signal(testing::interpret(seeded(0, 8))); });
    CHECK(explored.find("schedule: random_seed=") != std::string::npos);
    const uint64_t k = failing_seed(explored);
    CHECK(outcomes.at(k) != "ok");
    const std::string once = error_of([&] { racy_signal(testing::interpret(seeded(k, 1))); });
    const std::string twice = error_of([&] { racy_signal(testing::interpret(seeded(k, 1))); });
    CHECK(once == twice);
    CHECK(once == outcomes.at(k));
    // What goes wrong is the signal arriving unawaited: left over when the kernel ends, or too late.
    const bool left_over = once.find("semaphore `scratch 0` is 1 when the kernel ends") != std::string::npos;
    const bool too_late = once.find("has already ended") != std::string::npos;
    CHECK((left_over || too_late));
  }

  TEST_CASE("schedules: a deadlock across devices under a seed is the usual report, the same every time") {
    // Device 0 waits for two signals, device 1 sends one.
    const pl::Mesh mesh({2}, {"x"});
    auto kernel = [](pl::Ref o, pl::Ref sem) {
      pl::when(pl::axis_index("x") == 1, [&] { pl::semaphore_signal(sem, 1, pl::DeviceId({{"x", 0}})); });
      pl::when(pl::axis_index("x") == 0, [&] { pl::semaphore_wait(sem, 2); });
      o() = pl::zeros_like(o);
    };
    auto run = [&](uint64_t seed, int64_t schedules) {
      return error_of([&] {
        pl::shard_map(
            [&](const pl::Array&) {
              return pl::pallas_call(kernel, pl::GridSpec{.scratch_shapes = {pl::SemaphoreType::REGULAR}},
                                     pl::ShapeDtype({8}, pl::f32), testing::interpret(seeded(seed, schedules)))();
            },
            mesh, {pl::P("x")}, {pl::P("x")})(pl::Array::zeros({2, 2}, pl::f32));
      });
    };
    const std::string m = run(3, 4);
    CHECK(m.find("deadlock: nothing can make progress in collective kernel `kernel`") != std::string::npos);
    CHECK(m.find("device 0 (x=0): semaphore_wait on semaphore `scratch 0`") != std::string::npos);
    CHECK(m.find("holds 1 of 2") != std::string::npos);  // the value when nothing could run any more
    CHECK(m.find("device 1 (x=1): finished the kernel") != std::string::npos);
    CHECK(m.find("schedule: random_seed=3 (1 of 4 explored)") != std::string::npos);
    CHECK(run(5, 1) == run(5, 1));
  }

  TEST_CASE("schedules: two cores copying into the same output block are found and replayed") {
    // A grid of two parallel steps on two simulated cores; each step copies its input block into
    // the same output rows (a missing index in the output's window), so the last writer wins.
    auto call = [](const pl::CallOptions& options, bool own_rows) {
      pl::CallOptions o = options;
      o.compiler_params.dimension_semantics = {pl::parallel};
      o.interpret->num_cores_or_threads = 2;
      return pl::pallas_call(
          [own_rows](pl::Ref x, pl::Ref out, pl::Ref sem) {
            const pl::Value i = pl::program_id(0);
            pl::async_copy(x.at(pl::ds(i * kRows, kRows)), out.at(pl::ds(own_rows ? i * kRows : i * 0, kRows)), sem).wait();
          },
          pl::GridSpec{.grid = {2},
                       .in_specs = {pl::BlockSpec(pl::ANY)},
                       .out_specs = {pl::BlockSpec(pl::ANY)},
                       .scratch_shapes = {pl::SemaphoreType::DMA}},
          pl::ShapeDtype({2 * kRows, kCols}, pl::f32), o);
    };
    const pl::Array x = testing::ramp(2 * kRows, kCols);
    const std::string m = error_of([&] { call(testing::interpret(seeded(0, 16)), false)(x); });
    CHECK(m.find("output 0 depends on the schedule") != std::string::npos);
    const uint64_t k = failing_seed(m);
    const std::vector<float> a = pl::dynamic_slice(call(testing::interpret(seeded(k, 1)), false)(x), {0, 0}, {kRows, kCols}).to_vector<float>();
    const std::vector<float> b = pl::dynamic_slice(call(testing::interpret(seeded(k, 1)), false)(x), {0, 0}, {kRows, kCols}).to_vector<float>();
    const std::vector<float> first = pl::dynamic_slice(call(testing::interpret(seeded(0, 1)), false)(x), {0, 0}, {kRows, kCols}).to_vector<float>();
    CHECK(a == b);
    CHECK(a != first);
    // Each step writing its own rows: every schedule agrees, and the output is the input.
    CHECK(call(testing::interpret(seeded(0, 16)), true)(x).to_vector<float>() == x.to_vector<float>());
  }

  TEST_CASE("schedules: core_map cores ordered by a shared semaphore agree under every seed, unordered ones do not") {
    // Core 0 moves the second half of the rows into the first; core 1 copies the first half into the
    // second. With `ordered`, core 1 waits until core 0 signalled; without, it may read either.
    auto call = [](uint64_t seed, bool ordered) {
      return testing::core_handoff(testing::ramp(2 * kRows, kCols), kRows, testing::interpret(seeded(seed, 1)), ordered)
          .to_vector<float>();
    };
    const pl::Array x = testing::ramp(2 * kRows, kCols);
    const std::vector<float> second = pl::dynamic_slice(x, {kRows, 0}, {kRows, kCols}).to_vector<float>();
    std::vector<float> expected = second;
    expected.insert(expected.end(), second.begin(), second.end());
    std::set<std::vector<float>> unordered;
    for (uint64_t seed = 0; seed < 12; ++seed) {
      CHECK(call(seed, true) == expected);
      unordered.insert(call(seed, false));
      CHECK(call(seed, false) == call(seed, false));  // a seed replays
    }
    CHECK(unordered.size() == 2);
  }

  TEST_CASE("schedules: race-free collectives and pipelines give the same result under every schedule") {
    const pl::CallOptions free_running = testing::interpret(pl::InterpretParams{});
    const pl::CallOptions explore = testing::interpret(seeded(11, 4));
    // The seed's ring all-gathers (one-way and bidirectional) on a ring of 4.
    {
      const pl::Mesh mesh({4}, {"x"});
      const pl::Array x = testing::ramp(4 * kRows, kCols);
      for (bool bidirectional : {false, true}) {
        auto gather = [&](const pl::CallOptions& o) {
          return pl::shard_map([&](const pl::Array& b) { return seed::make_ag(b, bidirectional, o); }, mesh, {pl::P("x")},
                               {pl::P()})(x).gather();
        };
        CHECK(gather(explore).to_vector<float>() == gather(free_running).to_vector<float>());
      }
    }
    // The seed's fused all-gather + matmul on 2x2 (remote copies between transposed devices).
    {
      const pl::Mesh mesh({2, 2}, {"x", "y"});
      const pl::Array inputs = pl::Array::random_normal({256, 256}, pl::f32, 1);
      const pl::Array weights = pl::Array::random_normal({256, 128}, pl::f32, 2);
      auto fused = [&](const pl::CallOptions& o) {
        return pl::shard_map([&](const pl::Array& in, const pl::Array& w) { return seed::fused_ag_gemm(in, w, o); }, mesh,
                             {pl::P("x", "y"), pl::P("x", pl::None)}, {pl::P("x", "y")})(inputs, weights).gather();
      };
      CHECK(pl::allclose(fused(explore), fused(free_running), 0, 0));
    }
    // Example 9's bidirectional collective matmul (collective_id, capacity semaphores), ring of 4.
    {
      const int64_t ring_len = 4, size = 16;
      const pl::Mesh mesh({1, ring_len}, {"ring", "i"});
      const pl::Array lhs = pl::Array::random_normal({size, ring_len * size}, pl::bf16, 3);
      const pl::Array rhs = pl::Array::random_normal({ring_len * size, ring_len * 8}, pl::bf16, 4);
      std::vector<int32_t> ids(static_cast<size_t>(ring_len));
      std::iota(ids.begin(), ids.end(), 0);
      const pl::Array rings = pl::Array::from_vector(ids, {1, ring_len});
      const pl::Array positions = pl::Array::from_vector(ids, {ring_len});
      auto matmul = [&](const pl::CallOptions& o) {
        return pl::shard_map(
            [&](const pl::Array& l, const pl::Array& r) {
              return seed::collective_matmul(l, r, ring_len, 2, rings, positions, o);
            },
            mesh, {pl::P("ring", "i"), pl::P(pl::None, "i")}, {pl::P("ring", "i")})(lhs, rhs).gather();
      };
      CHECK(pl::allclose(matmul(explore), matmul(free_running), 0, 0));
    }
    // The manual double-buffered copy loop (example 6).
    {
      constexpr int64_t kChunks = 6;
      auto sum = [&](pl::CallOptions o) {
        return pl::pallas_call(
            examples::double_buffered_sum,
            pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                         .scratch_shapes = {pl::VMEM({2, kRows, kCols}, pl::f32), pl::SemaphoreType::DMA({2})}},
            pl::ShapeDtype({kRows, kCols}, pl::f32), o)(testing::ramp(kChunks * kRows, kCols));
      };
      CHECK(sum(explore).to_vector<float>() == sum(free_running).to_vector<float>());
    }
  }
}
