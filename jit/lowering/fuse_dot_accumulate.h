// fuse_dot_accumulate: `acc() += pl::dot(x, y)`, traced as store(acc, add(load(acc), dot_general(x, y))),
// becomes one dot_accumulate(acc, x, y) op, so that the fusion shows in IR dumps and both backends
// see the same op: the LLVM backend runs its GEMM micro-kernel straight into the ref, the
// interpreter computes it as the unfused ops would.
//
// The pattern fuses only when the load, the dot and the add have no other use and sit in the
// store's region, and nothing between the load and the store writes memory (so reading the
// accumulator at the store instead reads the same elements).
//
// Part of jit/ passes (run by the pipeline in lowering.cpp).
#pragma once

#include "jit/ir/ir.h"

namespace tessera::passes {

ir::Function fuse_dot_accumulate(const ir::Function& fn);

}  // namespace tessera::passes
