// A core's semaphores and the copies (DMAs) that signal them (docs/design.md §4.8-9).
//
// A semaphore is a counter in memory (int64, zero when allocated). A DMA semaphore counts bytes: a
// copy adds its byte count when it is done, and a wait for n bytes returns once the semaphore holds
// n and subtracts them. A regular semaphore counts signals. Every semaphore must be back at zero when
// the region that allocated it ends (for scratch: when the kernel ends).
//
// When a copy happens depends on the mode, which is what lets the interpreter find missing waits:
//   eager    the copy happens when it starts;
//   on_wait  the copy happens only when somebody waits on its semaphore (or its memory is freed),
//            the waiting ones in a seeded random order, so reading a destination before waiting
//            shows stale or poisoned data;
//   worker   the copy happens on a DMA worker thread, concurrently with the kernel (a copy of
//            64 KiB or less happens when it starts: handing it over costs more than it saves).
// A wait that nothing can satisfy (its value is short and no copy toward it is pending) is a
// deadlock: on one device nothing else can signal a core's semaphores, so it fails at once with a
// report instead of hanging.
//
// Runtime layer. Both backends call it: the interpreter directly, compiled kernels through the ABI.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jit/ir/diagnostics.h"
#include "jit/ir/dtype.h"
#include "runtime/settings.h"

namespace tessera::rt {

class LaunchGroup;
class RaceDetector;
class Schedule;

enum class DmaMode : uint8_t { eager, on_wait, worker };

class DmaEngine {
 public:
  // One copy: `move` moves the data (it may throw Fault); afterwards `bytes` are added to *sem. It
  // reads [src_lo, src_hi) and writes [dst_lo, dst_hi): freeing memory first completes the copies
  // touching it.
  struct Copy {
    std::function<void()> move;
    int64_t* sem = nullptr;
    int64_t bytes = 0;
    const std::byte* src_lo = nullptr;
    const std::byte* src_hi = nullptr;
    const std::byte* dst_lo = nullptr;
    const std::byte* dst_hi = nullptr;
    int64_t race = -1;  // its id in the race detector, when races are detected
    bool touches(const std::byte* lo, const std::byte* hi) const;
  };

  DmaEngine();
  DmaEngine(const DmaEngine&) = delete;
  DmaEngine& operator=(const DmaEngine&) = delete;
  ~DmaEngine();  // stop()s

  // Set before the kernel starts.
  void configure(DmaMode mode, uint64_t seed);
  // The device and core the engine serves (for messages and timelines).
  void identify(int64_t device, int core) {
    device_ = device;
    core_ = core;
  }
  DmaMode mode() const { return mode_; }
  // Race detection (runtime/race_detector.h): completions, signals and waits are reported to
  // `races` as those of `actor`.
  void watch_races(RaceDetector* races, int actor) {
    races_ = races;
    race_actor_ = actor;
  }
  // In a launch group (a collective launch, an mpmd_map) as `core` of `member`: waits block in the
  // group (other participants may signal), which reports deadlocks across them, and a completed
  // copy or a signal wakes the group's waiters. Copies run eagerly or on_wait, not on the worker.
  void join(LaunchGroup* group, int64_t member, int core);
  // Under a seed schedule (runtime/schedule.h) as seat `seat`: starts, signals and waits are
  // scheduling points, where another thread of the launch may take the turn.
  void schedule(Schedule* schedule, int64_t seat) {
    schedule_ = schedule;
    schedule_seat_ = seat;
  }
  // A scheduling point of the core (nothing when it runs free): the others may run first.
  void yield_point() {
    if (schedule_) schedule_point();
  }

  // How long named semaphores must stay at zero: an operand's are the caller's (a kernel may return
  // counts); scratch's until the kernel ends; a run_scoped region's at each end of the region, and
  // from its last end to the kernel's (a copy may arrive for its next run, never after the last).
  enum class Lifetime { operand, kernel, region };
  // Names `count` semaphores at `base` for messages, as they are allocated.
  void add_semaphores(const int64_t* base, int64_t count, DType kind, std::string name, Lifetime lifetime);

  void start(Copy copy);
  void signal(int64_t* sem, int64_t inc);
  // Waits until *sem >= value, then subtracts value. `dma`: a copy's wait, counting bytes.
  void wait(int64_t* sem, int64_t value, bool dma, SourceLoc loc);
  int64_t read(const int64_t* sem);

  // The end of the region that allocated [lo, hi): completes the copies touching it; semaphores in
  // it must be zero (else a Fault names the first that is not). `forget`: the memory is being freed.
  void release(const std::byte* lo, const std::byte* hi, bool forget);

  // The scratch and run_scoped semaphores once more, after the kernel's end: a Fault naming the first
  // that is not zero. In a launch group another participant's copy or signal may have landed there
  // after release() checked them (LaunchGroup::end).
  void check_kernel_semaphores() const;

  // Completes every copy started and not done (on_wait), e.g. when the kernel ends normally and its
  // copies target memory that outlives it.
  void flush();

  // After a failure: waits for the copies running on the worker and drops the pending ones.
  void stop();

  // "DMA semaphore `scratch 1`[3]"
  std::string describe(const int64_t* sem) const;

 private:
  struct Named {
    const int64_t* base;
    int64_t count;
    DType kind;
    std::string name;
    Lifetime lifetime;
  };
  struct Shared;  // what the worker thread touches; made when the worker mode is used
  friend class DmaWorker;

  const Named* find(const int64_t* sem) const;
  // The message for the first of `n`'s semaphores that is not zero, if any, checked `when`; `late`
  // is added after it.
  std::optional<std::string> nonzero(const Named& n, std::string_view when, std::string_view late) const;
  void apply(Copy& copy);  // moves the data and signals, on the calling thread
  void signalled();        // a semaphore went up: wakes the group's waiters
  void schedule_point();
  // Subtracts `value` from *sem if it holds that much; other cores may take from it at the same time.
  static bool take(int64_t* sem, int64_t value);
  bool take_and_acquire(int64_t* sem, int64_t value);  // take, and tell the race detector what was taken
  void drain_worker();     // waits until the worker finished this core's copies; rethrows their failure
  [[noreturn]] void deadlock(const int64_t* sem, int64_t value, int64_t have, bool dma, SourceLoc loc) const;

  DmaMode mode_ = DmaMode::eager;
  LaunchGroup* group_ = nullptr;
  int64_t member_ = 0;  // the seat in the group
  int seat_core_ = 0;
  int64_t device_ = 0;  // for messages and timelines
  int core_ = 0;
  uint64_t seed_ = 0;
  uint64_t draws_ = 0;         // random choices made so far (on_wait)
  std::vector<Named> named_;
  std::vector<Copy> pending_;  // on_wait: started, not done
  std::unique_ptr<Shared> shared_;
  RaceDetector* races_ = nullptr;
  int race_actor_ = -1;
  Schedule* schedule_ = nullptr;
  int64_t schedule_seat_ = 0;
};

// A copy of the box `shape` (elements of `es` bytes) between two strided windows (strides in
// elements), signalling `sem` with its byte count: what dma_start does.
DmaEngine::Copy window_copy(std::byte* dst, std::vector<int64_t> dst_strides, const std::byte* src,
                            std::vector<int64_t> src_strides, std::vector<int64_t> shape, int64_t es, int64_t* sem);

// DmaExecution, set_dma_execution and dma_execution() are in runtime/settings.h.
// Whether a launch whose grid keeps `active_cores` cores busy runs its copies on the worker.
bool use_dma_worker(int active_cores);

}  // namespace tessera::rt
