#include "runtime/dma_engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "runtime/collective.h"
#include "runtime/config.h"
#include "runtime/memory.h"
#include "runtime/race_detector.h"
#include "runtime/schedule.h"
#include "runtime/timeline.h"

namespace tessera::rt {

namespace {

// Semaphores are touched through atomic_ref: in the worker mode the worker thread signals them
// while the core reads and waits.
std::atomic_ref<int64_t> counter(int64_t* sem) { return std::atomic_ref<int64_t>(*sem); }
int64_t value_of(const int64_t* sem) { return std::atomic_ref<int64_t>(*const_cast<int64_t*>(sem)).load(); }

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

bool overlaps(const std::byte* a_lo, const std::byte* a_hi, const std::byte* b_lo, const std::byte* b_hi) {
  return a_lo < b_hi && b_lo < a_hi;
}

// The mode, or -1 until the first launch asks: TESSERA_DMA is read then, not at start-up, so that an
// invalid value is an exception from that call rather than an abort while the program loads.
std::atomic<int> g_execution{-1};

DmaExecution execution_from_env() {
  const std::string_view v = config::dma();
  return v == "eager" ? DmaExecution::eager : v == "worker" ? DmaExecution::worker : DmaExecution::automatic;
}

}  // namespace

struct DmaEngine::Shared {
  std::mutex mutex;
  std::condition_variable done;
  std::vector<int64_t*> in_flight;  // the semaphores of the copies on the worker, one entry per copy
  std::optional<std::string> failure;
};

// The thread that runs copies in the worker mode, for every core of the process in the order they
// were started. Never destroyed: it may be busy while the process exits.
class DmaWorker {
 public:
  static DmaWorker& get() {
    static DmaWorker* worker = new DmaWorker();
    return *worker;
  }

  void post(DmaEngine* engine, DmaEngine::Copy copy) {
    {
      std::lock_guard lock(mutex_);
      queue_.emplace_back(engine, std::move(copy));
    }
    ready_.notify_one();
  }

 private:
  DmaWorker() : thread_([this] { run(); }) { thread_.detach(); }

