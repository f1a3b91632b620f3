#include "runtime/collective.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "runtime/config.h"
#include "runtime/consequences.h"
#include "runtime/launch.h"
#include "runtime/memory.h"
#include "runtime/timeline.h"

namespace tessera::rt {

// ---- random delays ----------------------------------------------------------------------------------

namespace {
// The bound, or -1 until first read: TESSERA_CHAOS_US is read then, not at start-up, so that an invalid
// value is an exception from a launch rather than an abort while the program loads.
std::atomic<int64_t> g_delay_us{-1};
std::atomic<uint64_t> g_delay_seed{0};
std::atomic<uint64_t> g_delay_streams{0};
}  // namespace

void set_random_delays(int64_t max_microseconds, uint64_t seed) {
  g_delay_seed.store(seed);
  g_delay_us.store(std::max<int64_t>(0, max_microseconds));  // negative is off, as 0: -1 means "not read yet"
}

int64_t random_delay_bound() {
  int64_t max = g_delay_us.load(std::memory_order_relaxed);
  if (max < 0) {
    int64_t unset = -1;
    g_delay_us.compare_exchange_strong(unset, config::chaos_us());  // a racing set_random_delays wins
    max = g_delay_us.load();
  }
  return max;
}

void random_delay() {
  const int64_t max = random_delay_bound();
  if (max <= 0) return;
  thread_local std::mt19937_64 rng(g_delay_seed.load() * 0x9e3779b97f4a7c15ull + g_delay_streams.fetch_add(1));
  std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int64_t>(0, max)(rng)));
}

// ---- MeshRun ----------------------------------------------------------------------------------------

MeshRun::MeshRun(std::shared_ptr<const Mesh> mesh, Transport& transport)
    : mesh_(std::move(mesh)), transport_(transport), stopped_(static_cast<size_t>(mesh_->size())) {}
MeshRun::~MeshRun() = default;

std::shared_ptr<LaunchGroup> MeshRun::join(int64_t sequence, const LaunchKey& key, int64_t device, int cores,
                                          std::optional<uint64_t> schedule_seed) {
  std::lock_guard lock(mutex_);
  std::shared_ptr<LaunchGroup>& group = groups_[sequence];
  if (!group) {
    std::vector<std::string> devices;
    for (int64_t d = 0; d < mesh_->size(); ++d) devices.push_back(mesh_->device_str(d));
    group = std::make_shared<LaunchGroup>(
        std::move(devices),
        fmt::format("collective kernel `{}` (collective launch #{} of the shard_map over {})", key.kernel, sequence,
                    mesh_->str()),
        key, cores, /*entry_barrier=*/!key.collective_id, transport_, sequence, schedule_seed);
    const auto [first, last] = transport_.local_devices(mesh_->size());
    for (int64_t d = 0; d < mesh_->size(); ++d)
      if (d < first || d >= last) group->elsewhere(d);
    for (size_t d = 0; d < stopped_.size(); ++d)
      if (stopped_[d]) group->device_stopped(static_cast<int64_t>(d), *stopped_[d]);
    return group;
  }
  const LaunchKey& first = group->key();
  if (first.kernel != key.kernel || first.collective_id != key.collective_id || group->cores() != cores) {
    auto describe = [](const LaunchKey& k) {
      return fmt::format("kernel `{}`{}", k.kernel,
                         k.collective_id ? fmt::format(" with collective_id {}", *k.collective_id) : " without a collective_id");
    };
    throw UserError(
        fmt::format("the devices' collective launch #{} differ: every device of the mesh must launch the same collective "
                    "kernels in the same order",
                    sequence),
        fmt::format("{} launched {}; another device launched {}", mesh_->device_str(device), describe(key), describe(first)),
        "launch the same kernels, with the same collective_id, on every device of the shard_map", key.loc);
  }
  return group;
}

