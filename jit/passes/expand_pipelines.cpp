#include "jit/passes/expand_pipelines.h"

#include <fmt/format.h>

#include "dsl/ir/printer.h"
#include <set>
#include "dsl/ir/rewriter.h"

namespace tessera::passes {

using namespace ir;

namespace {

// Whether the body writes the ref `arg` (or any view of it): a store, or any use other than a load
// or a view (conservative, so that future ref uses count as writes until taught otherwise).
bool writes(const Function& fn, RegionId region, std::set<ValueId>& refs) {
  for (OpId id : fn.regions[region].ops) {
    const Op& op = fn.ops[id];
    for (size_t i = 0; i < op.operands.size(); ++i) {
      if (!refs.count(op.operands[i])) continue;
      if (op.kind == OpKind::View && i == 0) refs.insert(op.results[0]);
      else if (op.kind != OpKind::Load || i != 0) return true;
    }
    for (RegionId sub : op.regions)
      if (writes(fn, sub, refs)) return true;
  }
  return false;
}

// The grid indices of the step being expanded, for program_id / num_programs in its body.
struct GridContext {
  std::vector<ValueId> ids;   // i32, one per grid dim
  std::vector<int64_t> grid;
};

class Expander {
 public:
  explicit Expander(const Function& src)
      : src_(src), dst_(out_, src.name), rw_(src, dst_, [this](Rewriter&, OpId id) { return hook(id); }) {}

  Function run() {
    rw_.clone_params();
    rw_.inline_region(src_.body, dst_.function().params());
    return std::move(out_);
  }

 private:
  Builder& b() { return dst_; }

  ValueId constant(int64_t v, DType t, SourceLoc loc) {
    return b().create_value(OpKind::Constant, {}, Type::scalar(t), Literal::of_int(v), loc);
  }
  ValueId binop(OpKind k, ValueId x, ValueId y, SourceLoc loc) {
    const Type& t = b().type(x);
    Type r = (k == OpKind::Eq || k == OpKind::Ne) ? Type::tensor(DType::i1, t.shape) : t;
    return b().create_value(k, {x, y}, r, {}, loc);
  }

  bool hook(OpId id) {
    const Op& op = src_.ops[id];
    switch (op.kind) {
      case OpKind::Pipeline: expand(id); return true;
      case OpKind::ProgramId:
      case OpKind::NumPrograms: {
        if (contexts_.empty())
          throw InternalError("expand_pipelines", fmt::format("`{}` outside a pipeline ({})", mnemonic(op.kind), op.loc.str()));
        const GridContext& ctx = contexts_.back();
        const int64_t axis = std::get<int64_t>(op.attr);
        if (axis >= static_cast<int64_t>(ctx.grid.size()))
          throw InternalError("expand_pipelines", fmt::format("grid axis {} out of range ({})", axis, op.loc.str()));
        rw_.set(op.results[0], op.kind == OpKind::ProgramId ? ctx.ids[axis] : constant(ctx.grid[axis], DType::i32, op.loc));
        return true;
      }
      default: return false;
    }
  }

  // i32 grid indices of linear step `t` (index type): id_a = (t / stride_a) % grid_a, row-major.
  std::vector<ValueId> decompose(ValueId t, const std::vector<int64_t>& grid, SourceLoc loc) {
    std::vector<ValueId> ids(grid.size());
    int64_t stride = 1;
    for (int64_t a = static_cast<int64_t>(grid.size()) - 1; a >= 0; --a) {
      ValueId q = stride == 1 ? t : binop(OpKind::Div, t, constant(stride, DType::index, loc), loc);
      ValueId r = a == 0 ? q : binop(OpKind::Rem, q, constant(grid[a], DType::index, loc), loc);
      ids[a] = b().create_value(OpKind::Cast, {r}, Type::scalar(DType::i32), {}, loc);
      stride *= grid[a];
    }
    return ids;
  }

  // The block indices of one operand at the grid point `ids`: its index map, inlined.
  std::vector<ValueId> block_indices(RegionId map, const std::vector<ValueId>& ids, const GridContext& ctx) {
    contexts_.push_back(GridContext{ids, ctx.grid});
    std::vector<ValueId> bi = rw_.inline_region(map, ids);
    contexts_.pop_back();
    return bi;
  }

  // Element offsets of a block: index * block size for blocked dims, the index itself for squeezed dims.
  std::vector<ValueId> starts(const std::vector<ValueId>& bi, const PipelineOperand& po, SourceLoc loc) {
    std::vector<ValueId> s;
    for (size_t d = 0; d < bi.size(); ++d)
      s.push_back(po.squeezed[d] || po.block[d] == 1 ? bi[d] : binop(OpKind::Mul, bi[d], constant(po.block[d], DType::i32, loc), loc));
    return s;
  }

