// Launching kernels: splitting a grid's row-major step order over cores (docs/design.md §4.11), running
// the cores on threads, seating them in launch groups on a mesh, and collecting their failures; the
// state one core and the cores of one launch keep while they run.
//
// Runtime layer. The front end describes what to run (an Executable, runtime/executable.h) and calls
// launch() for a pallas_call, launch_together() for an mpmd_map and run_on_devices() for a
// shard_map; backends run one core's steps (rt::Backend).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <string>
#include <string_view>
#include <vector>

#include <memory>
#include <optional>

#include "jit/ir/diagnostics.h"
#include "jit/ir/ir.h"
#include "runtime/settings.h"
#include "runtime/collective.h"
#include "runtime/dma_engine.h"
#include "runtime/memory.h"
#include "runtime/race_detector.h"

namespace tessera::rt {

// Steps [lo, hi) of the grid's row-major order.
struct StepRange {
  int64_t lo = 0;
  int64_t hi = 0;
};

// Splits the grid over `num_cores`: the parallel dims (a prefix of the grid) are divided into
// contiguous chunks of ceil(P / cores) parallel points each (P = product of the parallel dims), and
// every chunk takes all steps of the arbitrary dims under it. Cores beyond the work get empty
// ranges. Without parallel dims everything runs on core 0.
std::vector<StepRange> split_steps(const std::vector<int64_t>& grid, const std::vector<ir::DimSemantics>& semantics,
                                   int num_cores);

// The steps under one point of the parallel dims (the prefix of the grid split_steps divides): the
// product of the grid's other dims, which always run together, in order, on one thread.
int64_t steps_per_parallel_point(const std::vector<int64_t>& grid, const std::vector<ir::DimSemantics>& semantics);

// The row-major grid point of a step.
std::vector<int64_t> grid_point_of(const std::vector<int64_t>& grid, int64_t step);

// Thrown inside a core whose launch was cancelled by another core's failure; never escapes run_cores.
struct Cancelled {};

// A block of the kernel's grid pipeline written back to its array: which operand, where, and the
// grid point and core that wrote it. Differential mode asks the interpreted run for these to say
// which grid point's block holds an element that differs.
struct BlockWrite {
  int64_t operand = 0;  // index among the pipeline's operands (inputs, then outputs)
  std::vector<int64_t> starts;
  Shape shape;
  ExecutionPoint point;
};

class BlockWriteLog {
 public:
  void add(BlockWrite w) {
    std::lock_guard lock(mutex_);
    writes_.push_back(std::move(w));
  }
  // The last write of `operand` whose block holds element `index`; null when none does.
  const BlockWrite* last_holding(int64_t operand, std::span<const int64_t> index) const;

 private:
  mutable std::mutex mutex_;
  std::vector<BlockWrite> writes_;
};

// State shared by the cores of one launch.
class Launch {
 public:
  // `name` (the kernel's, for timelines) must outlive the launch.
  explicit Launch(int device, std::string_view name = {}) : device_(device), name_(name) {}

  int device() const { return device_; }
  std::string_view name() const { return name_; }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }
  void cancel() { cancelled_.store(true, std::memory_order_relaxed); }

  // Records that block `starts` of pipeline operand `operand` was written back by `by`. Returns who
  // wrote it back before in this launch (a non-consecutive revisit, or a race between cores), if anyone.
  std::optional<ExecutionPoint> record_writeback(int64_t operand, std::span<const int64_t> starts, const ExecutionPoint& by);

  // Where the backend reports the blocks it writes back, when someone asked (else null).
  BlockWriteLog* block_writes = nullptr;
  // The seed of checked cores' on_wait copy order, when it replaces the executable's.
  std::optional<uint64_t> seed;
  // The steps under one point of the grid's parallel dims (steps_per_parallel_point) of this launch's
  // grid, whose sizes may be the call's (pl::from_prefetch): the unit cores share work and
  // random_parallel_order shuffles in.
  int64_t steps_per_point = 1;

