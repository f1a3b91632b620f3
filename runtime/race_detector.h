// Exact happens-before race detection for the interpreter (InterpretParams::detect_races,
// docs/design.md §4.17): the actors that run at once, the happens-before edges between them, the
// shadow memory of every buffer, and the reports. One home for the rules; the interpreter, the DMA
// engine and the launcher only call the hooks below.
//
// Actors: every core of a launch (each core of each device, each mpmd_map participant) and every
// copy in flight, from its start to its completion. A core's accesses carry an epoch (core, clock);
// a core's vector clock holds one entry per core actor, without bound. A copy needs no entry of its
// own: its accesses are checked when it starts, against its starter's clock (what happened before
// the start), and it is ordered before an access exactly when some wait that consumed its
// completion is (the copy keeps the epochs of those waits, its "acquirers").
//
// Edges: program order within a core; a copy starts after its core's preceding accesses; a copy's
// completion (its semaphore increment) -> the wait that consumes it; a semaphore signal (local or
// remote, the barrier semaphore's too) -> the wait that consumes it. A semaphore keeps the
// increments not yet taken in order; a wait takes its value from the front, joining the clock of
// every increment it takes from. Memory is named by its owner and region (an operand of a device,
// a core's allocation), so a remote copy's destination names the receiver's memory without
// translating addresses, and the per-region shadow is an interval map of byte ranges, each with the
// last write and the reads since (FastTrack: a read ordered after another replaces it).
//
// Runtime layer. Thread-safe: one lock per detector (the cores of a launch, or every device of a
// collective launch, share one).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "jit/ir/diagnostics.h"
#include "runtime/array.h"
#include "runtime/memory.h"

namespace tessera::rt {

struct CoreContext;

enum class AccessKind : uint8_t { read, write, dma_read, dma_write, remote_write };
// "read", "write", "DMA read", "DMA write", "remote write"
std::string_view access_kind_name(AccessKind kind);

// One access as a race report names it.
struct AccessSite {
  AccessKind kind = AccessKind::read;
  ExecutionPoint point;        // the core that made it; for a copy, the core that started it
  std::string buffer;          // "scratch 0", "output 0"
  std::string region;          // element ranges of the buffer: "[0:8, 0:128]"
  int64_t target_device = -1;  // a remote write: the device whose memory it wrote
  SourceLoc loc;               // the user's line
  // "DMA write of scratch 0[0:8, 0:128] (a copy started by device 0, core 0, grid point (1)) at k.cpp:12"
  std::string str() const;
};

// A race: two accesses to overlapping bytes, at least one a write, that happens-before does not order.
struct RaceReport {
  std::string buffer;
  AccessSite first;   // the access checked first
  AccessSite second;  // the one that found the race
  std::string message;
};

class RaceDetector {
 public:
  // `shared_operands`: every actor's operands are the same memory (an mpmd_map); else each launch
  // group member (device) has its own.
  explicit RaceDetector(bool shared_operands);
  RaceDetector(const RaceDetector&) = delete;
  RaceDetector& operator=(const RaceDetector&) = delete;
  ~RaceDetector();

  // A core starts: `member` is its launch group seat's member (its device; 0 outside a group),
  // `core` its core there. `ctx` resolves its addresses while it runs (its own thread only).
  int add_actor(const CoreContext& ctx, int64_t member, int core);

  // A core reads or writes the window `ref` (only the elements where `mask` is true, when given).
  void access(int actor, AccessKind kind, const RefView& ref, const Array* mask, SourceLoc loc);
  // A copy from `src` to `dst` starts (dma_start, an asynchronous block copy): its reads and writes
  // are checked now. Returns the copy's id for copy_done.
  int64_t start_copy(int actor, const RefView& src, const RefView& dst, SourceLoc loc);
  // A remote copy starts toward `target_member` (`target_device` in messages): `dst`, `recv_sem`
  // name the receiver's memory by their counterparts here. It completes at once toward both
  // semaphores (call before they are raised).
  void start_remote_copy(int actor, const RefView& src, const RefView& dst, const int64_t* send_sem,
                         const int64_t* recv_sem, int64_t target_member, int64_t target_device, SourceLoc loc);
  // Copy `copy` completes toward `sem`, adding `bytes` (call before the semaphore is raised).
  void copy_done(int actor, int64_t copy, const int64_t* sem, int64_t bytes);
  // A signal adding `amount` to `sem` (before it is raised); remote: to the counterpart of `sem` on
  // `target_member`.
  void signal(int actor, const int64_t* sem, int64_t amount);
  void remote_signal(int actor, const int64_t* sem, int64_t amount, int64_t target_member);
  // A wait took `value` from `sem` (after taking it).
  void wait(int actor, const int64_t* sem, int64_t value);
  // `sem` came into the launch holding `amount` (a semaphore input, docs/design.md §4.17): counts
  // older than every increment of this launch, ordering nothing (what raised them belongs to an
  // earlier launch, whose accesses this detector never compares). Counted once, whichever core
  // reports it first.
  void initial_count(int actor, const int64_t* sem, int64_t amount);

  // The races found so far, one per pair of access sites and buffer.
  std::vector<RaceReport> reports() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The windows a block copy between `array` and the block buffer `block` (at element `starts` of the
// array, one per dim, placed by `window`) moves: the box of the block's window in the array, and the
// same elements of the block. Empty windows when the window is invalid (the copy faults).
std::pair<RefView, RefView> block_copy_windows(const RefView& array, const RefView& block, std::span<const int64_t> starts,
                                               const BlockWindow& window = {});

// The races of a shard_map's launches: the detector each collective launch shares between its
// devices (by the launch's sequence number in the shard_map), and every report of the shard_map's
// launches, for the thread that called it.
class RaceRegistry {
 public:
  std::shared_ptr<RaceDetector> collective(int64_t sequence);
  void collect(const std::vector<RaceReport>& reports);
  std::vector<RaceReport> collected() const;

 private:
  mutable std::mutex mutex_;
  std::map<int64_t, std::shared_ptr<RaceDetector>> detectors_;
  std::vector<RaceReport> reports_;
};

// The races the last call on this thread found (rt::launch, launch_together, run_on_devices set it;
// empty when the call did not detect races).
const std::vector<RaceReport>& last_race_reports();
void set_last_race_reports(std::vector<RaceReport> reports);

}  // namespace tessera::rt
