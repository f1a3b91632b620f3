#include "runtime/launch.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <exception>
#include <thread>

#include "runtime/consequences.h"
#include "runtime/debug_print_format.h"
#include "runtime/executable.h"
#include "runtime/thread_pool.h"
#include "runtime/timeline.h"

namespace tessera::rt {

namespace {
// How many leading grid dims are parallel: the prefix split over cores.
size_t parallel_prefix(const std::vector<ir::DimSemantics>& semantics) {
  size_t p = 0;
  while (p < semantics.size() && semantics[p] == ir::DimSemantics::Parallel) ++p;
  return p;
}
}  // namespace

int64_t steps_per_parallel_point(const std::vector<int64_t>& grid, const std::vector<ir::DimSemantics>& semantics) {
  int64_t steps = 1;
  for (size_t d = parallel_prefix(semantics); d < grid.size(); ++d) steps *= grid[d];
  return steps;
}

std::vector<StepRange> split_steps(const std::vector<int64_t>& grid, const std::vector<ir::DimSemantics>& semantics,
                                   int num_cores) {
  int64_t total = 1;
  for (int64_t g : grid) total *= g;
  const size_t p = parallel_prefix(semantics);
  std::vector<StepRange> ranges(static_cast<size_t>(std::max(num_cores, 1)));
  if (p == 0 || num_cores <= 1 || total == 0) {
    ranges[0] = {0, total};
    return ranges;
  }
  const int64_t per_point = steps_per_parallel_point(grid, semantics);
  const int64_t parallel = total / per_point;
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
  // A rank-0 block has no starts, and memcpy's source must not be null even for zero bytes.
  if (!starts.empty()) std::memcpy(key.data() + sizeof operand, starts.data(), starts.size_bytes());
  return key;
}
}  // namespace

const BlockWrite* BlockWriteLog::last_holding(int64_t operand, std::span<const int64_t> index) const {
  std::lock_guard lock(mutex_);
  for (auto w = writes_.rbegin(); w != writes_.rend(); ++w) {
    if (w->operand != operand || w->starts.size() != index.size()) continue;
    bool inside = true;
    for (size_t d = 0; d < index.size() && inside; ++d)
      inside = index[d] >= w->starts[d] && index[d] < w->starts[d] + w->shape[d];
    if (inside) return &*w;
  }
  return nullptr;
}

std::optional<ExecutionPoint> Launch::record_writeback(int64_t operand, std::span<const int64_t> starts,
                                                      const ExecutionPoint& by) {
  std::string key = block_key(operand, starts);
  std::lock_guard lock(mutex_);
  auto [it, first] = written_.try_emplace(std::move(key), by);
  if (first) return std::nullopt;
  return it->second;
}

CoreContext::CoreContext(Launch& l, int core, const ir::Function* f, const DeviceContext* d)
    : launch(l), point{l.device(), core, {}, {}}, fn(f), device(d) {
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
  for (MemoryRegion& r : regions_)
    if (r.key == key) {
      r = MemoryRegion{key, lo, lo + bytes};
      return;
    }
  regions_.push_back(MemoryRegion{key, lo, lo + bytes});
}

const MemoryRegion* CoreContext::region_containing(const std::byte* p, int64_t extent) const {
  for (const MemoryRegion& r : regions_)
    if (p >= r.lo && p + extent <= r.hi) return &r;
  return nullptr;
}

const MemoryRegion* CoreContext::region(int64_t key) const {
  for (const MemoryRegion& r : regions_)
    if (r.key == key) return &r;
  return nullptr;
}

DmaEngine::Lifetime semaphore_lifetime(const ir::Function& fn, const ir::Op& alloc) {
  return alloc.parent == fn.body ? DmaEngine::Lifetime::kernel : DmaEngine::Lifetime::region;
}

void begin_pipeline(CoreContext& core, int64_t id) { core.nested_writebacks_[id].clear(); }

