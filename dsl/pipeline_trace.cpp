#include "dsl/pipeline_trace.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <limits>

namespace tessera::detail {

using ir::OpKind;

std::string grid_tuple_str(const std::vector<int64_t>& grid) {
  std::vector<std::string> dims;
  for (int64_t g : grid) dims.push_back(g == ir::kDynamicDim ? std::string("?") : fmt::format("{}", g));
  return fmt::format("({}{})", fmt::join(dims, ", "), dims.size() == 1 ? "," : "");
}

void PipelineContext::fail(std::string problem, std::string given, std::string fix, SourceLoc at) const {
  throw UserError(fmt::format("{}: {}", what, problem), std::move(given), std::move(fix), at);
}

int64_t PipelineContext::check_grid() const {
  const std::string given = fmt::format("grid {}", grid_tuple_str(grid));
  int64_t steps = 1;
  for (size_t d = 0; d < grid.size(); ++d) {
    if (grid[d] == ir::kDynamicDim) continue;
    if (grid[d] < 0)
      fail("grid dims must be >= 0", fmt::format("{} has {} in dim {}", given, grid[d], d), "use non-negative grid sizes", loc);
    if (grid[d] > INT32_MAX)
      fail("a grid dim does not fit pl::program_id, a 32-bit integer",
           fmt::format("{} has {} in dim {}; the largest is {} (2^31 - 1)", given, grid[d], d, INT32_MAX),
           "use larger blocks, or split the dim over two grid dims", loc);
  }
  for (int64_t g : grid)
    if (g != ir::kDynamicDim && __builtin_mul_overflow(steps, g, &steps))
      // It used to wrap around to a step count of zero and run nothing.
      fail("the grid has more steps than a 64-bit count holds",
           fmt::format("{}: the product of its dims exceeds {} (2^63 - 1)", given, INT64_MAX),
           "use fewer, larger blocks", loc);
  return steps;
}

namespace {

// Checks the block shape of `spec` against an array of `shape` and fills po's block, squeezed dims,
// kinds and padding (kinds and padding left empty when every dim is plain Blocked and unpadded).
void block_of(const PipelineContext& pc, const BlockSpec& spec, const Shape& shape, ir::PipelineOperand& po) {
  const std::string& name = po.name;
  const SourceLoc loc = po.loc;
  po.block.clear(), po.squeezed.clear(), po.kinds.clear(), po.pad_lo.clear(), po.pad_hi.clear();
  if (!spec.block_shape()) {
    po.block = shape;
    po.squeezed.assign(shape.size(), false);
    return;
  }
  const auto& bs = *spec.block_shape();
  if (bs.size() != shape.size())
    pc.fail(fmt::format("the block shape of {} has another rank than the array", name),
            fmt::format("block of {} dims for an array of shape {}", bs.size(), shape_tuple_str(shape)),
            "give one block dim per array dim (pl::squeezed for dims the kernel should not see)", loc);
  for (size_t d = 0; d < bs.size(); ++d) {
    if (!bs[d].is_squeezed && bs[d].size <= 0)
      pc.fail(fmt::format("block dims of {} must be positive", name),
              fmt::format("block dim {} is {} (array shape {})", d, bs[d].size, shape_tuple_str(shape)),
              "use sizes >= 1, or pl::squeezed", loc);
    if (bs[d].padding.first < 0 || bs[d].padding.second < 0)
      pc.fail(fmt::format("the pl::Element padding of {} must be >= 0", name),
              fmt::format("padding ({}, {}) in block dim {}", bs[d].padding.first, bs[d].padding.second, d),
              "pad by zero or more elements before and after the array", loc);
    po.block.push_back(bs[d].size);
    po.squeezed.push_back(bs[d].is_squeezed);
    po.kinds.push_back(bs[d].kind);
    po.pad_lo.push_back(bs[d].padding.first);
    po.pad_hi.push_back(bs[d].padding.second);
  }
  // Plain blocks keep the IR as it was: no per-dim vectors.
  bool plain = true, padded = false;
  for (size_t d = 0; d < bs.size(); ++d) {
    plain &= bs[d].kind == ir::BlockDimKind::Blocked;
    padded |= bs[d].padding != std::pair<int64_t, int64_t>{0, 0};
  }
  if (plain) po.kinds.clear();
  if (!padded) po.pad_lo.clear(), po.pad_hi.clear();
}

}  // namespace

ir::PipelineOperand pipeline_operand(const PipelineContext& pc, const BlockSpec& spec, const Shape& shape,
                                     const std::string& name, bool output, bool aliased) {
  ir::PipelineOperand po;
  po.name = name;
  po.is_output = output;
  po.aliased = aliased;
  const MemorySpace space = spec.memory_space().value_or(MemorySpace::VMEM);
  const SourceLoc loc = spec.loc().known() ? spec.loc() : pc.loc;
  po.loc = loc;
  if (is_dma_only(space)) {
    // Nothing is copied: the body gets the array itself, or a view of its block (dma_only_ref, when
    // the body is traced). The block shape is checked here, before anything is traced.
    ir::PipelineOperand checked = po;
    block_of(pc, spec, shape, checked);
    po.windowed = false;
    po.space = space;
    return po;
  }
  if (space == MemorySpace::SEMAPHORE)
    pc.fail(fmt::format("{} cannot be blocked into semaphore memory", name), "a BlockSpec in memory space SEMAPHORE",
            "use VMEM (the default) or SMEM blocks; semaphores are scratch (pl::SemaphoreType)", loc);
  po.space = space;
  po.buffers = spec.buffer_count().value_or(pc.default_buffers);
  if (po.buffers < 1 || (output && po.buffers > 2))
    pc.fail(fmt::format("{} asks for {} block buffers", name, po.buffers),
            fmt::format("pl::Buffered({}) on {}", po.buffers, output ? "an output" : "an input"),
            output ? "use pl::Buffered(1) or pl::Buffered(2) for outputs: one block is written back while the next is "
                     "computed"
                   : "use pl::Buffered(n) with n >= 1",
            loc);
  po.lookahead = spec.lookahead();
  if (po.lookahead && output)
    pc.fail(fmt::format("{} asks for lookahead, which outputs do not support", name),
            fmt::format("pl::Buffered({}, true) on an output", po.buffers),
            "drop use_lookahead on the output; it fetches inputs ahead, and outputs are only written back", loc);
  if (po.lookahead && po.buffers < 2)
    pc.fail(fmt::format("{} asks for lookahead with {} block buffer", name, po.buffers),
            fmt::format("pl::Buffered({}, true)", po.buffers),
            "use pl::Buffered(n, true) with n >= 2: lookahead fills the buffers the current block does not use", loc);
  block_of(pc, spec, shape, po);
  return po;
}

Value whole_grid_index(TraceContext& ctx, const std::vector<ir::ValueId>& offsets, size_t d, Value local, SourceLoc loc) {
  if (offsets.empty() || offsets[d] == ir::kNone) return local;
  return emit(ctx, OpKind::Add, {local, Value::wrap(ctx, offsets[d])}, Type::scalar(DType::i32), {}, loc);
}

namespace {

// The block indices of `po` at the grid point `args` (one i32 per grid dim), traced where the
// builder is: one i64 per dim, then one size per Bounded dim. `all_zero`, when given, is set to
// whether every index is the literal 0 (Pallas's trivial index map, BlockMapping.has_trivial_window).
std::vector<ir::ValueId> map_indices(TraceContext& ctx, const PipelineContext& pc, const BlockSpec& spec,
                                     const ir::PipelineOperand& po, const std::vector<ir::ValueId>& args,
                                     bool* all_zero = nullptr) {
  const size_t rank = pc.grid.size();
  const SourceLoc loc = spec.loc().known() ? spec.loc() : pc.loc;
  if (all_zero) *all_zero = true;
  std::vector<ir::ValueId> yielded, sizes;  // the indices, then one size per Bounded dim
  if (!spec.index_map()) {
    for (size_t d = 0; d < po.block.size(); ++d) {
      yielded.push_back(constant(ctx, ir::Literal::of_int(0), Type::scalar(DType::i64), loc).id());
      if (po.kind(d) == ir::BlockDimKind::Bounded)
        sizes.push_back(constant(ctx, ir::Literal::of_int(po.block[d]), Type::scalar(DType::i64), loc).id());
    }
  } else {
    const IndexMap& map = *spec.index_map();
    const int expected = static_cast<int>(rank + pc.prefetch.size());
    if (map.arity != expected)
      pc.fail(fmt::format("the index map of {} takes {} parameter(s), but the call passes {}", po.name, map.arity, expected),
              fmt::format("{} grid index(es) and {} scalar-prefetch ref(s)", rank, pc.prefetch.size()),
              pc.prefetch.empty() ? "take one pl::Value per grid dim"
                                  : "take one pl::Value per grid dim, then one pl::Ref per scalar-prefetch operand",
              loc);
    std::vector<IndexArg> margs;
    for (size_t d = 0; d < rank; ++d) {
      margs.emplace_back(whole_grid_index(ctx, pc.offsets, d, Value::wrap(ctx, args[d]), loc), static_cast<int>(d), loc);
    }
    for (size_t k = 0; k < pc.prefetch.size(); ++k) margs.emplace_back(pc.prefetch[k], static_cast<int>(rank + k), loc);
    std::vector<MapIndex> result = map.fn(margs);
    if (result.size() != po.block.size())
      pc.fail(fmt::format("the index map of {} returns {} index(es) for an array of rank {}", po.name, result.size(),
                          po.block.size()),
              fmt::format("block shape ({})", fmt::join(po.block, ", ")),
              "return one block index per array dim with pl::idx(...)", loc);
    auto scalar = [&](const Operand& o, size_t d) {
      if (o.is_literal() && o.literal().is_float)
        pc.fail(fmt::format("the index map of {} returns a float index", po.name),
                fmt::format("{} at position {}", o.literal().f, d), "return integer block indices", loc);
      // Block indices, element offsets and slice sizes are i64, each the value the map returned: an
      // i64, u32 or u64 index (widen_index) or a literal past i32 is itself, never wrapped into
      // another block (bounds checks see it; index * block size saturates, expand_pipelines).
      Value v = o.materialize(DType::i64);
      if (!v.is_scalar() || !is_int(v.dtype()))
        pc.fail(fmt::format("the index map of {} must return integer scalars", po.name),
                fmt::format("{} at position {}", describe(v), d), "return integer scalars (e.g. grid indices, ids[i])",
                loc);
      v = cast_to(widen_index(v, loc), DType::i64, loc);
      ctx.check_visible(v.id(), "an index map", loc);
      return v.id();
    };
    for (size_t d = 0; d < result.size(); ++d) {
      const MapIndex& m = result[d];
      const bool bounded = po.kind(d) == ir::BlockDimKind::Bounded;
      if (bounded && !m.size)
        pc.fail(fmt::format("the index map of {} returns an index for a pl::BoundedSlice dim", po.name),
                fmt::format("an index at position {}, whose block dim is pl::BoundedSlice({})", d, po.block[d]),
                "return pl::ds(start, size) for a BoundedSlice dim, size <= the bound", loc);
      if (!bounded && m.size)
        pc.fail(fmt::format("the index map of {} returns a slice for a dim that is not a pl::BoundedSlice", po.name),
                fmt::format("pl::ds(...) at position {}", d),
                "return a block index (or an element offset for pl::Element), or make the block dim pl::BoundedSlice(n)",
                loc);
      if (bounded && m.stride != 1)
        pc.fail(fmt::format("the index map of {} returns a strided slice", po.name),
                fmt::format("pl::ds(start, size, {}) at position {}", m.stride, d), "return pl::ds(start, size)", loc);
      if (bounded && m.size->is_literal() && !m.size->literal().is_float &&
          (m.size->literal().i < 0 || m.size->literal().i > po.block[d]))
        pc.fail(fmt::format("the index map of {} returns a slice over its pl::BoundedSlice bound", po.name),
                fmt::format("pl::ds(..., {}) at position {}, whose bound is {}", m.size->literal().i, d, po.block[d]),
                fmt::format("return a size in [0, {}], or raise the bound", po.block[d]), loc);
      if (all_zero && !(m.index.is_literal() && !m.index.literal().is_float && m.index.literal().i == 0))
        *all_zero = false;
      yielded.push_back(scalar(m.index, d));
      if (bounded) sizes.push_back(scalar(*m.size, d));
    }
  }
  yielded.insert(yielded.end(), sizes.begin(), sizes.end());
  return yielded;
}

// The index map of a windowed operand, as a region of the grid indices yielding map_indices.
ir::RegionId trace_index_map(TraceContext& ctx, const PipelineContext& pc, const BlockSpec& spec,
                             const ir::PipelineOperand& po) {
  const SourceLoc loc = spec.loc().known() ? spec.loc() : pc.loc;
  ir::RegionId r = ctx.builder().create_region(std::vector<Type>(pc.grid.size(), Type::scalar(DType::i32)));
  TraceContext::Scope scope(ctx, r, fmt::format("the index map of {}", po.name));
  ctx.grids.push_back({pc.grid, pc.offsets});
  const std::vector<ir::ValueId> args = ctx.builder().function().regions[r].args;  // a copy: tracing adds regions
  const std::vector<ir::ValueId> yielded = map_indices(ctx, pc, spec, po, args);
  ctx.builder().create(OpKind::Yield, yielded, {}, {}, loc);
  ctx.grids.pop_back();
  return r;
}

// index * block on i64, saturated to INT64_MIN / INT64_MAX where it would overflow, as the offsets of
// block copies are (expand_pipelines): a far-off index must fail the view's bounds check, not wrap
// back into range.
Value saturating_product(TraceContext& ctx, const Value& index, int64_t block, SourceLoc loc) {
  if (block == 1) return index;
  constexpr int64_t max = std::numeric_limits<int64_t>::max(), min = std::numeric_limits<int64_t>::min();
  const Type i64 = Type::scalar(DType::i64), flag = Type::scalar(DType::i1);
  auto c = [&](int64_t v) { return constant(ctx, ir::Literal::of_int(v), i64, loc); };
  const Value product = emit(ctx, OpKind::Mul, {index, c(block)}, i64, {}, loc);
  const Value over = emit(ctx, OpKind::Lt, {c(max / block), index}, flag, {}, loc);
  const Value under = emit(ctx, OpKind::Lt, {index, c(min / block)}, flag, {}, loc);
  return emit(ctx, OpKind::Select, {over, c(max), emit(ctx, OpKind::Select, {under, c(min), product}, i64, {}, loc)}, i64,
              {}, loc);
}

const char* space_name(MemorySpace s) { return s == MemorySpace::ANY ? "ANY" : "HBM"; }

// What the body gets for an operand in memory space ANY/HBM (never copied; reachable only by DMA),
// as Pallas decides it; traced at the top of the body, where program_id is the step's grid point.
//  - A trivial window (no block shape, or a block equal to the array at the literal block index 0)
//    is the array itself: pallas_call's Mosaic lowering accepts only these
//    (lowering.py:_check_block_mappings, "supports in memory space ANY only blocks having the same
//    block shape as the array shape and a trivial index_map").
//  - In pl::emit_pipeline, an HBM spec with any other window is a view of the array at the step's
//    block, nothing copied (pipeline.py: BufferedRef.create makes it unbuffered and
//    bind_existing_ref passes ref.at[compute_slice(indices)]); with no block shape the index map is
//    not called (_spec_has_trivial_windowing). An ANY spec has no buffer memory space there
//    ("Unsupported buffer memory space"): its windows are rejected. (Trivial ANY windows stay whole.)
Ref dma_only_ref(TraceContext& ctx, const PipelineContext& pc, bool nested, const BlockSpec& spec,
                 const ir::PipelineOperand& unwindowed, const Ref& array) {
  if (!spec.block_shape()) return array;  // (a BlockSpec has an index map only with a block shape)
  const Shape shape = array.shape();
  ir::PipelineOperand po = unwindowed;
  block_of(pc, spec, shape, po);
  std::vector<ir::ValueId> grid_point;
  for (size_t d = 0; d < pc.grid.size(); ++d)
    grid_point.push_back(ctx.emit_value(OpKind::ProgramId, {}, Type::scalar(DType::i32), int64_t{static_cast<int64_t>(d)}, po.loc));
  bool all_zero = true;
  const std::vector<ir::ValueId> idx = map_indices(ctx, pc, spec, po, grid_point, &all_zero);
  bool trivial = all_zero;
  for (size_t d = 0; d < po.block.size(); ++d)
    trivial &= !po.squeezed[d] && po.block[d] == shape[d] && po.kind(d) != ir::BlockDimKind::Bounded &&
               (po.pad_lo.empty() || (po.pad_lo[d] == 0 && po.pad_hi[d] == 0));
  if (trivial) return array;
  std::vector<std::string> block;
  for (size_t d = 0; d < po.block.size(); ++d) block.push_back(po.squeezed[d] ? "squeezed" : fmt::format("{}", po.block[d]));
  const std::string given = fmt::format("block ({}{}) of an array of shape {}{}", fmt::join(block, ", "),
                                        block.size() == 1 ? "," : "", shape_tuple_str(shape),
                                        all_zero ? "" : ", at block indices the index map computes");
  if (!nested)
    pc.fail(fmt::format("{} is in memory space {}, which the kernel gets whole: its block must be the whole array at "
                        "block index 0",
                        po.name, space_name(po.space)),
            given,
            "drop the block shape (pl::BlockSpec(pl::ANY)) and copy windows yourself, or use a VMEM block the grid "
            "copies in",
            po.loc);
  if (po.space == MemorySpace::ANY)
    pc.fail(fmt::format("{} is in memory space ANY, which pl::emit_pipeline does not window", po.name), given,
            "use pl::HBM for a view of each step's block (reachable by DMA), pl::BlockSpec(pl::ANY) for the whole "
            "array, or a VMEM block the pipeline copies in",
            po.loc);
  std::vector<Indexer> view;
  for (size_t d = 0; d < po.block.size(); ++d) {
    const Value i = Value::wrap(ctx, idx[d]);
    if (po.squeezed[d]) {
      view.emplace_back(i);  // an element offset; the dim is dropped
      continue;
    }
    if (!po.pad_lo.empty() && (po.pad_lo[d] != 0 || po.pad_hi[d] != 0))
      pc.fail(fmt::format("{} is a view of an HBM array, which pl::Element padding cannot extend", po.name),
              fmt::format("padding ({}, {}) in block dim {}", po.pad_lo[d], po.pad_hi[d], d),
              "drop the padding, or use a VMEM block the pipeline copies in", po.loc);
    // Blocked: block index * size; Element: the element offset; Bounded: the slice's start, over
    // the whole bound (the size it returned is not the view's).
    const Value start = po.kind(d) == ir::BlockDimKind::Blocked ? saturating_product(ctx, i, po.block[d], po.loc) : i;
    view.emplace_back(ds(Operand(start, po.loc), po.block[d]));
  }
  return array.view(view, po.loc);
}

}  // namespace

void trace_pipeline(TraceContext& ctx, const PipelineContext& pc, ir::PipelineAttr attr,
                    const std::vector<const BlockSpec*>& specs, ir::ValueId lo, ir::ValueId hi,
                    const std::vector<ir::ValueId>& arrays, const std::function<void(std::vector<Ref>&)>& body) {
  std::vector<ir::RegionId> regions;
  for (size_t k = 0; k < attr.operands.size(); ++k)
    if (attr.operands[k].windowed) regions.push_back(trace_index_map(ctx, pc, *specs[k], attr.operands[k]));

  std::vector<Type> body_types;
  std::vector<std::string> body_names;
  for (size_t k = 0; k < attr.operands.size(); ++k) {
    const ir::PipelineOperand& po = attr.operands[k];
    const Type& at = ctx.type(arrays[k]);
    if (!po.windowed) {
      body_types.push_back(at);
    } else {
      Shape visible;
      for (size_t d = 0; d < po.block.size(); ++d)
        if (!po.squeezed[d]) visible.push_back(po.block[d]);
      body_types.push_back(Type::ref(at.dtype, visible, po.space));
    }
    body_names.push_back(po.windowed ? po.name + " block" : po.name);
  }
  ir::RegionId region = ctx.builder().create_region(body_types, body_names);
  {
    TraceContext::Scope scope(ctx, region, attr.id > 0 ? "an emit_pipeline body" : "the kernel body");
    ctx.grids.push_back({pc.grid, pc.offsets});
    std::vector<Ref> refs;
    for (ir::ValueId a : ctx.builder().function().regions[region].args) refs.push_back(Ref::wrap(ctx, a));
    for (size_t k = 0; k < refs.size(); ++k)
      if (!attr.operands[k].windowed && is_dma_only(attr.operands[k].space))
        refs[k] = dma_only_ref(ctx, pc, attr.id > 0, *specs[k], attr.operands[k], refs[k]);
    body(refs);
    ctx.grids.pop_back();
  }
  regions.push_back(region);
  std::vector<ir::ValueId> operands{lo, hi};
  operands.insert(operands.end(), pc.sizes.begin(), pc.sizes.end());
  operands.insert(operands.end(), arrays.begin(), arrays.end());
  ctx.emit(OpKind::Pipeline, operands, {}, std::move(attr), pc.loc, regions);
}

}  // namespace tessera::detail
