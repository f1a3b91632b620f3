// Memory: allocations, ref views, loads and stores, and the block copies and block views of expanded
// pipelines. Loads stay lazy; a store runs the loop nest of the value it writes, after computing the
// pending tensors that read the memory it overwrites.
#include <fmt/format.h>

#include "jit/ir/printer.h"
#include "jit/llvm/codegen_state.h"

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
  RefCg out{nullptr, src.dtype, {}, {}, src.root};
  llvm::Value* offset = b_.getInt64(0);
  for (size_t d = 0; d < attr.dims.size(); ++d) {
    const ir::ViewDim& dim = attr.dims[d];
    llvm::Value* start = b_.CreateSExt(tensor(operands.starts[d]).scalar, b_.getInt64Ty());
    // Bounds: the first and last element of the window must lie inside the source.
    const int64_t reach = dim.squeeze ? 0 : (dim.size - 1) * dim.stride;
    if (dim.squeeze || dim.size > 0) {
      llvm::Value* bad = b_.CreateOr(b_.CreateICmpSLT(start, b_.getInt64(0)),
                                     b_.CreateICmpSGE(b_.CreateAdd(start, b_.getInt64(reach)), b_.getInt64(src.shape[d])));
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
  used(op);
  values_[op.results[0]] = out;
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
  set_lazy(op.results[0], t, deps, [this, r, t, mask, other, poison](const Index& i) -> llvm::Value* {
    llvm::Value* v = load_element(b_, r.dtype, ref_address(r, i));
    if (mask == ir::kNone) return v;
    llvm::Value* alt = other != ir::kNone ? elem(other, i) : poison ? poison : v;
    return b_.CreateSelect(elem(mask, i), v, alt);
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
  loop_nest(r.shape, [&](const Index& i) {
    llvm::Value* address = ref_address(r, i);
    llvm::Value* v = elem(value, i);
    if (mask != ir::kNone) v = b_.CreateSelect(elem(mask, i), v, load_element(b_, r.dtype, address));
    store_element(b_, r.dtype, address, v);
  });
  used(op);
}

void Emitter::emit_block_copy(ir::OpId id) {
  const ir::Op& op = fn_.ops[id];
  const ir::BlockCopyOperands operands = ir::block_copy_operands(fn_, op);
  const bool fetch = operands.fetch;
  const RefCg& array = ref(operands.array);
  const RefCg& block = ref(operands.block);
  if (block.strides != row_major(block.shape))
    throw InternalError("codegen", "a pipeline block buffer must be contiguous", ir::print_op(fn_, id));
  flush_readers(fetch ? block.root : array.root);
  llvm::Value* starts = i64_starts(operands.starts);
  llvm::Value* sem = operands.sem != ir::kNone ? ref(operands.sem).base : llvm::ConstantPointerNull::get(b_.getPtrTy());
  llvm::Value* opid = b_.getInt32(static_cast<int32_t>(id));
  llvm::Value* strides = i64_array(array.strides);
  check(fetch ? b_.CreateCall(rt_fetch_, {core_, opid, array.base, strides, block.base, starts, sem})
              : b_.CreateCall(rt_writeback_, {core_, opid, block.base, array.base, strides, starts, sem}));
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