void check_revisit(CoreContext& core, const ir::BlockCopyAttr& attr, std::span<const int64_t> starts) {
  if (attr.aliased) return;
  // The step that writes the block back now is the one revisiting it: the write-back runs at the end
  // of the last consecutive step that holds the block (docs/design.md §4.4). The kernel's grid names
  // steps by grid point; a nested pipeline by its own step (the kernel's grid point stays the same).
  std::vector<int64_t> first, now;
  if (attr.pipeline == 0) {
    const std::optional<ExecutionPoint> earlier = core.launch.record_writeback(attr.operand, starts, core.point);
    if (!earlier) return;
    if (earlier->core != core.point.core)
      throw Fault(fmt::format(
          "{} is written by two cores: its block at element offset ({}) was written back by core {} at grid point ({}) "
          "and again by this core. Parallel grid steps that run on different cores write the same block, a race: "
          "which result remains depends on timing and on the number of cores. Mark the grid dims along which the "
          "block stays the same `arbitrary` (and make them the innermost ones), or give each parallel step its own "
          "output block",
          attr.name, fmt::join(starts, ", "), earlier->core, fmt::join(earlier->grid_point, ", ")));
    first = earlier->grid_point;
    now = core.point.grid_point;
  } else {
    auto [it, fresh] = core.nested_writebacks_[attr.pipeline].try_emplace(block_key(attr.operand, starts), core.point.inner_point);
    if (fresh) return;
    first = it->second;
    now = core.point.inner_point;
  }
  const char* step = attr.pipeline == 0 ? "grid point" : "emit_pipeline step";
  throw Fault(fmt::format(
      "{} is revisited non-consecutively: its block at element offset ({}) was written back at {} ({}) and is written "
      "back again at {} ({}), after the grid moved on to other blocks in between, so the earlier result is overwritten "
      "instead of accumulated. Make the grid axes along which the block stays the same the innermost ones (and mark "
      "them arbitrary), or give each grid step its own output block",
      attr.name, fmt::join(starts, ", "), step, fmt::join(first, ", "), step, fmt::join(now, ", ")));
}

void run_cores(Launch& launch, int num_cores, const std::function<void(int core)>& body) {
  // The failure first in time is the cause; another core's later failure (a wait its partner will
  // never satisfy, say) is a consequence.
  Failures failures(static_cast<size_t>(num_cores));
  auto run = [&](int core) {
    try {
      body(core);
    } catch (const Cancelled&) {
    } catch (...) {
      failures.record(static_cast<size_t>(core), std::current_exception());
      launch.cancel();
    }
  };
  ThreadPool::global().run(num_cores, run);
  const std::vector<size_t> failed = failures.in_order();
  if (failed.empty()) return;
  Consequences after;
  for (size_t i = 1; i < failed.size(); ++i) after.add(fmt::format("core {}", failed[i]), failures.error(failed[i]));
  rethrow_with_notes(failures.error(failed.front()), after.notes());
}

// ---- launching executables ---------------------------------------------------------------------

