// Collective launches (docs/design.md §4b): a kernel that talks to other devices runs as one group of
// launches, one per device of the mesh, and remote copies and signals go from a core of one device
// to the same core of another through the group. mpmd_map runs all its participants (every point of
// every mesh) as one group too, so that they can block on semaphores they share.
//
// Every device's n-th collective launch in a shard_map call joins the same group, so a remote copy
// always lands in the target's buffers of the same kernel invocation, whatever the devices' relative
// timing (§4.10). A participant is ready once its memory is allocated; remote operations toward a
// participant wait until it is. Without a collective id every participant also waits at entry until
// all are ready (the implicit barrier). Waits block on the group's condition variable, and the group
// watches for the moment nothing can make progress: every participant is blocked, has finished, or
// belongs to a device that stopped without joining. Then it fails the launch on every device with
// one report, the wait-for picture, instead of hanging.
//
// Under a seed schedule (runtime/schedule.h; an interpreted launch whose copies complete on_wait) the
// group's participants take turns instead: one runs at a time, the seed picks who runs next at each
// scheduling point, and a blocked wait hands the turn on; the same deadlock report ends a schedule
// in which nobody can run.
//
// Runtime layer.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "jit/ir/diagnostics.h"
#include "runtime/settings.h"
#include "runtime/mesh.h"
#include "runtime/schedule.h"
#include "runtime/transport.h"

namespace tessera::rt {

struct CoreContext;
class LaunchGroup;

// Which kernel a collective launch is, for matching the devices' launches.
struct LaunchKey {
  std::string kernel;
  std::optional<int64_t> collective_id;
  SourceLoc loc;  // the pallas_call
};

// One shard_map call: its devices' progress and the groups of their collective launches.
class MeshRun {
 public:
  // `transport`: how its devices reach each other (runtime/transport.h); the devices it does not run
  // in this process take part in every group from elsewhere.
  explicit MeshRun(std::shared_ptr<const Mesh> mesh, Transport& transport = threads_transport());
  ~MeshRun();
  const Mesh& mesh() const { return *mesh_; }
  Transport& transport() const { return transport_; }

  // The group of every device's `sequence`-th collective launch (made by the first to arrive).
  // Fails (RuntimeError) when the launch does not match the one the other devices made.
  // `schedule_seed`: the launch runs under that seed schedule (the first device to arrive decides).
  std::shared_ptr<LaunchGroup> join(int64_t sequence, const LaunchKey& key, int64_t device, int cores,
                                    std::optional<uint64_t> schedule_seed = std::nullopt);
  // The device's function returned (or threw `why`): it will join no more groups.
  void device_stopped(int64_t device, const std::string& why);
  // The group of collective launch #`sequence`, when some device of this process made it; else null.
  std::shared_ptr<LaunchGroup> find(int64_t sequence);

 private:
  std::shared_ptr<const Mesh> mesh_;
  Transport& transport_;
  std::mutex mutex_;
  // Every group of the call, alive until it ends: a device may join after the others finished theirs.
  std::map<int64_t, std::shared_ptr<LaunchGroup>> groups_;
  std::vector<std::optional<std::string>> stopped_;  // by device: why it stopped
};

// What a blocked participant waits for, for the wait-for picture.
struct BlockedOn {
  std::string what;  // "DMA wait on DMA semaphore `scratch 1`", "the entry barrier", ...
  SourceLoc loc;
  int64_t have = 0, need = 0;  // semaphore waits: the value against the awaited one
  std::string unit;            // " bytes" for DMA semaphores
};

class LaunchGroup {
 public:
  // `members` names each member for messages ("device 3 (x=1, y=1)"), each with `cores` cores;
  // `scope` says what the group is ("collective kernel `k` (collective launch #0 of ...)").
  // `entry_barrier`: every participant waits at its start until all are ready. `transport` carries
  // its remote copies and signals. `schedule_seed`: its participants take turns under that seed
  // schedule (only where every participant is a thread of this process; elsewhere they run free).
  LaunchGroup(std::vector<std::string> members, std::string scope, LaunchKey key, int cores, bool entry_barrier,
              Transport& transport = threads_transport(), int64_t sequence = 0,
              std::optional<uint64_t> schedule_seed = std::nullopt);

