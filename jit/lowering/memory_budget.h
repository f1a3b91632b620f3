// check_vmem_budget: the VMEM a kernel allocates per core (block buffers and scratch) must fit the
// capacity (CompilerParams::vmem_limit_bytes, 64 MiB by default). Exceeding it is a UserError that
// lists every VMEM buffer with its size and where it comes from, largest first.
//
// Part of jit/ passes (an analysis: it does not change the IR).
#pragma once

#include <cstdint>

#include "jit/ir/ir.h"

namespace tessera::passes {

inline constexpr int64_t kDefaultVmemBytes = int64_t{64} << 20;

// The total bytes of VMEM the function allocates per core.
int64_t vmem_bytes(const ir::Function& fn);
void check_vmem_budget(const ir::Function& fn, int64_t limit_bytes, SourceLoc call_site);

}  // namespace tessera::passes
