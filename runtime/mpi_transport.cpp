#include "runtime/mpi_transport.h"

#include <fmt/format.h>
#include <mpi.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <string_view>
#include <thread>

#include <sys/statvfs.h>

#include "runtime/collective.h"
#include "runtime/launch.h"
#include "runtime/memory.h"
#include "runtime/segment_heap.h"

namespace tessera::rt::mpi {

namespace {

// ---- the windows -----------------------------------------------------------------------------------
//
// Each process allocates one window (MPI_Win_allocate), used for one shard_map call at a time and
// cleared between calls:
//   word 0           the mailbox's tail: bytes of it senders reserved so far (MPI_Fetch_and_op)
//   word 1           1 once every device of this process stopped in the current call
//   words 8..        per collective launch of the call: quiet, sent, consumed (the deadlock protocol)
//   then             per exposed participant (a slot): its gate, senders inside + kClosed once it ends
//   byte kMailbox..  the mailbox: messages (copies, signals, "ready") other processes put here
//
// A message is a header of int64 words, the box's shape and strides, then the data packed row-major.
// Its first word, the flag, is set last by an atomic MPI_Accumulate: a set flag means the rest landed.
//
// A second, dynamic window (MPI_Win_create_dynamic) exposes kernel memory itself: when a participant
// becomes ready, its process attaches the memory it has then (operands, allocations made before the
// kernel body) and tells every other process of the group the addresses (a kRegions message). A large
// copy toward it is then one MPI_Put straight into its buffer, through the participant's gate; a
// kLanded message raises the receive semaphore after the put was flushed.
//
// A third, shared window (MPI_Win_allocate_shared over the processes of a host) is the segment
// arrays come from while a shard_map over processes runs (runtime/segment_heap.h): every process of
// the host maps every other's part. Memory there is exposed by its offset in its process's part, and
// a large copy toward it from the same host is a memcpy into the mapping, through the same gate and
// with the same kLanded message; only memory outside it (a full segment) is attached to the dynamic
// window, which on one host Open MPI serves with CMA (process_vm_writev), three to four times slower.

constexpr int64_t kGroups = 256;  // collective launches per shard_map call that have words
constexpr int64_t kEntryWords = 3;
enum : int64_t { kQuiet = 0, kSent = 1, kConsumed = 2 };
constexpr MPI_Aint kTail = 0, kStopped = 8;
constexpr MPI_Aint entry(int64_t group, int64_t field) { return (8 + group * kEntryWords + field) * 8; }
constexpr int64_t kSlots = 4096;  // participants per shard_map call and process that can take direct puts
constexpr MPI_Aint gate(int64_t slot) { return entry(kGroups, 0) + slot * 8; }
constexpr MPI_Aint kMailbox = (gate(kSlots) + 63) / 64 * 64;
// Added to a gate when its participant ends: a sender that finds it there stays out.
constexpr int64_t kClosed = int64_t{1} << 40;
// Copies of at least this many bytes go straight into the destination when they can; smaller ones
// travel in the mailbox, where one put carries data and header together.
constexpr int64_t kDirectBytes = int64_t{16} << 10;

// How long a waiter polls its mailbox without sleeping (see idle), and the gap between two polls
// that means a new wait began.
constexpr std::chrono::microseconds kHotPoll{500}, kNewWait{1000};

enum Kind : int64_t { kPut = 1, kSignal = 2, kReady = 3, kRegions = 4, kLanded = 5, kEnded = 6 };
enum Header : size_t {
  hFlag, hSize, hKind, hGroup, hMember, hCore, hFrom,
  hDstKey, hDstOffset, hExtent, hRecvKey, hRecvOffset, hAmount, hEs, hRank,
  hOrigin,  // where the message's origin begins (0: it has none), after whatever else it carries
  kHeaderWords
};

// A copy's or signal's origin: the sender's execution point and the line of the copy or signal, at the
// end of its message. The receiving process finds it came too late (the target's kernel had ended),
// and reports the failure as the sender's own, as a thread of the same process does (LaunchGroup::
// with_target): its device, core, grid point and the user's line.
//   line, column, device, core, grid rank, inner rank, grid point, inner point, file bytes, file
void append_origin(std::vector<int64_t>& msg, const ExecutionPoint& point, SourceLoc loc) {
  const std::string_view file = loc.file ? std::string_view(loc.file) : std::string_view();
  const size_t at = msg.size();
  msg[hOrigin] = static_cast<int64_t>(at);
  msg.insert(msg.end(), {static_cast<int64_t>(loc.line), static_cast<int64_t>(loc.column), point.device, point.core,
                         static_cast<int64_t>(point.grid_point.size()), static_cast<int64_t>(point.inner_point.size())});
  msg.insert(msg.end(), point.grid_point.begin(), point.grid_point.end());
  msg.insert(msg.end(), point.inner_point.begin(), point.inner_point.end());
  msg.push_back(static_cast<int64_t>(file.size()));
  const size_t chars = msg.size();
  msg.resize(chars + (file.size() + 7) / 8, 0);
  if (!file.empty()) std::memcpy(msg.data() + chars, file.data(), file.size());
  msg[hSize] = static_cast<int64_t>(msg.size() * sizeof(int64_t));
}

// The origin append_origin put in `msg` (none: an unknown one).
std::pair<ExecutionPoint, SourceLoc> read_origin(const int64_t* msg) {
  if (msg[hOrigin] == 0) return {};
  const int64_t* o = msg + msg[hOrigin];
  ExecutionPoint point{static_cast<int>(o[2]), static_cast<int>(o[3]), {}, {}};
  const int64_t grid = o[4], inner = o[5];
  point.grid_point.assign(o + 6, o + 6 + grid);
  point.inner_point.assign(o + 6 + grid, o + 6 + grid + inner);
  const int64_t* f = o + 6 + grid + inner;
  SourceLoc loc;
  if (f[0] > 0) loc.file = interned_file_name(std::string_view(reinterpret_cast<const char*>(f + 1), static_cast<size_t>(f[0])));
  loc.line = static_cast<uint32_t>(o[0]);
  loc.column = static_cast<uint32_t>(o[1]);
  return {std::move(point), loc};
}

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw Fault(fmt::format("{} failed: {}", call, std::string(text, static_cast<size_t>(length))));
}

// The MPI datatype of a box of `shape` elements of `es` bytes laid out with `strides` (elements),
// from its first element: nested byte-strided vectors, innermost dimension first.
class BoxType {
 public:
  BoxType(std::span<const int64_t> shape, std::span<const int64_t> strides, int64_t es) {
    check(MPI_Type_contiguous(static_cast<int>(es), MPI_BYTE, &type_), "MPI_Type_contiguous");
    for (size_t d = shape.size(); d-- > 0;) {
      MPI_Datatype outer;
      check(MPI_Type_create_hvector(static_cast<int>(shape[d]), 1, strides[d] * es, type_, &outer),
            "MPI_Type_create_hvector");
      MPI_Type_free(&type_);
      type_ = outer;
    }
    check(MPI_Type_commit(&type_), "MPI_Type_commit");
  }
  ~BoxType() { MPI_Type_free(&type_); }
  BoxType(const BoxType&) = delete;
  BoxType& operator=(const BoxType&) = delete;
  MPI_Datatype get() const { return type_; }

