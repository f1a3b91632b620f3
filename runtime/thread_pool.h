// The threads of launches: the pool that runs a launch's cores, whose parallel grid dims are split
// over its workers (docs/design.md §5; as many threads as cores by default, pl::set_num_threads(n) or
// TESSERA_NUM_THREADS change it; workers sleep on a condition variable between launches), and
// threads of their own for bodies that may block on each other (mpmd_map participants, shard_map
// devices).
//
// Runtime layer; runtime/launch.cpp is the only user. No other layer starts threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "runtime/cpu_placement.h"
#include "runtime/settings.h"  // num_threads, set_num_threads

namespace tessera::rt {

class ThreadPool {
 public:
  static ThreadPool& global();
  ~ThreadPool();

  // Runs fn(i) for i in [0, n): i = 0 on the calling thread, the others on workers, and returns when
  // all are done. When the pool is already busy (a launch from inside a launch), the extra tasks
  // get threads of their own, so nothing waits for itself. The caller, its own task done, runs the
  // tasks no worker has started yet too: a launch never waits for a worker to wake only to find
  // nothing left (a body that blocks on another still finds it run: n threads for n tasks).
  void run(int n, const std::function<void(int)>& fn);

  // How long a worker that finished its task, and a caller whose own task is done, poll before
  // sleeping on the condition variable: launches in a loop (a 512^3 matmul on 2 threads is about a
  // millisecond) find the workers still polling rather than asleep on an idle core that has to be
  // woken first. Polling yields the core on every round, so a loaded machine loses little to it.
  static constexpr int64_t kPollMicroseconds = 300;

 private:
  // What a launch knows of a worker: where it last polled, so that a worker queued on the launching
  // thread's core is moved off it before the launch (cpu_placement.h says why), and whether it was.
  struct Seat {
    ThreadPlacement placement;
    std::atomic<int> cpu{-1};
    std::atomic<bool> moved{false};
  };

  ThreadPool() = default;
  void worker_loop(Seat& seat);
  void grow(int workers);
  void spread_from(int cpu, int workers);

  std::mutex run_mutex_;  // one launch at a time uses the workers
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  std::vector<std::unique_ptr<Seat>> seats_;  // seats_[i] is workers_[i]'s; stable addresses
  const std::function<void(int)>* task_ = nullptr;
  int next_ = 0, end_ = 0;
  // Written under mutex_; atomic so that polling threads may read them without it.
  std::atomic<int> pending_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
};

// The parallel work of one launch shared by the threads that run it. Each core owns a range of grid
// steps (split_steps: whole parallel points, contiguous); the thread of core c first takes all that
// is left of core c's range, then helps the others: it takes the back half of the range with the
// most left, in whole parallel points (`unit` steps each, counted from the range's start), and runs
// it as that core. So the points a core's range holds never change and every point's arbitrary
// steps run together, in order, on one thread (docs/design.md §4.11); only a range's tail may be
// run by a thread that found its own work done — the work of a worker that starts late (a loaded
// machine, a core slow to wake) does not wait for it.
class SharedRanges {
 public:
  struct Range {
    int64_t lo = 0, hi = 0;
  };
  struct Piece {
    int core;  // whose range it is cut from: the core it runs as
    Range steps;
  };
  SharedRanges(std::vector<Range> ranges, int64_t unit);
  // The next piece for the thread of core `self`, or nothing when no work is left.
  std::optional<Piece> next(int self);

 private:
  std::mutex mutex_;
  std::vector<Range> left_;  // what nobody has taken yet of each core's range: a prefix of it
  int64_t unit_;
};

// The failures of bodies that ran at the same time, in the order they happened: the first is
// usually the cause, later ones (the others left waiting for it) consequences.
class Failures {
 public:
  explicit Failures(size_t n) : errors_(n), order_(n, 0) {}
  // What body i threw (each body records at most once, from its own thread).
  void record(size_t i, std::exception_ptr e);
  size_t size() const { return errors_.size(); }
  const std::exception_ptr& error(size_t i) const { return errors_[i]; }
  // When body i's failure happened, 0 when it did not fail: a RuntimeError's sequence() (taken
  // in the kernel as it failed, not when the exception reached its body's end), else the time of
  // record. Larger is later.
  int64_t order(size_t i) const { return order_[i]; }
  // The bodies that failed, first first.
  std::vector<size_t> in_order() const;

 private:
  std::vector<std::exception_ptr> errors_;
  std::vector<int64_t> order_;
};

// Runs body(i) for i in [0, n) at the same time, each on a thread of its own (i = 0 on the caller's
// when `caller_runs_first`), and returns when all are done. The bodies may block on each other,
// which tasks of the pool must not. What a body throws is recorded in `failures`.
void run_concurrently(size_t n, bool caller_runs_first, Failures& failures, const std::function<void(size_t)>& body);

}  // namespace tessera::rt