  ValueId any_differs(const std::vector<ValueId>& a, const std::vector<ValueId>& c, ValueId init, SourceLoc loc) {
    ValueId acc = init;
    for (size_t d = 0; d < a.size(); ++d) acc = binop(OpKind::Or, acc, binop(OpKind::Ne, a[d], c[d], loc), loc);
    return acc;
  }

  // Whether every block of the operand lies wholly inside the array (the blocked dims divide it).
  static bool divides(const Shape& array, const PipelineOperand& po) {
    for (size_t d = 0; d < array.size(); ++d)
      if (!po.squeezed[d] && array[d] % po.block[d] != 0) return false;
    return true;
  }

  // The body's ref of a block: the block itself, or a view without its squeezed dims.
  ValueId squeeze(ValueId block, const PipelineOperand& po, const std::vector<ValueId>& zeros, SourceLoc loc) {
    bool any = false;
    for (bool s : po.squeezed) any |= s;
    if (!any) return block;
    ViewAttr va;
    Shape visible;
    for (size_t d = 0; d < po.block.size(); ++d) {
      va.dims.push_back(ViewDim{po.squeezed[d], po.block[d], 1});
      if (!po.squeezed[d]) visible.push_back(po.block[d]);
    }
    std::vector<ValueId> operands{block};
    operands.insert(operands.end(), zeros.begin(), zeros.end());
    return b().create_value(OpKind::View, operands, Type::ref(b().type(block).dtype, visible, po.space), va, loc);
  }

  // Emits `if (cond) { body() }`.
  template <class F>
  void when(ValueId cond, SourceLoc loc, F body) {
    RegionId then_r = b().create_region({});
    {
      Builder::RegionScope scope(b(), then_r);
      body();
      b().create(OpKind::Yield, {}, {}, {}, loc);
    }
    RegionId else_r = b().create_region({});
    {
      Builder::RegionScope scope(b(), else_r);
      b().create(OpKind::Yield, {}, {}, {}, loc);
    }
    b().create(OpKind::If, {cond}, {}, {}, loc, {then_r, else_r});
  }