namespace {

// Semaphores among a launch's operands that outlive its kernels and go back to no one must be zero
// when the launch ends: scratch semaphores the participants of an mpmd_map share, and semaphore inputs
// no output aliases (their counts would be lost; one the kernel returns keeps them, docs/design.md §4.9).
void check_operand_semaphores(const Executable& exe, std::span<void* const> data, const std::string& scope,
                              const ExecutionPoint& where) {
  for (size_t k = 0; k < exe.operands.size(); ++k) {
    const OperandInfo& op = exe.operands[k];
    const bool input = op.role == OperandRole::input &&
                       std::none_of(exe.aliases.begin(), exe.aliases.end(),
                                    [&](const std::pair<int, int>& a) { return a.first == static_cast<int>(k); });
    if (!is_semaphore(op.dtype) || (op.role != OperandRole::scratch && !input)) continue;
    const auto* sems = static_cast<const int64_t*>(data[k]);
    for (int64_t i = 0; i < num_elements(op.shape); ++i) {
      if (sems[i] == 0) continue;
      const bool dma = op.dtype == DType::dma_sem;
      throw RuntimeError(
          fmt::format("{} `{}`{} is {} when {} ends: {} must be back at zero by then ({}). Wait for every copy that "
                      "signals it, and wait on a regular semaphore for everything signalled to it{}",
                      dma ? "DMA semaphore" : "semaphore", op.name, op.shape.empty() ? "" : fmt::format("[{}]", i),
                      sems[i], scope,
                      input ? "a semaphore passed in and not returned (no input_output_aliases entry)"
                            : "a semaphore the participants share",
                      dma ? fmt::format("a DMA semaphore counts bytes: {} bytes of copies were never waited for", sems[i])
                          : fmt::format("{} signalled that no semaphore_wait took", sems[i]),
                      input ? ", or alias it to a semaphore output to hand its counts on" : ""),
          where, op.loc);
    }
  }
}

// Checked buffers over a launch's operands: scalar-prefetch operands copied into SMEM buffers the
// kernel may write, inputs read in place (read-only), outputs fresh (poisoned, or zeroed when
// `zero`) or copies of their aliased inputs, scratch operands fresh (semaphores start at zero, as
// make_buffer makes them). An aliased input is its output's buffer.
struct CheckedMemory {
  std::vector<std::unique_ptr<Buffer>> owned;
  std::vector<Buffer*> buffers;
  std::vector<void*> data;
  OperandMemory view() const { return {data, buffers}; }
  // The outputs, once the kernel finished writing them (they follow the arguments).
  std::vector<Array> outputs(size_t num_args, int num_outputs) const {
    std::vector<Array> outs;
    for (int o = 0; o < num_outputs; ++o) outs.push_back(buffers[num_args + static_cast<size_t>(o)]->array());
    return outs;
  }
};

int aliased_input(const Executable& exe, int output) {
  for (auto [in, out] : exe.aliases)
    if (out == output) return in;
  return -1;
}

CheckedMemory checked_memory(const Executable& exe, std::span<const Array> args, bool zero) {
  CheckedMemory m;
  int output = 0;
  for (size_t k = 0; k < exe.operands.size(); ++k) {
    const OperandInfo& op = exe.operands[k];
    std::unique_ptr<Buffer> b;
    switch (op.role) {
      case OperandRole::scalar_prefetch: b = std::make_unique<Buffer>(op.name, args[k], op.space, true); break;
      case OperandRole::input:
        // A semaphore input is the kernel's own copy of the counts: its waits take from them.
        b = std::make_unique<Buffer>(op.name, args[k], op.space, is_semaphore(op.dtype));
        break;
      case OperandRole::output:
        if (const int in = aliased_input(exe, output++); in >= 0)
          b = std::make_unique<Buffer>(op.name, args[static_cast<size_t>(in)], op.space, true);
        else
          b = make_buffer(op.name, op.dtype, op.shape, op.space, zero);
        break;
      case OperandRole::scratch: b = make_buffer(op.name, op.dtype, op.shape, op.space, zero); break;
    }
    m.buffers.push_back(m.owned.emplace_back(std::move(b)).get());
  }
  for (auto [in, out] : exe.aliases) m.buffers[static_cast<size_t>(in)] = m.buffers[args.size() + static_cast<size_t>(out)];
  for (Buffer* b : m.buffers) m.data.push_back(const_cast<std::byte*>(b->data()));
  return m;
}

// A core's operands: the launch's, with a copy of its own of each scalar-prefetch operand, made from
// the call's argument (docs/design.md §4.7: each TPU core has its own SMEM), so that what one core
// writes into its prefetch table no other core sees.
class CoreOperands {
 public:
  CoreOperands(const Executable& exe, const OperandMemory& shared, std::span<const Array> args)
      : data_(shared.data.begin(), shared.data.end()), buffers_(shared.buffers.begin(), shared.buffers.end()) {
    copies_.reserve(args.size());  // a small array lives inside its Array: the copies must not move
    for (size_t k = 0; k < args.size() && exe.operands[k].role == OperandRole::scalar_prefetch; ++k) {
      const OperandInfo& op = exe.operands[k];
      if (!buffers_.empty()) {
        buffers_[k] = owned_.emplace_back(std::make_unique<Buffer>(op.name, args[k], op.space, true)).get();
        data_[k] = const_cast<std::byte*>(buffers_[k]->data());
      } else {
        Array& copy = copies_.emplace_back(args[k]);
        data_[k] = copy.mutable_data();  // storage of its own: the caller's array never changes
      }
    }
  }
  OperandMemory view() const { return {data_, buffers_}; }

 private:
  std::vector<void*> data_;
  std::vector<Buffer*> buffers_;
  std::vector<std::unique_ptr<Buffer>> owned_;
  std::vector<Array> copies_;
};

// A core's turns under a seed schedule (runtime/schedule.h), if any: it arrives when made (and waits
// for its first turn) and leaves when it goes, with its failure, so that its last acts (leaving the
// group, unwinding) still happen in its turn.
class ScheduledTurn {
 public:
  ScheduledTurn(Schedule* schedule, int64_t seat) : schedule_(schedule), seat_(seat) {
    if (schedule_) schedule_->arrive(seat_);
  }
  ~ScheduledTurn() {
    if (schedule_) schedule_->leave(seat_, std::move(failure_));
  }
  ScheduledTurn(const ScheduledTurn&) = delete;
  ScheduledTurn& operator=(const ScheduledTurn&) = delete;
  void failed(std::exception_ptr e) { failure_ = std::move(e); }

