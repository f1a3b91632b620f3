// canonicalize: folds constants (element-wise ops, casts, broadcasts and reshapes of constants,
// selects and ifs with a constant condition) with the runtime's own numerics, and removes ops whose
// results are unused and that have no side effects. Repeats until nothing changes.
//
// Part of jit/ passes.
#pragma once

#include "jit/ir/ir.h"

namespace tessera::passes {

ir::Function canonicalize(const ir::Function& fn);
// Only the dead-code part: drops unused side-effect-free ops (used right after tracing).
ir::Function remove_dead_code(const ir::Function& fn);

}  // namespace tessera::passes
