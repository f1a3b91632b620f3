// The DMA engine on its own: semaphore accounting, the three ways copies run, deadlock reports and
// the zero-at-release check.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "runtime/dma_engine.h"
#include "runtime/memory.h"

using namespace tessera;
using namespace tessera::rt;
using doctest::Contains;

namespace {

// A copy of `src` into `dst` (n floats) signalling `sem`, that also logs its index when it lands.
DmaEngine::Copy logged_copy(float* dst, const float* src, int64_t n, int64_t* sem, std::vector<int>* log, int index) {
  DmaEngine::Copy c = window_copy(reinterpret_cast<std::byte*>(dst), {1}, reinterpret_cast<const std::byte*>(src), {1},
                                  {n}, sizeof(float), sem);
  auto move = std::move(c.move);
  c.move = [move, log, index] {
    move();
    log->push_back(index);
  };
  return c;
}

}  // namespace

TEST_SUITE("runtime") {
  TEST_CASE("dma engine: eager copies land when started and count their bytes") {
    DmaEngine e;
    int64_t sems[2] = {0, 0};
    e.add_semaphores(sems, 2, DType::dma_sem, "copies", DmaEngine::Lifetime::kernel);
    float src[4] = {1, 2, 3, 4}, dst[4] = {};
    std::vector<int> log;
    e.start(logged_copy(dst, src, 4, &sems[1], &log, 0));
    CHECK(dst[3] == 4.0f);
    CHECK(e.read(&sems[1]) == 16);
    e.wait(&sems[1], 16, true, SourceLoc{});
    CHECK(e.read(&sems[1]) == 0);
    CHECK_NOTHROW(e.release(reinterpret_cast<std::byte*>(sems), reinterpret_cast<std::byte*>(sems + 2), true));
  }

  TEST_CASE("dma engine: on_wait copies land only when waited on, in an order fixed by the seed") {
    auto order = [](uint64_t seed) {
      DmaEngine e;
      e.configure(DmaMode::on_wait, seed);
      int64_t sem = 0;
      e.add_semaphores(&sem, 1, DType::dma_sem, "sem", DmaEngine::Lifetime::kernel);
      float src[8] = {}, dst[8] = {};
      std::vector<int> log;
      for (int i = 0; i < 8; ++i) e.start(logged_copy(dst + i, src + i, 1, &sem, &log, i));
      CHECK(log.empty());  // nothing landed yet
      e.wait(&sem, 8 * 4, true, SourceLoc{});
      CHECK(e.read(&sem) == 0);
      return log;
    };
    const std::vector<int> a = order(1), b = order(1), c = order(2);
    CHECK(a.size() == 8);
    CHECK(a == b);
    CHECK(a != c);  // another seed, another order (these two seeds differ)
    // A wait for fewer bytes completes only as many copies as it needs.
    DmaEngine e;
    e.configure(DmaMode::on_wait, 0);
    int64_t sem = 0;
    float src[2] = {5, 6}, dst[2] = {};
    std::vector<int> log;
    e.start(logged_copy(dst, src, 1, &sem, &log, 0));
    e.start(logged_copy(dst + 1, src + 1, 1, &sem, &log, 1));
    e.wait(&sem, 4, true, SourceLoc{});
    CHECK(log.size() == 1);
    // Freeing the destination completes the rest.
    e.release(reinterpret_cast<std::byte*>(dst), reinterpret_cast<std::byte*>(dst + 2), true);
    CHECK(log.size() == 2);
    CHECK(dst[0] == 5.0f);
    CHECK(dst[1] == 6.0f);
  }

  TEST_CASE("dma engine: a wait nothing can satisfy is a deadlock Fault with the semaphore and the line") {
    for (DmaMode mode : {DmaMode::eager, DmaMode::on_wait, DmaMode::worker}) {
      DmaEngine e;
      e.configure(mode, 0);
      int64_t sems[3] = {0, 0, 0};
      e.add_semaphores(sems, 3, DType::sem, "flags", DmaEngine::Lifetime::kernel);
      e.signal(&sems[2], 1);
      static const std::source_location here = std::source_location::current();
      CHECK_THROWS_WITH_AS(e.wait(&sems[2], 2, false, here),
                           Contains("deadlock: this semaphore_wait can never return: semaphore `flags`[2] holds 1 and the "
                                    "wait needs 2"),
                           Fault);
      CHECK(e.read(&sems[2]) == 1);  // a failed wait takes nothing
    }
  }

  TEST_CASE("dma engine: released semaphores must be zero, named in the message") {
    DmaEngine e;
    int64_t regular = 0, dma[2] = {0, 0};
    e.add_semaphores(&regular, 1, DType::sem, "scratch 0", DmaEngine::Lifetime::kernel);
    e.add_semaphores(dma, 2, DType::dma_sem, "run_scoped 1", DmaEngine::Lifetime::region);
    e.signal(&regular, 3);
    CHECK_THROWS_WITH_AS(e.release(reinterpret_cast<std::byte*>(&regular), reinterpret_cast<std::byte*>(&regular + 1), false),
                         Contains("semaphore `scratch 0` is 3 when the kernel ends"), Fault);
    float src[4] = {}, dst[4] = {};
    e.start(window_copy(reinterpret_cast<std::byte*>(dst), {1}, reinterpret_cast<const std::byte*>(src), {1}, {4}, 4, &dma[1]));
    CHECK_THROWS_WITH_AS(e.release(reinterpret_cast<std::byte*>(dma), reinterpret_cast<std::byte*>(dma + 2), true),
                         Contains("DMA semaphore `run_scoped 1`[1] is 16 when its run_scoped region ends"), Fault);
    CHECK_THROWS_WITH_AS(e.signal(&regular, -1), Contains("a signal adds a non-negative amount"), Fault);
  }

  TEST_CASE("dma engine: at the kernel's end, scratch and run_scoped semaphores must be zero, operands not") {
    DmaEngine e;
    int64_t scratch = 0, region = 0, operand = 0;
    e.add_semaphores(&scratch, 1, DType::sem, "scratch 0", DmaEngine::Lifetime::kernel);
    e.add_semaphores(&region, 1, DType::sem, "run_scoped 0", DmaEngine::Lifetime::region);
    e.add_semaphores(&operand, 1, DType::sem, "input 1", DmaEngine::Lifetime::operand);
    e.signal(&operand, 2);  // a kernel may return counts in its semaphore operands
    e.check_kernel_semaphores();
    e.signal(&region, 1);  // after the region's last end: for a run that never comes
    CHECK_THROWS_WITH_AS(e.check_kernel_semaphores(),
                         Contains("semaphore `run_scoped 0` is 1 when the kernel ends (a remote copy or signal from "
                                  "another device or core reached it after the last run of its run_scoped region"),
                         Fault);
    e.wait(&region, 1, false, std::source_location::current());
    e.signal(&scratch, 1);
    CHECK_THROWS_WITH_AS(e.check_kernel_semaphores(), Contains("semaphore `scratch 0` is 1 when the kernel ends"),
                         Fault);
  }

  TEST_CASE("dma engine: worker copies run beside the caller and a wait blocks until they land") {
    DmaEngine e;
    e.configure(DmaMode::worker, 0);
    int64_t sem = 0;
    e.add_semaphores(&sem, 1, DType::dma_sem, "sem", DmaEngine::Lifetime::kernel);
    std::vector<float> src(1 << 16, 1.5f), dst(1 << 16, 0.0f);
    for (int rep = 0; rep < 20; ++rep) {
      e.start(window_copy(reinterpret_cast<std::byte*>(dst.data()), {1}, reinterpret_cast<const std::byte*>(src.data()), {1},
                          {static_cast<int64_t>(src.size())}, 4, &sem));
      e.wait(&sem, static_cast<int64_t>(src.size()) * 4, true, SourceLoc{});
      CHECK(dst.back() == 1.5f);
      dst.back() = 0.0f;
    }
    // A copy that fails on the worker fails the next wait.
    DmaEngine::Copy bad;
    bad.sem = &sem;
    bad.bytes = 1 << 20;
    bad.move = [] { throw Fault("the copy's window is out of bounds"); };
    e.start(std::move(bad));
    CHECK_THROWS_WITH_AS(e.wait(&sem, 1 << 20, true, SourceLoc{}), Contains("the copy's window is out of bounds"), Fault);
  }

  TEST_CASE("dma engine: in worker mode a copy of 64 KiB or less is done when it starts") {
    DmaEngine e;
    e.configure(DmaMode::worker, 0);
    int64_t sem = 0;
    e.add_semaphores(&sem, 1, DType::dma_sem, "sem", DmaEngine::Lifetime::kernel);
    std::vector<float> src(1 << 14, 2.5f), dst(1 << 14, 0.0f);  // 64 KiB
    e.start(window_copy(reinterpret_cast<std::byte*>(dst.data()), {1}, reinterpret_cast<const std::byte*>(src.data()), {1},
                        {static_cast<int64_t>(src.size())}, 4, &sem));
    CHECK(dst.back() == 2.5f);
    CHECK(e.read(&sem) == int64_t{1} << 16);
    e.wait(&sem, int64_t{1} << 16, true, SourceLoc{});
    // Its failure is the start's, as for an eager copy.
    DmaEngine::Copy bad;
    bad.sem = &sem;
    bad.bytes = 4;
    bad.move = [] { throw Fault("the copy's window is out of bounds"); };
    CHECK_THROWS_WITH_AS(e.start(std::move(bad)), Contains("the copy's window is out of bounds"), Fault);
  }

  TEST_CASE("dma engine: copies move strided windows") {
    // Column 1 of a 3x4 row-major array into a contiguous 3-vector.
    float src[12], dst[3] = {};
    for (int i = 0; i < 12; ++i) src[i] = static_cast<float>(i);
    DmaEngine e;
    int64_t sem = 0;
    e.start(window_copy(reinterpret_cast<std::byte*>(dst), {1}, reinterpret_cast<const std::byte*>(src + 1), {4}, {3}, 4, &sem));
    CHECK(dst[0] == 1.0f);
    CHECK(dst[1] == 5.0f);
    CHECK(dst[2] == 9.0f);
    CHECK(e.read(&sem) == 12);
    CHECK(window_extent(std::vector<int64_t>{3}, std::vector<int64_t>{4}, 4) == 36);
    CHECK(window_extent(std::vector<int64_t>{0, 3}, std::vector<int64_t>{3, 1}, 4) == 0);
  }
}