 private:
  Schedule* schedule_;
  int64_t seat_;
  std::exception_ptr failure_;
};

// Runs one core's share of `exe`: its memory regions (remote copies address them) and semaphores
// among the operands, its seat in the group (if any), the backend; then its copies stop and the
// memory a compiled kernel allocated goes back to the executable for the next launch. Throws the
// core's failure. `index`: the core's number among the launch's (for the on_wait order's seed).
// `schedule`: the seed schedule of a launch without a group, as seat `index` (a group brings its own).
void run_one_core(const Executable& exe, CoreContext& ctx, const OperandMemory& mem, StepRange steps,
                  LaunchGroup* group, Seat seat, uint64_t index, bool dma_worker, RaceDetector* races = nullptr,
                  Schedule* schedule = nullptr, std::span<const Array> args = {}) {
  // Under a seed schedule everything from here until the core leaves takes turns with the launch's
  // other threads, including its seat in the group and its actor in the race detector.
  int64_t schedule_seat = static_cast<int64_t>(index);
  if (group && group->schedule()) {
    schedule = group->schedule();
    schedule_seat = group->schedule_seat(seat);
  }
  ScheduledTurn turn(schedule, schedule_seat);
  ctx.dma.schedule(schedule, schedule_seat);
  const bool checked = exe.backend->checked();
  if (checked) {
    ctx.dma.configure(exe.checked.dma, ctx.launch.seed.value_or(exe.checked.seed) + index);
  } else {
    ctx.allocations = exe.take_arena();
    if (dma_worker) ctx.dma.configure(DmaMode::worker, 0);
  }
  for (size_t k = 0; k < mem.data.size(); ++k) {
    const OperandInfo& op = exe.operands[k];
    const int64_t key = op.role == OperandRole::scalar_prefetch ? core_operand_key(static_cast<int64_t>(k)) : -1 - static_cast<int64_t>(k);
    ctx.add_region(key, mem.data[k], op.bytes());
    if (is_semaphore(op.dtype))
      ctx.dma.add_semaphores(static_cast<const int64_t*>(mem.data[k]), num_elements(op.shape), op.dtype, op.name,
                             DmaEngine::Lifetime::operand);
  }
  if (races) {
    ctx.races = races;
    ctx.race_actor = races->add_actor(ctx, seat.member, seat.core);
    ctx.dma.watch_races(races, ctx.race_actor);
    // Counts a semaphore input brings (from the caller's array, not the memory other cores may have
    // signalled already) come first and order nothing.
    for (size_t k = 0; k < args.size(); ++k)
      if (is_semaphore(exe.operands[k].dtype))
        for (int64_t i = 0; i < args[k].size(); ++i)
          races->initial_count(ctx.race_actor, static_cast<const int64_t*>(mem.data[k]) + i, args[k].data_as<int64_t>()[i]);
  }
  {
    const GroupMembership member(group, seat, ctx);  // other participants stop reaching this core before its memory goes
    try {
      exe.backend->run_core(ctx, mem, steps);
    } catch (const Cancelled&) {
      throw;
    } catch (...) {
      turn.failed(std::current_exception());
      throw;
    }
    // A copy still in flight when the kernel returns lands before the launch does (its bytes are in
    // the output, its count in a semaphore output; docs/design.md §4.9). The interpreter drains its
    // own at the kernel's end; compiled code's may be on the worker.
    if (!ctx.fault && !checked) {
      try {
        ctx.dma.flush();
        collective_end(ctx);  // the interpreter's cores got there themselves
      } catch (const Fault& f) {
        // In a launch group, at the pallas_call: the kernel's end has no line of its own.
        ctx.fault = f.at(ctx.point, group ? group->key().loc : SourceLoc{});
      }
    }
    if (ctx.fault) turn.failed(std::make_exception_ptr(*ctx.fault));
  }
  ctx.dma.stop();  // after a failure, copies may still be running into the arena
  if (!checked) exe.give_arena(std::move(ctx.allocations));
  if (ctx.fault) throw *ctx.fault;
}

// At the end of a launch that detects races: its reports become the calling thread's last ones, and
// the shard_map's (if any) collects them.
struct RacesPublished {
  RaceDetector* races;
  DeviceContext* device;
  ~RacesPublished() {
    if (!races) return;
    std::vector<RaceReport> reports = races->reports();
    if (device && device->races) device->races->collect(reports);
    set_last_race_reports(std::move(reports));
  }
};

// The collective launch of every device of the current shard_map that this launch is part of, for a
// kernel that communicates.
std::shared_ptr<LaunchGroup> join_collective(const Executable& exe, DeviceContext* device, int cores,
                                             std::optional<uint64_t> schedule_seed) {
  if (!exe.communicates || !device) return nullptr;
  random_delay();
  std::shared_ptr<LaunchGroup> group =
      device->run->join(device->collective_launches++, exe.key, device->logical, cores, schedule_seed);
  // A kernel that returns semaphores may leave a remote copy in flight toward another device's
  // outputs: every participant waits at its end until the others have ended (docs/design.md §4.9).
  if (std::any_of(exe.operands.begin(), exe.operands.end(),
                  [](const OperandInfo& op) { return op.role == OperandRole::output && is_semaphore(op.dtype); }))
    group->hold_to_the_end();
  return group;
}

// The seed of the schedule a checked launch runs under, if any: the interpreter's threads take turns
// whenever copies complete on_wait, the mode in which a seed decides what the interpreter may decide
// (docs/design.md §4.15); eager copies and compiled code run free.
std::optional<uint64_t> schedule_seed(const Executable& exe, const std::optional<uint64_t>& launch_seed) {
  if (!exe.backend->checked() || exe.checked.dma != DmaMode::on_wait) return std::nullopt;
  return launch_seed.value_or(exe.checked.seed);
}

}  // namespace