 private:
  int device_;
  std::string_view name_;
  std::atomic<bool> cancelled_{false};
  std::mutex mutex_;
  std::unordered_map<std::string, ExecutionPoint> written_;  // operand and starts as raw bytes -> writer
};


// A piece of a core's memory that remote copies and signals can address: an operand (key -1 - k), a
// core's own copy of scalar-prefetch operand k (core_operand_key(k)) or an allocation (key: its alloc
// op). The same key names the corresponding memory on every device. Keys from 0 on are a core's own
// memory (race detection tells cores apart there); negative keys are the device's, shared by its cores.
constexpr int64_t core_operand_key(int64_t operand) { return (int64_t{1} << 48) + operand; }
struct MemoryRegion {
  int64_t key;
  const std::byte* lo;
  const std::byte* hi;
};

// One core's state while it runs a kernel. Errors report `point`. Compiled kernels also keep here
// the lowered IR (their calls into the runtime name ops by index), their allocations, and the first
// failure, which the host throws after the kernel returned.
struct CoreContext {
  // `device`: the device it runs on inside a shard_map (or the mpmd_map participant's point).
  CoreContext(Launch& l, int core, const ir::Function* f = nullptr, const DeviceContext* device = nullptr);
  ~CoreContext();  // ends the core's spans on the timeline
  CoreContext(const CoreContext&) = delete;
  CoreContext& operator=(const CoreContext&) = delete;

  Launch& launch;
  ExecutionPoint point;
  const ir::Function* fn = nullptr;
  const DeviceContext* device = nullptr;
  bool zero_uninitialized = false;
  // Memory a compiled kernel allocates, in the order it asks for it; a launch may hand in the
  // buffers of an earlier launch of the same kernel, which are then reused (and re-poisoned).
  std::vector<std::unique_ptr<Buffer>> allocations;
  size_t next_allocation = 0;
  std::optional<RuntimeError> fault;
  // Race detection (InterpretParams::detect_races): the detector and this core's actor there.
  RaceDetector* races = nullptr;
  int race_actor = -1;

  // The group of a collective launch or an mpmd_map (docs/design.md §4b), and the core's seat there:
  // set while a GroupMembership holds the core; no group otherwise.
  LaunchGroup* group() const { return group_; }
  Seat seat() const { return seat_; }

  // The memory other participants may address: registered as the kernel gets it (again under the
  // same key: moved), found by address here and by key on the other side.
  void add_region(int64_t key, const void* data, int64_t bytes);
  const MemoryRegion* region_containing(const std::byte* p, int64_t extent) const;
  const MemoryRegion* region(int64_t key) const;
  const std::vector<MemoryRegion>& regions() const { return regions_; }

  // What the timeline needs (timeline.h), while recording: when the kernel and the current grid step
  // began, the step's name, and the named scopes open in the kernel.
  struct TimelineState {
    double kernel_start = -1, step_start = -1;
    std::string step;
    std::vector<std::pair<std::string, double>> scopes;
  } timeline;
  // Declared last, so that it stops (waits for its copies) before the memory above goes away.
  DmaEngine dma;

 private:
  friend class GroupMembership;
  friend void check_revisit(CoreContext& core, const ir::BlockCopyAttr& attr, std::span<const int64_t> starts);
  friend void begin_pipeline(CoreContext& core, int64_t id);

  LaunchGroup* group_ = nullptr;
  Seat seat_;
  std::vector<MemoryRegion> regions_;
  // Blocks written back by the current run of each nested pipeline (emit_pipeline), by pipeline id,
  // with the pipeline step that wrote each back.
  std::map<int64_t, std::unordered_map<std::string, std::vector<int64_t>>> nested_writebacks_;
};

// How long the semaphores an Alloc op makes must stay at zero: the kernel's own scratch until the
// kernel ends, a nested (run_scoped) region's at each of the region's ends. Shared by both backends.
DmaEngine::Lifetime semaphore_lifetime(const ir::Function& fn, const ir::Op& alloc);

