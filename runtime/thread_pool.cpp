#include "runtime/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>

#include "jit/ir/diagnostics.h"
#include "runtime/config.h"

namespace tessera {

namespace {
std::atomic<int> g_threads{0};

int default_threads() {
  if (std::optional<int> n = config::num_threads()) return *n;
  unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}
}  // namespace

int num_threads(std::source_location loc) {
  int n = g_threads.load();
  if (n == 0) {
    // A launch asks inside its pallas_call's CallSite, which stays the line an invalid value reports;
    // a call of the user's own opens one at its line.
    std::optional<config::CallSite> site;
    if (!config::call_site().known()) site.emplace(loc);
    n = default_threads();
    g_threads.store(n);
  }
  return n;
}

void set_num_threads(int n, std::source_location loc) {
  if (n >= 1) {
    g_threads.store(n);
    return;
  }
  config::CallSite site(loc);
  g_threads.store(default_threads());
}

namespace rt {

ThreadPool& ThreadPool::global() {
  static ThreadPool pool;
  return pool;
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::grow(int workers) {
  while (static_cast<int>(workers_.size()) < workers) {
    Seat& seat = *seats_.emplace_back(std::make_unique<Seat>());
    workers_.emplace_back([this, &seat] {
      seat.placement = ThreadPlacement::of_calling_thread();
      worker_loop(seat);
    });
  }
}

void ThreadPool::spread_from(int cpu, int workers) {
  if (cpu < 0) return;
  for (int w = 0; w < workers; ++w) {
    Seat& seat = *seats_[static_cast<size_t>(w)];
    if (seat.cpu.load(std::memory_order_acquire) == cpu && !seat.moved.load(std::memory_order_relaxed) &&
        seat.placement.move_off(cpu))
      seat.moved.store(true, std::memory_order_release);
  }
}

namespace {
// Polls `ready` for up to kPollMicroseconds, yielding the core on every round; whether it came true.
template <class Ready>
bool poll(Ready ready) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(ThreadPool::kPollMicroseconds);
  for (;;) {
    if (ready()) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::yield();
  }
}
}  // namespace

void ThreadPool::worker_loop(Seat& seat) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* task;
    int index;
    poll([&] {
      seat.cpu.store(current_cpu(), std::memory_order_release);  // after `placement` is set
      return stop_.load(std::memory_order_relaxed) || generation_.load(std::memory_order_acquire) != seen;
    });
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      if (next_ >= end_) {
        // The caller ran what was left itself (run): poll for the next launch.
        seen = generation_;
        continue;
      }
      task = task_;
      index = next_++;
      if (next_ >= end_) seen = generation_;
    }
    // Moved off the launching thread's core: free to move again from here (it stays where it is).
    if (seat.moved.exchange(false, std::memory_order_acquire)) seat.placement.restore();
    (*task)(index);
    {
      std::lock_guard lock(mutex_);
      if (--pending_ == 0) done_.notify_all();
    }
  }
}

void ThreadPool::run(int n, const std::function<void(int)>& fn) {
  if (n <= 1) {
    if (n == 1) fn(0);
    return;
  }
  std::unique_lock busy(run_mutex_, std::try_to_lock);
  if (!busy.owns_lock()) {
    // Nested launch: give the other tasks threads of their own.
    std::vector<std::thread> threads;
    for (int i = 1; i < n; ++i) threads.emplace_back(fn, i);
    fn(0);
    for (auto& t : threads) t.join();
    return;
  }
  {
    std::lock_guard lock(mutex_);
    grow(n - 1);
  }
  // Before the workers see the task: one still queued on this thread's core would otherwise start
  // only when this thread is preempted, with nothing left to do (SharedRanges hands it all to us).
  spread_from(current_cpu(), n - 1);
  {
    std::lock_guard lock(mutex_);
    task_ = &fn;
    next_ = 1;
    end_ = n;
    pending_ = n - 1;
    ++generation_;
  }
  wake_.notify_all();
  fn(0);
  // Tasks no worker has claimed yet run here rather than wait for one: on a loaded machine a
  // sleeping worker may get its core only milliseconds later, when (its work shared, SharedRanges)
  // nothing is left for it to do, and the launch would end only then.
  for (;;) {
    int index;
    {
      std::lock_guard lock(mutex_);
      if (next_ >= end_) break;
      index = next_++;
      --pending_;
    }
    fn(index);
  }
  poll([&] { return pending_.load(std::memory_order_acquire) == 0; });
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return pending_ == 0; });
  task_ = nullptr;
}

SharedRanges::SharedRanges(std::vector<Range> ranges, int64_t unit)
    : left_(std::move(ranges)), unit_(std::max<int64_t>(unit, 1)) {}

std::optional<SharedRanges::Piece> SharedRanges::next(int self) {
  std::lock_guard lock(mutex_);
  if (Range& own = left_[static_cast<size_t>(self)]; own.lo < own.hi) {
    const Piece piece{self, own};
    own.lo = own.hi;
    return piece;
  }
  size_t victim = left_.size();
  for (size_t c = 0; c < left_.size(); ++c)
    if (left_[c].hi > left_[c].lo && (victim == left_.size() || left_[c].hi - left_[c].lo > left_[victim].hi - left_[victim].lo))
      victim = c;
  if (victim == left_.size()) return std::nullopt;
  Range& r = left_[victim];
  // The back half, in whole units: what is left of a range always starts where the range does (its
  // owner takes all of it at once), so a cut a whole number of units from there is a point boundary.
  const int64_t units = (r.hi - r.lo + unit_ - 1) / unit_;
  const int64_t cut = r.lo + units / 2 * unit_;
  const Piece piece{static_cast<int>(victim), Range{cut, r.hi}};
  r.hi = cut;
  return piece;
}

void Failures::record(size_t i, std::exception_ptr e) {
  uint64_t when = 0;
  try {
    std::rethrow_exception(e);
  } catch (const RuntimeError& r) {
    when = r.sequence();
  } catch (...) {
    when = next_failure_sequence();
  }
  errors_[i] = std::move(e);
  order_[i] = static_cast<int64_t>(when);
}

std::vector<size_t> Failures::in_order() const {
  std::vector<size_t> failed;
  for (size_t i = 0; i < size(); ++i)
    if (errors_[i]) failed.push_back(i);
  std::stable_sort(failed.begin(), failed.end(), [&](size_t a, size_t b) { return order_[a] < order_[b]; });
  return failed;
}

void run_concurrently(size_t n, bool caller_runs_first, Failures& failures, const std::function<void(size_t)>& body) {
  auto run = [&](size_t i) {
    try {
      body(i);
    } catch (...) {
      failures.record(i, std::current_exception());
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (size_t i = caller_runs_first ? 1 : 0; i < n; ++i) threads.emplace_back(run, i);
  if (caller_runs_first && n > 0) run(0);
  for (std::thread& t : threads) t.join();
}

}  // namespace rt
}  // namespace tessera
