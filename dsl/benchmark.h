// pl::benchmark: time a host function (a pallas_call, a shard_map, any callable) the way the seeds'
// notebooks do, and report the distribution of its run times.
//
//   pl::BenchmarkResult r = pl::benchmark(fused_fn, inputs, weights);           // 50 iters, 3 warmup
//   pl::benchmark({.iters = 200, .warmup = 10}, fused_fn, inputs, weights);
//
// Prints (unless .print = false):
//   BenchmarkResult (50 iters, 3 warmup)
//     mean:        0.306 ms
//     median:      0.302 ms
//     ...
// Calls are synchronous (a pallas_call returns when its results are ready), so each sample is the
// wall time of one call. Percentiles interpolate linearly between samples (numpy's default); stdev
// is the population standard deviation.
//
// Front-end layer (dsl/).
#pragma once

#include <chrono>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

namespace tessera {

struct BenchmarkOptions {
  int iters = 50;
  int warmup = 3;
  bool print = true;
  // Where the options were written (for the error on bad ones).
  std::source_location loc = std::source_location::current();
};

struct BenchmarkResult {
  int iters = 0;
  int warmup = 0;
  std::vector<double> times_ms;  // one per timed call, in call order
  double mean = 0, median = 0, stdev = 0, min = 0, max = 0, p95 = 0, p99 = 0;  // ms

  // The report in the format above.
  std::string str() const;
  // Summary statistics of `times_ms` (what pl::benchmark returns).
  static BenchmarkResult from_times(std::vector<double> times_ms, int warmup);
};

namespace detail {
void check_benchmark_options(const BenchmarkOptions& options);
void print_benchmark(const BenchmarkResult& r);
}  // namespace detail

template <class F, class... A>
BenchmarkResult benchmark(BenchmarkOptions options, F&& fn, A&&... args) {
  detail::check_benchmark_options(options);
  for (int i = 0; i < options.warmup; ++i) (void)fn(args...);
  std::vector<double> times;
  times.reserve(static_cast<size_t>(options.iters));
  for (int i = 0; i < options.iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    (void)fn(args...);
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  BenchmarkResult r = BenchmarkResult::from_times(std::move(times), options.warmup);
  if (options.print) detail::print_benchmark(r);
  return r;
}

template <class F, class... A>
BenchmarkResult benchmark(F&& fn, A&&... args) {
  return benchmark(BenchmarkOptions{}, std::forward<F>(fn), std::forward<A>(args)...);
}

}  // namespace tessera