std::vector<Array> launch(const Executable& exe, std::span<const Array> args, const LaunchOptions& options) {
  DeviceContext* device = current_device();
  Launch launch(device ? static_cast<int>(device->logical) : 0, exe.name());
  launch.block_writes = options.block_writes;
  launch.seed = options.seed;
  const bool checked = exe.backend->checked();
  // A checked backend simulates its cores; compiled code runs one core per thread, and on a mesh
  // the threads are shared by its devices.
  const int cores = checked  ? exe.checked.count
                    : device ? std::max<int>(1, num_threads() / static_cast<int>(device->mesh->size()))
                             : num_threads();
  // A grid sized by the call's arguments is read now, and split for this launch alone.
  const bool sized_at_call = !exe.grid_from_args.empty();
  const std::vector<int64_t> sized = sized_at_call ? exe.grid_of(args) : std::vector<int64_t>();
  const std::vector<int64_t>& grid = sized_at_call ? sized : exe.grid;
  const Executable::Split own_split = sized_at_call ? exe.split_of(grid, cores) : Executable::Split{};
  const Executable::Split& split = sized_at_call ? own_split : exe.split_for(cores);
  launch.steps_per_point = steps_per_parallel_point(grid, exe.semantics);
  // Race detection: the devices of a collective launch share one detector, as they share memory.
  set_last_race_reports({});
  std::shared_ptr<RaceDetector> races;
  if (checked && exe.checked.detect_races)
    races = exe.communicates && device && device->races ? device->races->collective(device->collective_launches)
                                                        : std::make_shared<RaceDetector>(false);
  const std::optional<uint64_t> seed = schedule_seed(exe, options.seed);
  const std::shared_ptr<LaunchGroup> group = join_collective(exe, device, split.active, seed);
  if (options.instant) *options.instant = group ? group->instant() : next_failure_sequence();
  const int64_t member = device ? device->logical : 0;
  // Cores of a launch without a group take turns under a schedule of their own.
  std::mutex own_schedule_mutex;
  std::optional<Schedule> own_schedule;
  if (seed && !group && split.active > 1) own_schedule.emplace(*seed, split.active, own_schedule_mutex);
  Schedule* const schedule = group ? group->schedule() : own_schedule ? &*own_schedule : nullptr;
  auto run_core = [&](int core, const OperandMemory& mem, bool dma_worker, StepRange range) {
    if (range.lo >= range.hi) {
      if (schedule) schedule->excuse(group ? group->schedule_seat(Seat{member, core}) : core);
      return;
    }
    CoreContext ctx(launch, core, &exe.lowered, device);
    run_one_core(exe, ctx, mem, range, group.get(), Seat{member, core}, static_cast<uint64_t>(core), dma_worker,
                 races.get(), own_schedule ? &*own_schedule : nullptr, args);
  };
  if (checked) {
    const CheckedMemory mem = checked_memory(exe, args, exe.checked.zero_uninitialized);
    const RacesPublished published(races.get(), device);  // also when a core fails
    std::exception_ptr failure;
    try {
      run_cores(launch, split.active, [&](int core) {
        run_core(core, CoreOperands(exe, mem.view(), args).view(), false, split.ranges[core]);
      });
    } catch (...) {
      failure = std::current_exception();
    }
    // Under a schedule every device of the group throws the first failure in the schedule's order,
    // once the whole group is done: the same failure for the same seed, whichever device reports it.
    if (schedule)
      if (std::exception_ptr first = schedule->wait_all_left()) failure = first;
    if (failure) std::rethrow_exception(failure);
    check_operand_semaphores(exe, mem.data, exe.name(), ExecutionPoint{static_cast<int>(member), 0, {}, {}});
    return mem.outputs(args.size(), exe.num_outputs());
  }

  // Compiled code takes raw memory: the outputs are fresh arrays whose elements nobody wrote.
  std::vector<Array> outs;
  const int num_outputs = exe.num_outputs();
  outs.reserve(static_cast<size_t>(num_outputs));
  for (size_t k = args.size(); k < args.size() + static_cast<size_t>(num_outputs); ++k) {
    const OperandInfo& op = exe.operands[k];
    if (const int in = aliased_input(exe, static_cast<int>(k - args.size())); in >= 0) {
      Array a = args[static_cast<size_t>(in)];
      a.mutable_data();  // a copy of its own: the caller's input never changes
      outs.push_back(std::move(a));
    } else if (is_semaphore(op.dtype)) {
      outs.push_back(Array(op.dtype, op.shape));  // semaphores start at zero
    } else {
      outs.push_back(Array::empty(op.shape, op.dtype));
    }
  }
  size_t num_prefetch = 0;
  while (num_prefetch < args.size() && exe.operands[num_prefetch].role == OperandRole::scalar_prefetch) ++num_prefetch;
  // SMEM copies the kernel may write (one core's; several cores take one each, CoreOperands).
  std::vector<Array> prefetch(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(num_prefetch));
  void* data_small[16];
  std::vector<void*> data_large;
  const size_t count = args.size() + outs.size();
  void** data = count <= 16 ? data_small : (data_large.resize(count), data_large.data());
  for (size_t k = 0; k < num_prefetch; ++k) data[k] = prefetch[k].mutable_data();
  for (size_t k = num_prefetch; k < args.size(); ++k) data[k] = const_cast<std::byte*>(args[k].data());
  // A semaphore input is the kernel's own copy of the caller's counts: its waits take from them.
  // Reserved only when there is one (no allocation on the common launch path): a small array lives
  // inside its Array, so the copies must not move.
  std::vector<Array> semaphore_inputs;
  for (size_t k = num_prefetch; k < args.size(); ++k) {
    if (!is_semaphore(exe.operands[k].dtype)) continue;
    if (semaphore_inputs.capacity() == 0) semaphore_inputs.reserve(args.size());
    data[k] = semaphore_inputs.emplace_back(args[k]).mutable_data();
  }
  for (size_t o = 0; o < outs.size(); ++o) data[args.size() + o] = outs[o].mutable_data();
  for (auto [in, out] : exe.aliases) data[in] = data[args.size() + static_cast<size_t>(out)];
  const OperandMemory mem{std::span<void* const>(data, count), {}};
  const bool worker = use_dma_worker(split.active) && !group;
  if (split.active <= 1) {
    run_core(0, mem, worker, split.ranges[0]);  // no threads to wake
  } else if (group || exe.communicates) {
    // A core of a collective launch has its seat in the group: it runs its own range, all of it.
    run_cores(launch, split.active,
              [&](int core) { run_core(core, CoreOperands(exe, mem, args).view(), worker, split.ranges[core]); });
  } else {
    // Each thread runs its core's range, then helps with what is left of the others' (SharedRanges).
    std::vector<SharedRanges::Range> ranges;
    for (int c = 0; c < split.active; ++c) ranges.push_back({split.ranges[c].lo, split.ranges[c].hi});
    SharedRanges shared(std::move(ranges), launch.steps_per_point);
    run_cores(launch, split.active, [&](int thread) {
      while (!launch.cancelled()) {
        const std::optional<SharedRanges::Piece> piece = shared.next(thread);
        if (!piece) return;
        run_core(piece->core, CoreOperands(exe, mem, args).view(), worker, StepRange{piece->steps.lo, piece->steps.hi});
      }
    });
  }
  check_operand_semaphores(exe, mem.data, exe.name(), ExecutionPoint{static_cast<int>(member), 0, {}, {}});
  return outs;
}

