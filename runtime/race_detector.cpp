#include "runtime/race_detector.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <set>
#include <tuple>
#include <unordered_set>

#include "runtime/launch.h"
#include "runtime/memory.h"

namespace tessera::rt {

std::string_view access_kind_name(AccessKind kind) {
  switch (kind) {
    case AccessKind::read: return "read";
    case AccessKind::write: return "write";
    case AccessKind::dma_read: return "DMA read";
    case AccessKind::dma_write: return "DMA write";
    case AccessKind::remote_write: return "remote write";
  }
  return "access";
}

namespace {

bool by_copy(AccessKind k) { return k != AccessKind::read && k != AccessKind::write; }
bool writes(AccessKind k) { return k != AccessKind::read && k != AccessKind::dma_read; }

}  // namespace

std::string AccessSite::str() const {
  std::string s = fmt::format("{} of {}{}", access_kind_name(kind), buffer, region);
  if (target_device >= 0) s += fmt::format(" on device {}", target_device);
  s += by_copy(kind) ? fmt::format(" (a copy started by {})", point.str()) : fmt::format(" by {}", point.str());
  return s + fmt::format(" at {}", loc.str());
}

namespace {

using Clock = std::vector<uint32_t>;

constexpr int32_t kNobody = INT32_MIN;

// An access in the shadow: by core actor `who` at its clock, or (who < 0) by copy -1 - who.
struct Epoch {
  int32_t who = kNobody;
  uint32_t clock = 0;
  uint32_t site = 0;  // index of its AccessSite
  bool operator==(const Epoch&) const = default;
};

// Bytes [lo, hi) of a region (lo is the map's key): the last write and the reads since that no
// later read of the same bytes is ordered after.
struct Cell {
  int64_t hi = 0;
  Epoch write;
  std::vector<Epoch> reads;
  bool same_state(const Cell& o) const { return write == o.write && reads == o.reads; }
};

// A piece of memory every participant names alike: an operand of a device (or of all, in an
// mpmd_map) or a core's allocation, by its region key (runtime/launch.h: MemoryRegion).
struct RegionId {
  int64_t owner = 0;
  int64_t key = 0;
  bool operator==(const RegionId&) const = default;
};
struct SemaphoreId {
  RegionId region;
  int64_t offset = 0;
  bool operator==(const SemaphoreId&) const = default;
};
struct RegionHash {
  size_t operator()(const RegionId& r) const { return std::hash<int64_t>()(r.owner * 1000003 + r.key); }
};
struct SemaphoreHash {
  size_t operator()(const SemaphoreId& s) const { return RegionHash()(s.region) * 31 + std::hash<int64_t>()(s.offset); }
};

constexpr int64_t kUnknownOwner = INT64_MIN;  // memory outside every region: named by its address

struct Actor {
  const CoreContext* ctx;
  int64_t member;
  int core;
  Clock clock;
  std::shared_ptr<const Clock> snapshot;  // `clock` as of its last join (its own entry may lag)
};

// A copy: its starter's clock at the start, and the waits that consumed its completion.
struct CopyRecord {
  int starter;
  uint32_t start_clock;
  std::shared_ptr<const Clock> knew;
  std::vector<std::pair<int, uint32_t>> acquirers;
};

// An increment of a semaphore not yet taken: a copy's completion, or a signal by `actor` at `clock`.
struct Increment {
  int64_t remaining;
  int64_t copy;  // >= 0: a copy's completion
  int actor;
  uint32_t clock;
  std::shared_ptr<const Clock> knew;
};

// The runs of contiguous bytes a window (of elements of `es` bytes, strides in elements) covers,
// relative to its first element, merged where they touch; only the elements where `mask` is true.
std::vector<std::pair<int64_t, int64_t>> byte_runs(const Shape& shape, std::span<const int64_t> strides, int64_t es,
                                                   const Array* mask) {
  std::vector<std::pair<int64_t, int64_t>> runs;
  if (num_elements(shape) == 0) return runs;
  auto emit = [&](int64_t lo, int64_t hi) {
    if (!runs.empty() && runs.back().second == lo) runs.back().second = hi;
    else runs.emplace_back(lo, hi);
  };
  const size_t rank = shape.size();
  if (rank == 0) {
    if (!mask || mask->data_as<bool>()[0]) emit(0, es);
    return runs;
  }
  // Dims [inner, rank) form one contiguous run of `run` elements (unmasked windows only).
  size_t inner = rank;
  int64_t run = 1;
  if (!mask && (strides[rank - 1] == 1 || shape[rank - 1] == 1)) {
    inner = rank - 1;
    run = shape[rank - 1];
    while (inner > 0 && (shape[inner - 1] == 1 || strides[inner - 1] == run)) run *= shape[--inner];
  }
  const bool* m = mask ? mask->data_as<bool>() : nullptr;
  std::vector<int64_t> index(inner, 0);
  for (int64_t linear = 0;; ++linear) {
    int64_t offset = 0;
    for (size_t d = 0; d < inner; ++d) offset += index[d] * strides[d];
    if (!m || m[linear]) emit(offset * es, (offset + run) * es);
    size_t d = inner;
    while (d > 0 && ++index[d - 1] == shape[d - 1]) index[--d] = 0;
    if (d == 0) break;
  }
  return runs;
}

// "[0:8, 0:128]": the element ranges of the buffer the window spans.
std::string region_of(const RefView& ref) {
  const Shape& shape = ref.buffer->shape;
  if (shape.empty()) return "";
  // Saturated: a window near INT64_MAX (masked_access_test) must not overflow while being described.
  int64_t last = ref.offset;
  for (size_t d = 0; d < ref.shape.size(); ++d) {
    int64_t reach = 0;
    if (__builtin_mul_overflow(ref.shape[d] - 1, ref.strides[d], &reach) || __builtin_add_overflow(last, reach, &last))
      last = reach < 0 ? INT64_MIN : INT64_MAX;
  }
  const std::vector<int64_t> lo = row_major_index(shape, ref.offset), hi = row_major_index(shape, last);
  std::vector<std::string> ranges;
  for (size_t d = 0; d < shape.size(); ++d) ranges.push_back(fmt::format("{}:{}", lo[d], hi[d] + 1));
  return fmt::format("[{}]", fmt::join(ranges, ", "));
}

// A race's identity for deduplication: both sites (kind and line, in either order) and the buffer.
using SiteKey = std::tuple<int, std::string_view, uint32_t, uint32_t>;
SiteKey site_key(const AccessSite& s) {
  return {static_cast<int>(s.kind), s.loc.file ? std::string_view(s.loc.file) : std::string_view(), s.loc.line,
          s.loc.column};
}

std::string race_message(const AccessSite& first, const AccessSite& second) {
  const int64_t device = first.kind == AccessKind::remote_write ? first.target_device
                         : second.kind == AccessKind::remote_write ? second.target_device
                                                                     : first.point.device;
  const std::string fix =
      by_copy(first.kind) || by_copy(second.kind)
          ? "wait for the copy before touching its source or destination (.wait(); across devices wait_recv on the "
            "receiver and wait_send on the sender), and start a copy only into memory nobody may still be using"
          : "order the two: signal a semaphore after the first and wait on it before the second, or give each core "
            "its own memory (its own scratch, or its own output block per parallel step)";
  return fmt::format(
      "race on `{}` of device {}: two accesses to the same bytes, at least one a write, that no wait or signal "
      "orders\n  {}\n  {}\n  fix: {}",
      second.buffer, device, first.str(), second.str(), fix);
}

}  // namespace

struct RaceDetector::Impl {
  bool shared_operands;
  mutable std::mutex mutex;
  std::deque<Actor> actors;
  std::deque<CopyRecord> copies;
  std::deque<AccessSite> sites;
  std::unordered_map<RegionId, std::map<int64_t, Cell>, RegionHash> shadow;
  std::unordered_map<SemaphoreId, std::deque<Increment>, SemaphoreHash> semaphores;
  std::unordered_set<SemaphoreId, SemaphoreHash> initialised;  // those whose initial count is in
  std::set<std::tuple<SiteKey, SiteKey, std::string>> seen;
  std::vector<RaceReport> reports;

