#include <doctest/doctest.h>
#include <fmt/format.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include <sched.h>

#include "runtime/cpu_placement.h"
#include "runtime/debug_print_format.h"
#include "runtime/executable.h"
#include "runtime/launch.h"
#include "runtime/thread_pool.h"

using namespace tessera;
using namespace tessera::rt;
using ir::DimSemantics;

namespace {

// A backend of the test's own: each step i writes output[i] = input[i] + 1, and it remembers which
// core ran which steps. The runtime knows no more of a backend than this.
class AddOne final : public Backend {
 public:
  explicit AddOne(bool checked) : checked_(checked) {}
  bool checked() const override { return checked_; }
  void run_core(CoreContext& core, const OperandMemory& operands, StepRange steps) const override {
    CHECK(operands.buffers.size() == (checked_ ? operands.data.size() : 0));
    const auto* in = static_cast<const float*>(operands.data[0]);
    auto* out = static_cast<float*>(operands.data[1]);
    for (int64_t i = steps.lo; i < steps.hi; ++i) out[i] = in[i] + 1;
    std::lock_guard lock(mutex_);
    ran_.emplace_back(core.point.core, steps);
  }
  std::vector<std::pair<int, StepRange>> ran() const {
    std::lock_guard lock(mutex_);
    return ran_;
  }

 private:
  bool checked_;
  mutable std::mutex mutex_;
  mutable std::vector<std::pair<int, StepRange>> ran_;
};

void describe_add_one(Executable& exe, bool checked) {
  exe.key = LaunchKey{"add_one", std::nullopt, {}};
  exe.operands = {OperandInfo{"input 0", OperandRole::input, DType::f32, {4}, MemorySpace::ANY, {}},
                  OperandInfo{"output 0", OperandRole::output, DType::f32, {4}, MemorySpace::ANY, {}}};
  exe.grid = {4};
  exe.semantics = {DimSemantics::Parallel};
  exe.backend = std::make_unique<AddOne>(checked);
}

}  // namespace

