#include "runtime/launch.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <exception>
#include <thread>

#include "runtime/thread_pool.h"
#include "runtime/timeline.h"

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

namespace {
// A written-back block as raw bytes: its operand and starts.
std::string block_key(int64_t operand, std::span<const int64_t> starts) {
  std::string key(sizeof(int64_t) * (starts.size() + 1), '\0');
  std::memcpy(key.data(), &operand, sizeof operand);
  std::memcpy(key.data() + sizeof operand, starts.data(), starts.size_bytes());
  return key;
}
}  // namespace

bool Launch::record_writeback(int64_t operand, std::span<const int64_t> starts) {
  std::string key = block_key(operand, starts);
  std::lock_guard lock(mutex_);
  return written_.insert(std::move(key)).second;
}

CoreContext::CoreContext(Launch& l, int core, const ir::Function* f) : launch(l), point{l.device(), core, {}, {}}, fn(f) {
  dma.identify(l.device(), core);
  if (timeline::recording()) timeline.kernel_start = timeline::now_us();
}

CoreContext::~CoreContext() {
  if (timeline.kernel_start < 0) return;
  const double end = timeline::now_us();
  const timeline::Track track = timeline::Track::core(launch.device(), point.core);
  // A failure may leave scopes open: they end with the kernel.
  for (auto it = timeline.scopes.rbegin(); it != timeline.scopes.rend(); ++it)
    timeline::span(track, it->first, "scope", it->second, end - it->second);
  if (timeline.step_start >= 0) timeline::span(track, timeline.step, "step", timeline.step_start, end - timeline.step_start);
  timeline::span(track, std::string(launch.name().empty() ? "kernel" : launch.name()), "kernel", timeline.kernel_start,
                 end - timeline.kernel_start, {{"fault", fault ? "yes" : "no"}});
}

void enter_grid_step(CoreContext& core) {
  if (!timeline::recording()) return;
  const double now = timeline::now_us();
  auto& t = core.timeline;
  if (t.step_start >= 0)
    timeline::span(timeline::Track::core(core.launch.device(), core.point.core), std::move(t.step), "step",
                   t.step_start, now - t.step_start);
  t.step = fmt::format("step ({})", fmt::join(core.point.grid_point, ", "));
  t.step_start = now;
}

void kernel_scope(CoreContext& core, const std::string& name, bool start) {
  if (!timeline::recording()) return;
  auto& scopes = core.timeline.scopes;
  if (start) {
    scopes.emplace_back(name, timeline::now_us());
    return;
  }
  // Scopes nest (the DSL emits them around a body), so the innermost open one is this one.
  if (scopes.empty()) return;  // started before recording began
  const double now = timeline::now_us();
  timeline::span(timeline::Track::core(core.launch.device(), core.point.core), std::move(scopes.back().first), "scope",
                 scopes.back().second, now - scopes.back().second);
  scopes.pop_back();
}

void CoreContext::add_region(int64_t key, const void* data, int64_t bytes) {
  const auto* lo = static_cast<const std::byte*>(data);
  for (MemoryRegion& r : regions)
    if (r.key == key) {
      r = MemoryRegion{key, lo, lo + bytes};
      return;
    }
  regions.push_back(MemoryRegion{key, lo, lo + bytes});
}

void begin_pipeline(CoreContext& core, int64_t id) { core.nested_writebacks[id].clear(); }

void check_revisit(CoreContext& core, const ir::BlockCopyAttr& attr, std::span<const int64_t> starts) {
  if (attr.aliased) return;
  const bool first = attr.pipeline == 0 ? core.launch.record_writeback(attr.operand, starts)
                                        : core.nested_writebacks[attr.pipeline].insert(block_key(attr.operand, starts)).second;
  if (first) return;
  throw Fault(fmt::format(
      "{} is revisited non-consecutively: its block at element offset ({}) is written back a second time, after the "
      "grid moved on to other blocks in between, so the earlier result is overwritten instead of accumulated. Make the "
      "grid axes along which the block stays the same the innermost ones (and mark them arbitrary), or give each grid "
      "step its own output block",
      attr.name, fmt::join(starts, ", ")));
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
  ThreadPool::global().run(num_cores, run);
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

void run_on_devices(const std::shared_ptr<const Mesh>& mesh, const std::function<void(int64_t device)>& body) {
  MeshRun run(mesh);
  const size_t n = static_cast<size_t>(mesh->size());
  Failures failures(n);
  run_concurrently(n, /*caller_runs_first=*/false, failures, [&](size_t i) {
    const int64_t d = static_cast<int64_t>(i);
    DeviceContext device{mesh, d, mesh->coords(d), &run, 0};
    const DeviceScope scope(&device);
    // The failure is recorded before the device counts as stopped: the ones that then fail waiting
    // for it come later.
    std::string why = "its function returned";
    try {
      body(d);
    } catch (const std::exception& e) {
      failures.record(i, std::current_exception());
      why = fmt::format("its function threw: {}", e.what());
    } catch (...) {
      failures.record(i, std::current_exception());
      why = "its function threw";
    }
    run.device_stopped(d, why);
  });
  if (const size_t first = failures.first(); first < n) std::rethrow_exception(failures.error(first));
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

void debug_print(const ExecutionPoint& where, const std::string& format, const std::vector<const Array*>& values) {
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] == '{' && i + 1 < format.size() && format[i + 1] == '}') {
      if (next >= values.size()) out += "{}";
      else out += values[next]->rank() == 0 ? values[next]->element_string(0) : values[next]->to_string();
      ++next;
      ++i;
    } else {
      out += format[i];
    }
  }
  debug_print_line(fmt::format("[{}] {}", where.str(), out));
}

}  // namespace tessera::rt