  // The owner of region `key` of member `member`'s core `core`.
  int64_t owner(int64_t key, int64_t member, int core) const {
    if (key < 0) return shared_operands ? -1 : member;  // an operand
    return (int64_t{1} << 40) + member * 65536 + core;  // an allocation of that core
  }

  // Where `p` (in `actor`'s memory, `extent` bytes) lies, as the same memory of member `member`.
  std::pair<RegionId, int64_t> place(const Actor& a, const std::byte* p, int64_t extent, int64_t member) const {
    const MemoryRegion* r = a.ctx->region_containing(p, extent);
    if (!r) return {RegionId{kUnknownOwner, 0}, reinterpret_cast<int64_t>(p)};
    return {RegionId{owner(r->key, member, a.core), r->key}, p - r->lo};
  }
  SemaphoreId semaphore(const Actor& a, const int64_t* sem, int64_t member) const {
    auto [region, offset] = place(a, reinterpret_cast<const std::byte*>(sem), sizeof(int64_t), member);
    return SemaphoreId{region, offset};
  }

  std::shared_ptr<const Clock> snapshot(Actor& a) {
    if (!a.snapshot) a.snapshot = std::make_shared<const Clock>(a.clock);
    return a.snapshot;
  }
  static void join(Actor& a, const Clock& other, int who, uint32_t clock) {
    if (a.clock.size() < other.size()) a.clock.resize(other.size(), 0);
    for (size_t i = 0; i < other.size(); ++i) a.clock[i] = std::max(a.clock[i], other[i]);
    if (a.clock.size() <= static_cast<size_t>(who)) a.clock.resize(static_cast<size_t>(who) + 1, 0);
    a.clock[static_cast<size_t>(who)] = std::max(a.clock[static_cast<size_t>(who)], clock);
    a.snapshot.reset();
  }