  void expand(OpId id) {
    const Op& op = src_.ops[id];
    const auto& pa = std::get<PipelineAttr>(op.attr);
    const SourceLoc loc = op.loc;
    const ValueId lo = rw_.map(op.operands[0]);
    const ValueId hi = rw_.map(op.operands[1]);
    const size_t n = pa.operands.size();

    // Block buffers (allocated once, before the loop) and the refs the body sees. An input the body
    // only reads, whose blocks all lie inside the array, is read in place (block_view) instead of
    // being copied: no copy can be told from none then. Aliased inputs are always copied, since
    // write-backs of their output change the array under them.
    std::vector<ValueId> arrays(n), buffers(n, kNone), body_args(n);
    std::vector<RegionId> maps(n, kNone);
    std::vector<bool> in_place(n, false);
    size_t region = 0;
    for (size_t k = 0; k < n; ++k)
      if (pa.operands[k].windowed) maps[k] = op.regions[region++];
    const RegionId body = op.regions[region];
    for (size_t k = 0; k < n; ++k) {
      const PipelineOperand& po = pa.operands[k];
      arrays[k] = rw_.map(op.operands[2 + k]);
      if (!po.windowed) {
        body_args[k] = arrays[k];
        continue;
      }
      const Type at = b().type(arrays[k]);
      if (!po.is_output && !po.aliased && po.space == MemorySpace::VMEM && divides(at.shape, po)) {
        std::set<ValueId> refs{src_.regions[body].args[k]};
        in_place[k] = !writes(src_, body, refs);
      }
      if (in_place[k]) continue;  // its ref is made in the loop, per step
      buffers[k] = b().create_value(OpKind::Alloc, {}, Type::ref(at.dtype, po.block, po.space),
                                    fmt::format("{} block", po.name), loc);
      body_args[k] = squeeze(buffers[k], po, std::vector<ValueId>(po.block.size(), constant(0, DType::i32, loc)), loc);
    }

    // Loop-carried: the previous step's block indices of each copied input.
    std::vector<ValueId> inits;
    std::vector<Type> carried_types{Type::scalar(DType::index)};
    for (size_t k = 0; k < n; ++k) {
      const PipelineOperand& po = pa.operands[k];
      if (!po.windowed || po.is_output || in_place[k]) continue;
      for (size_t d = 0; d < po.block.size(); ++d) {
        inits.push_back(constant(-1, DType::i32, loc));
        carried_types.push_back(Type::scalar(DType::i32));
      }
    }
    RegionId loop = b().create_region(carried_types);
    {
      Builder::RegionScope scope(b(), loop);
      const std::vector<ValueId> args = b().function().regions[loop].args;  // a copy: regions may grow
      const ValueId t = args[0];
      GridContext ctx{decompose(t, pa.grid, loc), pa.grid};
      b().create(OpKind::GridPoint, ctx.ids, {}, {}, loc);
      const ValueId first = binop(OpKind::Eq, t, lo, loc);

      std::vector<ValueId> next_prev;
      size_t carried = 1;
      for (size_t k = 0; k < n; ++k) {
        const PipelineOperand& po = pa.operands[k];
        if (!po.windowed || po.is_output) continue;
        std::vector<ValueId> bi = block_indices(maps[k], ctx.ids, ctx);
        if (in_place[k]) {
          const Type at = b().type(arrays[k]);
          std::vector<ValueId> operands{arrays[k]};
          for (ValueId s : starts(bi, po, loc)) operands.push_back(s);
          ValueId block = b().create_value(OpKind::BlockView, operands, Type::ref(at.dtype, po.block, po.space),
                                           BlockCopyAttr{po.name, static_cast<int64_t>(k), po.aliased},
                                           po.loc.known() ? po.loc : loc);
          body_args[k] = squeeze(block, po, std::vector<ValueId>(po.block.size(), constant(0, DType::i32, loc)), loc);
          continue;
        }
        std::vector<ValueId> prev(args.begin() + carried, args.begin() + carried + bi.size());
        carried += bi.size();
        when(any_differs(bi, prev, first, loc), loc, [&] {
          std::vector<ValueId> operands{arrays[k], buffers[k]};
          for (ValueId s : starts(bi, po, loc)) operands.push_back(s);
          b().create(OpKind::FetchBlock, operands, {}, BlockCopyAttr{po.name, static_cast<int64_t>(k), po.aliased},
                     po.loc.known() ? po.loc : loc);
        });
        next_prev.insert(next_prev.end(), bi.begin(), bi.end());
      }

      contexts_.push_back(ctx);
      rw_.inline_region(body, body_args);
      contexts_.pop_back();

      bool has_outputs = false;
      for (const PipelineOperand& po : pa.operands) has_outputs |= po.windowed && po.is_output;
      if (has_outputs) {
        const ValueId one = constant(1, DType::index, loc);
        const ValueId next = binop(OpKind::Add, t, one, loc);
        const ValueId last = binop(OpKind::Eq, next, hi, loc);
        // The next step's indices; on the last step the current ones, so index maps never see a
        // grid point outside the grid.
        const ValueId clamped = b().create_value(OpKind::Select, {last, t, next}, Type::scalar(DType::index), {}, loc);
        const std::vector<ValueId> next_ids = decompose(clamped, pa.grid, loc);
        for (size_t k = 0; k < n; ++k) {
          const PipelineOperand& po = pa.operands[k];
          if (!po.windowed || !po.is_output) continue;
          std::vector<ValueId> bo = block_indices(maps[k], ctx.ids, ctx);
          std::vector<ValueId> bn = block_indices(maps[k], next_ids, ctx);
          when(any_differs(bo, bn, last, loc), loc, [&] {
            std::vector<ValueId> operands{buffers[k], arrays[k]};
            for (ValueId s : starts(bo, po, loc)) operands.push_back(s);
            b().create(OpKind::WritebackBlock, operands, {}, BlockCopyAttr{po.name, static_cast<int64_t>(k), po.aliased},
                       po.loc.known() ? po.loc : loc);
          });
        }
      }
      b().create(OpKind::Yield, next_prev, {}, {}, loc);
    }
    std::vector<ValueId> for_operands{lo, hi, constant(1, DType::index, loc)};
    for_operands.insert(for_operands.end(), inits.begin(), inits.end());
    std::vector<Type> result_types(carried_types.begin() + 1, carried_types.end());
    b().create(OpKind::For, for_operands, result_types, {}, loc, {loop});
  }

  const Function& src_;
  Function out_;
  Builder dst_;
  Rewriter rw_;
  std::vector<GridContext> contexts_;
};

}  // namespace

Function expand_pipelines(const Function& fn) { return Expander(fn).run(); }

}  // namespace tessera::passes
