// The transport between the participants of a launch group (docs/design.md §4c): how a remote copy
// and a remote signal reach the target, how a blocked participant waits for something to change, and
// whether anybody anywhere can still signal it. This is the one place that knows whether devices share
// memory.
//
//   threads  (the default) every device of the mesh is a thread of this process: a remote copy writes
//            the target's memory directly, under the group's lock, once the target is ready;
//   MPI      (runtime/mpi_transport.h, built with TESSERA_MPI, chosen by pl::distributed::initialize)
//            each process runs only its own devices; copies and signals travel as one-sided puts.
//
// Addresses do not cross address spaces: the sender names its destination by memory region (an
// operand or allocation, the same key on every device) and offset, and the receiving side turns that
// into an address of its own.
//
// Runtime layer.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "jit/ir/diagnostics.h"

namespace tessera::rt {

struct CoreContext;
class LaunchGroup;
class MeshRun;

// A core's place in its launch group: the member (a device of the shard_map's mesh, or an mpmd_map
// participant) and its core there.
struct Seat {
  int64_t member = 0;
  int core = 0;
};

// Memory a remote operation addresses, the same on every device: the key of a memory region
// (MemoryRegion in runtime/launch.h) and a byte offset into it.
struct RemoteAddress {
  int64_t key = 0;
  int64_t offset = 0;
};

// A remote copy as its sender describes it: the box `shape` (elements of `es` bytes) read from `src`
// with `src_strides` (elements) and written at `dst` with `dst_strides`, covering `extent` bytes there;
// then `bytes` are added to the target's semaphore at `recv_sem`.
struct RemotePut {
  const std::byte* src = nullptr;
  std::span<const int64_t> src_strides;
  RemoteAddress dst;
  std::span<const int64_t> dst_strides;
  std::span<const int64_t> shape;
  int64_t es = 0;
  int64_t extent = 0;
  RemoteAddress recv_sem;
  int64_t bytes = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;

  // The devices [first, last) of a mesh of `size` devices this process runs (threads: all of them).
  std::pair<int64_t, int64_t> local_devices(int64_t size) const;

  // Delivers a remote copy from `from` to the same core of group member `target`: the data lands, then
  // the receive semaphore goes up. Throws Fault when the target cannot be reached (it already ended
  // its kernel, the memory is not the kernel's).
  virtual void put(LaunchGroup& group, CoreContext& from, int64_t target, const RemotePut& put, SourceLoc loc) = 0;
  // Adds `inc` to the semaphore at `sem` on the same core of member `target`.
  virtual void signal(LaunchGroup& group, CoreContext& from, int64_t target, RemoteAddress sem, int64_t inc,
                      SourceLoc loc) = 0;

  // The group's wait loop sleeps here until something may have changed: `lock` (the group's) is held
  // on entry and on return; `changed` is what local participants notify.
  virtual void idle(LaunchGroup& group, std::unique_lock<std::mutex>& lock, std::condition_variable& changed) = 0;
  // Every participant in this process waits or is done, and none of them can wake another: whether
  // nothing elsewhere can either (threads: there is no elsewhere). False means "keep waiting".
  virtual bool stuck_everywhere(LaunchGroup& group) = 0;
  // The entry barrier's question for members outside this process: have they all become ready?
  virtual bool others_ready(LaunchGroup& group) = 0;
  // The hold-to-the-end question (LaunchGroup::end) for members outside this process: have they all
  // ended their kernels (or finished, or stopped)? Asked once every participant here has; a transport
  // then tells the other processes so, once (threads: there is no elsewhere).
  virtual bool others_ended(LaunchGroup&) { return true; }
  // The participant at `seat` (in this process) is about to become ready with the memory `core` has
  // now: a transport may expose that memory to senders elsewhere (MPI: direct puts).
  virtual void opening(LaunchGroup&, Seat, const CoreContext&) {}
  // The participant at `seat` ends its kernel (maybe again): once this returns, nothing from elsewhere
  // writes its memory any more, since that memory may go right after.
  virtual void closing(LaunchGroup&, Seat) {}
  // Every participant of the group in this process finished or stopped (called under the group's lock).
  virtual void settled(LaunchGroup&) {}

  // ---- the host side: called by the thread that runs a shard_map ----
  virtual int process_index() const { return 0; }
  virtual int process_count() const { return 1; }
  // A shard_map call starts its devices.
  virtual void begin_run(MeshRun&) {}
  // Every device of the call in this process stopped: returns once every process got there (so that
  // no copy of this call lands in the next), with what went wrong in this process's mailbox, if anything:
  // a copy or signal that came too late is its sender's failure (its device, core, grid point and line).
  virtual std::optional<RuntimeError> end_run(MeshRun&) { return std::nullopt; }
  // Every process's `mine`, by process index (a collective of all processes; threads: just `mine`).
  virtual std::vector<std::string> exchange(std::string mine) { return {std::move(mine)}; }
};

// The devices [first, last) of a mesh of `size` that process `process` of `count` runs: contiguous
// logical ids, [process * size / count, (process + 1) * size / count).
std::pair<int64_t, int64_t> process_devices(int64_t size, int process, int count);

// Today's transport: every device a thread of this process.
Transport& threads_transport();

// The transport shard_maps use: the one installed (pl::distributed::initialize installs MPI's), else
// threads. Install before the first shard_map; null goes back to threads.
Transport& process_transport();
void set_process_transport(Transport* transport);

// The memory [p, p + extent) of `core` as a region and offset; a Fault naming `what` when it is none of
// the kernel's operands or allocations.
RemoteAddress remote_address(const CoreContext& core, const std::byte* p, int64_t extent, const char* what);
// The address on `core` of `at` (extent bytes there); a Fault naming `what` when the core has no such memory.
std::byte* local_address(const CoreContext& core, RemoteAddress at, int64_t extent, const char* what);

}  // namespace tessera::rt