  // Whether the access `e` happens before an access by `who` (an actor, or -1 - copy) whose clock is `now`.
  bool ordered(const Epoch& e, const Clock& now, int32_t who) const {
    if (e.who == who) return true;
    auto knows = [&](int actor, uint32_t clock) { return static_cast<size_t>(actor) < now.size() && now[actor] >= clock; };
    if (e.who >= 0) return knows(e.who, e.clock);
    for (auto [actor, clock] : copies[static_cast<size_t>(-1 - e.who)].acquirers)
      if (knows(actor, clock)) return true;
    return false;
  }

  uint32_t add_site(AccessKind kind, const Actor& a, const RefView& ref, int64_t target_device, SourceLoc loc) {
    sites.push_back(AccessSite{kind, a.ctx->point, ref.buffer->name, region_of(ref), target_device, loc});
    return static_cast<uint32_t>(sites.size() - 1);
  }

  void race(uint32_t first, uint32_t second) {
    const AccessSite& f = sites[first];
    const AccessSite& s = sites[second];
    SiteKey a = site_key(f), b = site_key(s);
    if (b < a) std::swap(a, b);
    if (!seen.emplace(a, b, s.buffer).second) return;
    RaceReport r{s.buffer, f, s, race_message(f, s)};
    std::fprintf(stderr, "tessera: %s\n", r.message.c_str());
    reports.push_back(std::move(r));
  }

  void check_cell(Cell& c, bool write, const Epoch& cur, const Clock& now) {
    if (c.write.who != kNobody && !ordered(c.write, now, cur.who)) race(c.write.site, cur.site);
    if (write) {
      for (const Epoch& r : c.reads)
        if (!ordered(r, now, cur.who)) race(r.site, cur.site);
      c.write = cur;
      c.reads.clear();
      return;
    }
    // A read ordered before this one is subsumed by it: whatever races with it races with this one.
    std::erase_if(c.reads, [&](const Epoch& r) { return ordered(r, now, cur.who); });
    c.reads.push_back(cur);
  }

  // Checks and records an access to bytes [lo, hi) of `region`.
  void check_run(const RegionId& region, int64_t lo, int64_t hi, bool write, const Epoch& cur, const Clock& now) {
    std::map<int64_t, Cell>& cells = shadow[region];
    auto it = cells.upper_bound(lo);
    if (it != cells.begin() && std::prev(it)->second.hi > lo) --it;
    int64_t pos = lo;
    while (pos < hi) {
      if (it == cells.end() || it->first >= hi) {
        it = cells.emplace_hint(it, pos, Cell{hi, {}, {}});
      } else if (it->first > pos) {
        it = cells.emplace_hint(it, pos, Cell{it->first, {}, {}});
      } else if (it->first < pos) {  // split off the part before lo
        Cell tail = it->second;
        it->second.hi = pos;
        it = cells.emplace_hint(std::next(it), pos, std::move(tail));
        continue;
      }
      if (it->second.hi > hi) {  // split off the part after hi
        Cell tail = it->second;
        it->second.hi = hi;
        cells.emplace_hint(std::next(it), hi, std::move(tail));
      }
      check_cell(it->second, write, cur, now);
      pos = it->second.hi;
      ++it;
    }
    // Neighbours left in the same state merge again, so that a block written whole stays one cell.
    auto first = cells.upper_bound(lo);
    if (first != cells.begin()) --first;
    if (first != cells.begin()) --first;
    for (auto next = std::next(first); next != cells.end() && first->first <= hi; next = std::next(first)) {
      if (first->second.hi == next->first && first->second.same_state(next->second)) {
        first->second.hi = next->second.hi;
        cells.erase(next);
      } else {
        first = next;
      }
    }
  }

