#include "jit/lowering/expand_pipelines.h"

#include <fmt/format.h>

#include <limits>
#include <set>

#include "jit/ir/operands.h"
#include "jit/ir/printer.h"
#include "jit/ir/rewriter.h"

namespace tessera::passes {

using namespace ir;

namespace {

// Whether the body writes the ref `arg` (or any view of it): a store, or any use other than a load,
// a view or the source of a copy (conservative, so that future ref uses count as writes until taught
// otherwise).
bool writes(const Function& fn, RegionId region, std::set<ValueId>& refs) {
  for (OpId id : fn.regions[region].ops) {
    const Op& op = fn.ops[id];
    for (size_t i = 0; i < op.operands.size(); ++i) {
      if (!refs.count(op.operands[i])) continue;
      if (op.kind == OpKind::View && i == 0) refs.insert(op.results[0]);
      else if (!(op.kind == OpKind::Load && i == 0) && !(op.kind == OpKind::DmaStart && i == 0)) return true;
    }
    for (RegionId sub : op.regions)
      if (writes(fn, sub, refs)) return true;
  }
  return false;
}

// The ref a chain of views starts from.
ValueId view_root(const Function& fn, ValueId ref) {
  for (const Op* d = fn.def(ref); d && d->kind == OpKind::View; d = fn.def(ref)) ref = window_operands(*d).ref;
  return ref;
}

// Whether anything in the function may write memory of `root`: a use of it (or of a view of it) other
// than a load, a copy's source or a pipeline input.
bool written_anywhere(const Function& fn, ValueId root) {
  for (const Op& op : fn.ops) {
    for (size_t i = 0; i < op.operands.size(); ++i) {
      const ValueId v = op.operands[i];
      if (!fn.type(v).is_ref() || view_root(fn, v) != root) continue;
      if (op.kind == OpKind::View || (op.kind == OpKind::Load && i == 0) || (op.kind == OpKind::DmaStart && i == 0))
        continue;
      if (op.kind == OpKind::Pipeline) {
        const size_t first = op.operands.size() - pipeline_operands(op).refs.size();
        if (i >= first && !std::get<PipelineAttr>(op.attr).operands[i - first].is_output) continue;
      }
      return true;
    }
  }
  return false;
}

// The size of one grid dim: known when tracing, or a value (index) known when the kernel runs.
struct Extent {
  int64_t size = 0;
  ValueId value = kNone;  // set for a dynamic dim
};
// A pipeline's grid: the size of each dim and its stride in linear steps (the product of the sizes
// after it), made once before the pipeline's loops.
struct Grid {
  std::vector<Extent> sizes, strides;
};

// The grid indices of the step being expanded, for program_id / num_programs in its body.
struct GridContext {
  std::vector<ValueId> ids;   // i32, one per grid dim
  Grid grid;
};

// How one pipeline operand reaches the body.
struct Plan {
  enum class Kind {
    Whole,    // unwindowed: the array itself
    InPlace,  // a block used where it lies in the array (block_view): a read-only input, or an output
              // whose copy nothing could observe
    Single,   // one block buffer, copied synchronously
    Ring,     // `count` block buffers with a DMA semaphore each, copied ahead asynchronously
    Lookahead,  // a Ring input that fetches the next distinct blocks whenever a buffer is free
  };
  Kind kind = Kind::Whole;
  ValueId array = kNone;
  ValueId buffer = kNone;  // Single: the block; Ring: [count, block...] slots
  ValueId sems = kNone;    // Ring: [count] DMA semaphores
  int64_t count = 1;
  RegionId map = kNone;
};

class Expander {
 public:
  Expander(const Function& src, bool outputs_in_place)
      : src_(src),
        outputs_in_place_(outputs_in_place),
        dst_(out_, src.name),
        rw_(src, dst_, [this](Rewriter&, OpId id) { return hook(id); }) {}

  Function run() {
    rw_.clone_params();
    rw_.inline_region(src_.body, dst_.function().params());
    return std::move(out_);
  }

 private:
  Builder& b() { return dst_; }