  const LaunchKey& key() const { return key_; }
  const std::string& scope() const { return scope_; }
  const std::string& member_name(int64_t member) const { return members_[static_cast<size_t>(member)]; }
  int64_t members() const { return static_cast<int64_t>(members_.size()); }
  Transport& transport() const { return transport_; }
  // Its number among the collective launches of its shard_map call.
  int64_t sequence() const { return sequence_; }
  // When it was made (next_failure_sequence()): the instant of the launch for every member, which
  // dates failures found after it (LaunchOptions::instant).
  uint64_t instant() const { return instant_; }
  int cores() const { return cores_; }
  bool entry_barrier() const { return entry_barrier_; }
  std::mutex& mutex() { return mutex_; }
  // The seed schedule its participants take turns under, or null when they run free; a participant's
  // seat there is schedule_seat().
  Schedule* schedule() const { return schedule_.get(); }
  int64_t schedule_seat(Seat s) const { return s.member * cores_ + s.core; }

  // Joins the participant at `seat` with its context (not ready yet).
  void join(Seat seat, CoreContext* ctx);
  // Its memory is allocated; with the entry barrier, waits until every participant is.
  void ready(Seat seat, SourceLoc loc);
  // The kernel ended on this participant (normally or not): no remote operation may reach it any more.
  void finish(Seat seat);
  // The member stopped without joining (or after): participants that wait for it fail.
  void device_stopped(int64_t member, const std::string& why);
  // The member runs in another process: its progress is the transport's to judge.
  void elsewhere(int64_t member);

  // Runs `op` on the local participant at `seat` under the group's lock, if it is ready, and wakes the
  // waiters: what a transport does with a copy or signal that arrived from elsewhere.
  // `into_operands`: `op` reaches only the target's operands, which may still receive copies and
  // signals once its kernel ended (end()); anything else is gone then.
  enum class Delivery { done, not_ready, gone };
  Delivery deliver(Seat seat, const std::function<void(CoreContext&)>& op, bool into_operands = false);

  // Runs `op` on the target participant (the same core of member `target`) once it is ready, under
  // the group's lock; waits meanwhile. Throws Fault when the target already finished or the group failed,
  // or when it waits at the end of its kernel (end()) and `into_operands` is false: `op` reaches memory
  // of the target other than its operands.
  void with_target(Seat from, int64_t target, const std::string& what, SourceLoc loc,
                   const std::function<void(CoreContext&)>& op, bool into_operands = false);

  // The kernel returns semaphores (docs/design.md §4.9): a remote copy another participant started
  // toward this one's outputs may still be in flight when this one's kernel ends, and must land in
  // its outputs, its count in its semaphore output, before the launch returns. Every participant then
  // waits at the end of its kernel (end()) until all have got there.
  void hold_to_the_end() { hold_to_the_end_ = true; }
  // (Also under the group's lock: it is an atomic of its own.)
  bool holds_to_the_end() const { return hold_to_the_end_; }
  // The kernel's body ended on this participant and its own copies landed: from now on copies and
  // signals toward its scratch and run_scoped memory are the sender's error, and its kernel-lifetime
  // semaphores are checked again (a Fault when one is not zero: another participant's copy or signal
  // landed after the kernel's own check). When the group holds to the end, then waits until every
  // participant has ended (or finished, or stopped), here and elsewhere (Transport::others_ended);
  // copies and signals toward its operands land meanwhile.
  void end(Seat seat);
  // Blocks (the lock held by `lock`) until `done()` is true, recording `on` for the wait-for picture.
  // Throws Fault with the deadlock report when nothing can make progress.
  void wait(std::unique_lock<std::mutex>& lock, Seat seat, const std::function<bool()>& done,
            const std::function<BlockedOn()>& on);
  // Wakes every waiter: a semaphore changed. Called without the lock, it takes it first, so that a
  // waiter between its check and its sleep cannot miss the change.
  void notify() {
    { std::lock_guard lock(mutex_); }
    changed_.notify_all();
  }