std::shared_ptr<LaunchGroup> MeshRun::find(int64_t sequence) {
  std::lock_guard lock(mutex_);
  auto it = groups_.find(sequence);
  return it == groups_.end() ? nullptr : it->second;
}

void MeshRun::device_stopped(int64_t device, const std::string& why) {
  std::lock_guard lock(mutex_);
  stopped_[static_cast<size_t>(device)] = why;
  for (auto& [sequence, group] : groups_) group->device_stopped(device, why);
}

// ---- LaunchGroup ------------------------------------------------------------------------------------

LaunchGroup::LaunchGroup(std::vector<std::string> members, std::string scope, LaunchKey key, int cores,
                         bool entry_barrier, Transport& transport, int64_t sequence,
                         std::optional<uint64_t> schedule_seed)
    : members_(std::move(members)), scope_(std::move(scope)), key_(std::move(key)), cores_(cores),
      entry_barrier_(entry_barrier), transport_(transport), sequence_(sequence), participants_(members_.size() * static_cast<size_t>(cores)) {
  // Reads TESSERA_CHAOS_US on the launching thread, so an invalid value fails the launch there rather
  // than a remote copy inside a kernel.
  random_delay_bound();
  // Participants in other processes cannot take turns with these threads: they run free.
  if (schedule_seed && transport_.process_count() == 1) {
    schedule_ = std::make_unique<Schedule>(*schedule_seed, static_cast<int64_t>(participants_.size()), mutex_);
    schedule_->on_stuck([this] {
      // The waits' values as they are now: others ran since each participant blocked.
      for (Participant& p : participants_)
        if (p.state == State::blocked && p.describe) p.on = (*p.describe)();
      if (!failure_) deadlocked();
    });
  }
}

void LaunchGroup::join(Seat seat, CoreContext* ctx) {
  std::lock_guard lock(mutex_);
  Participant& p = at(seat);
  p.state = State::joined;
  p.ctx = ctx;
  changed_.notify_all();
}

void LaunchGroup::ready(Seat seat, SourceLoc loc) {
  CoreContext* ctx = nullptr;
  {
    std::lock_guard lock(mutex_);
    ctx = at(seat).ctx;
  }
  if (ctx) transport_.opening(*this, seat, *ctx);
  std::unique_lock lock(mutex_);
  at(seat).state = State::ready;
  changed_.notify_all();
  if (entry_barrier_) {
    auto all_ready = [&] {
      for (const Participant& p : participants_)
        if (p.state == State::absent || p.state == State::joined) return false;
      return transport_.others_ready(*this);
    };
    wait(lock, seat, all_ready, [&] {
      return BlockedOn{"the entry barrier of a collective kernel without a collective_id (every device must start it)",
                       loc, 0, 0, {}};
    });
  }
  // The kernel's start (past the barrier) is a scheduling point: who goes first is the seed's.
  lock.unlock();
  if (schedule_) schedule_->point(schedule_seat(seat));
}

void LaunchGroup::finish(Seat seat) {
  transport_.closing(*this, seat);
  std::lock_guard lock(mutex_);
  at(seat).state = State::finished;
  changed_.notify_all();
  settle();
}

void LaunchGroup::device_stopped(int64_t member, const std::string& why) {
  std::lock_guard lock(mutex_);
  for (int c = 0; c < cores_; ++c) {
    Participant& p = at(Seat{member, c});
    if (p.state == State::absent) {
      p.state = State::stopped;
      p.on = BlockedOn{why, {}, 0, 0, {}};
      if (schedule_) schedule_->excuse_locked(schedule_seat(Seat{member, c}));
    }
  }
  changed_.notify_all();
  settle();
}

void LaunchGroup::settle() {
  for (const Participant& p : participants_)
    if (p.state != State::finished && p.state != State::stopped && p.state != State::elsewhere) return;
  transport_.settled(*this);
}