namespace {

// Under a seed schedule, the participant whose failure came first in the schedule's order (which
// the seed fixes), not first in time on the host: the same seed then always reports the same
// participant's failure, bit for bit. None when the launch ran free or no participant failed in its
// turn.
std::optional<size_t> first_failed_in_schedule(const LaunchGroup& group, const Failures& failures) {
  if (!group.schedule()) return std::nullopt;
  const int64_t seat = group.schedule()->first_failed_seat();
  for (size_t i = 0; i < failures.size(); ++i)
    if (group.schedule_seat(Seat{static_cast<int64_t>(i), 0}) == seat && failures.error(i)) return i;
  return std::nullopt;
}

}  // namespace

std::vector<Array> launch_together(const std::string& scope, std::span<const Participant> participants,
                                   std::span<const Array> args, const LaunchOptions& options) {
  // Every participant's executable has the same operands: the shared memory is made once.
  const Executable& layout = *participants[0].exe;
  const CheckedMemory mem =
      checked_memory(layout, args, layout.backend->checked() && layout.checked.zero_uninitialized);
  std::vector<std::string> names;
  for (const Participant& p : participants) names.push_back(p.name);
  LaunchGroup group(std::move(names), scope, layout.key, 1, /*entry_barrier=*/false, threads_transport(), 0,
                    schedule_seed(layout, options.seed));

  DeviceContext* outer = current_device();
  set_last_race_reports({});
  std::unique_ptr<RaceDetector> races;
  if (layout.backend->checked() && layout.checked.detect_races) races = std::make_unique<RaceDetector>(true);
  const RacesPublished published(races.get(), outer);
  Failures failures(participants.size());
  run_concurrently(participants.size(), /*caller_runs_first=*/true, failures, [&](size_t i) {
    const Participant& who = participants[i];
    DeviceContext point = who.point;
    // A device mesh's points are devices (named by their coordinates on timelines); a core mesh's
    // are cores of the device the launch runs on.
    const DeviceScope device_scope(who.is_device ? &point : outer);
    const int64_t device = who.is_device ? point.logical : (outer ? outer->logical : 0);
    Launch launch(static_cast<int>(device), who.exe->name());
    launch.seed = options.seed;
    CoreContext ctx(launch, static_cast<int>(i), &who.exe->lowered, &point);
    ctx.point.grid_point = point.coords;  // the grid is the mesh
    // Compiled copies are eager in a group: none is left pending when the kernel returns.
    run_one_core(*who.exe, ctx, mem.view(), StepRange{}, &group, Seat{static_cast<int64_t>(i), 0}, i, false,
                 races.get());
  });

  // A participant's own failure is the cause; the deadlock report of the ones left waiting for it is
  // a consequence (and the cause when there is nothing else). Of several, the first to fail.
  auto consequence = [&](size_t i) { return is_deadlock(failures.error(i)); };
  size_t first = participants.size();
  for (size_t i = 0; i < participants.size(); ++i) {
    if (!failures.error(i)) continue;
    if (first == participants.size() ||
        std::pair(consequence(i), failures.order(i)) < std::pair(consequence(first), failures.order(first)))
      first = i;
  }
  if (const std::optional<size_t> scheduled = first_failed_in_schedule(group, failures)) first = *scheduled;
  if (first < participants.size()) {
    // The others' failures, the deadlock report among them, follow the cause as notes.
    Consequences after;
    for (size_t i : failures.in_order())
      if (i != first) after.add(participants[i].name, failures.error(i));
    try {
      std::rethrow_exception(failures.error(first));
    } catch (const RuntimeError& e) {
      throw e.retold(fmt::format("{}, {}: {}", scope, participants[first].name, e.problem()), after.notes());
    }
  }
  check_operand_semaphores(layout, mem.data, scope,
                           ExecutionPoint{static_cast<int>(outer ? outer->logical : 0), 0, {}, {}});
  return mem.outputs(args.size(), layout.num_outputs());
}