  void check_window(const Actor& a, const RefView& ref, const Array* mask, int64_t member, bool write, const Epoch& cur) {
    const int64_t es = dtype_size(ref.buffer->dtype);
    const std::vector<std::pair<int64_t, int64_t>> runs = byte_runs(ref.shape, ref.strides, es, mask);
    if (runs.empty()) return;
    auto [region, base] = place(a, ref.buffer->data(), 1, member);
    base += ref.offset * es;
    for (auto [lo, hi] : runs) check_run(region, base + lo, base + hi, write, cur, a.clock);
  }

  int64_t begin_copy(Actor& a, int actor) {
    copies.push_back(CopyRecord{actor, a.clock[static_cast<size_t>(actor)], snapshot(a), {}});
    return static_cast<int64_t>(copies.size() - 1);
  }

  void push(const SemaphoreId& sem, Increment inc) {
    if (inc.remaining > 0) semaphores[sem].push_back(std::move(inc));
  }
};

RaceDetector::RaceDetector(bool shared_operands) : impl_(std::make_unique<Impl>()) {
  impl_->shared_operands = shared_operands;
}
RaceDetector::~RaceDetector() = default;

int RaceDetector::add_actor(const CoreContext& ctx, int64_t member, int core) {
  std::lock_guard lock(impl_->mutex);
  const int id = static_cast<int>(impl_->actors.size());
  Clock clock(static_cast<size_t>(id) + 1, 0);
  clock.back() = 1;  // others know nothing of it until it releases something
  impl_->actors.push_back(Actor{&ctx, member, core, std::move(clock), nullptr});
  return id;
}

void RaceDetector::access(int actor, AccessKind kind, const RefView& ref, const Array* mask, SourceLoc loc) {
  if (num_elements(ref.shape) == 0) return;
  std::lock_guard lock(impl_->mutex);
  Actor& a = impl_->actors[static_cast<size_t>(actor)];
  const Epoch cur{actor, a.clock[static_cast<size_t>(actor)], impl_->add_site(kind, a, ref, -1, loc)};
  impl_->check_window(a, ref, mask, a.member, writes(kind), cur);
}

int64_t RaceDetector::start_copy(int actor, const RefView& src, const RefView& dst, SourceLoc loc) {
  std::lock_guard lock(impl_->mutex);
  Actor& a = impl_->actors[static_cast<size_t>(actor)];
  const int64_t copy = impl_->begin_copy(a, actor);
  const int32_t who = static_cast<int32_t>(-1 - copy);
  if (num_elements(src.shape) > 0)
    impl_->check_window(a, src, nullptr, a.member, false, {who, 0, impl_->add_site(AccessKind::dma_read, a, src, -1, loc)});
  if (num_elements(dst.shape) > 0)
    impl_->check_window(a, dst, nullptr, a.member, true, {who, 0, impl_->add_site(AccessKind::dma_write, a, dst, -1, loc)});
  ++a.clock[static_cast<size_t>(actor)];  // what the core does next is concurrent with the copy
  return copy;
}

void RaceDetector::start_remote_copy(int actor, const RefView& src, const RefView& dst, const int64_t* send_sem,
                                     const int64_t* recv_sem, int64_t target_member, int64_t target_device,
                                     SourceLoc loc) {
  std::lock_guard lock(impl_->mutex);
  Actor& a = impl_->actors[static_cast<size_t>(actor)];
  const int64_t copy = impl_->begin_copy(a, actor);
  const int32_t who = static_cast<int32_t>(-1 - copy);
  if (num_elements(src.shape) > 0) {
    impl_->check_window(a, src, nullptr, a.member, false, {who, 0, impl_->add_site(AccessKind::dma_read, a, src, -1, loc)});
    impl_->check_window(a, dst, nullptr, target_member, true,
                        {who, 0, impl_->add_site(AccessKind::remote_write, a, dst, target_device, loc)});
  }
  const int64_t bytes = num_elements(src.shape) * dtype_size(src.buffer->dtype);
  impl_->push(impl_->semaphore(a, send_sem, a.member), Increment{bytes, copy, actor, 0, nullptr});
  impl_->push(impl_->semaphore(a, recv_sem, target_member), Increment{bytes, copy, actor, 0, nullptr});
  ++a.clock[static_cast<size_t>(actor)];
}

void RaceDetector::copy_done(int actor, int64_t copy, const int64_t* sem, int64_t bytes) {
  std::lock_guard lock(impl_->mutex);
  const Actor& a = impl_->actors[static_cast<size_t>(actor)];
  impl_->push(impl_->semaphore(a, sem, a.member), Increment{bytes, copy, actor, 0, nullptr});
}

void RaceDetector::signal(int actor, const int64_t* sem, int64_t amount) { remote_signal(actor, sem, amount, -1); }

void RaceDetector::remote_signal(int actor, const int64_t* sem, int64_t amount, int64_t target_member) {
  std::lock_guard lock(impl_->mutex);
  Actor& a = impl_->actors[static_cast<size_t>(actor)];
  const SemaphoreId id = impl_->semaphore(a, sem, target_member < 0 ? a.member : target_member);
  impl_->push(id, Increment{amount, -1, actor, a.clock[static_cast<size_t>(actor)], impl_->snapshot(a)});
  ++a.clock[static_cast<size_t>(actor)];  // what the core does next is not ordered before the waiter
}

void RaceDetector::wait(int actor, const int64_t* sem, int64_t value) {
  std::lock_guard lock(impl_->mutex);
  Actor& a = impl_->actors[static_cast<size_t>(actor)];
  auto found = impl_->semaphores.find(impl_->semaphore(a, sem, a.member));
  if (found == impl_->semaphores.end() || value <= 0) return;
  std::deque<Increment>& pending = found->second;
  std::vector<int64_t> consumed;
  for (int64_t left = value; left > 0 && !pending.empty();) {
    Increment& inc = pending.front();
    if (inc.copy >= 0) {
      const CopyRecord& c = impl_->copies[static_cast<size_t>(inc.copy)];
      if (c.starter != actor) Impl::join(a, *c.knew, c.starter, c.start_clock);
      consumed.push_back(inc.copy);
    } else if (inc.actor >= 0 && inc.actor != actor) {  // an initial count (actor -1) orders nothing
      Impl::join(a, *inc.knew, inc.actor, inc.clock);
    }
    const int64_t take = std::min(left, inc.remaining);
    left -= take;
    if ((inc.remaining -= take) == 0) pending.pop_front();
  }
  // The core's next accesses come after the wait: the copies it consumed are ordered before them.
  const uint32_t now = ++a.clock[static_cast<size_t>(actor)];
  for (int64_t c : consumed) impl_->copies[static_cast<size_t>(c)].acquirers.emplace_back(actor, now);
}

void RaceDetector::initial_count(int actor, const int64_t* sem, int64_t amount) {
  std::lock_guard lock(impl_->mutex);
  const Actor& a = impl_->actors[static_cast<size_t>(actor)];
  const SemaphoreId id = impl_->semaphore(a, sem, a.member);
  if (amount <= 0 || !impl_->initialised.insert(id).second) return;
  impl_->semaphores[id].push_front(Increment{amount, -1, -1, 0, nullptr});
}

std::vector<RaceReport> RaceDetector::reports() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->reports;
}