LaunchGroup::Delivery LaunchGroup::deliver(Seat seat, const std::function<void(CoreContext&)>& op,
                                            bool into_operands) {
  std::lock_guard lock(mutex_);
  Participant& t = at(seat);
  switch (t.state) {
    case State::absent:
    case State::joined: return Delivery::not_ready;
    case State::finished:
    case State::stopped:
    case State::elsewhere: return Delivery::gone;
    case State::ready:
    case State::blocked: break;
  }
  // After its end, as from a thread here (with_target): only its operands (docs/design.md §4.9).
  if (t.ended && !into_operands) return Delivery::gone;
  op(*t.ctx);
  changed_.notify_all();
  return Delivery::done;
}

void LaunchGroup::elsewhere(int64_t member) {
  std::lock_guard lock(mutex_);
  for (int c = 0; c < cores_; ++c) at(Seat{member, c}).state = State::elsewhere;
}

void LaunchGroup::with_target(Seat from, int64_t target, const std::string& what, SourceLoc loc,
                              const std::function<void(CoreContext&)>& op, bool into_operands) {
  random_delay();
  std::unique_lock lock(mutex_);
  Participant& t = at(Seat{target, from.core});
  auto started = [&] { return t.state != State::absent && t.state != State::joined; };
  wait(lock, from, started, [&] {
    return BlockedOn{fmt::format("{} toward {}, which has not started the kernel yet", what, members_[target]), loc, 0, 0,
                     {}};
  });
  if (t.state == State::finished || t.state == State::stopped)
    throw Fault(fmt::format(
        "{} toward {}, whose instance of kernel `{}` has already {}: a device may only reach another while that one runs "
        "the same kernel. Make the receiver wait for it (wait_recv, or semaphore_wait on the signalled semaphore) before "
        "its kernel ends, or return the receive semaphore as an output and wait in the next call",
        what, members_[target], key_.kernel, t.state == State::finished ? "ended" : "stopped"));
  // At its end, a participant's scratch and run_scoped memory had its last check (semaphores at
  // zero): only its operands, which the launch returns or checks after, may still change.
  if (t.ended && !into_operands)
    throw Fault(fmt::format(
        "{} toward {}, whose instance of kernel `{}` has ended: after its end a participant's operands may still "
        "receive copies and signals (a kernel that returns semaphores gets their counts), its scratch and run_scoped "
        "memory no more (their semaphores had their last check). Make the receiver wait for it (wait_recv, or "
        "semaphore_wait on the signalled semaphore) before its kernel ends, or return the receive semaphore as an "
        "output and wait in the next call",
        what, members_[target], key_.kernel));
  op(*t.ctx);
  changed_.notify_all();
}

void LaunchGroup::end(Seat seat) {
  std::unique_lock lock(mutex_);
  Participant& me = at(seat);
  if (me.ended || me.state == State::finished || me.state == State::stopped) return;
  // Every kernel, whether it holds to the end or not: its scratch had its last check (semaphores at
  // zero) just before, and a copy or signal from another participant that landed there since would
  // be lost without a word. Deliveries take this lock: those before it are in memory now and the
  // check below sees them, those after it find the participant ended and fail the sender.
  me.ended = true;
  changed_.notify_all();
  if (me.ctx) me.ctx->dma.check_kernel_semaphores();
  if (!hold_to_the_end_) return;
  const std::function<bool()> all_ended = [this] {
    return std::all_of(participants_.begin(), participants_.end(),
                       [](const Participant& p) {
                         return p.ended || p.state == State::finished || p.state == State::stopped ||
                                p.state == State::elsewhere;
                       }) &&
           transport_.others_ended(*this);
  };
  wait(lock, seat, all_ended, [&] {
    return BlockedOn{"the end of the kernel (it returns semaphores: copies toward its outputs may still come)",
                     key_.loc, 0, 0, {}};
  });
}

