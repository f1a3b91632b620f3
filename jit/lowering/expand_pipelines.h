// expand_pipelines: turns every `pipeline` op into an explicit loop over its grid steps that fetches
// input blocks when their block index changes (or on the first step), runs the body, and writes
// output blocks back when the next step's index differs (or on the last step) — docs/design.md §4.1-6,
// implemented once here for pallas_call and emit_pipeline, and executed by every backend.
//
// After it, the IR has no pipeline, program_id or num_programs ops. Part of jit/ passes.
#pragma once

#include "jit/ir/ir.h"

namespace tessera::passes {

ir::Function expand_pipelines(const ir::Function& fn);

}  // namespace tessera::passes
