// DMAs, semaphores and devices: asynchronous copies, semaphore signals, waits and reads, their
// remote forms, and axis_index. Each is a call into the runtime; waits first compute the pending
// tensors that read memory a copy may have changed.
#include "jit/llvm/codegen_state.h"

namespace tessera::jit::cg {

llvm::Value* Emitter::device_operands(ir::OperandSpan device) {
  const size_t n = device.size();
  llvm::Value* ids = entry_alloca(b_.getInt32Ty(), static_cast<int64_t>(n));
  for (size_t i = 0; i < n; ++i)
    b_.CreateStore(tensor(device[i]).scalar, b_.CreateInBoundsGEP(b_.getInt32Ty(), ids, b_.getInt64(i)));
  return ids;
}

void Emitter::emit_dma_start(ir::OpId id) {
  const ir::Op& op = fn_.ops[id];
  const ir::DmaOperands operands = ir::dma_operands(op);
  const RefCg& src = ref(operands.src);
  const RefCg& dst = ref(operands.dst);
  flush_readers(dst.root);  // tensors still to be read from the destination see it as before
  std::vector<int64_t> strides = src.strides;
  strides.insert(strides.end(), dst.strides.begin(), dst.strides.end());
  check(b_.CreateCall(rt_dma_start_, {core_, b_.getInt32(static_cast<int32_t>(id)), src.base, dst.base,
                                      ref(operands.send_sem).base, i64_array(strides)}));
  used(op);
}

void Emitter::emit_wait(ir::OpId id) {
  const ir::Op& op = fn_.ops[id];
  // After a wait, memory may hold what copies brought: tensors read before see it as it was.
  flush_readers(ir::kNone);
  const ir::SemaphoreOperands operands = ir::semaphore_operands(op);
  llvm::Value* sem = ref(operands.sem).base;
  llvm::Value* opid = b_.getInt32(static_cast<int32_t>(id));
  check(op.kind == OpKind::DmaWait ? b_.CreateCall(rt_dma_wait_, {core_, opid, sem})
                                   : b_.CreateCall(rt_sem_wait_, {core_, opid, sem, tensor(operands.amount).scalar}));
  used(op);
}

void Emitter::emit_semaphore_signal(ir::OpId id) {
  const ir::Op& op = fn_.ops[id];
  const ir::SemaphoreOperands operands = ir::semaphore_operands(op);
  check(b_.CreateCall(rt_sem_signal_, {core_, b_.getInt32(static_cast<int32_t>(id)), ref(operands.sem).base,
                                       tensor(operands.amount).scalar}));
  used(op);
}

void Emitter::emit_semaphore_read(const ir::Op& op) {
  used(op);
  set_scalar(op.results[0], DType::i32, b_.CreateCall(rt_sem_read_, {core_, ref(ir::semaphore_operands(op).sem).base}));
}

void Emitter::emit_remote_dma_start(ir::OpId id) {
  const ir::Op& op = fn_.ops[id];
  const ir::DmaOperands operands = ir::dma_operands(op);
  const RefCg& src = ref(operands.src);
  const RefCg& dst = ref(operands.dst);
  flush_readers(dst.root);  // the target may be this device
  std::vector<int64_t> strides = src.strides;
  strides.insert(strides.end(), dst.strides.begin(), dst.strides.end());
  check(b_.CreateCall(rt_remote_dma_, {core_, b_.getInt32(static_cast<int32_t>(id)), src.base, dst.base,
                                       ref(operands.send_sem).base, ref(operands.recv_sem).base, i64_array(strides),
                                       device_operands(operands.device)}));
  used(op);
}

void Emitter::emit_remote_signal(ir::OpId id) {
  const ir::Op& op = fn_.ops[id];
  const ir::SemaphoreOperands operands = ir::semaphore_operands(op);
  check(b_.CreateCall(rt_remote_signal_, {core_, b_.getInt32(static_cast<int32_t>(id)), ref(operands.sem).base,
                                          tensor(operands.amount).scalar, device_operands(operands.device)}));
  used(op);
}

void Emitter::emit_axis_index(const ir::Op& op) {
  set_scalar(op.results[0], DType::i32,
             b_.CreateCall(rt_axis_index_, {core_, b_.getInt32(static_cast<int32_t>(std::get<int64_t>(op.attr)))}));
}

}  // namespace tessera::jit::cg
