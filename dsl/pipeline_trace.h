// Tracing a pipeline: the blocked operands, index maps and body of pallas_call's grid and of
// pl::emit_pipeline, which both become one `pipeline` op (expanded later by one pass, docs/design.md §4).
//
// Front-end layer (dsl/), internal.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "dsl/specs.h"
#include "dsl/trace.h"

namespace tessera::detail {

// A grid as Python prints its tuple, `?` for a dynamic dim: "(4, ?)", "(8,)".
std::string grid_tuple_str(const std::vector<int64_t>& grid);

// What a pipeline is traced for.
struct PipelineContext {
  std::string what;                          // "pallas_call `matmul`", "pl::emit_pipeline": prefixes errors
  SourceLoc loc;                             // the call, blamed when a spec has no location of its own
  std::vector<int64_t> grid;                 // ir::kDynamicDim for a dim given at run time
  std::vector<Ref> prefetch;                 // scalar-prefetch refs every index map receives after the grid indices
  int64_t default_buffers = 1;               // block buffers when a spec sets no pipeline mode
  std::vector<ir::ValueId> sizes;            // the dynamic dims' sizes (index scalars), in order
  // Empty, or one per grid dim: an i32 added to the dim's index in index maps and program_id (where
  // this core's part of a grid split over cores starts; ir::kNone: nothing to add).
  std::vector<ir::ValueId> offsets;

  [[noreturn]] void fail(std::string problem, std::string given, std::string fix, SourceLoc at) const;
  // The grid's static dims are >= 0 and fit program_id (an i32), and their step count fits int64_t;
  // returns that step count (dynamic dims are checked when the kernel runs, by check_grid). Errors
  // point at `loc`.
  int64_t check_grid() const;
};

// Grid index `d` of the whole grid from this core's `local` one: `offsets[d]` (PipelineContext::offsets,
// GridScope::offsets) added where a grid split over cores gives one. Index maps and program_id use it.
Value whole_grid_index(TraceContext& ctx, const std::vector<ir::ValueId>& offsets, size_t d, Value local, SourceLoc loc);

// How the operand `name` of `shape` reaches the body, from its BlockSpec.
ir::PipelineOperand pipeline_operand(const PipelineContext& pc, const BlockSpec& spec, const Shape& shape,
                                     const std::string& name, bool output, bool aliased);

// Traces one index map per windowed operand, then the body (called with one ref per operand: its
// block, or the array itself when unwindowed), and emits the pipeline op over steps [lo, hi).
void trace_pipeline(TraceContext& ctx, const PipelineContext& pc, ir::PipelineAttr attr,
                    const std::vector<const BlockSpec*>& specs, ir::ValueId lo, ir::ValueId hi,
                    const std::vector<ir::ValueId>& arrays, const std::function<void(std::vector<Ref>&)>& body);

}  // namespace tessera::detail