 private:
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
};

// Whether a box can be described to MPI as one datatype (int counts, strides that do not go backwards).
bool describable(std::span<const int64_t> shape, std::span<const int64_t> strides, int64_t bytes) {
  if (bytes <= 0 || bytes > INT32_MAX) return false;
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] <= 0 || shape[d] > INT32_MAX || strides[d] < 0) return false;
  return true;
}

// Whether the box's elements are one run of memory (row-major strides, or dimensions of one).
bool contiguous(std::span<const int64_t> shape, std::span<const int64_t> strides) {
  int64_t expected = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

// A region in a kRegions message: its key, its address in the dynamic window (-1: not attached), its
// bytes and its offset in its process's part of the shared segment (-1: not there).
enum RegionWord : size_t { rKey, rAddress, rBytes, rShared, kRegionWords };

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(const Options& options) : capacity_(options.window_bytes) {
    const int64_t window_bytes = options.window_bytes;
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    check(MPI_Win_allocate(window_bytes, 1, MPI_INFO_NULL, comm_, &base_, &win_), "MPI_Win_allocate");
    MPI_Win_set_errhandler(win_, MPI_ERRORS_RETURN);
    std::memset(base_, 0, static_cast<size_t>(window_bytes));
    // One passive-target epoch for the program's life: every access is then a put or an atomic plus a flush.
    check(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_), "MPI_Win_lock_all");
    // Direct puts need a dynamic window, which Open MPI on one host builds on single-copy transfers
    // (CMA): where those are off (a container that forbids ptrace) every copy takes the mailbox.
    int direct = MPI_Win_create_dynamic(MPI_INFO_NULL, comm_, &memory_) == MPI_SUCCESS;
    check(MPI_Allreduce(MPI_IN_PLACE, &direct, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce");
    if (direct) {
      MPI_Win_set_errhandler(memory_, MPI_ERRORS_RETURN);
      check(MPI_Win_lock_all(MPI_MODE_NOCHECK, memory_), "MPI_Win_lock_all");
    } else if (memory_ != MPI_WIN_NULL) {
      MPI_Win_free(&memory_);
    }
    if (options.shared_bytes > 0) open_segment(options.shared_bytes);
    check(MPI_Barrier(comm_), "MPI_Barrier");
  }
  ~MpiTransport() override {
    if (segment_ != MPI_WIN_NULL) {
      MPI_Win_unlock_all(segment_);
      // Arrays still in the segment keep it mapped (freeing it would leave them dangling): MPI_Finalize
      // then takes it down with the process.
      if (!heap_ || heap_->used() == 0) MPI_Win_free(&segment_);
    }
    if (node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
    if (memory_ != MPI_WIN_NULL) {
      MPI_Win_unlock_all(memory_);
      for (const auto& [lo, a] : attached_) MPI_Win_detach(memory_, lo);
      MPI_Win_free(&memory_);
    }
    MPI_Win_unlock_all(win_);
    MPI_Win_free(&win_);
    MPI_Comm_free(&comm_);
  }

  int process_index() const override { return rank_; }
  int process_count() const override { return size_; }

  void put(LaunchGroup& group, CoreContext& from, int64_t target, const RemotePut& p, SourceLoc loc) override {
    if (is_local(group, target)) return threads_transport().put(group, from, target, p, loc);
    random_delay();
    const Timed timed(put_nanoseconds_);
    if (p.bytes >= kDirectBytes && put_direct(group, from, target, p, loc)) return;
    ++paths_mailbox_;
    const size_t rank = p.shape.size();
    const size_t data_words = static_cast<size_t>((p.bytes + 7) / 8);
    // One buffer per thread, reused: a fresh one per copy would pay a page fault per 4 KiB.
    thread_local std::vector<int64_t> msg;
    msg.assign(kHeaderWords + 2 * rank + data_words, 0);
    header(msg, group, kPut, target, &from);
    msg[hDstKey] = p.dst.key;
    msg[hDstOffset] = p.dst.offset;
    msg[hExtent] = p.extent;
    msg[hRecvKey] = p.recv_sem.key;
    msg[hRecvOffset] = p.recv_sem.offset;
    msg[hAmount] = p.bytes;
    msg[hEs] = p.es;
    msg[hRank] = static_cast<int64_t>(rank);
    for (size_t d = 0; d < rank; ++d) {
      msg[kHeaderWords + d] = p.shape[d];
      msg[kHeaderWords + rank + d] = p.dst_strides[d];
    }
    copy_box(reinterpret_cast<std::byte*>(msg.data() + kHeaderWords + 2 * rank),
             row_major_strides(Shape(p.shape.begin(), p.shape.end())), p.src, p.src_strides, p.shape, p.es);
    append_origin(msg, from.point, loc);
    send(group, owner(group, target), msg);
  }

  void signal(LaunchGroup& group, CoreContext& from, int64_t target, RemoteAddress sem, int64_t inc,
              SourceLoc loc) override {
    if (is_local(group, target)) return threads_transport().signal(group, from, target, sem, inc, loc);
    random_delay();
    std::vector<int64_t> msg(kHeaderWords);
    header(msg, group, kSignal, target, &from);
    msg[hDstKey] = sem.key;
    msg[hDstOffset] = sem.offset;
    msg[hAmount] = inc;
    append_origin(msg, from.point, loc);
    send(group, owner(group, target), msg);
  }

  void idle(LaunchGroup&, std::unique_lock<std::mutex>& lock, std::condition_variable& changed) override {
    // Deliveries take group locks: the mailbox is drained without this one.
    lock.unlock();
    const int delivered = progress();
    const auto now = std::chrono::steady_clock::now();
    // A waiter polls hot (yielding the core) for kHotPoll after it began waiting or last got something:
    // what it waits for is usually on its way, and a thread that sleeps on a busy machine wakes up
    // late (about a millisecond here), which every step of a ring pays. Then it sleeps between polls.
    thread_local std::chrono::steady_clock::time_point hot_since, last_poll;
    if (delivered > 0 || now - last_poll > kNewWait) hot_since = now;
    last_poll = now;
    if (delivered == 0 && now - hot_since < kHotPoll) std::this_thread::yield();
    lock.lock();
    if (delivered == 0 && now - hot_since >= kHotPoll) changed.wait_for(lock, std::chrono::microseconds(200));
  }

  // Every participant here waits or is done. A deadlock needs that of every process, and no message of
  // the launch in flight. Processes read each other's words at different moments, so one reading could
  // see a process quiet before it consumed a message and another after: two waves of readings that
  // agree, all quiet, and as many messages consumed as sent (counted before they are sent) rule that
  // out, since a quiet process wakes only by consuming a message, which moves its counter. No timeout:
  // a slow process is not quiet, and then nobody declares anything.
  bool stuck_everywhere(LaunchGroup& group) override {
    const int64_t g = group.sequence();
    if (g >= kGroups) return false;
    update(rank_, entry(g, kQuiet), 1, MPI_REPLACE);
    auto wave = [&] {
      std::vector<std::array<int64_t, 3>> w;
      for (int r = 0; r < size_; ++r)
        w.push_back({read(r, kStopped) | read(r, entry(g, kQuiet)), read(r, entry(g, kSent)),
                     read(r, entry(g, kConsumed))});
      return w;
    };
    const auto first = wave();
    int64_t sent = 0, consumed = 0;
    for (const auto& [quiet, s, c] : first) {
      if (!quiet) return false;
      sent += s;
      consumed += c;
    }
    return sent == consumed && wave() == first;
  }

  bool others_ready(LaunchGroup& group) override {
    const int64_t g = group.sequence();
    const int64_t members = group.members();
    // Every participant here is ready: tell every other process that runs devices of the mesh, once.
    const bool announce = !announced_[static_cast<size_t>(g % kGroups)].exchange(true);
    int others = 0;
    for (int r = 0; r < size_; ++r) {
      const auto [lo, hi] = process_devices(members, r, size_);
      if (r == rank_ || lo == hi) continue;
      ++others;
      if (!announce) continue;
      std::vector<int64_t> msg(kHeaderWords);
      header(msg, group, kReady, lo, nullptr);
      send(group, r, msg);
    }
    return ready_[static_cast<size_t>(g % kGroups)].load() >= others;
  }

  // A group that holds to the end (docs/design.md §4.9): every participant here ended its kernel, or
  // finished or stopped; tell every other process of the group so, once, and say whether all of
  // them told this one. Each process's copies and signals go before its kEnded in the mailbox, where
  // they are delivered in order: once a process has heard from all the others, everything they sent
  // toward its participants' operands has landed.
  bool others_ended(LaunchGroup& group) override {
    const int64_t g = group.sequence();
    if (g >= kGroups) return true;  // (the launch failed at its first send)
    return announce(group, announced_end_, kEnded) && ended_[static_cast<size_t>(g % kGroups)].load() >= others(group);
  }

  // Exposes the participant's memory to the other processes of the group (see "the windows").
  void opening(LaunchGroup& group, Seat seat, const CoreContext& core) override {
    if ((memory_ == MPI_WIN_NULL && !heap_) || group.sequence() >= kGroups || !has_others(group)) return;
    std::vector<int64_t> regions;  // kRegionWords each
    Exposed exposed;
    {
      std::lock_guard lock(attach_mutex_);
      if (next_slot_ >= kSlots) return;  // its copies take the mailbox
      for (const MemoryRegion& r : core.regions()) {
        if (r.hi - r.lo < kDirectBytes) continue;  // no copy into it goes direct
        // In the segment, processes of this host reach it by offset; the dynamic window is for other
        // hosts, or for memory outside the segment.
        const int64_t shared = heap_ && heap_->contains(r.lo, r.hi - r.lo) ? heap_->offset(r.lo) : -1;
        int64_t address = -1;
        if (memory_ != MPI_WIN_NULL && (shared < 0 || !one_host_)) {
          if (const std::byte* range = attach(r.lo, r.hi)) {
            exposed.ranges.push_back(range);
            MPI_Aint a = 0;
            check(MPI_Get_address(r.lo, &a), "MPI_Get_address");
            address = static_cast<int64_t>(a);
          }
        }
        if (shared < 0 && address < 0) continue;
        regions.insert(regions.end(), {r.key, address, r.hi - r.lo, shared});
      }
      if (regions.empty()) return;
      exposed.slot = next_slot_++;
      exposed_[{group.sequence(), seat.member, seat.core}] = exposed;
    }
    for (int r = 0; r < size_; ++r) {
      const auto [lo, hi] = process_devices(group.members(), r, size_);
      if (r == rank_ || lo == hi) continue;
      std::vector<int64_t> msg(kHeaderWords + regions.size());
      header(msg, group, kRegions, seat.member, nullptr);
      msg[hCore] = seat.core;
      msg[hAmount] = exposed.slot;
      msg[hRank] = static_cast<int64_t>(regions.size() / kRegionWords);
      std::copy(regions.begin(), regions.end(), msg.begin() + kHeaderWords);
      send(group, r, msg);
    }
  }

  // Closes the participant's gate and waits until no direct put is inside, then lets its memory go.
  void closing(LaunchGroup& group, Seat seat) override {
    Exposed exposed;
    {
      std::lock_guard lock(attach_mutex_);
      const auto it = exposed_.find({group.sequence(), seat.member, seat.core});
      if (it == exposed_.end()) return;
      exposed = it->second;
      exposed_.erase(it);
    }
    // Called from destructors (GroupMembership): an MPI failure here has nobody to tell, and the
    // memory stays attached until the program ends.
    try {
      for (int64_t inside = fetch_add(rank_, gate(exposed.slot), kClosed); inside != 0;
           inside = read(rank_, gate(exposed.slot)) - kClosed)
        std::this_thread::sleep_for(std::chrono::microseconds(10));
    } catch (const Fault&) {
      return;
    }
    std::lock_guard lock(attach_mutex_);
    for (const std::byte* range : exposed.ranges) detach(range);
  }

  void settled(LaunchGroup& group) override {
    if (group.sequence() >= kGroups) return;
    update(rank_, entry(group.sequence(), kQuiet), 1, MPI_REPLACE);
    // Participants here that finished without reaching the end (a failure) must not leave the others
    // waiting there for this process.
    if (group.holds_to_the_end()) announce(group, announced_end_, kEnded);
  }

  void begin_run(MeshRun& run) override {
    std::lock_guard lock(mailbox_);
    sharing_ = heap_ != nullptr;
    // The window serves one call at a time: messages name a collective launch of "the" current call.
    if (run_)
      throw UserError("a shard_map over processes started while another one runs in this process",
                      fmt::format("shard_map over {} during one over {}", run.mesh().str(), run_->mesh().str()),
                      "after pl::distributed::initialize, call shard_map from one host thread at a time (and not "
                      "inside another shard_map's function)",
                      {});
    run_ = &run;
    all_stopped_ = false;
  }

  std::optional<RuntimeError> end_run(MeshRun&) override {
    {
      std::lock_guard lock(mailbox_);
      all_stopped_ = true;
      sharing_ = false;
    }
    update(rank_, kStopped, 1, MPI_REPLACE);
    // Keep taking what arrives until every process got here: others may still wait for this process's
    // part of a deadlock verdict, which needs every message consumed.
    MPI_Request barrier;
    check(MPI_Ibarrier(comm_, &barrier), "MPI_Ibarrier");
    for (int done = 0; !done;) {
      progress();
      check(MPI_Test(&barrier, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (!done) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    while (progress() > 0) {
    }
    std::lock_guard lock(mailbox_);
    progress_locked();  // every sender flushed before the barrier: all of it is here now
    std::optional<RuntimeError> error = std::move(late_);
    late_.reset();
    if (!error && !arrived_.empty())
      error = RuntimeError(fmt::format("{} remote copies or signals reached this process for collective launches none "
                                       "of its devices made",
                                       arrived_.size()),
                           ExecutionPoint{}, SourceLoc{});
    // Clear the window for the next call; nobody writes into it before everybody cleared theirs.
    const int64_t used = std::min<int64_t>(capacity_, kMailbox + cursor_);
    std::memset(base_, 0, static_cast<size_t>(std::max<int64_t>(used, kMailbox)));
    MPI_Win_sync(win_);
    arrived_.clear();
    cursor_ = 0;
    {
      std::lock_guard remote(remote_mutex_);
      remote_.clear();
    }
    {
      std::lock_guard attach(attach_mutex_);
      next_slot_ = 0;
    }
    run_ = nullptr;
    for (auto& a : announced_) a = false;
    for (auto& r : ready_) r = 0;
    for (auto& a : announced_end_) a = false;
    for (auto& e : ended_) e = 0;
    check(MPI_Barrier(comm_), "MPI_Barrier");
    return error;
  }

  std::vector<std::string> exchange(std::string mine) override {
    const int64_t length = static_cast<int64_t>(mine.size());
    std::vector<int64_t> lengths(static_cast<size_t>(size_));
    check(MPI_Allgather(&length, 1, MPI_INT64_T, lengths.data(), 1, MPI_INT64_T, comm_), "MPI_Allgather");
    std::vector<int> counts, displacements;
    int64_t total = 0;
    for (int64_t l : lengths) {
      if (total + l > INT32_MAX)
        throw UserError("the results of a shard_map over processes are too large to gather in one MPI call",
                        fmt::format("{} bytes in all", total + l),
                        "return smaller blocks, or gather them in several shard_map calls", {});
      counts.push_back(static_cast<int>(l));
      displacements.push_back(static_cast<int>(total));
      total += l;
    }
    std::string all(static_cast<size_t>(total), '\0');
    check(MPI_Allgatherv(mine.data(), static_cast<int>(length), MPI_BYTE, all.data(), counts.data(),
                         displacements.data(), MPI_BYTE, comm_),
          "MPI_Allgatherv");
    std::vector<std::string> out;
    for (int r = 0; r < size_; ++r) out.push_back(all.substr(static_cast<size_t>(displacements[r]), lengths[r]));
    return out;
  }

 private:
  using SeatKey = std::array<int64_t, 3>;  // collective launch, member, core
  // A participant of this process whose memory is attached: its gate and the attached ranges it holds.
  struct Exposed {
    int64_t slot = 0;
    std::vector<const std::byte*> ranges;
  };
  // A participant of another process, as its kRegions message described it.
  struct Remote {
    int64_t slot = 0;
    std::vector<int64_t> regions;  // kRegionWords each
  };
  // Where a copy's destination is: the target's gate, and its address in the dynamic window or in the
  // target process's part of the segment as mapped here (whichever this process can reach; null/-1 not).
  struct Destination {
    int64_t slot = 0;
    MPI_Aint address = -1;
    std::byte* mapped = nullptr;
  };

public:
  // Storage for an array while a shard_map over processes runs: from this process's part of the
  // segment while there is room (Array's storage source, runtime/array.h).
  std::shared_ptr<std::byte[]> segment_storage(int64_t nbytes) {
    if (!sharing_) return nullptr;
    std::byte* p = heap_->take(nbytes);
    if (!p) return nullptr;
    return std::shared_ptr<std::byte[]>(p, [heap = heap_](std::byte* q) { heap->give(q); });
  }
  CopyPaths paths() const {
    return {paths_shared_, paths_window_, paths_mailbox_, static_cast<double>(put_nanoseconds_) * 1e-9};
  }
  bool shared() const { return heap_ != nullptr; }

 private:
  // The host's shared segment: every process of this host allocates its part and maps the others'.
  void open_segment(int64_t bytes) {
    check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node_), "MPI_Comm_split_type");
    MPI_Comm_set_errhandler(node_, MPI_ERRORS_RETURN);
    int node_size = 0;
    MPI_Comm_size(node_, &node_size);
    // Open MPI keeps the segment in /dev/shm, and a page touched there beyond its free space is a
    // SIGBUS, not an error (a container's /dev/shm may be 64 MiB): each process takes at most half of
    // what is free divided among the processes of the host. Below 1 MiB it takes none (the heap then).
    if (struct statvfs fs; statvfs("/dev/shm", &fs) == 0) {
      const int64_t free_bytes = static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
      bytes = std::min(bytes, free_bytes / 2 / node_size);
      if (bytes < (int64_t{1} << 20)) bytes = 0;
    }
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alloc_shared_noncontig", "true");  // each part page-aligned on its own
    void* base = nullptr;
    const int rc = MPI_Win_allocate_shared(bytes, 1, info, node_, &base, &segment_);
    MPI_Info_free(&info);
    check(rc, "MPI_Win_allocate_shared");
    MPI_Win_set_errhandler(segment_, MPI_ERRORS_RETURN);
    // MPI_Win_sync, the memory barrier of the shared-memory model, needs an epoch.
    check(MPI_Win_lock_all(MPI_MODE_NOCHECK, segment_), "MPI_Win_lock_all");
    MPI_Group world_group, node_group;
    MPI_Comm_group(comm_, &world_group);
    MPI_Comm_group(node_, &node_group);
    std::vector<int> node_ranks(static_cast<size_t>(node_size)), world_ranks(static_cast<size_t>(node_size));
    for (int i = 0; i < node_size; ++i) node_ranks[static_cast<size_t>(i)] = i;
    check(MPI_Group_translate_ranks(node_group, node_size, node_ranks.data(), world_group, world_ranks.data()),
          "MPI_Group_translate_ranks");
    MPI_Group_free(&world_group);
    MPI_Group_free(&node_group);
    mapped_.assign(static_cast<size_t>(size_), nullptr);
    for (int i = 0; i < node_size; ++i) {
      MPI_Aint part = 0;
      int unit = 0;
      void* at = nullptr;
      check(MPI_Win_shared_query(segment_, i, &part, &unit, &at), "MPI_Win_shared_query");
      mapped_[static_cast<size_t>(world_ranks[static_cast<size_t>(i)])] = static_cast<std::byte*>(at);
    }
    one_host_ = node_size == size_;
    if (bytes > 0) heap_ = std::make_shared<SegmentHeap>(static_cast<std::byte*>(base), bytes);
  }

  struct Attached {
    const std::byte* hi;
    int64_t users;
  };

  bool has_others(const LaunchGroup& group) const {
    const auto [lo, hi] = local_devices(group.members());
    return hi - lo < group.members();
  }

  // Attaches [lo, hi) to the dynamic window, or counts one more user of an attached range holding it
  // (devices of a process may share an input; cores of a device share its operands). Returns the
  // attached range's start; null when [lo, hi) is empty or straddles an attached range (MPI forbids
  // overlapping attachments) or MPI attaches no more (Open MPI's osc_rdma_max_attach, 64 by default),
  // and then copies into it take the mailbox. Under attach_mutex_.
  const std::byte* attach(const std::byte* lo, const std::byte* hi) {
    if (lo >= hi) return nullptr;
    auto after = attached_.upper_bound(lo);
    if (after != attached_.begin()) {
      auto before = std::prev(after);
      if (before->second.hi > lo) {
        if (before->second.hi < hi) return nullptr;
        ++before->second.users;
        return before->first;
      }
    }
    if (after != attached_.end() && after->first < hi) return nullptr;
    if (MPI_Win_attach(memory_, const_cast<std::byte*>(lo), hi - lo) != MPI_SUCCESS) return nullptr;
    attached_.emplace(lo, Attached{hi, 1});
    return lo;
  }
  void detach(const std::byte* lo) {
    const auto it = attached_.find(lo);
    if (it == attached_.end() || --it->second.users > 0) return;
    MPI_Win_detach(memory_, const_cast<std::byte*>(lo));
    attached_.erase(it);
  }

  // Where the copy's destination is in the target's process (process r), if its memory is exposed
  // there. Drains this process's mailbox once to learn of it.
  std::optional<Destination> destination(const LaunchGroup& group, int64_t target, int core, int r,
                                         const RemotePut& p) {
    const SeatKey key{group.sequence(), target, core};
    for (int attempt = 0; attempt < 2; ++attempt) {
      {
        std::lock_guard lock(remote_mutex_);
        if (const auto it = remote_.find(key); it != remote_.end()) {
          const std::vector<int64_t>& w = it->second.regions;
          for (size_t i = 0; i + kRegionWords <= w.size(); i += kRegionWords) {
            if (w[i + rKey] != p.dst.key || p.dst.offset < 0 || p.dst.offset + p.extent > w[i + rBytes]) continue;
            Destination d{it->second.slot};
            std::byte* part = mapped_.empty() ? nullptr : mapped_[static_cast<size_t>(r)];
            if (w[i + rShared] >= 0 && part) d.mapped = part + w[i + rShared] + p.dst.offset;
            else if (w[i + rAddress] >= 0) d.address = static_cast<MPI_Aint>(w[i + rAddress] + p.dst.offset);
            else return std::nullopt;
            return d;
          }
          return std::nullopt;
        }
      }
      if (attempt == 0) progress();
    }
    return std::nullopt;
  }

  // The copy as one MPI_Put into the target's buffer, then a kLanded message for its semaphore. False
  // when it cannot go that way (memory not exposed, the participant already ended): the mailbox then.
  bool put_direct(const LaunchGroup& group, CoreContext& from, int64_t target, const RemotePut& p, SourceLoc loc) {
    const int r = owner(group, target);
    const auto where = destination(group, target, from.seat().core, r, p);
    if (!where) return false;
    if (!where->mapped && (!describable(p.shape, p.src_strides, p.bytes) || !describable(p.shape, p.dst_strides, p.bytes)))
      return false;
    const int64_t slot = where->slot;
    // Inside the gate the participant cannot end, so its memory stays: a late copy of a wrong program
    // then takes the mailbox and is reported, instead of writing memory that moved on.
    if (fetch_add(r, gate(slot), 1) >= kClosed) {
      update(r, gate(slot), -1, MPI_SUM);
      return false;
    }
    struct Leave {
      MpiTransport& t;
      int r;
      int64_t slot;
      ~Leave() {
        try {
          t.update(r, gate(slot), -1, MPI_SUM);
        } catch (const Fault&) {  // MPI failed: the error that got us here is the one to report
        }
      }
    } leave{*this, r, slot};
    if (where->mapped) {
      // The target's memory is mapped here: the copy is a memcpy, and MPI_Win_sync (the shared-memory
      // model's barrier) puts its bytes before the kLanded message that raises the semaphore.
      copy_box(where->mapped, p.dst_strides, p.src, p.src_strides, p.shape, p.es);
      check(MPI_Win_sync(segment_), "MPI_Win_sync");
      ++paths_shared_;
    } else {
      const MPI_Aint address = where->address;
      if (contiguous(p.shape, p.src_strides) && contiguous(p.shape, p.dst_strides)) {
        check(MPI_Put(p.src, static_cast<int>(p.bytes), MPI_BYTE, r, address, static_cast<int>(p.bytes), MPI_BYTE,
                      memory_),
              "MPI_Put");
      } else {
        const BoxType src(p.shape, p.src_strides, p.es), dst(p.shape, p.dst_strides, p.es);
        check(MPI_Put(p.src, 1, src.get(), r, address, 1, dst.get(), memory_), "MPI_Put");
      }
      check(MPI_Win_flush(r, memory_), "MPI_Win_flush");
      ++paths_window_;
    }
    std::vector<int64_t> msg(kHeaderWords);
    header(msg, group, kLanded, target, &from);
    msg[hDstKey] = p.recv_sem.key;
    msg[hDstOffset] = p.recv_sem.offset;
    msg[hRecvKey] = p.dst.key;  // where the data went, to judge a delivery after the target's end
    msg[hAmount] = p.bytes;
    append_origin(msg, from.point, loc);
    send(group, r, msg);
    return true;
  }

  int64_t read(int r, MPI_Aint at) {
    int64_t none = 0, out = 0;
    check(MPI_Fetch_and_op(&none, &out, MPI_INT64_T, r, at, MPI_NO_OP, win_), "MPI_Fetch_and_op");
    check(MPI_Win_flush(r, win_), "MPI_Win_flush");
    return out;
  }
  int64_t fetch_add(int r, MPI_Aint at, int64_t value) {
    int64_t out = 0;
    check(MPI_Fetch_and_op(&value, &out, MPI_INT64_T, r, at, MPI_SUM, win_), "MPI_Fetch_and_op");
    check(MPI_Win_flush(r, win_), "MPI_Win_flush");
    return out;
  }
  void update(int r, MPI_Aint at, int64_t value, MPI_Op op) {
    check(MPI_Accumulate(&value, 1, MPI_INT64_T, r, at, 1, MPI_INT64_T, op, win_), "MPI_Accumulate");
    check(MPI_Win_flush(r, win_), "MPI_Win_flush");
  }

  bool is_local(const LaunchGroup& group, int64_t member) const {
    const auto [lo, hi] = local_devices(group.members());
    return member >= lo && member < hi;
  }
  int owner(const LaunchGroup& group, int64_t member) const {
    for (int r = 0; r < size_; ++r)
      if (const auto [lo, hi] = process_devices(group.members(), r, size_); member >= lo && member < hi) return r;
    return 0;
  }

  // The processes other than this one that run devices of the group's mesh.
  int others(const LaunchGroup& group) const {
    int n = 0;
    for (int r = 0; r < size_; ++r) {
      const auto [lo, hi] = process_devices(group.members(), r, size_);
      if (r != rank_ && lo != hi) ++n;
    }
    return n;
  }

  // Sends a `kind` message about the group to every other process of it, the first time only (`sent`
  // remembers, by group). Returns true.
  bool announce(const LaunchGroup& group, std::array<std::atomic<bool>, kGroups>& sent, Kind kind) {
    const int64_t g = group.sequence();
    if (sent[static_cast<size_t>(g % kGroups)].exchange(true)) return true;
    for (int r = 0; r < size_; ++r) {
      const auto [lo, hi] = process_devices(group.members(), r, size_);
      if (r == rank_ || lo == hi) continue;
      std::vector<int64_t> msg(kHeaderWords);
      header(msg, group, kind, lo, nullptr);
      send(group, r, msg);
    }
    return true;
  }

  void header(std::vector<int64_t>& msg, const LaunchGroup& group, Kind kind, int64_t target, const CoreContext* from) {
    msg[hSize] = static_cast<int64_t>(msg.size() * sizeof(int64_t));
    msg[hKind] = kind;
    msg[hGroup] = group.sequence();
    msg[hMember] = target;
    msg[hCore] = from ? from->seat().core : 0;
    msg[hFrom] = from ? from->seat().member : 0;
  }

  // Puts `msg` into process r's mailbox: counted as sent first (so that it is in flight from then on),
  // a place reserved atomically, the body put, then the flag.
  void send(const LaunchGroup& group, int r, std::vector<int64_t>& msg) {
    const int64_t g = group.sequence();
    if (g >= kGroups)
      throw Fault(fmt::format("{} is collective launch #{} of its shard_map call: across processes a shard_map call may "
                              "make at most {}. Split the work over several shard_map calls",
                              group.scope(), g, kGroups));
    const int64_t bytes = msg[hSize];
    update(rank_, entry(g, kSent), 1, MPI_SUM);
    const int64_t at = fetch_add(r, kTail, bytes);
    if (kMailbox + at + bytes > capacity_) {
      update(rank_, entry(g, kSent), -1, MPI_SUM);  // it never leaves
      throw Fault(fmt::format(
          "the MPI window of process {} is full: this shard_map call sent it more than {} bytes of remote copies and "
          "signals. Give pl::distributed::initialize a larger window_bytes, or split the work over several shard_map "
          "calls",
          r, capacity_ - kMailbox));
    }
    const MPI_Aint place = kMailbox + at;
    check(MPI_Put(msg.data() + 1, static_cast<int>(bytes - 8), MPI_BYTE, r, place + 8, static_cast<int>(bytes - 8),
                  MPI_BYTE, win_),
          "MPI_Put");
    check(MPI_Win_flush(r, win_), "MPI_Win_flush");
    update(r, place, 1, MPI_REPLACE);
  }

  // Takes in what arrived and delivers what it can; returns how many messages it consumed. One thread
  // drains at a time; the others go back to waiting.
  int progress() {
    std::unique_lock lock(mailbox_, std::try_to_lock);
    if (!lock.owns_lock()) return 0;
    return progress_locked();
  }

  int progress_locked() {
    for (;;) {
      if (kMailbox + cursor_ + static_cast<int64_t>(kHeaderWords * 8) > capacity_) break;
      if (read(rank_, kMailbox + cursor_) == 0) break;
      MPI_Win_sync(win_);
      // Delivered from where it landed: the window keeps it until the call ends.
      const auto* m = reinterpret_cast<const int64_t*>(static_cast<const std::byte*>(base_) + kMailbox + cursor_);
      arrived_.push_back(m);
      cursor_ += m[hSize];
    }
    int consumed = 0;
    for (auto it = arrived_.begin(); it != arrived_.end();) {
      if (!deliver(*it)) {
        ++it;
        continue;
      }
      const int64_t g = (*it)[hGroup];
      update(rank_, entry(g, kQuiet), 0, MPI_REPLACE);
      update(rank_, entry(g, kConsumed), 1, MPI_SUM);
      it = arrived_.erase(it);
      ++consumed;
    }
    return consumed;
  }

  // Delivers one message; false when its target is not ready yet (it stays in the mailbox).
  bool deliver(const int64_t* msg) {
    const int64_t g = msg[hGroup];
    if (msg[hKind] == kReady || msg[hKind] == kEnded) {
      // Under the group's lock, as every delivery that can end a wait: a participant that checks for a
      // deadlock holds it from judging every local wait hopeless until it has read every process's
      // counters, so the announcement either wakes a wait it judges, or is still unconsumed then.
      // Without the lock it could land in between, and the counters would show nothing in flight.
      // Until a device here makes the launch it stays in the mailbox (and in flight); once every
      // device here stopped, nobody here waits for it.
      const std::shared_ptr<LaunchGroup> group = run_ ? run_->find(g) : nullptr;
      if (!group) return all_stopped_;
      {
        std::lock_guard lock(group->mutex());
        ++(msg[hKind] == kReady ? ready_ : ended_)[static_cast<size_t>(g % kGroups)];
      }
      group->notify();  // a participant here may wait at its end in changed_.wait_for
      return true;
    }
    if (msg[hKind] == kRegions) {
      std::lock_guard lock(remote_mutex_);
      remote_[{g, msg[hMember], msg[hCore]}] = Remote{
          msg[hAmount], std::vector<int64_t>(msg + kHeaderWords, msg + kHeaderWords + kRegionWords * msg[hRank])};
      return true;
    }
    const std::shared_ptr<LaunchGroup> group = run_ ? run_->find(g) : nullptr;
    const Seat seat{msg[hMember], static_cast<int>(msg[hCore])};
    LaunchGroup::Delivery result = LaunchGroup::Delivery::gone;
    if (group) {
      try {
        // A put's destination and receive semaphore (kLanded: the semaphore, and in hRecvKey where the
        // data went), a signal's semaphore: operands (negative keys) may still be reached after the
        // target's end (docs/design.md §4.9).
        const bool into_operands = msg[hDstKey] < 0 && (msg[hKind] == kSignal || msg[hRecvKey] < 0);
        result = group->deliver(seat, [&](CoreContext& t) { apply(t, msg); }, into_operands);
      } catch (const std::exception& e) {
        if (!late_) {
          auto [point, loc] = read_origin(msg);
          late_.emplace(e.what(), std::move(point), loc);
        }
        return true;
      }
    } else if (!all_stopped_) {
      return false;  // its device has not launched it yet
    }
    if (result == LaunchGroup::Delivery::not_ready) return false;
    if (result == LaunchGroup::Delivery::gone && !late_ && run_) {
      const Mesh& mesh = run_->mesh();
      // Reported on the host after the call as the sender's failure (its header: the sender's device,
      // core and grid point, the copy's line); the message names the kernel and its pallas_call when a
      // device here made the launch.
      const std::string kernel =
          group ? fmt::format("kernel `{}` (collective launch #{}, the pallas_call at {})", group->key().kernel, g,
                              group->key().loc.str())
                : fmt::format("collective launch #{}", g);
      auto [point, loc] = read_origin(msg);
      late_.emplace(
          fmt::format(
          "a remote {} from {}, core {}, reached {} after that device's instance of {} had ended or it had stopped: a "
          "device may only reach another while that one runs the same kernel (after its end, only its operands, when "
          "the kernel returns semaphores). Make the receiver wait for it (wait_recv, or semaphore_wait on the "
          "signalled semaphore) before its kernel ends, or return the receive semaphore as an output and wait in the "
          "next call",
          msg[hKind] == kSignal ? "semaphore_signal" : "copy", mesh.device_str(msg[hFrom]), msg[hCore],
          mesh.device_str(seat.member), kernel),
          std::move(point), loc);
    }
    return true;
  }

  void apply(CoreContext& t, const int64_t* msg) {
    if (msg[hKind] == kSignal || msg[hKind] == kLanded) {
      // kLanded: the data was put and flushed (or copied and synced) before this message left; make it
      // visible here first.
      if (msg[hKind] == kLanded) {
        if (memory_ != MPI_WIN_NULL) MPI_Win_sync(memory_);
        if (segment_ != MPI_WIN_NULL) MPI_Win_sync(segment_);
      }
      auto* sem = reinterpret_cast<int64_t*>(local_address(t, RemoteAddress{msg[hDstKey], msg[hDstOffset]},
                                                           sizeof(int64_t),
                                                           msg[hKind] == kLanded ? "the receive semaphore"
                                                                                 : "the signalled semaphore"));
      std::atomic_ref<int64_t>(*sem).fetch_add(msg[hAmount]);
      return;
    }
    const size_t rank = static_cast<size_t>(msg[hRank]);
    const std::span<const int64_t> shape(msg + kHeaderWords, rank);
    const std::span<const int64_t> strides(msg + kHeaderWords + rank, rank);
    std::byte* to = local_address(t, RemoteAddress{msg[hDstKey], msg[hDstOffset]}, msg[hExtent],
                                  "the destination of a remote copy");
    auto* recv = reinterpret_cast<int64_t*>(
        local_address(t, RemoteAddress{msg[hRecvKey], msg[hRecvOffset]}, sizeof(int64_t), "the receive semaphore"));
    copy_box(to, strides, reinterpret_cast<const std::byte*>(msg + kHeaderWords + 2 * rank),
             row_major_strides(Shape(shape.begin(), shape.end())), shape, msg[hEs]);
    std::atomic_ref<int64_t>(*recv).fetch_add(msg[hAmount]);
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Win win_ = MPI_WIN_NULL;
  MPI_Win memory_ = MPI_WIN_NULL;  // the dynamic window over exposed kernel memory (null: none, no direct puts)
  // The host's shared segment (null: none): this process's part as a heap, every part as mapped here
  // by process (null: on another host), and whether every process is on this host.
  MPI_Comm node_ = MPI_COMM_NULL;
  MPI_Win segment_ = MPI_WIN_NULL;
  std::shared_ptr<SegmentHeap> heap_;
  std::vector<std::byte*> mapped_;
  bool one_host_ = false;
  // Whether arrays come from the segment now: while a shard_map over processes runs.
  std::atomic<bool> sharing_{false};
  std::atomic<int64_t> paths_shared_{0}, paths_window_{0}, paths_mailbox_{0}, put_nanoseconds_{0};
  // Adds the time from its construction to its destruction to `total`.
  struct Timed {
    std::atomic<int64_t>& total;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    ~Timed() {
      total += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
    }
  };
  void* base_ = nullptr;
  int rank_ = 0, size_ = 1;
  int64_t capacity_;
  // The mailbox's reader state, under mailbox_.
  std::mutex mailbox_;
  MeshRun* run_ = nullptr;
  bool all_stopped_ = false;
  int64_t cursor_ = 0;
  std::list<const int64_t*> arrived_;  // in the window, not yet delivered
  std::optional<RuntimeError> late_;         // the first copy or signal that came too late, as its sender's failure
  std::array<std::atomic<bool>, kGroups> announced_{};
  std::array<std::atomic<int>, kGroups> ready_{};
  std::array<std::atomic<bool>, kGroups> announced_end_{};  // kEnded sent (others_ended)
  std::array<std::atomic<int>, kGroups> ended_{};           // kEnded received
  // Exposed memory of this process's participants, under attach_mutex_.
  std::mutex attach_mutex_;
  std::map<const std::byte*, Attached> attached_;
  std::map<SeatKey, Exposed> exposed_;
  int64_t next_slot_ = 0;
  // Other processes' participants' exposed memory, learnt from their kRegions messages.
  std::mutex remote_mutex_;
  std::map<SeatKey, Remote> remote_;
};

std::unique_ptr<MpiTransport> g_transport;
bool g_we_initialized = false;

void finalize() {
  set_storage_source(nullptr, 0);
  set_process_transport(nullptr);
  g_transport.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g_we_initialized && !finalized) MPI_Finalize();
}

std::shared_ptr<std::byte[]> segment_storage(int64_t nbytes) {
  return g_transport ? g_transport->segment_storage(nbytes) : nullptr;
}

}  // namespace

bool initialized() { return g_transport != nullptr; }

CopyPaths copy_paths() { return g_transport ? g_transport->paths() : CopyPaths{}; }
bool has_shared_segment() { return g_transport && g_transport->shared(); }

void initialize(const Options& options, SourceLoc loc) {
  if (options.window_bytes < kMailbox + (int64_t{1} << 16) || options.window_bytes > INT32_MAX)
    throw UserError("pl::distributed::initialize: window_bytes is out of range",
                    fmt::format("window_bytes = {}", options.window_bytes),
                    fmt::format("give between {} and {} bytes (the default is 64 MiB)", kMailbox + (int64_t{1} << 16),
                                INT32_MAX),
                    loc);
  if (options.shared_bytes < 0 || (options.shared_bytes > 0 && options.shared_bytes < (int64_t{1} << 20)))
    throw UserError("pl::distributed::initialize: shared_bytes is out of range",
                    fmt::format("shared_bytes = {}", options.shared_bytes),
                    "give 0 (no shared-memory segment: copies between processes of a host go through MPI) or at "
                    "least 1 MiB (1048576 bytes; the default is 1 GiB)",
                    loc);
  if (g_transport)
    throw UserError("pl::distributed::initialize was called twice", "a second call",
                    "call it once, at the start of the program", loc);
  int already = 0;
  MPI_Initialized(&already);
  int provided = 0;
  if (!already) {
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    g_we_initialized = true;
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_MULTIPLE)
    throw UserError("pl::distributed::initialize needs an MPI with MPI_THREAD_MULTIPLE: every device is a thread that "
                    "calls MPI",
                    fmt::format("the MPI library provides thread level {}", provided),
                    "use an MPI built with thread-multiple support (Open MPI 4 is), or initialise it with "
                    "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) before calling pl::distributed::initialize",
                    loc);
  g_transport = std::make_unique<MpiTransport>(options);
  set_process_transport(g_transport.get());
  if (options.shared_bytes > 0) set_storage_source(segment_storage, kDirectBytes);
  std::atexit(finalize);
}

}  // namespace tessera::rt::mpi