std::pair<RefView, RefView> block_copy_windows(const RefView& array, const RefView& block, std::span<const int64_t> starts,
                                               const BlockWindow& window) {
  BlockBox box;
  if (block_box(array.shape, block.shape, starts, window, "", box))
    return {RefView{array.buffer, 0, {0}, {1}}, RefView{block.buffer, 0, {0}, {1}}};
  RefView in_array = array, in_block = block;
  in_array.shape = in_block.shape = box.shape;
  for (size_t d = 0; d < box.shape.size(); ++d) {
    in_array.offset += box.array_at[d] * array.strides[d];
    in_block.offset += box.block_at[d] * block.strides[d];
  }
  return {in_array, in_block};
}

std::shared_ptr<RaceDetector> RaceRegistry::collective(int64_t sequence) {
  std::lock_guard lock(mutex_);
  std::shared_ptr<RaceDetector>& d = detectors_[sequence];
  if (!d) d = std::make_shared<RaceDetector>(false);
  return d;
}

void RaceRegistry::collect(const std::vector<RaceReport>& reports) {
  std::lock_guard lock(mutex_);
  for (const RaceReport& r : reports)
    if (std::none_of(reports_.begin(), reports_.end(), [&](const RaceReport& o) { return o.message == r.message; }))
      reports_.push_back(r);
}

std::vector<RaceReport> RaceRegistry::collected() const {
  std::lock_guard lock(mutex_);
  return reports_;
}

namespace {
thread_local std::vector<RaceReport> t_last_reports;
}  // namespace

const std::vector<RaceReport>& last_race_reports() { return t_last_reports; }
void set_last_race_reports(std::vector<RaceReport> reports) { t_last_reports = std::move(reports); }

}  // namespace tessera::rt
