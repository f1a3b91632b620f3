// Memory: allocations, ref views, loads and stores, and the block copies and block views of expanded
// pipelines. Loads stay lazy; a store runs the loop nest of the value it writes, after computing the
// pending tensors that read the memory it overwrites; a store into a large output array streams
// past the caches (store_streaming). An output block written in place is written back as nothing.
#include <fmt/format.h>
#include <llvm/IR/IntrinsicsX86.h>

#include "jit/ir/printer.h"
#include "jit/llvm/codegen_state.h"
#include "jit/lowering/expand_pipelines.h"

namespace tessera::jit::cg {

void Emitter::emit_alloc(ir::OpId id) {
  const ir::Op& op = fn_.ops[id];
  const Type t = fn_.type(op.results[0]);
  llvm::Value* p = entry_b_.CreateCall(rt_alloc_, {core_, entry_b_.getInt32(static_cast<int32_t>(id))});
  values_[op.results[0]] = RefCg{p, t.dtype, t.shape, row_major(t.shape), op.results[0]};
}

void Emitter::view(ir::OpId id) {
  const ir::Op& op = fn_.ops[id];
  const ir::WindowOperands operands = ir::window_operands(op);
  const RefCg src = ref(operands.ref);
  const auto& attr = std::get<ir::ViewAttr>(op.attr);
  RefCg out{nullptr, src.dtype, {}, {}, src.root, nullptr};
  // A view only masked accesses use is checked by them, lane by lane (rt::lane_checked_views).
  auto lanes = lane_checked_[id] ? std::make_shared<LaneBounds>(LaneBounds{{}, src.shape, attr.dims}) : nullptr;
  llvm::Value* offset = b_.getInt64(0);
  for (size_t d = 0; d < attr.dims.size(); ++d) {
    const ir::ViewDim& dim = attr.dims[d];
    llvm::Value* start = b_.CreateSExt(tensor(operands.starts[d]).scalar, b_.getInt64Ty());
    if (lanes) lanes->starts.push_back(start);
    // Bounds: the first and last element of the window must lie inside the source. The last is
    // compared as start >= extent - reach, which cannot overflow as start + reach would for a start
    // near INT64_MAX (as rt::view checks).
    const int64_t reach = dim.squeeze ? 0 : (dim.size - 1) * dim.stride;
    if (!lanes && (dim.squeeze || dim.size > 0)) {
      llvm::Value* bad = b_.CreateOr(b_.CreateICmpSLT(start, b_.getInt64(0)),
                                     b_.CreateICmpSGE(start, b_.getInt64(src.shape[d] - reach)));
      llvm::BasicBlock* fault = llvm::BasicBlock::Create(ctx_, "view.fault", f_);
      llvm::BasicBlock* ok = llvm::BasicBlock::Create(ctx_, "view.ok", f_);
      b_.CreateCondBr(bad, fault, ok);
      b_.SetInsertPoint(fault);
      b_.CreateCall(rt_view_fault_, {core_, b_.getInt32(static_cast<int32_t>(id)), b_.getInt32(static_cast<int32_t>(d)), start});
      b_.CreateBr(abort_);
      b_.SetInsertPoint(ok);
    }
    offset = b_.CreateAdd(offset, b_.CreateMul(start, b_.getInt64(src.strides[d])));
    if (!dim.squeeze) {
      out.shape.push_back(dim.size);
      out.strides.push_back(src.strides[d] * dim.stride);
    }
  }
  out.base = element_address(b_, src.dtype, src.base, offset);
  out.lanes = std::move(lanes);
  used(op);
  values_[op.results[0]] = out;
}

llvm::Value* Emitter::lane_address(const RefCg& r, const Index& idx, llvm::Value* selected, ir::OpId access) {
  // Each dim's position in the viewed ref; the first one outside it is the one the fault names, as
  // rt::check_masked_lanes does. start + lane * stride saturates (as rt::lane_position): a start
  // near INT64_MAX must not wrap a lane past the edge back into range (or to a misreported element).
  const LaneBounds& lanes = *r.lanes;
  std::vector<llvm::Value*> position, outside;
  size_t k = 0;
  for (size_t d = 0; d < lanes.dims.size(); ++d) {
    llvm::Value* p = lanes.starts[d];
    if (!lanes.dims[d].squeeze) {
      llvm::Value* step = b_.CreateIntrinsic(llvm::Intrinsic::smul_fix_sat, {b_.getInt64Ty()},
                                             {idx[k++], b_.getInt64(lanes.dims[d].stride), b_.getInt32(0)});
      p = b_.CreateBinaryIntrinsic(llvm::Intrinsic::sadd_sat, p, step);
    }
    position.push_back(p);
    outside.push_back(b_.CreateOr(b_.CreateICmpSLT(p, b_.getInt64(0)), b_.CreateICmpSGE(p, b_.getInt64(lanes.extents[d]))));
  }
  llvm::Value* any = b_.getFalse();
  llvm::Value* dim = b_.getInt32(0);
  llvm::Value* element = b_.getInt64(0);
  for (size_t d = lanes.dims.size(); d-- > 0;) {
    any = b_.CreateOr(any, outside[d]);
    dim = b_.CreateSelect(outside[d], b_.getInt32(static_cast<int32_t>(d)), dim);
    element = b_.CreateSelect(outside[d], position[d], element);
  }
  llvm::BasicBlock* fault = llvm::BasicBlock::Create(ctx_, "lane.fault", f_);
  llvm::BasicBlock* ok = llvm::BasicBlock::Create(ctx_, "lane.ok", f_);
  b_.CreateCondBr(b_.CreateAnd(selected, any), fault, ok);
  b_.SetInsertPoint(fault);
  b_.CreateCall(rt_lane_fault_, {core_, b_.getInt32(static_cast<int32_t>(access)), dim, element});
  b_.CreateBr(abort_);
  b_.SetInsertPoint(ok);
  if (!lane_slot_) lane_slot_ = entry_alloca(b_.getInt64Ty(), 1);  // room for an element of any dtype
  return b_.CreateSelect(any, lane_slot_, ref_address(r, idx));
}

void Emitter::load(const ir::Op& op) {
  const ir::LoadOperands operands = ir::load_operands(op);
  const ValueId rv = operands.ref, mask = operands.mask, other = operands.other;
  const RefCg r = ref(rv);
  const Type t = fn_.type(op.results[0]);
  used(op);
  if (t.is_scalar() && mask == ir::kNone) {
    set_scalar(op.results[0], t.dtype, load_element(b_, r.dtype, r.base));
    return;
  }
  std::vector<ValueId> deps;
  for (ValueId v : {mask, other})
    if (v != ir::kNone) deps.push_back(v);
  llvm::Value* poison = is_float(t.dtype) ? nan_of(compute_type(b_, t.dtype)) : nullptr;
  const ir::OpId id = static_cast<ir::OpId>(&op - fn_.ops.data());
  set_lazy(op.results[0], t, deps, [this, r, t, mask, other, poison, id](const Index& i) -> llvm::Value* {
    if (mask == ir::kNone) return load_element(b_, r.dtype, ref_address(r, i));
    llvm::Value* selected = elem(mask, i);
    llvm::Value* v = load_element(b_, r.dtype, r.lanes ? lane_address(r, i, selected, id) : ref_address(r, i));
    llvm::Value* alt = other != ir::kNone ? elem(other, i) : poison ? poison : v;
    return b_.CreateSelect(selected, v, alt);
  });
  TensorCg& lt = tensor(op.results[0]);
  lt.roots.insert(r.root);
  lt.views.insert(rv);
  track(op.results[0]);
}

void Emitter::store(ir::OpId id) {
  const ir::Op& op = fn_.ops[id];
  if (store_dot(op)) return;
  const ir::StoreOperands operands = ir::store_operands(op);
  const ValueId target = operands.ref, value = operands.value, mask = operands.mask;
  const RefCg r = ref(target);
  std::set<ValueId> mine;
  tree(value, mine);
  if (mask != ir::kNone) tree(mask, mine);
  // Reading another window of the memory being written while writing it element by element could
  // read elements this store already changed: compute the value first then.
  const TensorCg& vt = tensor(value);
  bool hazard = false;
  if (vt.roots.count(r.root))
    for (ValueId w : vt.views) hazard |= w != target;
  if (hazard) materialize(value);
  flush_readers(r.root, mine);
  prepare(value);
  if (mask != ir::kNone) prepare(mask);
  auto store_at = [&](const Index& i) {
    if (mask == ir::kNone) {
      store_element(b_, r.dtype, ref_address(r, i), elem(value, i));
      return;
    }
    llvm::Value* selected = elem(mask, i);
    llvm::Value* address = r.lanes ? lane_address(r, i, selected, id) : ref_address(r, i);
    store_element(b_, r.dtype, address, b_.CreateSelect(selected, elem(value, i), load_element(b_, r.dtype, address)));
  };
  if (mask == ir::kNone && streams_past_caches(r)) store_streaming(r, value, store_at);
  else loop_nest(r.shape, store_at);
  used(op);
}

// Outputs at least this large are written with non-temporal stores: they do not fit in the caches,
// so a regular store's read of each line before writing it (the RFO) only costs bandwidth.
static constexpr int64_t kStreamingBytes = int64_t{16} << 20;

// Whether a ref's rows are short runs far apart (at most 8 KiB, as a 64 x 1024 f32 block of a
// 4096-wide array: 4 KiB runs 16 KiB apart), which the hardware prefetchers, retraining at every
// 4 KiB page, leave to start with cache misses.
static bool has_short_rows(const RefCg& r) {
  const size_t rank = r.shape.size();
  return rank >= 2 && r.strides.back() == 1 && r.strides[rank - 2] != r.shape.back() &&
         r.shape.back() * dtype_size(r.dtype) <= 8192;
}

bool Emitter::past_caches(const RefCg& r) const {
  // Only a kernel's own output array (a parameter outside VMEM and SMEM) is written to memory; VMEM
  // buffers and scratch are meant to stay in the caches.
  if (fn_.def(r.root)) return false;
  const Type& array = fn_.type(r.root);
  if (array.space == MemorySpace::VMEM || array.space == MemorySpace::SMEM) return false;
  return array.num_elements() * dtype_size(r.dtype) >= kStreamingBytes;
}

bool Emitter::streams_past_caches(const RefCg& r) const {
  if (!past_caches(r)) return false;
  const int64_t es = dtype_size(r.dtype);
  // Element types stored as computed, rows of whole 64-byte lines with line-aligned row strides: a
  // row that starts on a line boundary is whole vectors of one line each.
  if (r.dtype != DType::f32 && r.dtype != DType::i32 && r.dtype != DType::f64 && r.dtype != DType::i64) return false;
  const size_t rank = r.shape.size();
  if (rank == 0 || r.strides.back() != 1 || (r.shape.back() * es) % 64 != 0) return false;
  for (size_t d = 0; d + 1 < rank; ++d)
    if ((r.strides[d] * es) % 64 != 0) return false;
  return true;
}

void Emitter::store_streaming(const RefCg& r, ValueId value, const std::function<void(const Index&)>& store_at) {
  // Row by row: a row that starts on a 64-byte boundary (every row of an array from the runtime's
  // allocator, whose blocks start on line boundaries) is stored one line-wide vector at a time,
  // non-temporally; any other falls back to the regular loop. With short rows far apart, the
  // sources of the block's shape are prefetched two rows ahead into L2 as well (bench_elementwise's
  // 64 x 1024 blocks: non-temporal stores alone ran at 0.67-1.02x the plain streaming loop, with
  // the prefetches at 1.0-1.44x; one row ahead into L1 was slower). A prefetch never faults, so the
  // reach past the block is harmless.
  std::vector<RefCg> prefetched;
  if (has_short_rows(r))
    for (ValueId w : std::set<ValueId>(tensor(value).views)) {
      const RefCg s = ref(w);
      if (s.shape == r.shape && has_short_rows(s)) prefetched.push_back(s);
    }
  const int64_t es = dtype_size(r.dtype), lanes = 64 / es, cols = r.shape.back();
  llvm::Type* vec_t = llvm::FixedVectorType::get(compute_type(b_, r.dtype), static_cast<unsigned>(lanes));
  const Shape rows(r.shape.begin(), r.shape.end() - 1);
  loop_nest(rows, [&](const Index& row) {
    Index first = row;
    first.push_back(b_.getInt64(0));
    llvm::Value* start = b_.CreatePtrToInt(ref_address(r, first), b_.getInt64Ty());
    llvm::Value* aligned = b_.CreateICmpEQ(b_.CreateAnd(start, b_.getInt64(63)), b_.getInt64(0));
    llvm::BasicBlock* vector_rows = llvm::BasicBlock::Create(ctx_, "stream.row", f_);
    llvm::BasicBlock* scalar_rows = llvm::BasicBlock::Create(ctx_, "stream.unaligned", f_);
    llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "stream.done", f_);
    b_.CreateCondBr(aligned, vector_rows, scalar_rows);
    b_.SetInsertPoint(vector_rows);
    emit_loop(b_, cols / lanes, [&](llvm::Value* chunk) {
      llvm::Value* c0 = b_.CreateMul(chunk, b_.getInt64(lanes));
      for (const RefCg& s : prefetched) {
        Index ahead = row;
        ahead.back() = b_.CreateAdd(ahead.back(), b_.getInt64(2));
        ahead.push_back(c0);
        b_.CreateIntrinsic(llvm::Intrinsic::prefetch, {b_.getPtrTy()},
                           {ref_address(s, ahead), b_.getInt32(0), b_.getInt32(2), b_.getInt32(1)});
      }
      llvm::Value* v = llvm::PoisonValue::get(vec_t);
      for (int64_t l = 0; l < lanes; ++l) {
        Index i = row;
        i.push_back(b_.CreateAdd(c0, b_.getInt64(l)));
        v = b_.CreateInsertElement(v, elem(value, i), b_.getInt64(l));
      }
      Index at = row;
      at.push_back(c0);
      store_nontemporal(b_, v, ref_address(r, at), 64);
    });
    b_.CreateBr(done);
    b_.SetInsertPoint(scalar_rows);
    emit_loop(b_, cols, [&](llvm::Value* c) {
      Index i = row;
      i.push_back(c);
      store_at(i);
    });
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  });
  fence_nontemporal(b_);
}