TEST_SUITE("runtime") {
  TEST_CASE("launch: parallel dims are split into contiguous chunks per core") {
    const auto P = DimSemantics::Parallel, A = DimSemantics::Arbitrary;
    auto r = split_steps({4, 3}, {P, A}, 2);
    REQUIRE(r.size() == 2);
    CHECK(r[0].lo == 0);
    CHECK(r[0].hi == 6);
    CHECK(r[1].lo == 6);
    CHECK(r[1].hi == 12);
    // 3 parallel points over 2 cores: ceil(3/2) = 2 points for core 0, 1 for core 1.
    auto u = split_steps({3, 2}, {P, A}, 2);
    CHECK(u[0].hi == 4);
    CHECK(u[1].lo == 4);
    CHECK(u[1].hi == 6);
    // More cores than work: the rest get nothing.
    auto e = split_steps({1, 5}, {P, A}, 4);
    CHECK(e[0].hi == 5);
    CHECK(e[3].lo == e[3].hi);
    // No parallel dims: one core does everything.
    auto s = split_steps({4, 3}, {A, A}, 2);
    CHECK(s[0].hi == 12);
    CHECK(s[1].lo == s[1].hi);
  }

  TEST_CASE("launch: the steps under one parallel point are the product of the non-parallel dims") {
    const auto P = DimSemantics::Parallel, A = DimSemantics::Arbitrary;
    CHECK(steps_per_parallel_point({4, 4, 3}, {P, P, A}) == 3);
    CHECK(steps_per_parallel_point({4, 4, 3}, {P, A, A}) == 12);
    CHECK(steps_per_parallel_point({4, 4}, {P, P}) == 1);
    // Only a prefix is parallel: a parallel dim after an arbitrary one runs with it.
    CHECK(steps_per_parallel_point({2, 3, 5}, {P, A, P}) == 15);
    CHECK(steps_per_parallel_point({2, 3}, {A, A}) == 6);
  }

  TEST_CASE("thread pool: every task runs once, whichever thread claims it, launch after launch") {
    // The caller runs the tasks no worker has claimed when its own is done, so which thread runs
    // which task varies: each still runs exactly once, and the next run finds the workers ready.
    for (int n : {2, 3, 5}) {
      for (int round = 0; round < 50; ++round) {
        std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
        ThreadPool::global().run(n, [&](int i) { ++runs[static_cast<size_t>(i)]; });
        for (int i = 0; i < n; ++i) {
          INFO(n, " tasks, round ", round, ", task ", i);
          CHECK(runs[static_cast<size_t>(i)].load() == 1);
        }
      }
    }
  }

  TEST_CASE("thread pool: a task that waits for another finds it run, whoever claimed either") {
    // Task 1 waits until task 2 has run (a core waiting for a partner's signal). If the caller,
    // done with task 0, claims task 1 and blocks, a worker must still claim task 2.
    for (int round = 0; round < 20; ++round) {
      std::mutex m;
      std::condition_variable cv;
      bool two_ran = false;
      std::atomic<int> finished{0};
      ThreadPool::global().run(3, [&](int i) {
        if (i == 1) {
          std::unique_lock lock(m);
          cv.wait(lock, [&] { return two_ran; });
        } else if (i == 2) {
          {
            std::lock_guard lock(m);
            two_ran = true;
          }
          cv.notify_all();
        }
        ++finished;
      });
      CHECK(finished.load() == 3);
    }
  }

  TEST_CASE("thread pool: a worker found on the launching thread's core runs its task on another") {
    // Linux leaves two busy threads queued on one core for tens of milliseconds (cpu_placement.h):
    // the pool moves such a worker before the launch. Set it up on purpose: the caller and (inside
    // one launch) the worker that claims task 1 are pinned to the caller's core; the next launches
    // must find that worker moved.
    cpu_set_t all;
    CPU_ZERO(&all);
    REQUIRE(sched_getaffinity(0, sizeof all, &all) == 0);
    if (CPU_COUNT(&all) < 2) {
      MESSAGE("one core in this process's affinity: nothing to move to");
      return;
    }
    // The workers exist before the caller is pinned: a thread inherits its creator's cores.
    ThreadPool::global().run(2, [](int) {});
    const int here = sched_getcpu();
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(here, &one);
    REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
    const std::thread::id caller = std::this_thread::get_id();
    // Task 0 waits until task 1 has started, so that a worker, not the caller, runs task 1.
    auto launch = [&](const std::function<void()>& on_worker) {
      std::atomic<bool> started{false};
      bool on_a_worker = false;
      ThreadPool::global().run(2, [&](int i) {
        if (i == 1) {
          on_a_worker = std::this_thread::get_id() != caller;
          if (on_a_worker) on_worker();
          started = true;
        } else {
          while (!started) std::this_thread::yield();
        }
      });
      return on_a_worker;
    };
    bool pinned = false;
    for (int round = 0; round < 20 && !pinned; ++round)
      pinned = launch([&] { REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0); });
    REQUIRE(pinned);
    // Pinned and never moved, the worker could run nowhere else. Moved, it gets its cores back as it
    // claims the task, so on a machine busy with other work the scheduler may occasionally queue it
    // on the caller's core again before the task reads its core: count the rounds, don't require all.
    int on_a_worker = 0, elsewhere = 0;
    for (int round = 0; round < 5; ++round) {
      int cpu = -1;
      if (launch([&] { cpu = sched_getcpu(); })) {
        ++on_a_worker;
        if (cpu != here) ++elsewhere;
      }
    }
    INFO(elsewhere, " of ", on_a_worker, " tasks run by a worker ran off the caller's core");
    CHECK(on_a_worker == 5);  // task 0 spins until task 1 starts: only a worker can run task 1
    CHECK(elsewhere > 0);
    REQUIRE(sched_setaffinity(0, sizeof all, &all) == 0);
  }

  TEST_CASE("thread placement: a thread moved off its core runs elsewhere at once, and restore gives its cores back") {
    cpu_set_t all;
    CPU_ZERO(&all);
    REQUIRE(sched_getaffinity(0, sizeof all, &all) == 0);
    std::optional<ThreadPlacement> placement;
    std::atomic<int> cpu{-1}, stage{0}, after{-1};
    std::thread t([&] {
      placement = ThreadPlacement::of_calling_thread();
      stage = 1;
      while (stage != 2) cpu = sched_getcpu();  // busy: queued or running, never asleep
      after = sched_getcpu();
      placement->restore();
      cpu_set_t now;
      CPU_ZERO(&now);
      sched_getaffinity(0, sizeof now, &now);
      CHECK(CPU_EQUAL(&now, &all));
    });
    while (stage != 1 || cpu < 0) std::this_thread::yield();
    const int from = cpu;
    const bool moved = placement->move_off(from);
    stage = 2;
    t.join();
    CHECK(moved == (CPU_COUNT(&all) >= 2));
    if (moved) CHECK(after.load() != from);
  }

  TEST_CASE("shared ranges: a core's thread takes all of its own range, then the back half of the largest other") {
    // Two cores of 4 parallel points each, 3 steps per point.
    SharedRanges shared({{0, 12}, {12, 24}}, 3);
    const std::optional<SharedRanges::Piece> own = shared.next(0);
    REQUIRE(own);
    CHECK(own->core == 0);
    CHECK(own->steps.lo == 0);
    CHECK(own->steps.hi == 12);
    // Core 1's thread has not started: core 0's thread takes the back half of core 1's range, as
    // core 1, then half of what is left, then the last point.
    std::vector<std::pair<int64_t, int64_t>> stolen;
    while (std::optional<SharedRanges::Piece> p = shared.next(0)) {
      CHECK(p->core == 1);
      stolen.emplace_back(p->steps.lo, p->steps.hi);
    }
    CHECK(stolen == std::vector<std::pair<int64_t, int64_t>>{{18, 24}, {15, 18}, {12, 15}});
    CHECK_FALSE(shared.next(1));  // core 1's thread, late, finds nothing left
  }

  TEST_CASE("shared ranges: every step runs once, pieces are whole parallel points, whoever takes them") {
    // 3 cores over 7, 7 and 5 points of 4 steps; the threads ask in an arbitrary interleaving.
    const int64_t unit = 4;
    const std::vector<SharedRanges::Range> ranges = {{0, 28}, {28, 56}, {56, 76}};
    for (uint64_t order = 0; order < 20; ++order) {
      SharedRanges shared(ranges, unit);
      std::vector<int> runs(76, 0);
      uint64_t pick = order;
      for (;;) {
        const int thread = static_cast<int>(pick % 3);
        pick = pick * 6364136223846793005ull + 1442695040888963407ull;
        std::optional<SharedRanges::Piece> p = shared.next(thread);
        if (!p) break;
        const SharedRanges::Range& whole = ranges[static_cast<size_t>(p->core)];
        CHECK(p->steps.lo >= whole.lo);
        CHECK(p->steps.hi <= whole.hi);
        CHECK(p->steps.lo < p->steps.hi);
        CHECK((p->steps.lo - whole.lo) % unit == 0);
        CHECK((p->steps.hi - whole.lo) % unit == 0);
        for (int64_t s = p->steps.lo; s < p->steps.hi; ++s) ++runs[static_cast<size_t>(s)];
      }
      CHECK(runs == std::vector<int>(76, 1));
    }
  }

  TEST_CASE("launch: unchecked cores share their ranges, each step runs once as the core that owns it") {
    const std::vector<float> values = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    const Array x = Array::from_vector(values, {12});
    for (int threads : {2, 3, 5}) {
      Executable exe;
      describe_add_one(exe, false);
      exe.operands[0].shape = exe.operands[1].shape = {12};
      exe.grid = {6, 2};
      exe.semantics = {DimSemantics::Parallel, DimSemantics::Arbitrary};
      set_num_threads(threads);
      const std::vector<Array> out = launch(exe, std::vector<Array>{x});
      set_num_threads(0);
      std::vector<float> want;
      for (float v : values) want.push_back(v + 1);
      CHECK(out[0].to_vector<float>() == want);
      const std::vector<StepRange> owners = split_steps(exe.grid, exe.semantics, threads);
      int64_t covered = 0;
      for (const auto& [core, steps] : static_cast<const AddOne&>(*exe.backend).ran()) {
        INFO("threads ", threads, ", core ", core, ", steps ", steps.lo, "..", steps.hi);
        CHECK(steps.lo >= owners[static_cast<size_t>(core)].lo);
        CHECK(steps.hi <= owners[static_cast<size_t>(core)].hi);
        CHECK(steps.lo % 2 == 0);  // the arbitrary dim's two steps are never split
        CHECK(steps.hi % 2 == 0);
        covered += steps.hi - steps.lo;
      }
      CHECK(covered == 12);
    }
  }

  TEST_CASE("launch: grid points are row-major, last axis fastest") {
    CHECK(grid_point_of({2, 3, 4}, 0) == std::vector<int64_t>{0, 0, 0});
    CHECK(grid_point_of({2, 3, 4}, 5) == std::vector<int64_t>{0, 1, 1});
    CHECK(grid_point_of({2, 3, 4}, 23) == std::vector<int64_t>{1, 2, 3});
  }

  TEST_CASE("launch: a failing core cancels the others and its error reaches the caller") {
    Launch launch(0);
    std::atomic<int> ran{0};
    CHECK_THROWS_WITH_AS(run_cores(launch, 3,
                                   [&](int core) {
                                     ++ran;
                                     if (core == 1) throw std::runtime_error("core 1 failed");
                                   }),
                         "core 1 failed", std::runtime_error);
    CHECK(ran == 3);
    CHECK(launch.cancelled());
  }

  TEST_CASE("launch: a block written back twice is reported with its first writer") {
    Launch launch(0);
    const std::vector<int64_t> a{0, 128}, b{128, 0};
    const ExecutionPoint first{0, 1, {3, 4}, {}}, second{0, 0, {5, 6}, {}};
    CHECK_FALSE(launch.record_writeback(2, a, first));
    CHECK_FALSE(launch.record_writeback(2, b, first));
    CHECK_FALSE(launch.record_writeback(3, a, first));
    const std::optional<ExecutionPoint> earlier = launch.record_writeback(2, a, second);
    REQUIRE(earlier.has_value());
    CHECK(earlier->core == 1);
    CHECK(earlier->grid_point == std::vector<int64_t>{3, 4});
  }

  TEST_CASE("launch: an executable runs on any backend, its grid split over the backend's cores") {
    const Array x = Array::from_vector(std::vector<float>{1, 2, 3, 4}, {4});
    // A checked backend gets buffers and simulates the cores it asks for.
    Executable checked;
    describe_add_one(checked, true);
    checked.checked.count = 2;
    std::vector<Array> out = launch(checked, std::vector<Array>{x});
    REQUIRE(out.size() == 1);
    CHECK(out[0].to_vector<float>() == std::vector<float>{2, 3, 4, 5});
    CHECK(x.to_vector<float>() == std::vector<float>{1, 2, 3, 4});
    auto ran = static_cast<const AddOne&>(*checked.backend).ran();
    REQUIRE(ran.size() == 2);
    for (const auto& [core, steps] : ran) CHECK(steps.lo == core * 2);
    // An unchecked one gets raw memory; without parallel dims one core runs every step.
    Executable raw;
    describe_add_one(raw, false);
    raw.semantics = {DimSemantics::Arbitrary};
    out = launch(raw, std::vector<Array>{x});
    CHECK(out[0].to_vector<float>() == std::vector<float>{2, 3, 4, 5});
    ran = static_cast<const AddOne&>(*raw.backend).ran();
    REQUIRE(ran.size() == 1);
    CHECK(ran[0].second.hi == 4);
  }

  TEST_CASE("launch: an aliased input is its output's memory, and the caller's array never changes") {
    const Array x = Array::from_vector(std::vector<float>{1, 2, 3, 4}, {4});
    Executable exe;
    describe_add_one(exe, false);
    exe.aliases = {{0, 0}};
    const std::vector<Array> out = launch(exe, std::vector<Array>{x});
    CHECK(out[0].to_vector<float>() == std::vector<float>{2, 3, 4, 5});  // in place: each element read before written
    CHECK(x.to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  }

  TEST_CASE("launch: concurrent bodies may block on each other, and their failures come back") {
    std::mutex mutex;
    std::condition_variable changed;
    int arrived = 0;
    Failures failures(3);
    const uint64_t before = next_failure_sequence();  // earlier tests of this process took some
    run_concurrently(3, true, failures, [&](size_t i) {
      std::unique_lock lock(mutex);
      ++arrived;
      changed.notify_all();
      changed.wait(lock, [&] { return arrived == 3; });  // every body waits for all the others
      if (i == 2) throw std::runtime_error("body 2 failed");
    });
    CHECK(failures.in_order() == std::vector<size_t>{2});
    CHECK(failures.order(2) == static_cast<int64_t>(before) + 1);
    CHECK_FALSE(failures.error(0));
    CHECK_FALSE(failures.error(1));
  }

  TEST_CASE("launch: participants launched together share their operands, and a failure names its participant") {
    // A backend that fails, or writes its participant's number into its element of the shared output.
    class MarkOrFail final : public Backend {
     public:
      explicit MarkOrFail(bool fail) : fail_(fail) {}
      bool checked() const override { return true; }
      void run_core(CoreContext& core, const OperandMemory& operands, StepRange) const override {
        if (fail_) throw RuntimeError("it failed", core.point, {});
        static_cast<float*>(operands.data[1])[core.device->logical] = static_cast<float>(core.device->logical);
      }

     private:
      bool fail_;
    };
    Executable mark, fail;
    describe_add_one(mark, true);
    describe_add_one(fail, true);
    mark.backend = std::make_unique<MarkOrFail>(false);
    fail.backend = std::make_unique<MarkOrFail>(true);
    auto mesh = std::make_shared<const Mesh>(std::vector<int64_t>{4}, std::vector<std::string>{"core"});
    auto participant = [&](const Executable& exe, std::string name, int64_t point) {
      return Participant{&exe, std::move(name), DeviceContext{mesh, point, mesh->coords(point), nullptr, 0, 0}, false};
    };
    const std::vector<Array> x{Array::from_vector(std::vector<float>{1, 2, 3, 4}, {4})};
    std::vector<Participant> all;
    for (int64_t p = 0; p < 4; ++p) all.push_back(participant(mark, fmt::format("marker {}", p), p));
    std::vector<Array> out = launch_together("mpmd_map `t`", all, x);
    CHECK(out.at(0).to_vector<float>() == std::vector<float>{0, 1, 2, 3});
    all[2] = participant(fail, "the failing one", 2);
    CHECK_THROWS_WITH_AS(launch_together("mpmd_map `t`", all, x), doctest::Contains("mpmd_map `t`, the failing one: it failed"),
                         RuntimeError);
  }
}

TEST_SUITE("runtime") {
  TEST_CASE("debug_print format: fields, braces, values after a format without fields, formats IR made otherwise") {
    const rt::DebugPrintFormat parsed = rt::parse_debug_print_format("a {{b}} {} c {}");
    CHECK(parsed.error.empty());
    CHECK(parsed.literals == std::vector<std::string>{"a {b} ", " c ", ""});
    CHECK(rt::parse_debug_print_format("{:>4}").error == "the field `{:>4}` names, indexes, formats or converts its value");
    CHECK(rt::parse_debug_print_format("x }").error == "a lone `}` at offset 2");
    const Array one = Array::scalar(1.0, DType::f32), seven = Array::scalar(7.0, DType::i32);
    CHECK(rt::format_debug_print("x {} y {}", {&one, &seven}) == "x 1.0 y 7");
    CHECK(rt::format_debug_print("x", {&one, &seven}) == "x 1.0 7");
    // The front end rejects such a format; IR built without it prints the text as it is.
    CHECK(rt::format_debug_print("x {0}", {&one}) == "x {0} 1.0");
  }
}
