// The interpreter: executes lowered IR (pipelines already expanded) on one core, op by op, each op
// over whole blocks with the functions of block_ops.h. It is the reference implementation of the
// semantics in DESIGN.md §4 and checks everything it can: every ref access is bounds-checked, block
// fetches must start inside the array, output blocks may not be revisited non-consecutively, and
// uninitialised memory holds poison (NaN / max-int / true, or zero on request).
//
// Runtime layer; the front end hands it the lowered Function and the launch's buffers.
#pragma once

#include <variant>
#include <vector>

#include "jit/ir/ir.h"
#include "jit/ir/operands.h"
#include "runtime/array.h"
#include "runtime/launch.h"
#include "runtime/memory.h"

namespace tessera::rt {

struct InterpretOptions {
  bool zero_uninitialized = false;  // fill uninitialised memory with zeros instead of poison
};

// A run-time value: a tensor (scalar or block) or a ref.
using Value = std::variant<std::monostate, Array, RefView>;

class Interpreter {
 public:
  Interpreter(const ir::Function& fn, InterpretOptions options);

  // Runs the kernel with one value per parameter (refs to the call's buffers, then the step range).
  // Failures are RuntimeErrors carrying ctx.point and the op's source line.
  void run(CoreContext& ctx, std::vector<Value> params) const;

 private:
  struct Frame;
  std::vector<Value> exec_region(Frame& frame, ir::RegionId region, std::vector<Value> args) const;
  void exec_op(Frame& frame, const ir::Op& op) const;
  // The logical id of the device a remote op's operands from `first` on name.
  int64_t target(Frame& frame, const ir::Op& op, ir::OperandSpan device) const;

  const ir::Function& fn_;
  InterpretOptions options_;
};

}  // namespace tessera::rt
