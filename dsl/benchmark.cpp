#include "dsl/benchmark.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "jit/ir/diagnostics.h"

namespace tessera {

namespace {
// numpy.percentile's default: linear interpolation between the two closest ranks.
double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}
}  // namespace

BenchmarkResult BenchmarkResult::from_times(std::vector<double> times_ms, int warmup) {
  BenchmarkResult r;
  r.iters = static_cast<int>(times_ms.size());
  r.warmup = warmup;
  r.times_ms = std::move(times_ms);
  if (r.times_ms.empty()) return r;
  std::vector<double> s = r.times_ms;
  std::sort(s.begin(), s.end());
  const double n = static_cast<double>(s.size());
  r.mean = std::accumulate(s.begin(), s.end(), 0.0) / n;
  double var = 0;
  for (double t : s) var += (t - r.mean) * (t - r.mean);
  r.stdev = std::sqrt(var / n);
  r.median = percentile(s, 50);
  r.min = s.front();
  r.max = s.back();
  r.p95 = percentile(s, 95);
  r.p99 = percentile(s, 99);
  return r;
}

std::string BenchmarkResult::str() const {
  return fmt::format(
      "BenchmarkResult ({} iters, {} warmup)\n"
      "  mean:   {:10.3f} ms\n"
      "  median: {:10.3f} ms\n"
      "  stdev:  {:10.3f} ms\n"
      "  min:    {:10.3f} ms\n"
      "  max:    {:10.3f} ms\n"
      "  p95:    {:10.3f} ms\n"
      "  p99:    {:10.3f} ms\n",
      iters, warmup, mean, median, stdev, min, max, p95, p99);
}

namespace detail {

void check_benchmark_options(const BenchmarkOptions& options) {
  if (options.iters < 1 || options.warmup < 0)
    throw UserError("pl::benchmark needs at least one timed iteration and a non-negative warm-up",
                    fmt::format("iters = {}, warmup = {}", options.iters, options.warmup),
                    "pass e.g. {.iters = 50, .warmup = 3}", options.loc);
}

void print_benchmark(const BenchmarkResult& r) {
  std::fputs(r.str().c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace detail
}  // namespace tessera
