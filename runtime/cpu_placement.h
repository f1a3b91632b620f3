// Where threads run: the few Linux scheduler calls the thread pool needs to keep a launch's threads on
// different cores (runtime/thread_pool.cpp says when; docs/design.md §5).
//
// Why it is needed: when a pool worker and the thread that launches a kernel end up queued on the same
// core, Linux moves one of them away only after several load-balancing rounds, because both ran a
// moment ago and count as cache-hot; for tens of milliseconds every launch then runs at one core's
// speed while the other core idles (seen on 2-core VMs as a 512^3 matmul at 100 instead of 200
// GFLOP/s for 20-70 launches in a row). Moving the worker explicitly ends that at once.
//
// Runtime layer, no dependencies. Elsewhere than Linux these do nothing.
#pragma once

#include <array>
#include <cstdint>

namespace tessera::rt {

// The core the calling thread is running on now, or -1 when unknown (a few nanoseconds: no syscall).
int current_cpu();

// A thread and the cores it may run on, as they were when it started.
class ThreadPlacement {
 public:
  static ThreadPlacement of_calling_thread();
  // Narrows the thread to its cores except `cpu`, which moves it off `cpu` at once if it is queued
  // there (or decides where it next wakes). Whether it did: false when `cpu` is its only core.
  bool move_off(int cpu) const;
  // Gives the calling thread (which must be this one) its cores back: it stays where it is now.
  void restore() const;

 private:
  int64_t tid_ = 0;
  std::array<uint64_t, 16> cores_{};  // an affinity mask, CPU_SETSIZE bits
};

}  // namespace tessera::rt
