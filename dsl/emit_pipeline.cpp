#include "dsl/emit_pipeline.h"

#include <fmt/format.h>

#include "dsl/pipeline_trace.h"

namespace tessera::detail {

using ir::OpKind;

void emit_pipeline_impl(const PipelineSpec& spec, int body_arity, const std::function<void(std::vector<Ref>&)>& body,
                        const std::vector<Ref>& refs, SourceLoc loc) {
  auto& ctx = TraceContext::current("pl::emit_pipeline", loc);
  const PipelineContext pc{"pl::emit_pipeline", loc, spec.grid, {}, 2};
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
  const int64_t steps = pc.check_grid();
  if (!spec.dimension_semantics.empty() && spec.dimension_semantics.size() != spec.grid.size())
    pc.fail("dimension_semantics must have one entry per grid dim",
            fmt::format("{} entries for a grid of {} dims", spec.dimension_semantics.size(), spec.grid.size()),
            "list pl::parallel or pl::arbitrary for every grid dim", loc);

  ir::PipelineAttr pa;
  pa.id = ++ctx.pipelines;
  pa.grid = spec.grid;
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
  const Value hi = constant(ctx, ir::Literal::of_int(steps), Type::scalar(DType::index), loc);
  trace_pipeline(ctx, pc, std::move(pa), specs, lo.id(), hi.id(), arrays, body);
}

}  // namespace tessera::detail