  ValueId constant(int64_t v, DType t) { return b().create_value(OpKind::Constant, {}, Type::scalar(t), Literal::of_int(v), loc_); }
  ValueId binop(OpKind k, ValueId x, ValueId y) {
    const Type& t = b().type(x);
    Type r = (k == OpKind::Eq || k == OpKind::Ne || k == OpKind::Lt) ? Type::tensor(DType::i1, t.shape) : t;
    return b().create_value(k, {x, y}, r, {}, loc_);
  }
  ValueId select(ValueId c, ValueId x, ValueId y) { return b().create_value(OpKind::Select, {c, x, y}, b().type(x), {}, loc_); }
  // (x + 1) % n
  ValueId next_slot(ValueId x, int64_t n) {
    return binop(OpKind::Rem, binop(OpKind::Add, x, constant(1, DType::i32)), constant(n, DType::i32));
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
        if (axis >= static_cast<int64_t>(ctx.grid.sizes.size()))
          throw InternalError("expand_pipelines", fmt::format("grid axis {} out of range ({})", axis, op.loc.str()));
        const Extent& e = ctx.grid.sizes[axis];
        rw_.set(op.results[0], op.kind == OpKind::ProgramId ? ctx.ids[axis]
                               : e.value != kNone
                                   ? b().create_value(OpKind::Cast, {e.value}, Type::scalar(DType::i32), {}, op.loc)
                                   : b().create_value(OpKind::Constant, {}, Type::scalar(DType::i32),
                                                      Literal::of_int(e.size), op.loc));
        return true;
      }
      default: return false;
    }
  }

  // An extent as an index value.
  ValueId index_of(const Extent& e) { return e.value != kNone ? e.value : constant(e.size, DType::index); }
  // The product of two extents: known when both are.
  Extent times(const Extent& x, const Extent& y) {
    if (x.value == kNone && y.value == kNone) return Extent{x.size * y.size};
    if (x.value == kNone && x.size == 1) return y;
    return Extent{0, binop(OpKind::Mul, index_of(x), index_of(y))};
  }

  // i32 grid indices of linear step `t` (index type): id_a = (t / stride_a) % grid_a, row-major.
  std::vector<ValueId> decompose(ValueId t, const Grid& grid) {
    std::vector<ValueId> ids(grid.sizes.size());
    for (int64_t a = static_cast<int64_t>(ids.size()) - 1; a >= 0; --a) {
      const Extent& stride = grid.strides[a];
      ValueId q = stride.value == kNone && stride.size == 1 ? t : binop(OpKind::Div, t, index_of(stride));
      ValueId r = a == 0 ? q : binop(OpKind::Rem, q, index_of(grid.sizes[a]));
      ids[a] = b().create_value(OpKind::Cast, {r}, Type::scalar(DType::i32), {}, loc_);
    }
    return ids;
  }

  // The extents of a pipeline's grid; with dynamic dims, first the check that they may run (a
  // negative size is an error, a zero one runs no step).
  Grid grid_of(const Op& op, const PipelineAttr& pa) {
    Grid grid;
    const OperandSpan sizes = pipeline_operands(op).sizes;
    size_t next = 0;
    for (int64_t g : pa.grid) grid.sizes.push_back(g == kDynamicDim ? Extent{0, rw_.map(sizes[next++])} : Extent{g});
    if (!sizes.empty()) {
      std::vector<ValueId> all;
      for (const Extent& e : grid.sizes) all.push_back(index_of(e));
      b().create(OpKind::CheckGrid, all, {}, std::string(pa.id > 0 ? "pl::emit_pipeline" : "pallas_call"), loc_);
    }
    grid.strides.resize(grid.sizes.size());
    Extent stride{1};
    for (size_t a = grid.sizes.size(); a-- > 0;) {
      grid.strides[a] = stride;
      if (a > 0) stride = times(stride, grid.sizes[a]);
    }
    return grid;
  }

  // The block indices of one operand at linear step `t`: its index map, inlined.
  std::vector<ValueId> block_indices(const Plan& p, ValueId t, const Grid& grid) {
    std::vector<ValueId> ids = decompose(t, grid);
    contexts_.push_back(GridContext{ids, grid});
    std::vector<ValueId> bi = rw_.inline_region(p.map, ids);
    contexts_.pop_back();
    return bi;
  }

