// Control flow: if, for and while (with carried values) and run_scoped regions. Scalars cross region boundaries
// in registers (phis, loop-carried values); blocks in buffers allocated once when the kernel starts.
#include <algorithm>

#include "jit/llvm/codegen_state.h"

namespace tessera::jit::cg {

void Emitter::copy_into(ValueId v, llvm::Value* slot) {
  prepare(v);
  const TensorCg& t = tensor(v);
  if (t.kind == TensorCg::Kind::Buffer && t.buffer == slot) return;
  const DType dtype = t.dtype;
  const Shape shape = t.shape;
  if (t.kind == TensorCg::Kind::Buffer) {
    b_.CreateMemCpy(slot, llvm::MaybeAlign(), t.buffer, llvm::MaybeAlign(), num_elements(shape) * dtype_size(dtype));
    return;
  }
  loop_nest(shape, [&](const Index& i) {
    store_element(b_, dtype, element_address(b_, dtype, slot, linear(i, shape)), elem(v, i));
  });
}

void Emitter::bind_buffer(ValueId v, const Type& t, llvm::Value* slot) {
  TensorCg m;
  m.kind = TensorCg::Kind::Buffer;
  m.dtype = t.dtype;
  m.shape = t.shape;
  m.buffer = slot;
  values_[v] = std::move(m);
}

void Emitter::emit_if(const ir::Op& op) {
  flush_readers(ir::kNone);
  used(op);
  std::vector<llvm::Value*> slots;
  for (ValueId r : op.results) slots.push_back(fn_.type(r).is_block() ? block_slot(fn_.type(r)) : nullptr);
  llvm::BasicBlock* then_bb = llvm::BasicBlock::Create(ctx_, "then", f_);
  llvm::BasicBlock* else_bb = llvm::BasicBlock::Create(ctx_, "else", f_);
  llvm::BasicBlock* merge = llvm::BasicBlock::Create(ctx_, "endif", f_);
  b_.CreateCondBr(tensor(op.operands[0]).scalar, then_bb, else_bb);
  std::vector<std::pair<std::vector<llvm::Value*>, llvm::BasicBlock*>> incoming;
  for (int branch = 0; branch < 2; ++branch) {
    b_.SetInsertPoint(branch == 0 ? then_bb : else_bb);
    pending_.emplace_back();
    std::vector<ValueId> yielded = emit_region(op.regions[branch]);
    std::vector<llvm::Value*> scalars;
    for (size_t i = 0; i < yielded.size(); ++i) {
      if (slots[i]) copy_into(yielded[i], slots[i]);
      else scalars.push_back(tensor(yielded[i]).scalar);
    }
    pending_.pop_back();
    incoming.emplace_back(scalars, b_.GetInsertBlock());
    b_.CreateBr(merge);
  }
  b_.SetInsertPoint(merge);
  size_t s = 0;
  for (size_t i = 0; i < op.results.size(); ++i) {
    const Type t = fn_.type(op.results[i]);
    if (slots[i]) {
      bind_buffer(op.results[i], t, slots[i]);
      continue;
    }
    llvm::PHINode* phi = b_.CreatePHI(compute_type(b_, t.dtype), 2);
    for (auto& [vals, bb] : incoming) phi->addIncoming(vals[s], bb);
    set_scalar(op.results[i], t.dtype, phi);
    ++s;
  }
}

void Emitter::emit_scope(const ir::Op& op) {
  used(op);
  pending_.emplace_back();
  std::vector<ValueId> yielded = emit_region(op.regions[0]);
  for (size_t i = 0; i < op.results.size(); ++i) {
    const Type t = fn_.type(op.results[i]);
    if (t.is_block()) {
      llvm::Value* slot = block_slot(t);
      copy_into(yielded[i], slot);
      bind_buffer(op.results[i], t, slot);
    } else {
      set_scalar(op.results[i], t.dtype, tensor(yielded[i]).scalar);
    }
  }
  pending_.pop_back();
}

std::vector<llvm::Value*> Emitter::carry_in(ir::OperandSpan inits, std::vector<llvm::Value*>& slots) {
  std::vector<llvm::Value*> scalars;
  for (ValueId init : inits) {
    const Type t = fn_.type(init);
    if (t.is_block()) {
      llvm::Value* slot = block_slot(t);
      copy_into(init, slot);
      slots.push_back(slot);
    } else {
      slots.push_back(nullptr);
      scalars.push_back(tensor(init).scalar);
    }
  }
  return scalars;
}

void Emitter::bind_carried(ir::OperandSpan args, const std::vector<llvm::Value*>& slots,
                           const std::vector<llvm::Value*>& scalars) {
  size_t s = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    const Type t = fn_.type(args[i]);
    if (slots[i]) bind_buffer(args[i], t, slots[i]);
    else set_scalar(args[i], t.dtype, scalars[s++]);
  }
}