void Emitter::emit_block_copy(ir::OpId id) {
  const ir::Op& op = fn_.ops[id];
  const ir::BlockCopyOperands operands = ir::block_copy_operands(fn_, op);
  const bool fetch = operands.fetch;
  const RefCg& array = ref(operands.array);
  // An output block written in place is "written back" from a view of the array onto itself: the
  // runtime then records the block for the revisit check and moves nothing (a null block).
  const bool in_place = passes::writes_back_in_place(fn_, op);
  const RefCg& block = ref(operands.block);
  if (!in_place && block.strides != row_major(block.shape))
    throw InternalError("codegen", "a pipeline block buffer must be contiguous", ir::print_op(fn_, id));
  if (!in_place) flush_readers(fetch ? block.root : array.root);
  // The runtime reads the Bounded dims' sizes after the starts (they follow them in the operands).
  llvm::Value* starts = i64_starts(ir::OperandSpan(operands.starts.data(), operands.starts.size() + operands.sizes.size()));
  llvm::Value* sem = operands.sem != ir::kNone ? ref(operands.sem).base : llvm::ConstantPointerNull::get(b_.getPtrTy());
  llvm::Value* opid = b_.getInt32(static_cast<int32_t>(id));
  llvm::Value* strides = i64_array(array.strides);
  check(fetch ? b_.CreateCall(rt_fetch_, {core_, opid, array.base, strides, block.base, starts, sem})
              : b_.CreateCall(rt_writeback_, {core_, opid, in_place ? llvm::ConstantPointerNull::get(b_.getPtrTy()) : block.base,
                                              array.base, strides, starts, sem}));
  used(op);
}

