// The code generator: lowered IR (pipelines expanded) to one LLVM function with the uniform kernel
// ABI of runtime/kernel_abi.h. Block values are not memory objects: element-wise chains become one
// loop nest at the op that consumes them (a store, a reduction), dot_accumulate (`acc() +=
// dot(...)`) accumulates into the ref through the GEMM micro-kernel, and values are put in
// temporaries only when they are used twice, across regions, or across a store that could change
// what they read. Block copies, allocations, checks and prints call the runtime by symbol.
//
// jit/ internal: LLVM types are only forward-declared here.
#pragma once

#include <string>

#include "jit/ir/ir.h"
#include "jit/llvm/target.h"

namespace llvm {
class Module;
}

namespace tessera::jit {

// Emits `fn` into `module` as `void symbol(ptr operands, i64 first_step, i64 end_step, ptr core)`,
// choosing the dot micro-kernels for `target` (the one the module is compiled for).
void emit_kernel(const ir::Function& fn, llvm::Module& module, const std::string& symbol, const CpuTarget& target);

}  // namespace tessera::jit
