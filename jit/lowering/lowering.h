// The pass pipeline, in order, in one place:
//
//   verify -> canonicalize -> expand_pipelines -> canonicalize -> fuse_dot_accumulate -> check_vmem_budget
//
// The IR is verified after every pass (an InternalError names the pass that broke it).
// TESSERA_DUMP_IR=1 prints the traced IR, TESSERA_DUMP_IR=<pass> the IR after that pass,
// TESSERA_DUMP_IR=all after each; TESSERA_TIME_PASSES=1 prints how long each pass took. Dumps go
// to stderr. Both backends run the result.
//
// Part of jit/ passes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "jit/ir/ir.h"

namespace tessera::passes {

struct LoweringOptions {
  int64_t vmem_limit_bytes = int64_t{64} << 20;
  SourceLoc call_site;  // where the kernel's pallas_call was written: blamed for budget errors
  // Whether output blocks that nothing can tell apart from copies are written where they lie in
  // the output array (docs/design.md §4.4). Compiled code does; the interpreter keeps its copies.
  bool outputs_in_place = true;
};

// The names of the passes, in order ("canonicalize" appears twice).
const std::vector<std::string>& pass_names();

ir::Function lower(const ir::Function& traced, const LoweringOptions& options);

}  // namespace tessera::passes
