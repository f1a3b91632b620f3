// What a launch runs: a lowered kernel, the layout of its operands, how its grid splits over cores,
// and the backend that runs one core's share of it. The front end (pallas_call, mpmd_map) builds one
// per traced signature of arguments; runtime/launch.h runs it.
//
// The runtime knows backends only through rt::Backend, so it depends on neither of them: the
// interpreter (runtime/interpreter) implements it, and so does CompiledCode here, around an entry
// point with the kernel ABI (runtime/kernel_abi.h) that the JIT (jit/llvm) provides.
//
// Runtime layer.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "jit/ir/diagnostics.h"
#include "jit/ir/ir.h"
#include "runtime/dma_engine.h"
#include "runtime/kernel_abi.h"
#include "runtime/launch.h"

namespace tessera::rt {

class Buffer;

// What an operand (a ref parameter of the kernel, in order) is to the caller.
enum class OperandRole : uint8_t { scalar_prefetch, input, output, scratch };

struct OperandInfo {
  std::string name;  // "scalar prefetch 0", "input 1", "output 0", "scratch 2": used in errors
  OperandRole role;
  DType dtype;
  Shape shape;
  MemorySpace space;
  SourceLoc loc;  // scratch: where it was declared
  int64_t bytes() const { return num_elements(shape) * dtype_size(dtype); }
};

// The memory of a launch's operands, one entry per operand, in order.
struct OperandMemory {
  std::span<void* const> data;       // the first byte of each (what compiled code takes)
  std::span<Buffer* const> buffers;  // the same memory as checked buffers; only for checked backends
};

// Runs one core's share of a kernel.
class Backend {
 public:
  virtual ~Backend() = default;
  // Whether it runs on checked buffers whose unwritten memory is poisoned, simulating its cores (the
  // interpreter), rather than on raw memory with one core per thread (compiled code).
  virtual bool checked() const = 0;
  // Runs steps [steps.lo, steps.hi) of the grid on `core` (a kernel without a grid has no steps). A
  // failure is a RuntimeError: thrown, or left in core.fault for the launch to throw.
  virtual void run_core(CoreContext& core, const OperandMemory& operands, StepRange steps) const = 0;
};

// A compiled kernel: its entry point, and whatever keeps its code loaded.
class CompiledCode final : public Backend {
 public:
  CompiledCode(KernelEntry entry, std::shared_ptr<const void> code) : entry_(entry), code_(std::move(code)) {}
  bool checked() const override { return false; }
  void run_core(CoreContext& core, const OperandMemory& operands, StepRange steps) const override {
    entry_(operands.data.data(), steps.lo, steps.hi, &core);
  }

 private:
  KernelEntry entry_;
  std::shared_ptr<const void> code_;
};

// How the cores of a checked backend behave (InterpretParams).
struct CheckedCores {
  int count = 1;  // simulated cores a grid is split over
  DmaMode dma = DmaMode::eager;
  uint64_t seed = 0;  // of the on_wait order; core c uses seed + c
  bool zero_uninitialized = false;  // outputs and scratch start zeroed instead of poisoned
  bool detect_races = false;        // happens-before race detection (runtime/race_detector.h)
};

// A grid dim sized by a call argument (pl::from_prefetch): the value of operand `operand`, a rank-0
// integer scalar-prefetch array, read on the host at every launch. `loc` wrote it in the grid.
struct GridFromArg {
  size_t dim = 0;
  size_t operand = 0;
  SourceLoc loc;
};

// A kernel ready to launch, for one signature of arguments.
struct Executable {
  Executable() = default;
  // The backend may keep references into `lowered`.
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  LaunchKey key;  // the kernel's name, collective id and call site
  ir::Function lowered;
  // The ref parameters of `lowered`, in order: the call's arguments (scalar-prefetch operands, then
  // inputs), the outputs, then scratch the launch provides (an mpmd_map's shared scratch).
  std::vector<OperandInfo> operands;
  // input_output_aliases: (operand index of the input, output number); the output is a copy of the
  // input and the kernel sees one buffer for both.
  std::vector<std::pair<int, int>> aliases;
  // The grid (none for an mpmd_map participant, which runs once) and how its dims split over cores.
  std::vector<int64_t> grid;  // ir::kDynamicDim where grid_from_args gives the size
  std::vector<ir::DimSemantics> semantics;
  std::vector<GridFromArg> grid_from_args;
  bool communicates = false;  // remote copies or signals: launches on a mesh are collective
  std::unique_ptr<Backend> backend;
  CheckedCores checked;

  const std::string& name() const { return key.kernel; }
  int num_outputs() const;

  // How the grid's steps split over `cores` cores, and how many of them have any (later ones have
  // nothing to do). Made once per core count and kept as long as the executable, so that a launch
  // reads it without copying.
  struct Split {
    int active = 0;
    std::vector<StepRange> ranges;
  };
  const Split& split_for(int cores) const;
  // The grid of a launch with `args` (the call's arguments): `grid` with the sizes they give. A size
  // the grid rule refuses (rt::grid_sizes_error) is a RuntimeError at the line that wrote the dim.
  std::vector<int64_t> grid_of(std::span<const Array> args) const;
  // How `grid` splits over `cores` cores: what split_for keeps for a grid known when compiling.
  Split split_of(const std::vector<int64_t>& grid, int cores) const;
  // Memory compiled kernels allocated in earlier launches, for the next launches to reuse.
  std::vector<std::unique_ptr<Buffer>> take_arena() const;
  void give_arena(std::vector<std::unique_ptr<Buffer>> arena) const;

 private:
  mutable std::mutex mutex_;
  mutable std::map<int, Split> splits_;  // by core count; its nodes never move
  mutable std::vector<std::vector<std::unique_ptr<Buffer>>> arenas_;
};

}  // namespace tessera::rt