void Emitter::emit_block_view(ir::OpId id) {
  const ir::Op& op = fn_.ops[id];
  const ir::WindowOperands operands = ir::window_operands(op);
  const RefCg array = ref(operands.ref);
  const Type t = fn_.type(op.results[0]);
  const size_t rank = array.shape.size();
  llvm::Value* bad = b_.getFalse();
  llvm::Value* offset = b_.getInt64(0);
  for (size_t d = 0; d < rank; ++d) {
    llvm::Value* start = b_.CreateSExt(tensor(operands.starts[d]).scalar, b_.getInt64Ty());
    // rt::block_start_valid: in a zero-size dim the one valid start is 0.
    bad = b_.CreateOr(bad, b_.CreateOr(b_.CreateICmpSLT(start, b_.getInt64(0)),
                                       b_.CreateICmpSGE(start, b_.getInt64(std::max<int64_t>(array.shape[d], 1)))));
    offset = b_.CreateAdd(offset, b_.CreateMul(start, b_.getInt64(array.strides[d])));
  }
  llvm::BasicBlock* fault = llvm::BasicBlock::Create(ctx_, "block.fault", f_);
  llvm::BasicBlock* ok = llvm::BasicBlock::Create(ctx_, "block.ok", f_);
  b_.CreateCondBr(bad, fault, ok);
  b_.SetInsertPoint(fault);
  llvm::Value* starts = i64_starts(operands.starts);
  b_.CreateCall(rt_block_view_fault_, {core_, b_.getInt32(static_cast<int32_t>(id)), starts});
  b_.CreateBr(abort_);
  b_.SetInsertPoint(ok);
  values_[op.results[0]] =
      RefCg{element_address(b_, array.dtype, array.base, offset), array.dtype, t.shape, array.strides, array.root};
  used(op);
}

}  // namespace tessera::jit::cg