  // The operands of a block's copy after its array and buffer: the element offsets of its window,
  // then the sizes of its Bounded dims (`bi`: what the index map yields, indices then sizes).
  // Offsets are index * block size for blocked dims; the index itself for squeezed dims and the start
  // of a BoundedSlice's pl::ds; for an Element dim the offset into the padded array less the padding
  // before it. Index maps yield i64 and products are 64-bit, saturated: an i32 one wrapped for offsets
  // of 2^31 and more (arrays past 2^31 elements in a dim, or a far-off index that wrapped back into
  // range instead of faulting).
  std::vector<ValueId> starts(const std::vector<ValueId>& bi, const PipelineOperand& po) {
    std::vector<ValueId> s;
    const size_t rank = po.block.size();
    for (size_t d = 0; d < rank; ++d) {
      const BlockDimKind kind = po.kind(d);
      const int64_t pad = po.pad_lo.empty() ? 0 : po.pad_lo[d];
      if (kind == BlockDimKind::Bounded || (kind == BlockDimKind::Element && pad == 0) ||
          (kind == BlockDimKind::Blocked && (po.squeezed[d] || po.block[d] == 1))) {
        s.push_back(bi[d]);
        continue;
      }
      s.push_back(kind == BlockDimKind::Element ? saturating_sub(bi[d], pad) : saturating_mul(bi[d], po.block[d]));
    }
    s.insert(s.end(), bi.begin() + static_cast<std::ptrdiff_t>(rank), bi.end());
    return s;
  }
  // index * block (block > 1) and offset - pad (pad > 0) on i64, saturated to INT64_MIN / INT64_MAX where
  // they would overflow: a far-off index (a u64 clamped to INT64_MAX, an i64 near either end) must
  // stay far off and fail its bounds check, not wrap back into range as a plain product would.
  ValueId saturating_mul(ValueId index, int64_t block) {
    constexpr int64_t max = std::numeric_limits<int64_t>::max(), min = std::numeric_limits<int64_t>::min();
    if (block == 0) return constant(0, DType::i64);
    const ValueId product = binop(OpKind::Mul, index, constant(block, DType::i64));
    const ValueId over = binop(OpKind::Lt, constant(max / block, DType::i64), index);
    const ValueId under = binop(OpKind::Lt, index, constant(min / block, DType::i64));
    return select(over, constant(max, DType::i64), select(under, constant(min, DType::i64), product));
  }
  ValueId saturating_sub(ValueId offset, int64_t pad) {
    const int64_t min = std::numeric_limits<int64_t>::min();
    const ValueId under = binop(OpKind::Lt, offset, constant(min + pad, DType::i64));
    return select(under, constant(min, DType::i64), binop(OpKind::Sub, offset, constant(pad, DType::i64)));
  }
  // How many values an operand's index map yields: one per dim, then one per Bounded dim.
  static size_t map_width(const PipelineOperand& po) { return po.block.size() + bounded_dims(po.kinds); }

  ValueId any_differs(const std::vector<ValueId>& a, const std::vector<ValueId>& c, ValueId init) {
    ValueId acc = init;
    for (size_t d = 0; d < a.size(); ++d) acc = binop(OpKind::Or, acc, binop(OpKind::Ne, a[d], c[d]));
    return acc;
  }

  // Whether every block of the operand lies wholly inside the array (the blocked dims divide it).
  static bool divides(const Shape& array, const PipelineOperand& po) {
    for (size_t d = 0; d < array.size(); ++d)
      // A block larger than its array (an empty one, say, squeezed dims included) is padded, so
      // copied; a zero-size block (of a zero-size array passed whole) divides its zero-size dim.
      if (po.block[d] > array[d] || (!po.squeezed[d] && po.block[d] != 0 && array[d] % po.block[d] != 0))
        return false;
    return true;
  }

  // A view of `ref` that drops the dims flagged in `drop` (at index `at` for dims with an index).
  ValueId view(ValueId ref, const std::vector<ValueId>& at, const std::vector<bool>& drop) {
    const Type& t = b().type(ref);
    ViewAttr va;
    Shape visible;
    for (size_t d = 0; d < t.shape.size(); ++d) {
      va.dims.push_back(ViewDim{drop[d], drop[d] ? 1 : t.shape[d], 1});
      if (!drop[d]) visible.push_back(t.shape[d]);
    }
    std::vector<ValueId> operands{ref};
    operands.insert(operands.end(), at.begin(), at.end());
    return b().create_value(OpKind::View, operands, Type::ref(t.dtype, visible, t.space), va, loc_);
  }

  // The body's ref of a block: the block itself, or a view without its squeezed dims.
  ValueId squeeze(ValueId block, const PipelineOperand& po) {
    bool any = false;
    for (bool s : po.squeezed) any |= s;
    if (!any) return block;
    return view(block, std::vector<ValueId>(po.block.size(), constant(0, DType::i32)), po.squeezed);
  }

  // Slot `slot` of a ring: its block buffer and its semaphore.
  ValueId ring_block(const Plan& p, ValueId slot) {
    std::vector<ValueId> at(b().type(p.buffer).shape.size(), constant(0, DType::i32));
    at[0] = slot;
    std::vector<bool> drop(at.size(), false);
    drop[0] = true;
    return view(p.buffer, at, drop);
  }
  ValueId ring_sem(const Plan& p, ValueId slot) { return view(p.sems, {slot}, {true}); }

