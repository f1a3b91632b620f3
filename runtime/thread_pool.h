// The thread pool that runs a launch's cores: parallel grid dims are split over its workers
// (DESIGN.md §5). As many threads as cores by default; pl::set_num_threads(n) or TESSERA_NUM_THREADS
// change it. Workers sleep on a condition variable between launches.
//
// Runtime layer.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera {

// The number of threads compiled kernels use (including the caller's).
int num_threads();
// Sets it; n < 1 restores the default (TESSERA_NUM_THREADS, else the number of hardware threads).
// The default is read on first use; an invalid TESSERA_NUM_THREADS makes either throw UserError.
void set_num_threads(int n);

namespace rt {

class ThreadPool {
 public:
  static ThreadPool& global();
  ~ThreadPool();

  // Runs fn(i) for i in [0, n): i = 0 on the calling thread, the others on workers, and returns when
  // all are done. When the pool is already busy (a launch from inside a launch), the extra tasks
  // get threads of their own, so nothing waits for itself.
  void run(int n, const std::function<void(int)>& fn);

 private:
  ThreadPool() = default;
  void worker_loop();
  void grow(int workers);

  std::mutex run_mutex_;  // one launch at a time uses the workers
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* task_ = nullptr;
  int next_ = 0, end_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace rt
}  // namespace tessera