  void run() {
    for (;;) {
      std::pair<DmaEngine*, DmaEngine::Copy> job;
      {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, [&] { return !queue_.empty(); });
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      auto& [engine, copy] = job;
      std::optional<std::string> failure;
      try {
        copy.move();
      } catch (const std::exception& e) {
        failure = e.what();
      }
      DmaEngine::Shared& shared = *engine->shared_;
      std::lock_guard lock(shared.mutex);
      if (failure && !shared.failure) shared.failure = std::move(failure);
      if (!failure) counter(copy.sem).fetch_add(copy.bytes);
      shared.in_flight.erase(std::find(shared.in_flight.begin(), shared.in_flight.end(), copy.sem));
      // Notified under the lock: once it is released the engine may be gone.
      shared.done.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::pair<DmaEngine*, DmaEngine::Copy>> queue_;
  std::thread thread_;
};

void set_dma_execution(DmaExecution mode) { g_execution.store(static_cast<int>(mode)); }
DmaExecution dma_execution() {
  int mode = g_execution.load(std::memory_order_relaxed);
  if (mode < 0) {
    int unset = -1;
    // A set_dma_execution racing with this first read wins.
    g_execution.compare_exchange_strong(unset, static_cast<int>(execution_from_env()));
    mode = g_execution.load();
  }
  return static_cast<DmaExecution>(mode);
}

bool use_dma_worker(int active_cores) {
  switch (dma_execution()) {
    case DmaExecution::eager: return false;
    case DmaExecution::worker: return true;
    case DmaExecution::automatic: break;
  }
  static const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return active_cores < cores;
}

bool DmaEngine::Copy::touches(const std::byte* lo, const std::byte* hi) const {
  const auto* s = reinterpret_cast<const std::byte*>(sem);
  return overlaps(src_lo, src_hi, lo, hi) || overlaps(dst_lo, dst_hi, lo, hi) || (s >= lo && s < hi);
}

DmaEngine::Copy window_copy(std::byte* dst, std::vector<int64_t> dst_strides, const std::byte* src,
                            std::vector<int64_t> src_strides, std::vector<int64_t> shape, int64_t es, int64_t* sem) {
  DmaEngine::Copy c;
  c.sem = sem;
  c.bytes = num_elements(shape) * es;
  c.src_lo = src;
  c.src_hi = src + window_extent(shape, src_strides, es);
  c.dst_lo = dst;
  c.dst_hi = dst + window_extent(shape, dst_strides, es);
  c.move = [=, dst_strides = std::move(dst_strides), src_strides = std::move(src_strides), shape = std::move(shape)] {
    copy_box(dst, dst_strides, src, src_strides, shape, es);
  };
  return c;
}

DmaEngine::DmaEngine() = default;
DmaEngine::~DmaEngine() { stop(); }

void DmaEngine::configure(DmaMode mode, uint64_t seed) {
  mode_ = mode;
  seed_ = seed;
  if (mode == DmaMode::worker && !shared_) shared_ = std::make_unique<Shared>();
}

void DmaEngine::join(LaunchGroup* group, int64_t member, int core) {
  group_ = group;
  member_ = member;
  seat_core_ = core;
  if (mode_ == DmaMode::worker) mode_ = DmaMode::eager;
}

void DmaEngine::add_semaphores(const int64_t* base, int64_t count, DType kind, std::string name, Lifetime lifetime) {
  std::erase_if(named_, [&](const Named& n) { return n.base == base; });
  named_.push_back(Named{base, count, kind, std::move(name), lifetime});
}

const DmaEngine::Named* DmaEngine::find(const int64_t* sem) const {
  for (const Named& n : named_)
    if (sem >= n.base && sem < n.base + n.count) return &n;
  return nullptr;
}

std::string DmaEngine::describe(const int64_t* sem) const {
  const Named* n = find(sem);
  if (!n) return "a semaphore";
  const std::string kind = n->kind == DType::dma_sem ? "DMA semaphore" : "semaphore";
  if (n->count == 1) return fmt::format("{} `{}`", kind, n->name);
  return fmt::format("{} `{}`[{}]", kind, n->name, sem - n->base);
}

void DmaEngine::apply(Copy& copy) {
  copy.move();
  if (races_ && copy.race >= 0) races_->copy_done(race_actor_, copy.race, copy.sem, copy.bytes);
  counter(copy.sem).fetch_add(copy.bytes);
  signalled();
}

void DmaEngine::schedule_point() { schedule_->point(schedule_seat_); }

void DmaEngine::signalled() {
  if (group_) group_->notify();  // another participant may wait on it (mpmd_map's shared semaphores)
}

bool DmaEngine::take(int64_t* sem, int64_t value) {
  int64_t have = value_of(sem);
  while (have >= value)
    if (counter(sem).compare_exchange_weak(have, have - value)) return true;
  return false;
}

bool DmaEngine::take_and_acquire(int64_t* sem, int64_t value) {
  if (!take(sem, value)) return false;
  if (races_) races_->wait(race_actor_, sem, value);
  return true;
}

namespace {
constexpr int64_t kInlineCopyBytes = int64_t{64} << 10;
}  // namespace

void DmaEngine::start(Copy copy) {
  yield_point();
  if (timeline::recording()) {
    // The copy's span runs from its start to its completion, whichever thread completes it.
    copy.move = [move = std::move(copy.move), track = timeline::Track::copies(device_, core_),
                 name = fmt::format("copy {} B", copy.bytes), sem = describe(copy.sem), t0 = timeline::now_us()] {
      move();
      timeline::async_span(track, name, "dma", t0, timeline::now_us() - t0, {{"semaphore", sem}});
    };
  }
  switch (mode_) {
    case DmaMode::eager: apply(copy); return;
    case DmaMode::on_wait: pending_.push_back(std::move(copy)); return;
    case DmaMode::worker: {
      // A small copy costs less to do than to hand over: posting it, waking the worker and waiting
      // for it take a few microseconds, about what moving 64 KiB takes. Completing it at its start
      // is one of the orders the worker could have produced.
      if (copy.bytes <= kInlineCopyBytes) {
        apply(copy);
        return;
      }
      {
        std::lock_guard lock(shared_->mutex);
        if (shared_->failure) throw Fault(*shared_->failure);
        shared_->in_flight.push_back(copy.sem);
      }
      DmaWorker::get().post(this, std::move(copy));
      return;
    }
  }
}

void DmaEngine::signal(int64_t* sem, int64_t inc) {
  if (inc < 0)
    throw Fault(fmt::format("semaphore_signal of {} by {}: a signal adds a non-negative amount (wait to take some away)",
                            describe(sem), inc));
  yield_point();
  if (races_) races_->signal(race_actor_, sem, inc);
  counter(sem).fetch_add(inc);
  signalled();
}

int64_t DmaEngine::read(const int64_t* sem) { return value_of(sem); }

void DmaEngine::wait(int64_t* sem, int64_t value, bool dma, SourceLoc loc) {
  if (value < 0)
    throw Fault(fmt::format("semaphore_wait on {} for {}: the value to wait for must be >= 0", describe(sem), value));
  yield_point();
  // On the timeline: how long the core was blocked here.
  timeline::Scope span(timeline::Track::core(device_, core_), dma ? "DMA wait" : "semaphore_wait", "wait");
  if (timeline::recording()) {
    span.arg("semaphore", describe(sem));
    span.arg("value", std::to_string(value));
    span.arg("at", loc.str());
  }
  switch (mode_) {
    case DmaMode::eager:
    case DmaMode::on_wait:
      while (!take_and_acquire(sem, value)) {
        // on_wait: complete the copies toward this semaphore one at a time, in a seeded random order.
        std::vector<size_t> candidates;
        for (size_t i = 0; i < pending_.size(); ++i)
          if (pending_[i].sem == sem) candidates.push_back(i);
        if (!candidates.empty()) {
          const size_t pick = candidates[splitmix64(seed_ ^ (draws_++ * 0x2545f4914f6cdd1dull)) % candidates.size()];
          Copy copy = std::move(pending_[pick]);
          pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(pick));
          apply(copy);
          continue;
        }
        if (!group_) deadlock(sem, value, value_of(sem), dma, loc);
        // The core blocks, its copies go on: the other participants may be waiting for them.
        flush();
        // Another participant may still signal it: block in the group, which knows when none can.
        // Others may take from the same semaphore, so it is taken again after waking.
        std::unique_lock lock(group_->mutex());
        group_->wait(
            lock, Seat{member_, seat_core_}, [&] { return value_of(sem) >= value; },
            [&] {
              return BlockedOn{fmt::format("{} on {}", dma ? "DMA wait" : "semaphore_wait", describe(sem)), loc,
                               value_of(sem), value, dma ? " bytes" : ""};
            });
      }
      return;
    case DmaMode::worker: {
      for (int spin = 0; spin < 4096; ++spin)  // copies are short: a brief spin avoids a sleep
        if (take_and_acquire(sem, value)) return;
      std::unique_lock lock(shared_->mutex);
      for (;;) {
        if (take_and_acquire(sem, value)) return;
        if (shared_->failure) throw Fault(*shared_->failure);
        if (std::find(shared_->in_flight.begin(), shared_->in_flight.end(), sem) == shared_->in_flight.end())
          deadlock(sem, value, value_of(sem), dma, loc);
        shared_->done.wait(lock);
      }
    }
  }
}

void DmaEngine::drain_worker() {
  if (!shared_) return;
  std::unique_lock lock(shared_->mutex);
  shared_->done.wait(lock, [&] { return shared_->in_flight.empty(); });
  if (shared_->failure) throw Fault(*shared_->failure);
}

void DmaEngine::flush() {
  if (mode_ == DmaMode::worker) drain_worker();
  // In start order: a later copy to the same place wins, as it would have had they been eager.
  std::vector<Copy> pending = std::move(pending_);
  pending_.clear();
  for (Copy& copy : pending) apply(copy);
}

void DmaEngine::stop() {
  if (shared_) {
    std::unique_lock lock(shared_->mutex);
    shared_->done.wait(lock, [&] { return shared_->in_flight.empty(); });
  }
  pending_.clear();
}

void DmaEngine::release(const std::byte* lo, const std::byte* hi, bool forget) {
  if (mode_ == DmaMode::worker) drain_worker();
  for (size_t i = 0; i < pending_.size();) {
    if (!pending_[i].touches(lo, hi)) {
      ++i;
      continue;
    }
    Copy copy = std::move(pending_[i]);
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
    apply(copy);
  }
  std::optional<std::string> error;
  for (const Named& n : named_) {
    const auto* at = reinterpret_cast<const std::byte*>(n.base);
    if (at >= lo && at < hi && !error)
      error = nonzero(n, n.lifetime == Lifetime::region ? "its run_scoped region ends" : "the kernel ends", "");
  }
  if (forget)
    std::erase_if(named_, [&](const Named& n) {
      const auto* at = reinterpret_cast<const std::byte*>(n.base);
      return at >= lo && at < hi;
    });
  if (error) throw Fault(*error);
}

std::optional<std::string> DmaEngine::nonzero(const Named& n, std::string_view when, std::string_view late) const {
  for (int64_t i = 0; i < n.count; ++i) {
    const int64_t v = value_of(n.base + i);
    if (v == 0) continue;
    return fmt::format(
        "{} is {} when {}{}: every semaphore must be back at zero by then ({}). Wait for every copy you start "
        "(.wait()), and wait on a regular semaphore for everything signalled to it",
        describe(n.base + i), v, when, late,
        n.kind == DType::dma_sem ? fmt::format("a DMA semaphore counts bytes: {} bytes of copies were never waited for", v)
                                 : fmt::format("{} signalled that no semaphore_wait took", v));
  }
  return std::nullopt;
}

void DmaEngine::check_kernel_semaphores() const {
  for (const Named& n : named_) {
    if (n.lifetime == Lifetime::operand) continue;
    const std::optional<std::string> error =
        n.lifetime == Lifetime::kernel
            ? nonzero(n, "the kernel ends",
                      " (a remote copy or signal from another device or core reached it as the kernel ended, after its "
                      "last wait)")
            : nonzero(n, "the kernel ends",
                      " (a remote copy or signal from another device or core reached it after the last run of its "
                      "run_scoped region ended: it can only be for a run that never comes)");
    if (error) throw Fault(*error);
  }
}

void DmaEngine::deadlock(const int64_t* sem, int64_t value, int64_t have, bool dma, SourceLoc loc) const {
  const char* what = dma ? "DMA wait" : "semaphore_wait";
  const char* unit = dma ? " bytes" : "";
  throw Fault(fmt::format(
      "deadlock: this {} can never return: {} holds {}{} and the wait needs {}{}, and nothing that could raise it is "
      "left (no copy that signals it is in flight, and on one device only this core signals its semaphores)\n"
      "  blocked waits:\n"
      "    {} on {} at {}: holds {} of {}{}\n"
      "  fix: start the copy (or signal the semaphore) before waiting on it, and wait for exactly what it receives: a "
      "copy's .wait() takes the byte count of its destination",
      what, describe(sem), have, unit, value, unit, what, describe(sem), loc.str(), have, value, unit));
}

}  // namespace tessera::rt