namespace {

// The failure every process reports after a shard_map over processes: the first process's own failure,
// before any deadlock report (what the others ran into while waiting for it). `mine`: this process's
// failure, if any. Returns normally when no process failed.
void agree_on_failure(Transport& transport, std::exception_ptr mine) {
  std::vector<std::optional<SentFailure>> all;
  for (const std::string& sent : transport.exchange(encode_failure(mine))) all.push_back(decode_failure(sent));
  size_t chosen = all.size();
  for (bool deadlock : {false, true}) {
    for (size_t p = 0; p < all.size() && chosen == all.size(); ++p)
      if (all[p] && all[p]->deadlock.has_value() == deadlock) chosen = p;
    if (chosen < all.size()) break;
  }
  if (chosen == all.size()) return;
  // What the other processes ran into follows as notes.
  Consequences after;
  for (size_t p = 0; p < all.size(); ++p) {
    if (p == chosen || !all[p]) continue;
    const std::string who = fmt::format("process {}", p);
    if (all[p]->deadlock)
      after.add_deadlock(who, *all[p]->deadlock, all[p]->message);
    else
      after.add_text(who, all[p]->message);
  }
  if (chosen == static_cast<size_t>(transport.process_index())) rethrow_with_notes(mine, after.notes());
  // The failing process's own header (its device, core, grid point and the user's line) on every
  // process, its notes, then the others'.
  const SentFailure& cause = *all[chosen];
  const std::string problem = fmt::format("process {} of {} failed: {}", chosen, all.size(), cause.message);
  std::vector<std::string> notes = cause.notes;
  for (std::string& note : after.notes()) notes.push_back(std::move(note));
  const ExecutionPoint where = cause.where.value_or(ExecutionPoint{});
  if (cause.deadlock)
    throw RuntimeError(problem, where, cause.loc, std::make_shared<const Deadlock>(*cause.deadlock)).retold(problem, notes);
  throw RuntimeError(problem, where, cause.loc).retold(problem, notes);
}

}  // namespace