  // Emits `if (cond) { body() }`.
  template <class F>
  void when(ValueId cond, F body) {
    RegionId then_r = b().create_region({});
    {
      Builder::RegionScope scope(b(), then_r);
      body();
      b().create(OpKind::Yield, {}, {}, {}, loc_);
    }
    RegionId else_r = b().create_region({});
    {
      Builder::RegionScope scope(b(), else_r);
      b().create(OpKind::Yield, {}, {}, {}, loc_);
    }
    b().create(OpKind::If, {cond}, {}, {}, loc_, {then_r, else_r});
  }

  // Emits `for t in [lo, hi) { body(t, carried) -> next carried }`; returns the final carried values.
  template <class F>
  std::vector<ValueId> loop(ValueId lo, ValueId hi, const std::vector<ValueId>& inits, F body) {
    std::vector<Type> types{Type::scalar(DType::index)};
    for (ValueId v : inits) types.push_back(b().type(v));
    RegionId region = b().create_region(types);
    {
      Builder::RegionScope scope(b(), region);
      const std::vector<ValueId> args = b().function().regions[region].args;  // a copy: regions may grow
      std::vector<ValueId> next = body(args[0], std::vector<ValueId>(args.begin() + 1, args.end()));
      b().create(OpKind::Yield, next, {}, {}, loc_);
    }
    std::vector<ValueId> operands{lo, hi, constant(1, DType::index)};
    operands.insert(operands.end(), inits.begin(), inits.end());
    OpId id = b().create(OpKind::For, operands, std::vector<Type>(types.begin() + 1, types.end()), {}, loc_, {region});
    return b().function().ops[id].results;
  }

  // Emits `while (cond(carried)) { carried = body(carried) }`; returns the final carried values.
  template <class C, class F>
  std::vector<ValueId> while_loop(const std::vector<ValueId>& inits, C cond, F body) {
    std::vector<Type> types;
    for (ValueId v : inits) types.push_back(b().type(v));
    RegionId cond_r = b().create_region(types);
    {
      Builder::RegionScope scope(b(), cond_r);
      const std::vector<ValueId> args = b().function().regions[cond_r].args;
      b().create(OpKind::Yield, {cond(args)}, {}, {}, loc_);
    }
    RegionId body_r = b().create_region(types);
    {
      Builder::RegionScope scope(b(), body_r);
      const std::vector<ValueId> args = b().function().regions[body_r].args;
      b().create(OpKind::Yield, body(args), {}, {}, loc_);
    }
    OpId id = b().create(OpKind::While, inits, types, {}, loc_, {cond_r, body_r});
    return b().function().ops[id].results;
  }

  BlockCopyAttr copy_attr(const PipelineAttr& pa, size_t k) const {
    const PipelineOperand& po = pa.operands[k];
    return BlockCopyAttr{po.name, static_cast<int64_t>(k), po.aliased, pa.id, po.pad_lo, po.pad_hi, po.kinds};
  }
  SourceLoc blame(const PipelineOperand& po) const { return po.loc.known() ? po.loc : loc_; }

  // Decides how each operand reaches the body and allocates its buffers (once, before the loop).
  std::vector<Plan> plan(const Op& op, const PipelineAttr& pa) {
    const size_t n = pa.operands.size();
    std::vector<Plan> plans(n);
    size_t region = 0;
    for (size_t k = 0; k < n; ++k)
      if (pa.operands[k].windowed) plans[k].map = op.regions[region++];
    const RegionId body = op.regions[region];
    for (size_t k = 0; k < n; ++k) {
      const PipelineOperand& po = pa.operands[k];
      Plan& p = plans[k];
      p.array = rw_.map(pipeline_operands(op).refs[k]);
      if (!po.windowed) continue;
      const Type at = b().type(p.array);
      // A block the body only reads, that lies wholly inside an array nothing writes while the
      // pipeline runs, is read in place: no copy can be told from none then. Aliased inputs are
      // always copied, since write-backs of their output change the array under them.
      // Element and BoundedSlice windows may overlap the edges anywhere (or copy part of the block),
      // so they are always copied.
      const bool plain = po.kinds.empty();
      if (plain && !po.is_output && !po.aliased && po.space == MemorySpace::VMEM && divides(at.shape, po)) {
        std::set<ValueId> refs{src_.regions[body].args[k]};
        const bool array_written = pa.id > 0 && written_anywhere(src_, view_root(src_, pipeline_operands(op).refs[k]));
        if (!writes(src_, body, refs) && !array_written) {
          p.kind = Plan::Kind::InPlace;
          continue;
        }
      }
      // An output block of the kernel's own grid is written where it lies when no copy could be
      // told from none (docs/design.md §4.4): its blocks tile the array, so no write falls past an
      // edge to be dropped; it is no alias of an input, so no fetch reads the array while a block is
      // half written; and nothing but the body reaches the kernel's output array, so none sees it
      // before its write-back. Blocks revisited consecutively stay where they are, as a buffer does.
      if (plain && outputs_in_place_ && po.is_output && !po.aliased && pa.id == 0 && po.space == MemorySpace::VMEM &&
          divides(at.shape, po)) {
        p.kind = Plan::Kind::InPlace;
        continue;
      }
      if (po.buffers <= 1) {
        p.kind = Plan::Kind::Single;
        p.buffer = b().create_value(OpKind::Alloc, {}, Type::ref(at.dtype, po.block, po.space),
                                    fmt::format("{} block", po.name), loc_);
        continue;
      }
      p.kind = po.lookahead && !po.is_output ? Plan::Kind::Lookahead : Plan::Kind::Ring;
      p.count = po.buffers;
      Shape slots{po.buffers};
      slots.insert(slots.end(), po.block.begin(), po.block.end());
      p.buffer = b().create_value(OpKind::Alloc, {}, Type::ref(at.dtype, slots, po.space),
                                  fmt::format("{} blocks", po.name), loc_);
      p.sems = b().create_value(OpKind::Alloc, {}, Type::ref(DType::dma_sem, {po.buffers}, MemorySpace::SEMAPHORE),
                                fmt::format("{} copies", po.name), loc_);
    }
    return plans;
  }