void LaunchGroup::wait(std::unique_lock<std::mutex>& lock, Seat seat, const std::function<bool()>& done,
                       const std::function<BlockedOn()>& on) {
  if (schedule_) {
    scheduled_wait(lock, seat, done, on);
    return;
  }
  Participant& me = at(seat);
  const State before = me.state;
  while (!done()) {
    me.state = State::blocked;
    me.on = on();
    me.done = &done;
    try {
      check();
    } catch (...) {
      me.done = nullptr;
      throw;
    }
    transport_.idle(*this, lock, changed_);
    me.done = nullptr;
    me.state = before;
  }
  if (failure_) throw_failure();
}

void LaunchGroup::scheduled_wait(std::unique_lock<std::mutex>& lock, Seat seat, const std::function<bool()>& done,
                                 const std::function<BlockedOn()>& on) {
  Participant& me = at(seat);
  const State before = me.state;
  while (!done() && !failure_) {
    me.state = State::blocked;
    me.on = on();
    me.done = &done;
    me.describe = &on;
    // Returns once the condition holds and it is this participant's turn, or once nobody can run
    // (the schedule then had the deadlock written into failure_).
    schedule_->block(lock, schedule_seat(seat), done);
    me.done = nullptr;
    me.describe = nullptr;
    me.state = before;
  }
  if (failure_) throw_failure();
}

void LaunchGroup::check() {
  if (failure_) throw_failure();
  for (const Participant& p : participants_) {
    switch (p.state) {
      case State::absent:   // its device may still launch the kernel
      case State::joined:
      case State::ready: return;
      case State::blocked:
        if ((*p.done)()) return;  // woken, not yet running
        break;
      case State::finished:
      case State::stopped:
      case State::elsewhere: break;  // the transport judges the members in other processes
    }
  }
  if (!transport_.stuck_everywhere(*this)) return;
  if (failure_) throw_failure();  // found by the transport meanwhile
  deadlocked();
  changed_.notify_all();
  throw_failure();
}

void LaunchGroup::throw_failure() const { throw Fault(*failure_, deadlock_); }

void LaunchGroup::deadlocked() {
  // The report lists every participant; the blocked ones' waits are also kept as data, for telling
  // this failure from its cause (rt::Consequences).
  auto deadlock = std::make_shared<Deadlock>();
  std::string s = fmt::format("{} in {}; every participant waits or is done:", kDeadlockReport, scope_);
  for (size_t i = 0; i < participants_.size(); ++i) {
    const Participant& p = participants_[i];
    const std::string& member = members_[i / static_cast<size_t>(cores_)];
    const std::string who = cores_ > 1 ? fmt::format("{}, core {}", member, i % cores_) : member;
    switch (p.state) {
      case State::blocked: {
        std::string on = fmt::format("{} at {}", p.on.what, p.on.loc.str());
        if (p.on.need > 0) on += fmt::format(": holds {} of {}{}", p.on.have, p.on.need, p.on.unit);
        s += fmt::format("\n    {}: {}", who, on);
        deadlock->waits.push_back(Deadlock::Wait{who, std::move(on)});
        break;
      }
      case State::finished: s += fmt::format("\n    {}: finished the kernel", who); break;
      case State::stopped: s += fmt::format("\n    {}: stopped before launching it ({})", who, p.on.what); break;
      case State::elsewhere: s += fmt::format("\n    {}: waits or is done in another process", who); break;
      default: s += fmt::format("\n    {}: running", who); break;
    }
  }
  s += "\n  no copies are in flight: copies between participants land when they start, or when their core blocks";
  s += "\n  fix: every wait needs a matching copy or signal from a participant that is still running; check which one "
       "should have sent what the blocked ones wait for";
  failure_ = std::move(s);
  deadlock_ = std::move(deadlock);
}

// ---- remote operations ------------------------------------------------------------------------------

GroupMembership::GroupMembership(LaunchGroup* group, Seat seat, CoreContext& core) : group_(group), seat_(seat) {
  if (!group_) return;
  core.group_ = group_;
  core.seat_ = seat_;
  core.dma.join(group_, seat_.member, seat_.core);
  group_->join(seat_, &core);
}

