// dot_general and dot_accumulate. A dot_accumulate (`acc() += dot(...)`, fused by the lowering)
// runs the GEMM micro-kernel straight into the ref; a dot_general is kept deferred until it is used,
// so that a store of it, or of it added to another ref's contents (`out() = acc() + dot(...)`),
// writes the ref directly too; anywhere else the dot is computed into a temporary.
#include <algorithm>
#include <optional>

#include "jit/llvm/codegen_state.h"

namespace tessera::jit::cg {

void Emitter::defer_dot(ir::OpId id) {
  const ir::Op& op = fn_.ops[id];
  const Type t = fn_.type(op.results[0]);
  TensorCg d;
  d.kind = TensorCg::Kind::Dot;
  d.dtype = t.dtype;
  d.shape = t.shape;
  d.dot = id;
  d.deps = op.operands;
  for (ValueId o : op.operands) {
    const TensorCg& ot = tensor(o);
    d.roots.insert(ot.roots.begin(), ot.roots.end());
    d.views.insert(ot.views.begin(), ot.views.end());
  }
  values_[op.results[0]] = std::move(d);
  track(op.results[0]);
}

bool Emitter::store_dot(const ir::Op& op) {
  const ir::StoreOperands operands = ir::store_operands(op);
  if (operands.mask != ir::kNone) return false;
  const ValueId target = operands.ref, value = operands.value;
  const RefCg& r = ref(target);
  if (r.shape.size() != 2 || r.strides[1] != 1 || static_uses_[value] != 1) return false;
  auto deferred_dot = [&](ValueId v) {
    const Cg& cg = values_[v];
    return static_uses_[v] == 1 && std::holds_alternative<TensorCg>(cg) &&
           std::get<TensorCg>(cg).kind == TensorCg::Kind::Dot && std::get<TensorCg>(cg).dtype == r.dtype;
  };
  // The sum the GEMM starts from, read where it is: a load, not yet computed, of a row-major window
  // of other memory with the target's shape and dtype.
  auto addend = [&](ValueId v) -> std::optional<RefCg> {
    const ir::Op* d = fn_.def(v);
    if (!d || d->kind != OpKind::Load || ir::load_operands(*d).mask != ir::kNone || static_uses_[v] != 1 ||
        tensor(v).kind != TensorCg::Kind::Lazy)
      return std::nullopt;
    const RefCg& a = ref(ir::load_operands(*d).ref);
    if (a.shape != r.shape || a.dtype != r.dtype || a.strides[1] != 1 || a.root == r.root || a.lanes) return std::nullopt;
    return a;
  };
  // The value is the dot, or the dot added to such a load (`out() = acc() + dot(...)`).
  ValueId dot_value = value;
  std::optional<RefCg> from;
  if (!deferred_dot(value)) {
    const ir::Op* add = fn_.def(value);
    if (!add || add->kind != OpKind::Add) return false;
    for (int s = 0; s < 2 && !from; ++s)
      if (deferred_dot(add->operands[1 - s])) {
        from = addend(add->operands[s]);
        dot_value = add->operands[1 - s];
      }
    if (!from) return false;
  }
  // The micro-kernels write f32 C, and i32 C for the int8 tiles.
  const ir::Op& dot_op = fn_.ops[tensor(dot_value).dot];
  const ir::DotOperands dot = ir::dot_operands(dot_op);
  const bool int8_tile = gemm_int8_tiles(target_, fn_.type(dot.lhs).dtype, fn_.type(dot.rhs).dtype);
  if (r.dtype != DType::f32 && !(r.dtype == DType::i32 && int8_tile)) return false;
  // The dot's operands must not read the target (the GEMM writes it while reading them).
  if (tensor(value).roots.count(r.root)) return false;
  std::set<ValueId> mine;
  tree(value, mine);
  flush_readers(r.root, mine);
  // A stored dot is the ref's last word, so an output past the caches is streamed to memory as any
  // store to it is (an accumulation into it is not: a next k step reads it back); the micro-tiles
  // check the alignment themselves, and store a row's partial last vector under a mask.
  gemm(dot.lhs, dot.rhs, std::get<ir::DotAttr>(dot_op.attr), fn_.type(dot_op.results[0]), &r,
       /*accumulate=*/from.has_value(), from ? &*from : nullptr, past_caches(r));
  for (ValueId v : mine) uses_[v] = 0;
  used(op);
  return true;
}

void Emitter::emit_dot_accumulate(ir::OpId id) {
  const ir::Op& op = fn_.ops[id];
  const ir::DotOperands operands = ir::dot_operands(op);
  const ValueId target = operands.acc, lhs = operands.lhs, rhs = operands.rhs;
  const RefCg r = ref(target);
  const auto& dims = std::get<ir::DotAttr>(op.attr);
  const Type type = fn_.type(target).value_type();
  // The GEMM accumulates in place into a row-major f32 matrix (i32 for the int8 tiles), unless an
  // operand still reads the target (the GEMM writes it while reading them).
  const bool int8_tile = gemm_int8_tiles(target_, fn_.type(lhs).dtype, fn_.type(rhs).dtype);
  const bool in_place = (r.dtype == DType::f32 || (r.dtype == DType::i32 && int8_tile)) &&
                        r.shape.size() == 2 && r.strides[1] == 1 &&
                        !tensor(lhs).roots.count(r.root) && !tensor(rhs).roots.count(r.root);
  flush_readers(r.root);
  if (in_place) {
    gemm(lhs, rhs, dims, type, &r, /*accumulate=*/true);
  } else {
    // As the unfused ops: the dot into a temporary, then each element of the target plus the dot's.
    const TensorCg product = gemm(lhs, rhs, dims, type, nullptr, /*accumulate=*/false);
    loop_nest(r.shape, [&](const Index& i) {
      llvm::Value* address = ref_address(r, i);
      llvm::Value* p = load_element(b_, product.dtype, element_address(b_, product.dtype, product.buffer, linear(i, r.shape)));
      store_element(b_, r.dtype, address, binary(OpKind::Add, r.dtype, load_element(b_, r.dtype, address), p));
    });
  }
  used(op);
}

StridedTensor Emitter::strided(ValueId v) {
  const ir::Op* d = fn_.def(v);
  const TensorCg& t = tensor(v);
  if (t.kind == TensorCg::Kind::Lazy && d && d->kind == OpKind::Load && ir::load_operands(*d).mask == ir::kNone) {
    const RefCg& r = ref(ir::load_operands(*d).ref);
    return StridedTensor{r.base, r.dtype, r.strides};
  }
  if (t.kind == TensorCg::Kind::Lazy && d && d->kind == OpKind::Transpose) {
    // Result dim i is the operand's dim perm[i]: the same memory, strides permuted.
    const StridedTensor src = strided(d->operands[0]);
    const auto& perm = std::get<std::vector<int64_t>>(d->attr);
    StridedTensor out{src.ptr, src.dtype, {}};
    for (int64_t p : perm) out.strides.push_back(src.strides[p]);
    return out;
  }
  materialize(v);
  const TensorCg& m = tensor(v);
  return StridedTensor{m.buffer, m.dtype, row_major(m.shape)};
}

std::vector<MatrixOperand> Emitter::matrices(ValueId v, const std::vector<int64_t>& batch, int64_t row, int64_t col) {
  const StridedTensor s = strided(v);
  const Shape& shape = fn_.type(v).shape;
  const int64_t ld = row < 0 ? 0 : s.strides[row], cs = col < 0 ? 0 : s.strides[col];
  int64_t count = 1;
  for (int64_t d : batch) count *= shape[d];
  std::vector<MatrixOperand> out;
  for (int64_t bt = 0; bt < count; ++bt) {
    // The batch index bt, row-major over the batch dims, as an element offset.
    int64_t offset = 0, rest = bt;
    for (auto d = batch.rbegin(); d != batch.rend(); ++d) {
      offset += rest % shape[*d] * s.strides[*d];
      rest /= shape[*d];
    }
    llvm::Value* ptr = offset ? element_address(b_, s.dtype, s.ptr, b_.getInt64(offset)) : s.ptr;
    out.push_back(MatrixOperand{ptr, s.dtype, ld, cs});
  }
  return out;
}

namespace {

// How many blocks of rows x cols make one matrix of a parameter of shape `shape` (row-major) that x
// is a block of: the extents of the dims x's rows and columns step along, in blocks.
int64_t matrix_blocks(const Shape& shape, const MatrixOperand& x, int64_t rows, int64_t cols) {
  const std::vector<int64_t> strides = row_major(shape);
  auto extent = [&](int64_t stride) {
    int64_t e = 1;
    for (size_t d = 0; d < shape.size(); ++d)
      if (stride != 0 && strides[d] == stride) e = std::max(e, shape[d]);
    return e;
  };
  auto blocks = [](int64_t e, int64_t size) { return size > 0 ? (e + size - 1) / size : int64_t{1}; };
  return blocks(extent(x.ld), rows) * blocks(extent(x.cs), cols);
}

}  // namespace

// A packed copy of operand `v` (its matrix `x`, rows x cols), made by `pack` into `bytes`, at most
// once per kernel run and block when v is read in place from a kernel parameter; nullptr when it is
// not. Parameters do not change while a kernel runs (inputs are read-only, outputs are only written
// back, never loaded), so a block packed once stays valid; across grid steps the same block recurs
// (a matmul's A(i, k) for every j, megablox gmm's rhs block for every m-tile of its group, and each
// chunk of a tile), and a direct-mapped cache keyed by its address turns those repacks into
// lookups. The cache belongs to the parameter and the way its blocks are packed, not to one dot: a
// kernel with several dots on the same blocks (megablox gmm's dot over a whole tile and its dot over
// a chunk of a tile at a group boundary) packs each block once for all of them.
llvm::Value* Emitter::cached_pack(ValueId v, const MatrixOperand& x, int64_t rows, int64_t cols, int64_t bytes,
                                  const std::string& layout, const std::function<void(llvm::Value*)>& pack,
                                  SpreadPrefetch* spread, int64_t next) {
  const ir::Op* d = fn_.def(v);
  if (!d || d->kind != OpKind::Load || ir::load_operands(*d).mask != ir::kNone) return nullptr;
  const RefCg& r = ref(ir::load_operands(*d).ref);
  const ir::ValueInfo& root = fn_.values[r.root];
  if (root.def != ir::kNone || x.ptr != r.base) return nullptr;  // not a parameter read in place
  // Slots for the blocks of one matrix of the parameter, up to 256 blocks or 8 MiB (a power of
  // two): a matmul's B blocks recur only after the grid has visited all of them once (every (k, j)
  // block before i moves on), so a cache smaller than B packed evicts each block before it comes
  // back (2048 x 1024 bf16 B is 128 blocks, 4 MiB). A batch of matrices (megablox gmm's rhs, one per
  // group) is walked one matrix after the other, its blocks recurring within their matrix only: the
  // next matrix's blocks take the slots the last one's leave, whose lines the caches still hold,
  // where slots for every matrix would have each packing write lines last touched long ago and
  // evicted since (gmm f32: 0.88x -> 0.91x the dense matmul).
  auto [cache, made] = pack_caches_.try_emplace({r.root, layout, x.ld, x.cs, rows, cols, bytes}, PackCache{});
  if (made) {
    const int64_t blocks = std::min<int64_t>(matrix_blocks(fn_.type(r.root).shape, x, rows, cols), 256);
    int64_t slots = 1;
    while (slots < blocks && 2 * slots * bytes <= (int64_t{8} << 20)) slots *= 2;
    llvm::Value* keys = entry_alloca(b_.getPtrTy(), slots);
    for (int64_t s = 0; s < slots; ++s)
      entry_b_.CreateStore(llvm::ConstantPointerNull::get(b_.getPtrTy()),
                           entry_b_.CreateInBoundsGEP(entry_b_.getPtrTy(), keys, entry_b_.getInt64(s)));
    cache->second = PackCache{keys, temp(slots * bytes), slots};
  }
  llvm::Value* keys = cache->second.keys;
  llvm::Value* buffers = cache->second.buffers;
  const int64_t slots = cache->second.slots;
  // The slot is the block's (row, column) position in the parameter, row-major over blocks: blocks
  // `minor` bytes apart along the contiguous dim and `major` bytes apart along the strided one, whose
  // rows are `line` bytes long, counted from the parameter's start (not from address 0: an array
  // that starts inside a `major` would have the blocks of one row straddle two, and two blocks of one
  // matrix share a slot). Distinct blocks of one matrix land in distinct slots.
  const int64_t size = dtype_size(x.dtype);
  const bool row_major = x.ld >= x.cs;
  const int64_t line = std::max<int64_t>((row_major ? x.ld : x.cs) * size, 1);
  const int64_t minor = std::max<int64_t>(row_major ? cols * x.cs * size : rows * x.ld * size, 1);
  const int64_t major = std::max<int64_t>(row_major ? rows * x.ld * size : cols * x.cs * size, 1);
  llvm::Value* per_line = b_.getInt64(std::max<int64_t>(line / minor, 1));
  auto slot_of = [&](llvm::Value* from_start) {
    return b_.CreateAnd(b_.CreateAdd(b_.CreateMul(b_.CreateUDiv(from_start, b_.getInt64(major)), per_line),
                                     b_.CreateUDiv(b_.CreateURem(from_start, b_.getInt64(line)), b_.getInt64(minor))),
                        b_.getInt64(slots - 1));
  };
  auto buffer = [&](llvm::Value* slot) {
    return b_.CreateInBoundsGEP(b_.getInt8Ty(), buffers, b_.CreateMul(slot, b_.getInt64(bytes)));
  };
  llvm::Value* start = b_.CreatePtrToInt(ref(r.root).base, b_.getInt64Ty());
  llvm::Value* offset = b_.CreateSub(b_.CreatePtrToInt(x.ptr, b_.getInt64Ty()), start);
  llvm::Value* slot = slot_of(offset);
  llvm::Value* key_slot = b_.CreateInBoundsGEP(b_.getPtrTy(), keys, slot);
  llvm::Value* copy = buffer(slot);
  if (spread) {
    if (!cache->second.prefetch) {
      cache->second.prefetch = entry_alloca(spread_prefetch_state_type(ctx_), 1);
      emit_spread_prefetch_init(entry_b_, SpreadPrefetch{cache->second.prefetch});
    }
    spread->state = cache->second.prefetch;
  }
  llvm::BasicBlock* fill = llvm::BasicBlock::Create(ctx_, "pack", f_);
  llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "pack.done", f_);
  b_.CreateCondBr(b_.CreateICmpNE(b_.CreateLoad(b_.getPtrTy(), key_slot), x.ptr), fill, done);
  b_.SetInsertPoint(fill);
  pack(copy);
  b_.CreateStore(x.ptr, key_slot);
  b_.CreateBr(done);
  b_.SetInsertPoint(done);
  if (spread) {
    // Queue the next block, packed or not: the packed slots recur only after the grid has visited
    // all of B, so a step's slot comes from L3 unless fetched under the dot before (seed matmul
    // f32: 3-6% faster than when only a packing queued its next block; docs/design.md §8).
    llvm::Value* next_ptr = b_.CreateGEP(b_.getInt8Ty(), x.ptr, b_.getInt64(next));
    llvm::Value* next_slot = slot_of(b_.CreateAdd(offset, b_.getInt64(next)));
    llvm::Value* packed_already =
        b_.CreateICmpEQ(b_.CreateLoad(b_.getPtrTy(), b_.CreateInBoundsGEP(b_.getPtrTy(), keys, next_slot)), next_ptr);
    emit_spread_prefetch_queue(b_, *spread, next_ptr,
                               b_.CreateSelect(packed_already, llvm::ConstantPointerNull::get(b_.getPtrTy()), next_ptr),
                               buffer(next_slot));
  }
  return copy;
}

