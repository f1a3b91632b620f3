// expand_pipelines: turns every `pipeline` op into an explicit loop over its grid steps that fetches
// input blocks when their block index changes (or on the first step), runs the body, and writes
// output blocks back when the next step's index differs (or on the last step) — docs/design.md §4.1-6,
// implemented once here for pallas_call and emit_pipeline, and executed by every backend.
//
// An input block the body only reads, and (with `outputs_in_place`) an output block of the kernel's
// own grid that no copy could be told from, is used where it lies in its array: a block_view instead
// of a buffer (docs/design.md §4.3-4). Such an output's "write-back" stays in the IR as a
// writeback_block from that view onto itself: it copies nothing, but keeps the revisit check.
//
// After it, the IR has no pipeline, program_id or num_programs ops. Part of jit/ passes.
#pragma once

#include "jit/ir/ir.h"

namespace tessera::passes {

ir::Function expand_pipelines(const ir::Function& fn, bool outputs_in_place = true);

// Whether `op` is the write-back of an output block written in place: a writeback_block from a
// block_view of its own destination array (it copies nothing; the block is only recorded).
bool writes_back_in_place(const ir::Function& fn, const ir::Op& op);

}  // namespace tessera::passes