  // The pipeline as loops (docs/design.md §4.1-6). Per step: inputs whose block index changed are
  // fetched (a ring fetches n - 1 steps ahead, a lookahead ring the next distinct blocks while it has
  // free buffers, and both wait for the current block), the body runs, and
  // outputs whose block index changes next step (or at the last step) are written back (a ring of
  // two writes back asynchronously and waits for the previous write-back before reusing its slot).
  void expand(OpId id) {
    const Op& op = src_.ops[id];
    const auto& pa = std::get<PipelineAttr>(op.attr);
    const SourceLoc outer_loc = loc_;  // a nested pipeline is expanded while its parent is
    loc_ = op.loc;
    const ValueId lo = rw_.map(pipeline_operands(op).lo);
    const ValueId hi = rw_.map(pipeline_operands(op).hi);
    const size_t n = pa.operands.size();
    const int64_t depth = static_cast<int64_t>(contexts_.size());
    const Grid grid = grid_of(op, pa);
    std::vector<Plan> plans = plan(op, pa);
    const RegionId body = op.regions.back();
    auto is_input = [&](size_t k, Plan::Kind kind) { return !pa.operands[k].is_output && plans[k].kind == kind; };
    auto is_output = [&](size_t k, Plan::Kind kind) { return pa.operands[k].is_output && plans[k].kind == kind; };
    bool has_outputs = false;
    for (size_t k = 0; k < n; ++k) has_outputs |= pa.operands[k].windowed && pa.operands[k].is_output;
    if (pa.id > 0 && has_outputs) b().create(OpKind::PipelineBegin, {}, {}, pa.id, loc_);

    // A ring input's fetch for step u, if its block differs from the last one fetched.
    // state: the last fetched block indices, then the next slot to fill.
    auto issue = [&](size_t k, ValueId u, ValueId may, const std::vector<ValueId>& state) {
      const Plan& p = plans[k];
      const PipelineOperand& po = pa.operands[k];
      std::vector<ValueId> bi = block_indices(p, u, grid);
      std::vector<ValueId> last(state.begin(), state.end() - 1);
      const ValueId slot = state.back();
      const ValueId go = binop(OpKind::And, may, any_differs(bi, last, binop(OpKind::Eq, u, lo)));
      when(go, [&] {
        std::vector<ValueId> operands{p.array, ring_block(p, slot)};
        for (ValueId s : starts(bi, po)) operands.push_back(s);
        operands.push_back(ring_sem(p, slot));
        b().create(OpKind::FetchBlock, operands, {}, copy_attr(pa, k), blame(po));
      });
      std::vector<ValueId> next = bi;
      next.push_back(select(go, next_slot(slot, p.count), slot));
      return next;
    };

    // Prologue: ring inputs fetch the first n - 1 steps ahead.
    std::vector<ValueId> ring_state;  // per ring input: last fetched indices, next slot
    for (size_t k = 0; k < n; ++k) {
      if (!is_input(k, Plan::Kind::Ring)) continue;
      for (size_t d = 0; d < map_width(pa.operands[k]); ++d) ring_state.push_back(constant(-1, DType::i64));
      ring_state.push_back(constant(0, DType::i32));
    }
    int64_t lookahead = 0;
    for (size_t k = 0; k < n; ++k)
      if (is_input(k, Plan::Kind::Ring)) lookahead = std::max(lookahead, plans[k].count - 1);
    if (!ring_state.empty()) {
      const ValueId ahead = binop(OpKind::Add, lo, constant(lookahead, DType::index));
      const ValueId end = select(binop(OpKind::Lt, ahead, hi), ahead, hi);
      ring_state = loop(lo, end, ring_state, [&](ValueId u, std::vector<ValueId> state) {
        std::vector<ValueId> next;
        size_t at = 0;
        for (size_t k = 0; k < n; ++k) {
          if (!is_input(k, Plan::Kind::Ring)) continue;
          const size_t width = map_width(pa.operands[k]) + 1;
          // Only the first count - 1 steps of this input are fetched ahead.
          const ValueId mine = binop(OpKind::Lt, u, binop(OpKind::Add, lo, constant(plans[k].count - 1, DType::index)));
          std::vector<ValueId> s(state.begin() + at, state.begin() + at + width);
          for (ValueId v : issue(k, u, mine, s)) next.push_back(v);
          at += width;
        }
        return next;
      });
    }

    // The body's refs of unwindowed operands and single buffers are the same at every step.
    std::vector<ValueId> fixed_args(n, kNone);
    for (size_t k = 0; k < n; ++k) {
      if (plans[k].kind == Plan::Kind::Whole) fixed_args[k] = plans[k].array;
      if (plans[k].kind == Plan::Kind::Single) fixed_args[k] = squeeze(plans[k].buffer, pa.operands[k]);
    }

    // Loop-carried: per Single input its previous block indices; per ring input its fetch state,
    // previous indices and current slot; per ring output its current slot and whether a write-back
    // is in flight.
    std::vector<ValueId> inits;
    size_t ring_at = 0;
    for (size_t k = 0; k < n; ++k) {
      const PipelineOperand& po = pa.operands[k];
      const size_t width = map_width(po);
      if (is_input(k, Plan::Kind::Single)) {
        for (size_t d = 0; d < width; ++d) inits.push_back(constant(-1, DType::i64));
      } else if (is_input(k, Plan::Kind::Ring)) {
        for (size_t d = 0; d <= width; ++d) inits.push_back(ring_state[ring_at++]);
        for (size_t d = 0; d < width; ++d) inits.push_back(constant(-1, DType::i64));
        inits.push_back(constant(0, DType::i32));
      } else if (is_input(k, Plan::Kind::Lookahead)) {
        // The next step to scan, the block values of the last one scanned, the fetches issued; the
        // previous step's block values and the fetch number of its block.
        inits.push_back(lo);
        for (size_t d = 0; d < width; ++d) inits.push_back(constant(-1, DType::i64));
        inits.push_back(constant(0, DType::i32));
        for (size_t d = 0; d < width; ++d) inits.push_back(constant(-1, DType::i64));
        inits.push_back(constant(-1, DType::i32));
      } else if (is_output(k, Plan::Kind::Ring)) {
        inits.push_back(constant(0, DType::i32));
        inits.push_back(constant(0, DType::i32));
      }
    }
    std::vector<ValueId> final_state = loop(lo, hi, inits, [&](ValueId t, std::vector<ValueId> carried) {
      const std::vector<ValueId> ids = decompose(t, grid);
      b().create(OpKind::GridPoint, ids, {}, depth, loc_);
      const ValueId first = binop(OpKind::Eq, t, lo);
      std::vector<ValueId> next;
      std::vector<ValueId> body_args = fixed_args;
      std::vector<ValueId> in_place(n, kNone);  // the block_view of each in-place operand
      size_t at = 0;
      auto take = [&](size_t count) {
        std::vector<ValueId> v(carried.begin() + at, carried.begin() + at + count);
        at += count;
        return v;
      };
      for (size_t k = 0; k < n; ++k) {
        const PipelineOperand& po = pa.operands[k];
        const Plan& p = plans[k];
        const size_t rank = map_width(po);  // the state of its last index map values
        if (!po.windowed) continue;
        if (p.kind == Plan::Kind::InPlace) {
          std::vector<ValueId> operands{p.array};
          for (ValueId s : starts(block_indices(p, t, grid), po)) operands.push_back(s);
          const Type& at_t = b().type(p.array);
          in_place[k] = b().create_value(OpKind::BlockView, operands, Type::ref(at_t.dtype, po.block, po.space),
                                         copy_attr(pa, k), blame(po));
          body_args[k] = squeeze(in_place[k], po);
        } else if (po.is_output) {
          if (p.kind == Plan::Kind::Ring) {
            body_args[k] = squeeze(ring_block(p, carried[at]), po);  // its slot; the state is used below
            at += 2;
          }
        } else if (p.kind == Plan::Kind::Single) {
          std::vector<ValueId> bi = block_indices(p, t, grid);
          std::vector<ValueId> prev = take(rank);
          when(any_differs(bi, prev, first), [&] {
            std::vector<ValueId> operands{p.array, p.buffer};
            for (ValueId s : starts(bi, po)) operands.push_back(s);
            b().create(OpKind::FetchBlock, operands, {}, copy_attr(pa, k), blame(po));
          });
          for (ValueId v : bi) next.push_back(v);
        } else if (p.kind == Plan::Kind::Lookahead) {
          // Fetch number f goes to slot f % count. This step's block is fetch `cur` (one more than
          // the previous step's if the block changed); every later fetch up to cur + count - 1 has a
          // free slot, so the scan fetches the following distinct blocks (skipping steps that
          // revisit the block before them) until the slots are full or the grid ends.
          const ValueId scan_from = take(1)[0];
          const std::vector<ValueId> scanned = take(rank);
          const ValueId issued = take(1)[0];
          const std::vector<ValueId> prev = take(rank);
          const ValueId last_fetch = take(1)[0];
          std::vector<ValueId> bi = block_indices(p, t, grid);
          const ValueId changed = any_differs(bi, prev, first);
          const ValueId one = constant(1, DType::i32), zero = constant(0, DType::i32);
          const ValueId cur = binop(OpKind::Add, last_fetch, select(changed, one, zero));
          const ValueId limit = binop(OpKind::Add, cur, constant(p.count, DType::i32));
          std::vector<ValueId> scan_init{scan_from};
          scan_init.insert(scan_init.end(), scanned.begin(), scanned.end());
          scan_init.push_back(issued);
          const std::vector<ValueId> scan = while_loop(
              scan_init,
              [&](const std::vector<ValueId>& s) {
                return binop(OpKind::And, binop(OpKind::Lt, s.back(), limit), binop(OpKind::Lt, s[0], hi));
              },
              [&](const std::vector<ValueId>& s) {
                const ValueId u = s[0], f = s.back();
                const std::vector<ValueId> last(s.begin() + 1, s.end() - 1);
                std::vector<ValueId> bu = block_indices(p, u, grid);
                const ValueId go = any_differs(bu, last, binop(OpKind::Eq, u, lo));
                when(go, [&] {
                  const ValueId slot = binop(OpKind::Rem, f, constant(p.count, DType::i32));
                  std::vector<ValueId> operands{p.array, ring_block(p, slot)};
                  for (ValueId v : starts(bu, po)) operands.push_back(v);
                  operands.push_back(ring_sem(p, slot));
                  b().create(OpKind::FetchBlock, operands, {}, copy_attr(pa, k), blame(po));
                });
                std::vector<ValueId> out{binop(OpKind::Add, u, constant(1, DType::index))};
                out.insert(out.end(), bu.begin(), bu.end());
                out.push_back(binop(OpKind::Add, f, select(go, one, zero)));
                return out;
              });
          const ValueId slot = binop(OpKind::Rem, cur, constant(p.count, DType::i32));
          when(changed, [&] {
            b().create(OpKind::DmaWait, {ring_sem(p, slot)}, {}, num_elements(po.block) * dtype_size(b().type(p.array).dtype),
                       blame(po));
          });
          next.insert(next.end(), scan.begin(), scan.end());
          next.insert(next.end(), bi.begin(), bi.end());
          next.push_back(cur);
          body_args[k] = squeeze(ring_block(p, slot), po);
        } else {  // Ring input: fetch count - 1 steps ahead, then wait for this step's block.
          std::vector<ValueId> fetch_state = take(rank + 1);
          std::vector<ValueId> prev = take(rank);
          const ValueId slot = take(1)[0];
          const ValueId ahead = binop(OpKind::Add, t, constant(p.count - 1, DType::index));
          const ValueId may = binop(OpKind::Lt, ahead, hi);
          const ValueId u = select(may, ahead, t);  // never a step outside the grid
          for (ValueId v : issue(k, u, may, fetch_state)) next.push_back(v);
          std::vector<ValueId> bi = block_indices(p, t, grid);
          const ValueId changed = any_differs(bi, prev, first);
          const ValueId cur = select(first, constant(0, DType::i32), select(changed, next_slot(slot, p.count), slot));
          when(changed, [&] {
            b().create(OpKind::DmaWait, {ring_sem(p, cur)}, {}, num_elements(po.block) * dtype_size(b().type(p.array).dtype),
                       blame(po));
          });
          for (ValueId v : bi) next.push_back(v);
          next.push_back(cur);
          body_args[k] = squeeze(ring_block(p, cur), po);
        }
      }

      contexts_.push_back(GridContext{ids, grid});
      rw_.inline_region(body, body_args);
      contexts_.pop_back();

      if (has_outputs) {
        const ValueId step_after = binop(OpKind::Add, t, constant(1, DType::index));
        const ValueId last = binop(OpKind::Eq, step_after, hi);
        // The next step's indices; on the last step the current ones, so index maps never see a
        // grid point outside the grid.
        const ValueId clamped = select(last, t, step_after);
        at = 0;
        for (size_t k = 0; k < n; ++k) {
          const PipelineOperand& po = pa.operands[k];
          const Plan& p = plans[k];
          if (!po.windowed || !po.is_output) {
            if (is_input(k, Plan::Kind::Single)) at += map_width(po);
            if (is_input(k, Plan::Kind::Ring)) at += 2 * map_width(po) + 2;
            if (is_input(k, Plan::Kind::Lookahead)) at += 2 * map_width(po) + 3;
            continue;
          }
          std::vector<ValueId> bo = block_indices(p, t, grid);
          std::vector<ValueId> bn = block_indices(p, clamped, grid);
          const ValueId changes = any_differs(bo, bn, last);
          if (p.kind == Plan::Kind::Single || p.kind == Plan::Kind::InPlace) {
            // An in-place block is "written back" from itself: nothing moves, the revisit check runs.
            when(changes, [&] {
              std::vector<ValueId> operands{p.kind == Plan::Kind::InPlace ? in_place[k] : p.buffer, p.array};
              for (ValueId s : starts(bo, po)) operands.push_back(s);
              b().create(OpKind::WritebackBlock, operands, {}, copy_attr(pa, k), blame(po));
            });
            continue;
          }
          // Ring output: write this slot back, then wait for the other slot's write-back.
          const ValueId slot = carried[at];
          const ValueId in_flight = carried[at + 1];
          at += 2;
          const int64_t bytes = num_elements(po.block) * dtype_size(b().type(p.array).dtype);
          when(changes, [&] {
            std::vector<ValueId> operands{ring_block(p, slot), p.array};
            for (ValueId s : starts(bo, po)) operands.push_back(s);
            operands.push_back(ring_sem(p, slot));
            b().create(OpKind::WritebackBlock, operands, {}, copy_attr(pa, k), blame(po));
            when(binop(OpKind::Ne, in_flight, constant(0, DType::i32)),
                 [&] { b().create(OpKind::DmaWait, {ring_sem(p, next_slot(slot, 2))}, {}, bytes, blame(po)); });
          });
          next.push_back(select(changes, next_slot(slot, 2), slot));
          next.push_back(select(changes, constant(1, DType::i32), in_flight));
        }
      }
      return next;  // in operand order: a pipeline's inputs come before its outputs
    });

    // Epilogue: ring outputs wait for their last write-back.
    size_t at = 0;
    for (size_t k = 0; k < n; ++k) {
      const PipelineOperand& po = pa.operands[k];
      if (is_input(k, Plan::Kind::Single)) at += map_width(po);
      else if (is_input(k, Plan::Kind::Ring)) at += 2 * map_width(po) + 2;
      else if (is_input(k, Plan::Kind::Lookahead)) at += 2 * map_width(po) + 3;
      else if (is_output(k, Plan::Kind::Ring)) {
        const ValueId slot = final_state[at];
        const ValueId in_flight = final_state[at + 1];
        at += 2;
        const int64_t bytes = num_elements(po.block) * dtype_size(b().type(plans[k].array).dtype);
        when(binop(OpKind::Ne, in_flight, constant(0, DType::i32)), [&] {
          b().create(OpKind::DmaWait, {ring_sem(plans[k], next_slot(slot, 2))}, {}, bytes, blame(po));
        });
      }
    }
    loc_ = outer_loc;
  }

  const Function& src_;
  const bool outputs_in_place_;
  Function out_;
  Builder dst_;
  Rewriter rw_;
  std::vector<GridContext> contexts_;
  SourceLoc loc_;  // of the pipeline being expanded
};

}  // namespace

Function expand_pipelines(const Function& fn, bool outputs_in_place) { return Expander(fn, outputs_in_place).run(); }

bool writes_back_in_place(const Function& fn, const Op& op) {
  if (op.kind != OpKind::WritebackBlock) return false;
  const BlockCopyOperands operands = block_copy_operands(fn, op);
  const Op* block = fn.def(operands.block);
  return block && block->kind == OpKind::BlockView && window_operands(*block).ref == operands.array;
}

}  // namespace tessera::passes