void run_on_devices(const std::shared_ptr<const Mesh>& mesh, const std::function<void(int64_t device)>& body) {
  Transport& transport = process_transport();
  MeshRun run(mesh, transport);
  // This process runs its own devices [first, last); the others take part from their processes.
  const auto [first_device, last_device] = transport.local_devices(mesh->size());
  const size_t n = static_cast<size_t>(last_device - first_device);
  Failures failures(n);
  RaceRegistry races;
  struct Publish {  // the shard_map's races are its caller's, also when it fails
    RaceRegistry& races;
    ~Publish() { set_last_race_reports(races.collected()); }
  } publish{races};
  transport.begin_run(run);
  run_concurrently(n, /*caller_runs_first=*/false, failures, [&](size_t i) {
    const int64_t d = first_device + static_cast<int64_t>(i);
    DeviceContext device{mesh, d, mesh->coords(d), &run, 0, 0, &races};
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
  // The first device's failure is the error; what the others then ran into follows it as notes.
  std::exception_ptr failure;
  Consequences after;
  const std::vector<size_t> failed = failures.in_order();
  if (!failed.empty()) failure = failures.error(failed.front());
  for (size_t i = 1; i < failed.size(); ++i)
    after.add(fmt::format("device {}", first_device + static_cast<int64_t>(failed[i])), failures.error(failed[i]));
  if (std::optional<RuntimeError> late = transport.end_run(run)) {
    if (!failure)
      failure = std::make_exception_ptr(*late);
    else
      after.add(late->loc().known() ? "" : "the transport", std::make_exception_ptr(*late));  // "" names its device
  }
  if (failure && !after.notes().empty()) {
    try {
      rethrow_with_notes(failure, after.notes());
    } catch (...) {
      failure = std::current_exception();
    }
  }
  if (transport.process_count() == 1) {
    if (failure) std::rethrow_exception(failure);
    return;
  }
  agree_on_failure(transport, failure);
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
  debug_print_line(fmt::format("[{}] {}", where.str(), format_debug_print(format, values)));
}

}  // namespace tessera::rt