namespace {

// The block of x (rows x cols) as runs of contiguous bytes: {runs, bytes a run, stride in bytes};
// runs = 0 when neither dim is contiguous.
struct BlockRuns {
  int64_t runs = 0, run_bytes = 0, stride = 0;
};
BlockRuns block_runs(const MatrixOperand& x, int64_t rows, int64_t cols) {
  const int64_t size = dtype_size(x.dtype);
  if (x.cs == 1) return {rows, cols * size, x.ld * size};
  if (x.ld == 1) return {cols, rows * size, x.cs * size};
  return {};
}

// Asks the memory system for the block after `x` (rows x cols) along the dot's contracted dim,
// `next` elements on. A matmul grid packs B one k step after the other, and megablox gmm its next
// group's first block after the last k step, so on a packing miss the next step's block is most
// likely that one: fetched while this step's dot runs, its packing finds it in the caches. Walks
// the block's contiguous lines; a prefetch never faults, so a block past the end of the array is
// harmless. In one burst after the pack, for the AMX tiles; the micro-tiles spread the same lines
// through their k loops instead (SpreadPrefetch, jit/llvm/gemm.h).
// (The burst: gmm with 8 groups of whole tiles, which packs its rhs once, eight times the dense
// matmul's B: 1.5-2% less CPU time, f32 and bf16; the dense matmul unchanged.)
void prefetch_next_block(llvm::IRBuilderBase& b, const MatrixOperand& x, int64_t rows, int64_t cols, int64_t next) {
  const auto [lines, bytes, stride] = block_runs(x, rows, cols);
  if (lines == 0) return;
  llvm::Function* prefetch =
      llvm::Intrinsic::getDeclaration(b.GetInsertBlock()->getModule(), llvm::Intrinsic::prefetch, {b.getPtrTy()});
  llvm::Value* base = b.CreateGEP(b.getInt8Ty(), x.ptr, b.getInt64(next * dtype_size(x.dtype)));
  emit_loop(b, lines, [&](llvm::Value* l) {
    llvm::Value* line = b.CreateGEP(b.getInt8Ty(), base, b.CreateMul(l, b.getInt64(stride)));
    for (int64_t c = 0; c < bytes; c += 64)
      b.CreateCall(prefetch, {b.CreateGEP(b.getInt8Ty(), line, b.getInt64(c)), b.getInt32(0), b.getInt32(2), b.getInt32(1)});
  });
}

// What a mask compares rows with: a scalar broadcast to the mask's shape, or a constant.
struct Bound {
  ValueId scalar = ir::kNone;
  int64_t literal = 0;
  bool operator==(const Bound&) const = default;
};

// A dot operand zeroed outside one range of rows along its contracted dim `dim`:
// select(lower <= row && row < upper, kept, 0) with row = iota(dim) + offset, the bounds shifted
// by `adjust` (a strict lower bound, an inclusive upper one). A missing bound is none of its side.
struct RowRange {
  ValueId kept = ir::kNone;
  Bound offset;
  std::optional<Bound> lower, upper;
  int64_t lower_adjust = 0, upper_adjust = 0;
  DType rows = DType::i32;
  // Both operands keep the same rows: every product outside them is 0 x 0 in the interpreter.
  bool same_rows(const RowRange& o) const {
    return offset == o.offset && lower == o.lower && upper == o.upper && lower_adjust == o.lower_adjust &&
           upper_adjust == o.upper_adjust && rows == o.rows;
  }
};

std::optional<Bound> bound_of(const ir::Function& fn, ValueId v) {
  const ir::Op* d = fn.def(v);
  if (d && d->kind == OpKind::BroadcastTo && fn.type(d->operands[0]).is_scalar()) return Bound{d->operands[0], 0};
  if (d && d->kind == OpKind::Constant && !std::get<ir::Literal>(d->attr).is_float)
    return Bound{ir::kNone, std::get<ir::Literal>(d->attr).i};
  return std::nullopt;
}

// The rows of `v` if it is iota(dim), or iota(dim) plus a bound: its offset.
std::optional<Bound> rows_offset(const ir::Function& fn, ValueId v, int64_t dim) {
  auto is_iota = [&](ValueId x) {
    const ir::Op* d = fn.def(x);
    return d && d->kind == OpKind::Iota && std::get<int64_t>(d->attr) == dim;
  };
  if (is_iota(v)) return Bound{};
  const ir::Op* d = fn.def(v);
  if (!d || d->kind != OpKind::Add) return std::nullopt;
  for (int s = 0; s < 2; ++s)
    if (is_iota(d->operands[s])) return bound_of(fn, d->operands[1 - s]);
  return std::nullopt;
}

// Adds one comparison of rows with a bound to `range`; false if `c` is not one.
bool add_comparison(const ir::Function& fn, ValueId c, int64_t dim, RowRange& range, bool& has_rows) {
  const ir::Op* d = fn.def(c);
  if (!d || !(d->kind == OpKind::Ge || d->kind == OpKind::Gt || d->kind == OpKind::Lt || d->kind == OpKind::Le))
    return false;
  for (int s = 0; s < 2; ++s) {
    const std::optional<Bound> offset = rows_offset(fn, d->operands[s], dim);
    const std::optional<Bound> bound = bound_of(fn, d->operands[1 - s]);
    if (!offset || !bound || (has_rows && !(*offset == range.offset))) continue;
    const DType rows = fn.type(d->operands[s]).dtype;
    if (rows != DType::i32 && rows != DType::i64) return false;
    // The comparison as rows (op) bound.
    OpKind k = d->kind;
    if (s == 1) k = k == OpKind::Ge ? OpKind::Le : k == OpKind::Gt ? OpKind::Lt : k == OpKind::Lt ? OpKind::Gt : OpKind::Ge;
    const bool lower = k == OpKind::Ge || k == OpKind::Gt;
    if ((lower && range.lower) || (!lower && range.upper)) return false;
    (lower ? range.lower : range.upper) = *bound;
    (lower ? range.lower_adjust : range.upper_adjust) = (k == OpKind::Gt || k == OpKind::Le) ? 1 : 0;
    range.offset = *offset;
    range.rows = rows;
    has_rows = true;
    return true;
  }
  return false;
}

// `v` as a RowRange along `dim`, if it is one.
std::optional<RowRange> row_range(const ir::Function& fn, ValueId v, int64_t dim) {
  const ir::Op* sel = fn.def(v);
  if (!sel || sel->kind != OpKind::Select) return std::nullopt;
  const ir::Op* zero = fn.def(sel->operands[2]);
  if (!zero || zero->kind != OpKind::Constant || std::get<ir::Literal>(zero->attr).as_double() != 0) return std::nullopt;
  RowRange range;
  range.kept = sel->operands[1];
  bool has_rows = false;
  const ir::Op* mask = fn.def(sel->operands[0]);
  if (mask && mask->kind == OpKind::And) {
    if (!add_comparison(fn, mask->operands[0], dim, range, has_rows) ||
        !add_comparison(fn, mask->operands[1], dim, range, has_rows))
      return std::nullopt;
  } else if (!add_comparison(fn, sel->operands[0], dim, range, has_rows)) {
    return std::nullopt;
  }
  return range;
}

}  // namespace

