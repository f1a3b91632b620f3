#include "dsl/emit_pipeline.h"

#include <fmt/format.h>

#include "dsl/control.h"
#include "dsl/pipeline_trace.h"
#include "dsl/value.h"

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

// A grid split over cores (PipelineSpec::core_axis / core_axis_name): the grid this core runs and,
// in `offsets` (empty when not split), where its part starts in each dim (ir::kNone: at 0).
struct Partition {
  std::vector<GridDim> grid;
  std::vector<ir::ValueId> offsets;
};

// `grid` with dim `d` replaced by `g`.
std::vector<GridDim> with_dim(const std::vector<GridDim>& grid, size_t d, const GridDim& g) {
  std::vector<GridDim> out;
  for (size_t i = 0; i < grid.size(); ++i) out.push_back(i == d ? g : grid[i]);
  return out;
}

Partition partition_grid(TraceContext& ctx, const PipelineContext& pc, const PipelineSpec& spec,
                         std::source_location loc) {
  Partition part{spec.grid, {}};
  if (!spec.core_axis && !spec.core_axis_name) return part;
  if (spec.core_axis && spec.core_axis_name)
    pc.fail("only one of core_axis and core_axis_name may be set",
            fmt::format(".core_axis = {} and .core_axis_name = {}", *spec.core_axis, spec.core_axis_name->str()),
            "name the core either by a grid axis of the enclosing kernel (core_axis) or by a mesh axis "
            "(core_axis_name)",
            loc);
  int64_t cores = 0;
  std::optional<Value> core;
  if (spec.core_axis) {
    const int axis = *spec.core_axis;
    if (ctx.grids.empty())
      pc.fail(fmt::format("core_axis {} names a grid axis, but the enclosing kernel has no grid", axis),
              "an mpmd_map kernel, which runs once at every point of its mesh",
              "name the mesh axis instead: .core_axis_name = \"core\"", loc);
    const std::vector<int64_t>& outer = ctx.grids.back().sizes;
    if (axis < 0 || axis >= static_cast<int>(outer.size()))
      pc.fail(fmt::format("core_axis {} is not an axis of the enclosing grid", axis),
              fmt::format("a grid of {} dims {}", outer.size(), grid_tuple_str(outer)),
              outer.empty() ? std::string("the enclosing grid has no axes: leave core_axis unset")
                            : fmt::format("use an axis in [0, {})", outer.size()),
              loc);
    if (outer[static_cast<size_t>(axis)] == ir::kDynamicDim)
      pc.fail("the grid cannot be split over a number of cores known only when the kernel runs",
              fmt::format("core_axis {}, a dim sized at call time in {}", axis, grid_tuple_str(outer)),
              "make the enclosing grid's core dim a number", loc);
    cores = outer[static_cast<size_t>(axis)];
    core = program_id(axis, loc);
  } else {
    cores = axis_size(*spec.core_axis_name, loc);
    core = axis_index(*spec.core_axis_name, loc);
  }
  if (cores == 1) return part;

  const size_t rank = spec.grid.size();
  std::vector<size_t> parallel;
  for (size_t d = 0; d < spec.dimension_semantics.size(); ++d)
    if (spec.dimension_semantics[d] == DimensionSemantics::Parallel) parallel.push_back(d);
  if (parallel.empty())
    pc.fail(fmt::format("the grid cannot be split over {} cores: none of its dims is parallel", cores),
            fmt::format("grid of {} dim(s), dimension_semantics ({})", rank,
                        spec.dimension_semantics.empty() ? std::string("none given: all arbitrary")
                                                         : fmt::format("{} entries, none pl::parallel",
                                                                       spec.dimension_semantics.size())),
            "mark the dim to split pl::parallel in .dimension_semantics (its steps must not depend on each other)",
            loc);
  auto index_value = [&](int64_t v) { return Operand(v, loc).materialize(DType::i32); };
  part.offsets.assign(rank, ir::kNone);
  // The first static parallel dim the core count divides: equal parts.
  for (size_t d : parallel) {
    const GridDim& g = spec.grid[d];
    if (!g.is_static() || g.size() % cores != 0) continue;
    const int64_t each = g.size() / cores;
    part.grid = with_dim(spec.grid, d, GridDim(each));
    part.offsets[d] = (Operand(*core, loc) * Operand(index_value(each), loc)).id();
    return part;
  }
  // Else one dim as evenly as it goes: the largest static parallel dim, or the one traced parallel dim.
  std::optional<size_t> dim, traced;
  for (size_t d : parallel) {
    const GridDim& g = spec.grid[d];
    if (!g.is_static()) {
      if (traced)
        pc.fail(fmt::format("the grid cannot be split over {} cores: it has several traced parallel dims", cores),
                fmt::format("dims {} and {} are traced and pl::parallel", *traced, d),
                "mark one of them pl::arbitrary, or give a static parallel dim the core count divides", loc);
      traced = d;
    } else if (!dim || g.size() > spec.grid[*dim].size()) {
      dim = d;
    }
  }
  if (!dim) dim = traced;
  const GridDim& g = spec.grid[*dim];
  const Value size = g.is_static() ? index_value(g.size()) : astype(Operand(g.value(), loc), DType::i32);
  const Operand c(*core, loc), n(index_value(cores), loc);
  const Value base = Operand(size, loc) / n, rem = Operand(size, loc) % n;
  const Value early = c < Operand(rem, loc);  // the cores that take one step more
  const Value steps = where(Operand(early, loc), Operand(base, loc) + 1, base);
  const Value start = where(Operand(early, loc), c * Operand(steps, loc), c * Operand(base, loc) + Operand(rem, loc));
  part.grid = with_dim(spec.grid, *dim, GridDim(steps));
  part.offsets[*dim] = start.id();
  return part;
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
                        const std::vector<Ref>& refs, std::source_location loc) {
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
  if (!spec.dimension_semantics.empty() && spec.dimension_semantics.size() != spec.grid.size())
    pc.fail("dimension_semantics must have one entry per grid dim",
            fmt::format("{} entries for a grid of {} dims", spec.dimension_semantics.size(), spec.grid.size()),
            "list pl::parallel or pl::arbitrary for every grid dim", loc);
  Partition part = partition_grid(ctx, pc, spec, loc);
  pc.offsets = std::move(part.offsets);
  const int64_t fixed_steps = trace_grid(ctx, pc, part.grid);

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
    if (spec.no_pipelining) {  // one buffer, no copy ahead: the copies are synchronous
      pa.operands.back().buffers = 1;
      pa.operands.back().lookahead = false;
    }
    arrays.push_back(r.id());
  }
  const Value lo = constant(ctx, ir::Literal::of_int(0), Type::scalar(DType::index), loc);
  const Value hi = step_count(ctx, pc, fixed_steps);
  trace_pipeline(ctx, pc, std::move(pa), specs, lo.id(), hi.id(), arrays, body);
}

}  // namespace tessera::detail