 private:
  enum class State { absent, joined, ready, blocked, finished, stopped, elsewhere };
  struct Participant {
    State state = State::absent;
    CoreContext* ctx = nullptr;
    BlockedOn on;                               // blocked: what on; stopped: why
    const std::function<bool()>* done = nullptr;  // blocked: whether it may go on
    const std::function<BlockedOn()>* describe = nullptr;  // blocked under a schedule: `on` as of now
    bool ended = false;  // its kernel's body ended (end()): only its operands may still be reached
  };
  Participant& at(Seat s) { return participants_[static_cast<size_t>(s.member * cores_ + s.core)]; }
  // Tells the transport when every participant here finished or stopped (the lock held).
  void settle();
  // Throws the group's failure, or detects a deadlock (sets the failure, wakes everyone, throws).
  void check();
  // wait() under the seed schedule: the turn goes on while the participant waits.
  void scheduled_wait(std::unique_lock<std::mutex>& lock, Seat seat, const std::function<bool()>& done,
                      const std::function<BlockedOn()>& on);
  // Finds the group deadlocked (the lock held): its report and waits become the group's failure.
  void deadlocked();
  // Throws the group's failure (the lock held; failure_ set).
  [[noreturn]] void throw_failure() const;

  std::vector<std::string> members_;
  std::string scope_;
  LaunchKey key_;
  int cores_;
  bool entry_barrier_;
  std::atomic<bool> hold_to_the_end_{false};
  Transport& transport_;
  int64_t sequence_;
  uint64_t instant_ = next_failure_sequence();
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Participant> participants_;
  // The deadlock report, once the group found one: every participant that was waiting fails with it.
  std::optional<std::string> failure_;
  std::shared_ptr<const Deadlock> deadlock_;  // its waits, as data (RuntimeError::deadlock)
  std::unique_ptr<Schedule> schedule_;
};

// A core's seat in a launch group for the core's lifetime: made once its memory regions are known,
// it joins the group (waits block there, copies and signals wake the group); when it goes, normally
// or after a failure, no other participant may reach the core any more. Without a group, nothing.
class GroupMembership {
 public:
  GroupMembership(LaunchGroup* group, Seat seat, CoreContext& core);
  ~GroupMembership();
  GroupMembership(const GroupMembership&) = delete;
  GroupMembership& operator=(const GroupMembership&) = delete;

 private:
  LaunchGroup* group_;
  Seat seat_;
};

// A core's memory is allocated: in a collective launch it becomes ready for other devices (and waits
// at the implicit entry barrier when the kernel has no collective_id).
void collective_ready(CoreContext& core);

// The kernel's body ended on this core and its copies landed (LaunchGroup::end): in a group that
// holds to the end, waits for the others. Nothing outside a group or once the core finished.
void collective_end(CoreContext& core);

// The kernel ended on this core (normally or not): other devices can no longer reach it.
void collective_finish(CoreContext& core);

// The logical id of the device named by `ids` (mesh coordinates, or one logical id); a Fault saying
// what is out of range when it is not a device of the mesh.
int64_t target_device(const Mesh& mesh, std::span<const int64_t> ids, bool logical);
// remote_dma_start: copies the box `shape` (elements of `es` bytes) from `src` (here) to the memory
// of `target` that corresponds to `dst` here, then adds the byte count to `send_sem` here and to the
// target's semaphore corresponding to `recv_sem`.
void remote_copy(CoreContext& core, const std::byte* src, std::span<const int64_t> src_strides, const std::byte* dst,
                 std::span<const int64_t> dst_strides, std::span<const int64_t> shape, int64_t es, int64_t* send_sem,
                 const int64_t* recv_sem, int64_t target, SourceLoc loc);
// remote_semaphore_signal: adds `inc` to the target's semaphore corresponding to `sem` here.
void remote_signal(CoreContext& core, const int64_t* sem, int64_t inc, int64_t target, SourceLoc loc);

// Sleeps the random delay set with set_random_delays (runtime/settings.h), if any.
void random_delay();
// The bound in force (reads TESSERA_CHAOS_US the first time).
int64_t random_delay_bound();

}  // namespace tessera::rt