GroupMembership::~GroupMembership() {
  if (group_) group_->finish(seat_);  // (again, if the backend did)
}

void collective_ready(CoreContext& core) {
  if (LaunchGroup* group = core.group()) group->ready(core.seat(), group->key().loc);
}

void collective_end(CoreContext& core) {
  LaunchGroup* group = core.group();
  if (!group) return;
  // Under random delays, a participant slow to get from its kernel's last semaphore check to its end
  // (a copy or signal from another may land in between: LaunchGroup::end checks again).
  random_delay();
  group->end(core.seat());
}

void collective_finish(CoreContext& core) {
  if (LaunchGroup* group = core.group()) group->finish(core.seat());
}

int64_t target_device(const Mesh& mesh, std::span<const int64_t> ids, bool logical) {
  if (logical) {
    if (ids[0] < 0 || ids[0] >= mesh.size())
      throw Fault(fmt::format("device id {} is outside {}: logical ids are in [0, {})", ids[0], mesh.str(), mesh.size()));
    return ids[0];
  }
  for (size_t a = 0; a < ids.size(); ++a)
    if (ids[a] < 0 || ids[a] >= mesh.shape()[a])
      throw Fault(fmt::format("device ({}) is outside {}: its coordinate on axis `{}` is {}, valid ones are [0, {})",
                              fmt::join(ids, ", "), mesh.str(), mesh.axis_names()[a], ids[a], mesh.shape()[a]));
  return mesh.logical(ids);
}

namespace {

std::atomic_ref<int64_t> counter(int64_t* sem) { return std::atomic_ref<int64_t>(*sem); }

const std::byte* bytes_of(const int64_t* sem) { return reinterpret_cast<const std::byte*>(sem); }

// The group member that is device `target` of the sender's mesh.
int64_t member_of(const CoreContext& core, int64_t target) { return core.device->first_member + target; }

void require_group(const CoreContext& core) {
  if (!core.group() || !core.device)
    throw Fault("a remote copy or signal outside a collective launch: run the kernel inside pl::shard_map");
}

}  // namespace

void remote_copy(CoreContext& core, const std::byte* src, std::span<const int64_t> src_strides, const std::byte* dst,
                 std::span<const int64_t> dst_strides, std::span<const int64_t> shape, int64_t es, int64_t* send_sem,
                 const int64_t* recv_sem, int64_t target, SourceLoc loc) {
  require_group(core);
  core.dma.yield_point();
  const int64_t bytes = num_elements(Shape(shape.begin(), shape.end())) * es;
  timeline::Scope span(timeline::Track::copies(core.device->logical, core.point.core),
                       timeline::recording() ? fmt::format("remote copy {} B to device {}", bytes, target) : "", "dma");
  const int64_t extent = window_extent(shape, dst_strides, es);
  const RemotePut put{src,
                      src_strides,
                      remote_address(core, dst, extent, "the destination of a remote copy"),
                      dst_strides,
                      shape,
                      es,
                      extent,
                      remote_address(core, bytes_of(recv_sem), sizeof(int64_t), "the receive semaphore"),
                      bytes};
  LaunchGroup& group = *core.group();
  group.transport().put(group, core, member_of(core, target), put, loc);
  counter(send_sem).fetch_add(bytes);  // the data left: the source may be reused
  group.notify();                      // (the sender's own cores may wait on it)
}

void remote_signal(CoreContext& core, const int64_t* sem, int64_t inc, int64_t target, SourceLoc loc) {
  require_group(core);
  if (inc < 0) throw Fault(fmt::format("semaphore_signal by {}: a signal adds a non-negative amount", inc));
  core.dma.yield_point();
  LaunchGroup& group = *core.group();
  group.transport().signal(group, core, member_of(core, target),
                           remote_address(core, bytes_of(sem), sizeof(int64_t), "the signalled semaphore"), inc, loc);
}

}  // namespace tessera::rt