std::optional<KSpan> Emitter::contracted_span(ValueId& lhs, ValueId& rhs, int64_t lhs_dim, int64_t rhs_dim, int64_t k) {
  const std::optional<RowRange> l = row_range(fn_, lhs, lhs_dim), r = row_range(fn_, rhs, rhs_dim);
  if (!l || !r || !l->same_rows(*r)) return std::nullopt;
  // The bounds must be scalars in registers by now (a rank-0 tensor computed otherwise is left alone).
  for (const std::optional<Bound>& x : {std::optional<Bound>(l->offset), l->lower, l->upper})
    if (x && x->scalar != ir::kNone && tensor(x->scalar).kind != TensorCg::Kind::Scalar) return std::nullopt;
  auto value = [&](const Bound& x) -> llvm::Value* {
    if (x.scalar == ir::kNone) return b_.getInt64(x.literal);
    return b_.CreateSExtOrTrunc(tensor(x.scalar).scalar, b_.getInt64Ty());
  };
  auto smax = [&](llvm::Value* x, llvm::Value* y) { return b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, x, y); };
  auto smin = [&](llvm::Value* x, llvm::Value* y) { return b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, x, y); };
  llvm::Value* offset = value(l->offset);
  auto row = [&](const Bound& x, int64_t adjust) { return b_.CreateSub(b_.CreateAdd(value(x), b_.getInt64(adjust)), offset); };
  llvm::Value* lo = l->lower ? smin(smax(row(*l->lower, l->lower_adjust), b_.getInt64(0)), b_.getInt64(k)) : b_.getInt64(0);
  llvm::Value* hi = l->upper ? smin(row(*l->upper, l->upper_adjust), b_.getInt64(k)) : b_.getInt64(k);
  // i32 rows wrap past INT32_MAX in the interpreter: the span ends where they would.
  if (l->rows == DType::i32) hi = smin(hi, b_.CreateSub(b_.getInt64(int64_t{INT32_MAX} + 1), offset));
  lhs = l->kept;
  rhs = r->kept;
  return KSpan{lo, smax(hi, lo)};
}

