// The interpreter: executes lowered IR (pipelines already expanded) on one core, op by op, each op
// over whole blocks with the functions of block_ops.h. It is the reference implementation of the
// semantics in docs/design.md §4 and checks everything it can: every ref access is bounds-checked, block
// fetches must start inside the array, output blocks may not be revisited non-consecutively,
// uninitialised memory holds poison (NaN / max-int / true, or zero on request), and a load of scratch
// the kernel never wrote is an error (unless uninitialised memory reads as zero: scratch_writes.h).
//
// Runtime layer: one of the two backends (rt::Backend). The front end builds it over the lowered
// Function of an Executable; the launch (runtime/launch.h) hands it each core's buffers and steps.
#pragma once

#include <functional>
#include <mutex>
#include <span>
#include <variant>
#include <vector>

#include "jit/ir/ir.h"
#include "jit/ir/operands.h"
#include "runtime/array.h"
#include "runtime/executable.h"
#include "runtime/launch.h"
#include "runtime/memory.h"

namespace tessera::rt {

enum class AccessKind : uint8_t;  // runtime/race_detector.h

struct InterpretOptions {
  bool zero_uninitialized = false;  // fill uninitialised memory with zeros instead of poison
  // Ops computing float values (arithmetic, casts, reductions, dots, shape ops) are not computed:
  // their results are +inf. Loads, stores, copies and semaphores run as usual.
  bool skip_floating_point_ops = false;
  // Called at the start of every step of the kernel's grid, one call at a time, with the step's grid
  // point and the core that runs it.
  std::function<void(std::vector<int64_t> grid_point, int64_t core)> grid_point_recorder;
  // A view past its ref's bounds that is only loaded from reads the poison of uninitialised memory
  // outside the ref instead of failing (InterpretParams::out_of_bounds_reads = uninitialized).
  bool uninitialized_out_of_bounds_reads = false;
  // Loads and stores through a view of a whole buffer may reach into the buffer's TPU padding
  // (tpu_padded_shape): the padding reads as uninitialised and drops what is stored there
  // (InterpretParams::buffer_bounds = padded).
  bool padded_buffer_bounds = false;
  // Visit the points of the grid's parallel dims in a seeded random order per core (see
  // InterpretParams::random_parallel_order), each point's steps (Launch::steps_per_point) in order.
  // The seed is the launch's (schedule exploration) or `seed`, plus the core.
  bool random_parallel_order = false;
  uint64_t seed = 0;
};

// A run-time value: a tensor (scalar or block) or a ref.
using Value = std::variant<std::monostate, Array, RefView>;

class Interpreter final : public Backend {
 public:
  // `fn` must outlive the interpreter.
  Interpreter(const ir::Function& fn, InterpretOptions options);

  bool checked() const override { return true; }
  // Runs the kernel over the operands' buffers (and, for a kernel over a grid, the steps). Failures
  // are RuntimeErrors carrying ctx.point and the op's source line.
  void run_core(CoreContext& ctx, const OperandMemory& operands, StepRange steps) const override;

 private:
  // Runs the kernel with one value per parameter.
  void run(CoreContext& ctx, std::vector<Value> params) const;
  struct Frame;
  std::vector<Value> exec_region(Frame& frame, ir::RegionId region, std::vector<Value> args) const;
  // `shuffled`: a grid loop run_parallel_points_shuffled already narrowed to one point.
  void exec_op(Frame& frame, const ir::Op& op, bool shuffled = false) const;
  // The logical id of the device a remote op's operands from `first` on name.
  int64_t target(Frame& frame, const ir::Op& op, ir::OperandSpan device) const;

  // An out-of-bounds view of `ref` that only loads (and, for padded bounds, stores) go through: a
  // buffer of the view's shape, its shadow, holding the in-bounds elements and poison elsewhere (see
  // InterpretOptions::uninitialized_out_of_bounds_reads and padded_buffer_bounds).
  RefView out_of_bounds_window(Frame& frame, const ir::Op& op, const RefView& ref, std::span<const int64_t> starts) const;
  // Whether the window `attr` at `starts` of `ref` lies inside the TPU padding of ref's buffer
  // (padded_buffer_bounds; only a whole, non-SMEM buffer is padded).
  bool within_padding(const RefView& ref, std::span<const int64_t> starts, const ir::ViewAttr& attr) const;
  // Before a load from or a store into `r`: race detection's note of the access and, when `r` is in a
  // shadow, the shadow refreshed from its ref (the detector sees the ref's in-bounds part accessed).
  void before_access(Frame& frame, const RefView& r, AccessKind kind, const Array* mask, SourceLoc loc) const;
  // After a store into `r` (of the lanes `mask` selects, when given): the elements recorded as
  // written, and a shadow's in-bounds part written back to its ref.
  void after_store(Frame& frame, const RefView& r, const Array* mask) const;
  // Before a masked access through `ref`: faults when a lane `mask` selects lies outside the ref of a
  // lane-checked view whose window reaches past it.
  void check_lanes(Frame& frame, ir::ValueId ref, const Array& mask, bool store) const;
  // Runs the grid's loop `op` one parallel point at a time, in a random order (random_parallel_order).
  void run_parallel_points_shuffled(Frame& frame, const ir::Op& op) const;
  // Whether `op` is the loop over the kernel's grid steps (from the first-step to the end-step parameter).
  bool is_grid_loop(const ir::Op& op) const;

  const ir::Function& fn_;
  InterpretOptions options_;
  // View ops whose result (and the views of it) is only loaded from: those an out-of-bounds read may pass.
  std::vector<bool> read_only_view_;
  // View ops whose result (and the views of it) is only loaded from and stored into: those padded
  // buffer bounds apply to.
  std::vector<bool> load_store_view_;
  // View ops whose every use is a masked load or store: checked lane by lane there (lane_checked_views).
  std::vector<bool> lane_checked_view_;
  // Alloc ops (by op id) whose writes are recorded and whose loads are checked (ScratchWrites);
  // empty when uninitialised memory reads as zero.
  std::vector<bool> tracked_scratch_;
  mutable std::mutex recorder_mutex_;  // the recorder sees one call at a time
};

}  // namespace tessera::rt
