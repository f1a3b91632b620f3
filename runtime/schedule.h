// A seeded schedule of the threads of one interpreted launch (docs/design.md §4.15): the cores of a
// launch, or every participant (devices x cores) of a launch group, take turns instead of running
// at once, so that the interleaving of cores and devices is the seed's and replays exactly.
//
// Exactly one seat holds the baton and runs; the others are parked. At a scheduling point (a DMA
// start or wait, a semaphore signal or wait, a remote copy or signal, a grid step) the holder hands
// the baton to a runnable seat drawn from the seed, itself included. A seat blocked in a wait is not
// runnable until its condition holds. When no seat is runnable and some wait, nothing can ever make
// progress: the owner is told (it writes its deadlock report) and the waiting seats run again one at
// a time, to fail with it. The first hand-over waits until every seat has arrived or been excused,
// so the threads' start-up timing decides nothing.
//
// Everything a seat does between two hand-overs therefore happens alone, in an order fixed by the
// seed: the same seed gives the same interleaving, the same results and the same failures, bit for
// bit. Free-running launches (no seed schedule asked for) never make one.
//
// Runtime layer.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <random>
#include <vector>

namespace tessera::rt {

class Schedule {
 public:
  // `seats` threads take turns under `mutex`: the owner's (a launch group's, so that waits and the
  // group's state are judged under one lock), held by the caller of the methods that take a lock.
  Schedule(uint64_t seed, int64_t seats, std::mutex& mutex);

  // What the owner does when no seat can run and some wait (under the lock): record why.
  void on_stuck(std::function<void()> stuck) { stuck_ = std::move(stuck); }

  // Seat `s` starts; returns once it holds the baton.
  void arrive(int64_t s);
  // Seat `s` will never arrive (its device stopped, its core has no steps); nothing if it did.
  void excuse(int64_t s);
  void excuse_locked(int64_t s);  // the same, the lock held
  // A scheduling point of the holder `s`: returns once `s` holds the baton again.
  void point(int64_t s);
  // The holder `s` waits until `done()` holds (the lock held by `lock`): other seats run meanwhile.
  // Returns once `s` holds the baton and `done()` holds, or once the schedule is stuck (stuck()).
  void block(std::unique_lock<std::mutex>& lock, int64_t s, const std::function<bool()>& done);
  // Whether no seat could run while some waited: every wait fails from then on.
  bool stuck() const { return stuck_now_; }
  // The holder `s` ends, after `failure` if it failed (the first failure in schedule order is kept).
  void leave(int64_t s, std::exception_ptr failure = nullptr);
  // Returns once every seat left or was excused; then the first failure of a seat, if any.
  std::exception_ptr wait_all_left();
  // The seat whose failure is the first in schedule order, -1 when none failed (once all left).
  int64_t first_failed_seat() const {
    std::lock_guard lock(mutex_);
    return first_failed_seat_;
  }

 private:
  enum class State { expected, arrived, blocked, left, excused };
  struct Seat {
    State state = State::expected;
    const std::function<bool()>* done = nullptr;  // blocked: whether it may go on
  };
  // Hands the baton to a runnable seat drawn from the seed (the lock held); declares the schedule
  // stuck when none is runnable but some wait.
  void pass();
  bool runnable(const Seat& seat) const;
  void wait_turn(std::unique_lock<std::mutex>& lock, int64_t s);

  std::mutex& mutex_;
  std::condition_variable turn_changed_;
  std::mt19937_64 rng_;
  std::vector<Seat> seats_;
  int64_t expected_;            // seats that have neither arrived nor been excused
  int64_t turn_ = -1;           // the seat holding the baton; -1 before the first hand-over
  bool started_ = false;        // the first hand-over happened
  bool stuck_now_ = false;
  std::function<void()> stuck_;
  std::exception_ptr first_failure_;
  int64_t first_failed_seat_ = -1;
};

}  // namespace tessera::rt
