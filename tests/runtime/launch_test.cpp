#include <doctest/doctest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <stdexcept>

#include "runtime/launch.h"
#include "runtime/thread_pool.h"

using namespace tessera;
using namespace tessera::rt;
using ir::DimSemantics;

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

  TEST_CASE("launch: a block written back twice is reported once") {
    Launch launch(0);
    const std::vector<int64_t> a{0, 128}, b{128, 0};
    CHECK(launch.record_writeback(2, a));
    CHECK(launch.record_writeback(2, b));
    CHECK(launch.record_writeback(3, a));
    CHECK_FALSE(launch.record_writeback(2, a));
  }
  TEST_CASE("launch: concurrent bodies may block on each other, and their failures come back") {
    std::mutex mutex;
    std::condition_variable changed;
    int arrived = 0;
    Failures failures(3);
    run_concurrently(3, true, failures, [&](size_t i) {
      std::unique_lock lock(mutex);
      ++arrived;
      changed.notify_all();
      changed.wait(lock, [&] { return arrived == 3; });  // every body waits for all the others
      if (i == 2) throw std::runtime_error("body 2 failed");
    });
    CHECK(failures.first() == 2);
    CHECK(failures.order(2) == 1);
    CHECK_FALSE(failures.error(0));
    CHECK_FALSE(failures.error(1));
  }
}