void Emitter::compute_dot(ValueId v) {
  const ir::Op& op = fn_.ops[tensor(v).dot];
  const ir::DotOperands operands = ir::dot_operands(op);
  values_[v] = gemm(operands.lhs, operands.rhs, std::get<ir::DotAttr>(op.attr), fn_.type(op.results[0]), nullptr, false);
}

TensorCg Emitter::gemm(ValueId lhs, ValueId rhs, const ir::DotAttr& dims, const Type& t, const RefCg* into,
                       bool accumulate, const RefCg* from, bool streaming) {
  const Type lt = fn_.type(lhs), rt_ = fn_.type(rhs);
  const DType result = t.dtype;
  const DType acc = (is_float(lt.dtype) || is_float(rt_.dtype))
                        ? ((lt.dtype == DType::f64 || rt_.dtype == DType::f64) ? DType::f64 : DType::f32)
                        : ((dtype_size(lt.dtype) == 8 || dtype_size(rt_.dtype) == 8) ? DType::i64 : DType::i32);
  // Arrange the operands as [batch, m, k] and [batch, k, n].
  auto free_dims = [](const Type& x, const std::vector<int64_t>& c, const std::vector<int64_t>& bt) {
    std::vector<int64_t> f;
    for (int64_t d = 0; d < x.rank(); ++d)
      if (std::find(c.begin(), c.end(), d) == c.end() && std::find(bt.begin(), bt.end(), d) == bt.end()) f.push_back(d);
    return f;
  };
  const auto lfree = free_dims(lt, dims.lhs_contract, dims.lhs_batch);
  const auto rfree = free_dims(rt_, dims.rhs_contract, dims.rhs_batch);
  auto product = [](const Type& x, const std::vector<int64_t>& ds) {
    int64_t p = 1;
    for (int64_t d : ds) p *= x.shape[d];
    return p;
  };
  const int64_t B = product(lt, dims.lhs_batch), M = product(lt, lfree), K = product(lt, dims.lhs_contract),
                N = product(rt_, rfree);
  // One free and one contracting dim per operand (or none: a vector), any batch dims: the operands
  // are strided views of their memory, transposed or not, and every form reaches the micro-kernels.
  const bool strided_views = lfree.size() <= 1 && rfree.size() <= 1 && dims.lhs_contract.size() <= 1 &&
                             dims.rhs_contract.size() <= 1;
  const bool pairs = gemm_bf16_pairs(target_, lt.dtype, rt_.dtype);
  // Operands zeroed outside the same rows of k: the micro-tiles sum over those rows alone, reading
  // the operands as they were before the zeroing.
  KSpan span;
  if (strided_views && B == 1 && acc == DType::f32 && dims.lhs_contract.size() == 1 &&
      gemm_spans_k(target_, lt.dtype, rt_.dtype, K))
    if (const std::optional<KSpan> s = contracted_span(lhs, rhs, dims.lhs_contract[0], dims.rhs_contract[0], K)) span = *s;
  std::vector<MatrixOperand> a_ops, b_ops;
  auto only = [](const std::vector<int64_t>& ds) { return ds.empty() ? int64_t{-1} : ds[0]; };
  if (strided_views) {
    a_ops = matrices(lhs, dims.lhs_batch, only(lfree), only(dims.lhs_contract));
    b_ops = matrices(rhs, dims.rhs_batch, only(dims.rhs_contract), only(rfree));
  } else {
    // Several free or contracting dims in one operand: a temporary with them permuted together.
    auto arrange = [&](ValueId x, const Type& xt, std::vector<int64_t> order, int64_t rows, int64_t cols) {
      // A temporary holding x with its dims permuted into `order`, as [batch][rows][cols].
      std::vector<int64_t> permuted_shape;
      for (int64_t d : order) permuted_shape.push_back(xt.shape[d]);
      prepare(x);
      llvm::Value* buf = temp(num_elements(permuted_shape) * dtype_size(xt.dtype));
      loop_nest(permuted_shape, [&](const Index& i) {
        Index src(order.size());
        for (size_t d = 0; d < order.size(); ++d) src[order[d]] = i[d];
        store_element(b_, xt.dtype, element_address(b_, xt.dtype, buf, linear(i, permuted_shape)), elem(x, src));
      });
      std::vector<MatrixOperand> out;
      for (int64_t bt = 0; bt < B; ++bt)
        out.push_back(MatrixOperand{element_address(b_, xt.dtype, buf, b_.getInt64(bt * rows * cols)), xt.dtype, cols});
      return out;
    };
    std::vector<int64_t> lorder = dims.lhs_batch, rorder = dims.rhs_batch;
    lorder.insert(lorder.end(), lfree.begin(), lfree.end());
    lorder.insert(lorder.end(), dims.lhs_contract.begin(), dims.lhs_contract.end());
    rorder.insert(rorder.end(), dims.rhs_contract.begin(), dims.rhs_contract.end());
    rorder.insert(rorder.end(), rfree.begin(), rfree.end());
    a_ops = arrange(lhs, lt, lorder, M, K);
    b_ops = arrange(rhs, rt_, rorder, K, N);
  }
  // The int8 tiles write i32 C (a dot stored or accumulated into an i32 ref, or the temporary).
  const bool int8_tiles = acc == DType::i32 && gemm_int8_tiles(target_, lt.dtype, rt_.dtype) &&
                          (!into || into->dtype == DType::i32);
  const bool tiles = acc == DType::f32 || int8_tiles;
  const int64_t packed_bytes = tiles ? gemm_packed_b_bytes(target_, lt.dtype, rt_.dtype, N, K) : 0;
  llvm::Value* packed = nullptr;
  llvm::Value* packed_a = tiles ? temp(gemm_packed_a_bytes(target_, lt.dtype, rt_.dtype, M, K)) : nullptr;
  bool b_packed = false;
  std::optional<SpreadPrefetch> spread_prefetch;
  if (tiles && B == 1 && strided_views) {
    // A block of a parameter is packed once per kernel run: B always, an A the f32 tile converts
    // to f32 or the vpmaddwd tile widens to i16.
    std::optional<DType> a_as;
    if (acc == DType::f32 && !pairs && !gemm_f32_reads_a_in_place(a_ops[0])) a_as = DType::f32;
    if (int8_tiles && gemm_int8_words(target_, lt.dtype, rt_.dtype)) a_as = DType::i16;
    if (a_as)
      if (llvm::Value* dense = cached_pack(lhs, a_ops[0], M, K, M * K * dtype_size(*a_as),
                                           "dense " + std::string(dtype_name(*a_as)),
                                           [&](llvm::Value* to) { emit_pack_dense(b_, a_ops[0], to, M, K, *a_as); }))
        a_ops[0] = MatrixOperand{dense, *a_as, K};
    // The next block of B along k, which the next grid step most likely packs, is fetched while
    // this dot runs: by the micro-tiles, spread through their k loops together with the slot it
    // will be packed into; on AMX tiles in one burst after the pack.
    const BlockRuns runs = block_runs(b_ops[0], K, N);
    const int64_t next = K * b_ops[0].ld;
    if (runs.runs > 0 && !gemm_amx(target_, lt.dtype, rt_.dtype))
      spread_prefetch = SpreadPrefetch{nullptr, runs.runs, runs.run_bytes, runs.stride, packed_bytes};
    // The packing of B depends on A's dtype too (f32 panels, bf16 pairs, int8 quads or
    // the words of a widened int8; the target decides between the last two).
    packed = cached_pack(
        rhs, b_ops[0], K, N, packed_bytes,
        "B " + std::string(dtype_name(b_ops[0].dtype)) + " for " + std::string(dtype_name(lt.dtype)),
        [&](llvm::Value* to) {
          emit_pack_b(b_, target_, lt.dtype, b_ops[0], to, N, K);
          if (!spread_prefetch) prefetch_next_block(b_, b_ops[0], K, N, next);
        },
        spread_prefetch ? &*spread_prefetch : nullptr, next * dtype_size(b_ops[0].dtype));
    b_packed = packed != nullptr;
    if (!b_packed) spread_prefetch.reset();
  }
  if (tiles && !packed) packed = temp(packed_bytes);
  llvm::Value* c = nullptr;
  int64_t ldc = N;
  if (into) {
    c = into->base;
    ldc = into->strides[0];
  } else {
    c = temp(B * M * N * dtype_size(acc));
  }
  for (int64_t bt = 0; bt < B; ++bt) {
    llvm::Value* cb = into ? c : element_address(b_, acc, c, b_.getInt64(bt * M * N));
    const CMatrix cm{.ptr = cb,
                     .ld = ldc,
                     .accumulate = accumulate,
                     .from = from ? from->base : nullptr,
                     .from_ld = from ? from->strides[0] : 0,
                     .streaming = streaming};
    if (acc == DType::f32)
      emit_gemm_f32(b_, target_, a_ops[bt], b_ops[bt], cm, M, N, K, packed, packed_a, b_packed,
                    spread_prefetch ? &*spread_prefetch : nullptr, span);
    else if (int8_tiles)
      emit_gemm_i8(b_, target_, a_ops[bt], b_ops[bt], cm, M, N, K, packed, packed_a, b_packed,
                   spread_prefetch ? &*spread_prefetch : nullptr);
    else emit_gemm_loops(b_, a_ops[bt], b_ops[bt], cb, ldc, acc, M, N, K, accumulate);  // no `from`: tiles only
  }
  if (into) return {};
  TensorCg m;
  m.kind = TensorCg::Kind::Buffer;
  m.dtype = acc;
  m.shape = t.shape;
  m.buffer = c;
  if (result != acc) {
    // Convert the accumulator into the result dtype, as the runtime does after summing.
    llvm::Value* out = temp(num_elements(t.shape) * dtype_size(result));
    const Shape shape = t.shape;
    loop_nest(shape, [&](const Index& i) {
      llvm::Value* x = load_element(b_, acc, element_address(b_, acc, c, linear(i, shape)));
      store_element(b_, result, element_address(b_, result, out, linear(i, shape)), convert(acc, result, x));
    });
    m.dtype = result;
    m.buffer = out;
  }
  return m;
}

}  // namespace tessera::jit::cg