std::vector<llvm::Value*> Emitter::carry_out(const std::vector<ValueId>& yielded, const std::vector<llvm::Value*>& slots) {
  // Compute every new block before overwriting any carried buffer the yields might read (a yield of
  // another carried block is copied aside first).
  std::vector<llvm::Value*> staged(slots.size(), nullptr);
  for (size_t i = 0; i < slots.size(); ++i)
    if (slots[i]) {
      const TensorCg& y = tensor(yielded[i]);
      if (y.kind == TensorCg::Kind::Buffer && y.buffer == slots[i]) continue;
      materialize(yielded[i]);
      staged[i] = tensor(yielded[i]).buffer;
      if (std::find(slots.begin(), slots.end(), staged[i]) != slots.end()) {
        const Type t = fn_.type(yielded[i]);
        llvm::Value* aside = block_slot(t);
        b_.CreateMemCpy(aside, llvm::MaybeAlign(), staged[i], llvm::MaybeAlign(), t.num_elements() * dtype_size(t.dtype));
        staged[i] = aside;
      }
    }
  std::vector<llvm::Value*> next;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i]) {
      if (staged[i]) {
        const Type t = fn_.type(yielded[i]);
        b_.CreateMemCpy(slots[i], llvm::MaybeAlign(), staged[i], llvm::MaybeAlign(), t.num_elements() * dtype_size(t.dtype));
      }
    } else {
      next.push_back(tensor(yielded[i]).scalar);
    }
  }
  return next;
}

void Emitter::emit_for(const ir::Op& op) {
  flush_readers(ir::kNone);
  const ir::Region& body = fn_.regions[op.regions[0]];
  const ir::ForOperands operands = ir::for_operands(op);
  llvm::Value* lo = tensor(operands.lb).scalar;
  llvm::Value* hi = tensor(operands.ub).scalar;
  llvm::Value* step = tensor(operands.step).scalar;
  const DType iv_type = fn_.type(operands.lb).dtype;
  std::vector<llvm::Value*> slots;
  const std::vector<llvm::Value*> init = carry_in(operands.inits, slots);
  used(op);
  std::vector<llvm::Value*> final = emit_loop(b_, lo, hi, step, init, [&](llvm::Value* iv, const std::vector<llvm::Value*>& carried) {
    set_scalar(body.args[0], iv_type, iv);
    bind_carried(ir::OperandSpan(body.args).subspan(1), slots, carried);
    pending_.emplace_back();
    std::vector<llvm::Value*> next = carry_out(emit_region(op.regions[0]), slots);
    pending_.pop_back();
    return next;
  });
  bind_carried(op.results, slots, final);  // the results: the final carried values
}

void Emitter::emit_while(const ir::Op& op) {
  flush_readers(ir::kNone);
  std::vector<llvm::Value*> slots;
  const std::vector<llvm::Value*> init = carry_in(op.operands, slots);
  used(op);
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  llvm::BasicBlock* header = llvm::BasicBlock::Create(ctx_, "while", f_);
  llvm::BasicBlock* body_bb = llvm::BasicBlock::Create(ctx_, "while.body", f_);
  llvm::BasicBlock* exit = llvm::BasicBlock::Create(ctx_, "while.exit", f_);
  b_.CreateBr(header);
  b_.SetInsertPoint(header);
  std::vector<llvm::PHINode*> phis;
  std::vector<llvm::Value*> carried;
  for (llvm::Value* v : init) {
    phis.push_back(b_.CreatePHI(v->getType(), 2));
    phis.back()->addIncoming(v, pre);
    carried.push_back(phis.back());
  }
  // The condition sees the carried values at the top of every iteration, the first included.
  bind_carried(fn_.regions[op.regions[0]].args, slots, carried);
  pending_.emplace_back();
  llvm::Value* go = tensor(emit_region(op.regions[0]).at(0)).scalar;
  pending_.pop_back();
  b_.CreateCondBr(go, body_bb, exit);
  b_.SetInsertPoint(body_bb);
  bind_carried(fn_.regions[op.regions[1]].args, slots, carried);
  pending_.emplace_back();
  std::vector<llvm::Value*> next = carry_out(emit_region(op.regions[1]), slots);
  pending_.pop_back();
  for (size_t i = 0; i < phis.size(); ++i) phis[i]->addIncoming(next[i], b_.GetInsertBlock());
  b_.CreateBr(header);
  b_.SetInsertPoint(exit);
  bind_carried(op.results, slots, carried);
}

}  // namespace tessera::jit::cg
