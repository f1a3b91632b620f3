#include "runtime/launch.h"

#include <cstdio>
#include <exception>
#include <thread>

namespace tessera::rt {

std::vector<StepRange> split_steps(const std::vector<int64_t>& grid, const std::vector<ir::DimSemantics>& semantics,
                                   int num_cores) {
  int64_t total = 1;
  for (int64_t g : grid) total *= g;
  int64_t parallel = 1;
  size_t p = 0;
  while (p < semantics.size() && semantics[p] == ir::DimSemantics::Parallel) parallel *= grid[p++];
  std::vector<StepRange> ranges(static_cast<size_t>(std::max(num_cores, 1)));
  if (p == 0 || num_cores <= 1 || total == 0) {
    ranges[0] = {0, total};
    return ranges;
  }
  const int64_t per_point = total / parallel;  // steps under one parallel point
  const int64_t points_per_core = (parallel + num_cores - 1) / num_cores;
  for (int c = 0; c < num_cores; ++c) {
    int64_t first = std::min<int64_t>(parallel, c * points_per_core);
    int64_t last = std::min<int64_t>(parallel, first + points_per_core);
    ranges[c] = {first * per_point, last * per_point};
  }
  return ranges;
}

std::vector<int64_t> grid_point_of(const std::vector<int64_t>& grid, int64_t step) {
  std::vector<int64_t> point(grid.size());
  for (int64_t d = static_cast<int64_t>(grid.size()) - 1; d >= 0; --d) {
    point[d] = grid[d] == 0 ? 0 : step % grid[d];
    step = grid[d] == 0 ? 0 : step / grid[d];
  }
  return point;
}

bool Launch::record_writeback(const std::string& output, const std::vector<int64_t>& starts) {
  std::lock_guard lock(mutex_);
  return written_[output].insert(starts).second;
}

void run_cores(Launch& launch, int num_cores, const std::function<void(int core)>& body) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(num_cores));
  auto run = [&](int core) {
    try {
      body(core);
    } catch (const Cancelled&) {
    } catch (...) {
      errors[core] = std::current_exception();
      launch.cancel();
    }
  };
  std::vector<std::thread> threads;
  for (int c = 1; c < num_cores; ++c) threads.emplace_back(run, c);
  run(0);
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

namespace {
std::mutex g_print_mutex;
std::function<void(std::string_view)> g_print_sink;
}  // namespace

void set_debug_print_sink(std::function<void(std::string_view)> sink) {
  std::lock_guard lock(g_print_mutex);
  g_print_sink = std::move(sink);
}

void debug_print_line(std::string_view line) {
  std::lock_guard lock(g_print_mutex);
  if (g_print_sink) {
    g_print_sink(line);
  } else {
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
}

}  // namespace tessera::rt
