#include "dsl/emit_pipeline.h"

#include <fmt/format.h>

#include "dsl/pipeline_trace.h"

namespace tessera::detail {

using ir::OpKind;

namespace {

// Fills pc.grid (static sizes, ir::kDynamicDim for a traced dim) and pc.sizes (each traced dim's size
// as an index scalar) and returns the step count of the static dims.
int64_t trace_grid(TraceContext& ctx, PipelineContext& pc, const std::vector<GridDim>& grid) {
  for (size_t d = 0; d < grid.size(); ++d) {
    const GridDim& g = grid[d];
    if (g.is_static()) {
      pc.grid.push_back(g.size());
      continue;
    }
    const SourceLoc at = g.loc().known() ? g.loc() : pc.loc;
    if (g.prefetch())
      pc.fail(fmt::format("grid dim {} is pl::from_prefetch({}), which sizes a pallas_call grid", d, *g.prefetch()),
              fmt::format("pl::from_prefetch({}) in dim {}", *g.prefetch(), d),
              "read the size from the scalar-prefetch ref inside the kernel and pass that value, e.g. counts[g]", at);
    const Value& v = g.value();
    check_live(v, at);
    if (!v.is_scalar() || !is_int(v.dtype()))
      pc.fail(fmt::format("grid dim {} must be an integer scalar", d), fmt::format("{} in dim {}", describe(v), d),
              "pass a number or a traced i32/i64 scalar, e.g. a block count read from a scalar-prefetch ref", at);
    ctx.check_visible(v.id(), "pl::emit_pipeline", at);
    pc.grid.push_back(ir::kDynamicDim);
    pc.sizes.push_back(cast_to(v, DType::index, at).id());
  }
  const int64_t fixed = pc.check_grid();
  for (size_t d = 0; d < pc.grid.size(); ++d)
    if (pc.grid[d] == 0)
      // Pallas rejects it too: a pipeline that can never run a step is a mistake when it is known.
      pc.fail("a grid dim of 0 runs no step, which emit_pipeline rejects",
              fmt::format("grid {} has 0 in dim {}", grid_tuple_str(pc.grid), d),
              "skip the pipeline (pl::when) when there is nothing to do; a traced grid dim may be 0 and then "
              "runs no step",
              pc.loc);
  return fixed;
}

// The step count: `fixed` times the dynamic sizes, computed when the kernel runs (check_grid rejects
// negative sizes before the pipeline's loops).
Value step_count(TraceContext& ctx, const PipelineContext& pc, int64_t fixed) {
  Value steps = constant(ctx, ir::Literal::of_int(fixed), Type::scalar(DType::index), pc.loc);
  for (ir::ValueId size : pc.sizes)
    steps = emit(ctx, OpKind::Mul, {steps, Value::wrap(ctx, size)}, Type::scalar(DType::index), {}, pc.loc);
  return steps;
}

}  // namespace

void emit_pipeline_impl(const PipelineSpec& spec, int body_arity, const std::function<void(std::vector<Ref>&)>& body,
                        const std::vector<Ref>& refs, SourceLoc loc) {
  auto& ctx = TraceContext::current("pl::emit_pipeline", loc);
  PipelineContext pc{"pl::emit_pipeline", loc, {}, {}, 2};
  const size_t ni = spec.in_specs.size(), no = spec.out_specs.size();
  if (refs.size() != ni + no)
    pc.fail("the pipeline is called with another number of refs than it has specs",
            fmt::format("{} ref(s) for {} in_specs and {} out_specs", refs.size(), ni, no),
            "call it with one ref per in_spec, then one per out_spec", loc);
  if (body_arity != static_cast<int>(ni + no))
    pc.fail("the body takes another number of refs than the pipeline has specs",
            fmt::format("a body of {} pl::Ref parameter(s) for {} in_specs and {} out_specs", body_arity, ni, no),
            "give the body one pl::Ref per input block, then one per output block (capture scratch from the kernel)",
            loc);
  const int64_t fixed_steps = trace_grid(ctx, pc, spec.grid);
  if (!spec.dimension_semantics.empty() && spec.dimension_semantics.size() != spec.grid.size())
    pc.fail("dimension_semantics must have one entry per grid dim",
            fmt::format("{} entries for a grid of {} dims", spec.dimension_semantics.size(), spec.grid.size()),
            "list pl::parallel or pl::arbitrary for every grid dim", loc);

  ir::PipelineAttr pa;
  pa.id = ++ctx.pipelines;
  pa.grid = pc.grid;
  pa.semantics = spec.dimension_semantics.empty()
                     ? std::vector<ir::DimSemantics>(spec.grid.size(), ir::DimSemantics::Arbitrary)
                     : spec.dimension_semantics;
  std::vector<const BlockSpec*> specs;
  std::vector<ir::ValueId> arrays;
  for (size_t k = 0; k < ni + no; ++k) {
    const bool output = k >= ni;
    const Ref& r = refs[k];
    const std::string name = output ? fmt::format("emit_pipeline output {}", k - ni) : fmt::format("emit_pipeline input {}", k);
    trace_of(r, "pl::emit_pipeline", loc);
    if (r.memory_space() == MemorySpace::SEMAPHORE)
      pc.fail(fmt::format("{} is a semaphore", name), r.describe(), "pipeline data refs (HBM, ANY or VMEM arrays)", loc);
    if (output) check_writable(r, "pl::emit_pipeline", loc);
    ctx.check_visible(r.id(), "pl::emit_pipeline", loc);
    specs.push_back(output ? &spec.out_specs[k - ni] : &spec.in_specs[k]);
    pa.operands.push_back(pipeline_operand(pc, *specs.back(), r.shape(), name, output, false));
    arrays.push_back(r.id());
  }
  const Value lo = constant(ctx, ir::Literal::of_int(0), Type::scalar(DType::index), loc);
  const Value hi = step_count(ctx, pc, fixed_steps);
  trace_pipeline(ctx, pc, std::move(pa), specs, lo.id(), hi.id(), arrays, body);
}

}  // namespace tessera::detail