// Records a block written back by a writeback_block op and faults on a non-consecutive revisit
// (unless the output aliases an input, where revisits are the point): across the launch for the
// kernel's grid, within one run for a nested pipeline. Shared by both backends.
void check_revisit(CoreContext& core, const ir::BlockCopyAttr& attr, std::span<const int64_t> starts);
// The start of a grid step of the kernel (core.point.grid_point holds it): the previous step's span
// ends on the timeline. Shared by both backends, like the two below.
void enter_grid_step(CoreContext& core);
// A trace_start (start) or trace_stop op: a named scope in a kernel, a span on the core's track.
void kernel_scope(CoreContext& core, const std::string& name, bool start);
// The start of a run of nested pipeline `id`: it has written back nothing yet.
void begin_pipeline(CoreContext& core, int64_t id);

// Runs body(core) for every core on the thread pool (core 0 on the caller's thread). When a core
// throws, the launch is cancelled and, after all cores stopped, the first failure in time is
// rethrown (RuntimeError::sequence; what other cores ran into after it is its consequence).
void run_cores(Launch& launch, int num_cores, const std::function<void(int core)>& body);

struct Executable;

// What a caller may ask of one launch beyond its executable.
struct LaunchOptions {
  BlockWriteLog* block_writes = nullptr;  // checked backends log the blocks they write back here
  std::optional<uint64_t> seed;           // replaces Executable::checked.seed (schedule exploration)
  // Set to the launch's instant, a next_failure_sequence() value that dates a failure found after it:
  // the same for every device of a collective launch (LaunchGroup::instant), else taken at its start.
  uint64_t* instant = nullptr;
};

// A pallas_call: runs `exe` over its grid on the current device (rt::current_device(), none outside
// a shard_map), its steps split over the cores, and returns its outputs. `args` are the
// scalar-prefetch operands, then the inputs. A kernel that communicates joins the collective launch
// of every device of the shard_map (the caller checked that there is one). Throws the first failure
// of its cores (run_cores).
std::vector<Array> launch(const Executable& exe, std::span<const Array> args, const LaunchOptions& options = {});

// One participant of launch_together: a point of a mesh running `exe` once, as one core.
struct Participant {
  const Executable* exe = nullptr;
  std::string name;  // in errors: "function 1 (CoreMesh("core", 2)) at core=1"
  // Its point: what pl::axis_index and device ids in the kernel resolve against (coords are its
  // grid point), and its place in the group (first_member + logical).
  DeviceContext point;
  // Whether the point is a device (named by its coordinates on timelines, current while it runs)
  // or a core of the device the launch was made on.
  bool is_device = false;
};

// An mpmd_map: runs every participant at once, each on a thread of its own, as one launch group
// (member i: participants[i]) in which they may block on each other. They share the operands, the
// same layout for all: the inputs (`args`, read in place), the outputs and the scratch operands;
// semaphores among them start at zero and must be back at zero at the end. `scope` names the launch
// in errors ("mpmd_map `k`"). Returns the outputs; throws the first participant's own failure (a
// deadlock report only when there is nothing else), naming it; under a seed schedule the first in the
// schedule's order, so that a seed replays the same error text. `options.seed`: the schedule's seed
// in place of the executables' (schedule exploration); block_writes is not used (no grid).
std::vector<Array> launch_together(const std::string& scope, std::span<const Participant> participants,
                                   std::span<const Array> args, const LaunchOptions& options = {});

// A shard_map: runs body(device) once per device of `mesh`, each on a thread of its own with its
// device current (rt::current_device()), as one MeshRun for the collective launches they make.
// Rethrows the first failure once every device stopped. Under a transport of several processes
// (runtime/transport.h) only this process's devices run here, and every process throws the same
// failure: the first process's own, before deadlock reports.
void run_on_devices(const std::shared_ptr<const Mesh>& mesh, const std::function<void(int64_t device)>& body);

// set_debug_print_sink is in runtime/settings.h.
void debug_print_line(std::string_view line);
// Prints one debug_print: the format with each `{}` replaced by the next value, prefixed by `where`
// (runtime/debug_print_format.h: how formats read and values print).
void debug_print(const ExecutionPoint& where, const std::string& format, const std::vector<const Array*>& values);

}  // namespace tessera::rt
