// The code generator's driver: the kernel function and its runtime declarations, the table of
// values (refs, scalars, lazy and deferred tensors), regions, and the dispatch of each op to the file
// that emits its concern (see codegen_state.h).
#include "jit/llvm/codegen.h"

#include <fmt/format.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include "jit/ir/printer.h"
#include "jit/llvm/abi_types.h"
#include "jit/llvm/codegen_state.h"
#include "runtime/memory.h"

namespace tessera::jit {
namespace cg {

Emitter::Emitter(const ir::Function& fn, llvm::Module& module, const std::string& symbol, const CpuTarget& target)
    : fn_(fn), target_(target), m_(module), ctx_(module.getContext()), b_(ctx_), entry_b_(ctx_), values_(fn.values.size()),
      uses_(fn.values.size(), 0), nonlocal_use_(fn.values.size(), false), lane_checked_(rt::lane_checked_views(fn)) {
  count_uses();
  static_uses_ = uses_;
  f_ = llvm::Function::Create(llvm_function_type<rt::KernelFunction>(ctx_), llvm::Function::ExternalLinkage, symbol, module);
  f_->getArg(0)->setName("operands");
  f_->getArg(3)->setName("core");
  f_->addParamAttr(0, llvm::Attribute::NoAlias);
  core_ = f_->getArg(3);
  entry_ = llvm::BasicBlock::Create(ctx_, "entry", f_);
  body_ = llvm::BasicBlock::Create(ctx_, "body", f_);
  llvm::BasicBlock* body = body_;
  abort_ = llvm::BasicBlock::Create(ctx_, "abort", f_);
  entry_b_.SetInsertPoint(entry_);
  b_.SetInsertPoint(abort_);
  b_.CreateRetVoid();
  b_.SetInsertPoint(body);
  declare_runtime();
}

void Emitter::run() {
  bind_params();
  pending_.emplace_back();
  emit_region(fn_.body);
  b_.CreateRetVoid();
  // The entry block holds every allocation; if one failed, stop before the body. A kernel that talks
  // to other devices then tells its collective launch that its memory is there.
  if (ir::communicates(fn_)) {
    llvm::BasicBlock* allocated = llvm::BasicBlock::Create(ctx_, "allocated", f_, body_);
    check(entry_b_, entry_b_.CreateCall(rt_failed_, {core_}), allocated);
    entry_b_.SetInsertPoint(allocated);
    check(entry_b_, entry_b_.CreateCall(rt_ready_, {core_}), body_);
  } else {
    check(entry_b_, entry_b_.CreateCall(rt_failed_, {core_}), body_);
  }
  std::string errors;
  llvm::raw_string_ostream os(errors);
  if (llvm::verifyFunction(*f_, &os))
    throw InternalError("codegen", fmt::format("generated invalid LLVM IR: {}", os.str()), ir::print(fn_));
}

void Emitter::count_uses() {
  for (const ir::Op& op : fn_.ops) {
    switch (op.kind) {
      case OpKind::DmaStart:
      case OpKind::DmaWait:
      case OpKind::SemaphoreSignal:
      case OpKind::SemaphoreWait:
      case OpKind::SemaphoreRead:
      case OpKind::RemoteDmaStart:
      case OpKind::RemoteSemaphoreSignal: tracks_copies_ = true; break;
      case OpKind::Alloc: tracks_copies_ |= is_semaphore(fn_.type(op.results[0]).dtype); break;
      default: break;
    }
  }
  for (const ir::Op& op : fn_.ops)
    for (ValueId v : op.operands) {
      ++uses_[v];
      const ir::ValueInfo& info = fn_.values[v];
      ir::RegionId home = info.def == ir::kNone ? info.region : fn_.ops[info.def].parent;
      if (home != op.parent) nonlocal_use_[v] = true;
    }
}

void Emitter::declare_runtime() {
  // Each with the LLVM type of its C++ declaration (runtime/kernel_abi.def).
  rt_grid_point_ = declare_abi_function(m_, rt::abi::grid_point);
  rt_check_grid_ = declare_abi_function(m_, rt::abi::check_grid);
  rt_failed_ = declare_abi_function(m_, rt::abi::failed);
  rt_alloc_ = declare_abi_function(m_, rt::abi::alloc);
  rt_release_ = declare_abi_function(m_, rt::abi::release);
  rt_temp_ = declare_abi_function(m_, rt::abi::temp);
  rt_ipow_ = declare_abi_function(m_, rt::abi::ipow);
  rt_fetch_ = declare_abi_function(m_, rt::abi::fetch_block);
  rt_writeback_ = declare_abi_function(m_, rt::abi::writeback_block);
  rt_dma_start_ = declare_abi_function(m_, rt::abi::dma_start);
  rt_dma_wait_ = declare_abi_function(m_, rt::abi::dma_wait);
  rt_sem_signal_ = declare_abi_function(m_, rt::abi::semaphore_signal);
  rt_sem_wait_ = declare_abi_function(m_, rt::abi::semaphore_wait);
  rt_sem_read_ = declare_abi_function(m_, rt::abi::semaphore_read);
  rt_pipeline_begin_ = declare_abi_function(m_, rt::abi::pipeline_begin);
  rt_ready_ = declare_abi_function(m_, rt::abi::ready);
  rt_remote_dma_ = declare_abi_function(m_, rt::abi::remote_dma_start);
  rt_remote_signal_ = declare_abi_function(m_, rt::abi::remote_signal);
  rt_axis_index_ = declare_abi_function(m_, rt::abi::axis_index);
  rt_view_fault_ = declare_abi_function(m_, rt::abi::view_fault);
  rt_lane_fault_ = declare_abi_function(m_, rt::abi::masked_lane_fault);
  rt_block_view_fault_ = declare_abi_function(m_, rt::abi::block_view_fault);
  rt_print_ = declare_abi_function(m_, rt::abi::debug_print);
  rt_trace_scope_ = declare_abi_function(m_, rt::abi::trace_scope);
}

void Emitter::bind_params() {
  const auto& params = fn_.params();
  size_t ref = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const Type& t = fn_.type(params[i]);
    if (t.is_ref()) {
      llvm::Value* slot = b_.CreateInBoundsGEP(b_.getPtrTy(), f_->getArg(0), b_.getInt64(static_cast<int64_t>(ref++)));
      values_[params[i]] = RefCg{b_.CreateLoad(b_.getPtrTy(), slot), t.dtype, t.shape, row_major(t.shape), params[i]};
    } else if (t == Type::scalar(DType::index) && i + 2 >= params.size()) {
      set_scalar(params[i], DType::index, f_->getArg(i + 2 == params.size() ? 1 : 2));
    } else {
      throw InternalError("codegen", "kernel parameters must be refs followed by the step range", ir::print(fn_));
    }
  }
}

void Emitter::set_scalar(ValueId v, DType t, llvm::Value* x) {
  TensorCg s;
  s.kind = TensorCg::Kind::Scalar;
  s.dtype = t;
  s.scalar = x;
  values_[v] = std::move(s);
}

llvm::Value* Emitter::linear(const Index& idx, const Shape& shape) {
  std::vector<int64_t> st = row_major(shape);
  llvm::Value* off = b_.getInt64(0);
  for (size_t d = 0; d < idx.size(); ++d) off = b_.CreateAdd(off, b_.CreateMul(idx[d], b_.getInt64(st[d])));
  return off;
}

llvm::Value* Emitter::ref_address(const RefCg& r, const Index& idx) {
  llvm::Value* off = b_.getInt64(0);
  for (size_t d = 0; d < idx.size(); ++d) off = b_.CreateAdd(off, b_.CreateMul(idx[d], b_.getInt64(r.strides[d])));
  return element_address(b_, r.dtype, r.base, off);
}

llvm::Value* Emitter::elem(ValueId v, const Index& idx) {
  TensorCg& t = tensor(v);
  switch (t.kind) {
    case TensorCg::Kind::Scalar: return t.scalar;
    case TensorCg::Kind::Buffer:
      return load_element(b_, t.dtype, element_address(b_, t.dtype, t.buffer, t.shape.empty() ? b_.getInt64(0) : linear(idx, t.shape)));
    case TensorCg::Kind::Lazy: return t.gen(idx);
    case TensorCg::Kind::Dot: break;
  }
  throw InternalError("codegen", "a dot_general was read before it was computed");
}

void Emitter::set_lazy(ValueId v, const Type& type, std::vector<ValueId> deps, std::function<llvm::Value*(const Index&)> gen) {
  TensorCg t;
  t.kind = TensorCg::Kind::Lazy;
  t.dtype = type.dtype;
  t.shape = type.shape;
  t.gen = std::move(gen);
  for (ValueId d : deps) {
    const TensorCg& dt = tensor(d);
    if (dt.kind == TensorCg::Kind::Lazy || dt.kind == TensorCg::Kind::Dot) {
      t.roots.insert(dt.roots.begin(), dt.roots.end());
      t.views.insert(dt.views.begin(), dt.views.end());
    }
  }
  t.deps = std::move(deps);
  values_[v] = std::move(t);
  track(v);
}

void Emitter::track(ValueId v) {
  const TensorCg& t = tensor(v);
  if ((t.kind == TensorCg::Kind::Lazy || t.kind == TensorCg::Kind::Dot) && !t.roots.empty()) pending_.back().push_back(v);
}

llvm::Value* Emitter::temp(int64_t bytes) {
  return entry_b_.CreateCall(rt_temp_, {core_, entry_b_.getInt64(std::max<int64_t>(bytes, 1))});
}

llvm::Value* Emitter::entry_alloca(llvm::Type* t, int64_t n) {
  return entry_b_.CreateAlloca(t, entry_b_.getInt64(n));
}

void Emitter::loop_nest(const Shape& shape, const std::function<void(const Index&)>& body, Index idx) {
  if (idx.size() == shape.size()) {
    body(idx);
    return;
  }
  emit_loop(b_, shape[idx.size()], [&](llvm::Value* i) {
    Index next = idx;
    next.push_back(i);
    loop_nest(shape, body, next);
  });
}

void Emitter::prepare(ValueId v) {
  TensorCg& t = tensor(v);
  if (t.kind == TensorCg::Kind::Dot) {
    compute_dot(v);
    return;
  }
  if (t.kind != TensorCg::Kind::Lazy) return;
  for (ValueId d : std::vector<ValueId>(t.deps)) prepare(d);
}

void Emitter::materialize(ValueId v) {
  TensorCg& t = tensor(v);
  if (t.kind == TensorCg::Kind::Dot) {
    compute_dot(v);
    return;
  }
  if (t.kind != TensorCg::Kind::Lazy) return;
  prepare(v);
  const DType dtype = t.dtype;
  const Shape shape = t.shape;
  llvm::Value* buffer = temp(num_elements(shape) * dtype_size(dtype));
  loop_nest(shape, [&](const Index& idx) {
    store_element(b_, dtype, element_address(b_, dtype, buffer, linear(idx, shape)), elem(v, idx));
  });
  TensorCg m;
  m.kind = TensorCg::Kind::Buffer;
  m.dtype = dtype;
  m.shape = shape;
  m.buffer = buffer;
  values_[v] = std::move(m);
}

void Emitter::flush_readers(ValueId root, const std::set<ValueId>& except) {
  std::vector<ValueId>& pending = pending_.back();
  std::vector<ValueId> keep;
  for (ValueId v : pending) {
    const Cg& cg = values_[v];
    if (!std::holds_alternative<TensorCg>(cg)) continue;
    const TensorCg& t = std::get<TensorCg>(cg);
    if (t.kind != TensorCg::Kind::Lazy && t.kind != TensorCg::Kind::Dot) continue;
    if (uses_[v] == 0) continue;
    if (except.count(v) || (root != ir::kNone && !t.roots.count(root))) {
      keep.push_back(v);
      continue;
    }
    materialize(v);
  }
  pending = std::move(keep);
}

void Emitter::tree(ValueId v, std::set<ValueId>& out) {
  if (!out.insert(v).second) return;
  const TensorCg& t = tensor(v);
  if (t.kind == TensorCg::Kind::Lazy)
    for (ValueId d : t.deps) tree(d, out);
}

void Emitter::used(const ir::Op& op) {
  for (ValueId v : op.operands) --uses_[v];
}

llvm::Value* Emitter::i64_array(const std::vector<int64_t>& values) {
  std::vector<llvm::Constant*> elems;
  for (int64_t v : values) elems.push_back(b_.getInt64(v));
  if (elems.empty()) elems.push_back(b_.getInt64(0));
  auto* type = llvm::ArrayType::get(b_.getInt64Ty(), elems.size());
  return new llvm::GlobalVariable(m_, type, /*isConstant=*/true, llvm::GlobalValue::PrivateLinkage,
                                  llvm::ConstantArray::get(type, elems), "strides");
}

llvm::Value* Emitter::i64_starts(ir::OperandSpan starts) {
  llvm::Value* out = entry_alloca(b_.getInt64Ty(), std::max<int64_t>(1, static_cast<int64_t>(starts.size())));
  for (size_t d = 0; d < starts.size(); ++d)
    b_.CreateStore(b_.CreateSExt(tensor(starts[d]).scalar, b_.getInt64Ty()),
                   b_.CreateInBoundsGEP(b_.getInt64Ty(), out, b_.getInt64(static_cast<int64_t>(d))));
  return out;
}

bool Emitter::cheap(ValueId v, int depth) const {
  const ir::Op* d = fn_.def(v);
  if (!d) return false;
  if (d->kind == OpKind::Constant || d->kind == OpKind::Iota) return true;
  if (d->kind == OpKind::BroadcastTo) return fn_.type(d->operands[0]).is_scalar();
  // Index arithmetic on those (`iota(d) + offset`, a row mask's operand used by both of its bounds'
  // comparisons) costs an integer add or multiply per element where a buffer costs a store and a
  // load: a 128 x 128 i32 buffer filled at every grid step for a mask that a dot then never reads
  // (it sums over the mask's rows, KSpan) took a tenth of megablox tgmm's time.
  const bool index_arithmetic = d->kind == OpKind::Add || d->kind == OpKind::Sub || d->kind == OpKind::Mul;
  if (!index_arithmetic || !is_int(fn_.type(v).dtype) || depth >= 2) return false;
  for (ValueId x : d->operands)
    if (!cheap(x, depth + 1)) return false;
  return true;
}

std::vector<ValueId> Emitter::emit_region(ir::RegionId r) {
  std::vector<ValueId> yielded;
  for (ir::OpId id : fn_.regions[r].ops) {
    const ir::Op& op = fn_.ops[id];
    if (op.kind == OpKind::Yield) {
      yielded = op.operands;
      break;
    }
    emit_op(id);
    for (ValueId res : op.results) {
      const Cg& cg = values_[res];
      if (!std::holds_alternative<TensorCg>(cg)) continue;
      const TensorCg& t = std::get<TensorCg>(cg);
      const bool deferred = t.kind == TensorCg::Kind::Lazy || t.kind == TensorCg::Kind::Dot;
      // Cheap tensors (splat constants, iotas) are recomputed wherever they are used.
      if (deferred && !cheap(res) && (nonlocal_use_[res] || uses_[res] > 1)) materialize(res);
    }
  }
  release_allocations(r);
  return yielded;
}

void Emitter::release_allocations(ir::RegionId r) {
  if (!tracks_copies_) return;
  std::vector<ir::OpId> allocs;
  for (ir::OpId id : fn_.regions[r].ops)
    if (fn_.ops[id].kind == OpKind::Alloc) allocs.push_back(id);
  if (allocs.empty()) return;
  flush_readers(ir::kNone);
  for (auto it = allocs.rbegin(); it != allocs.rend(); ++it)
    check(b_.CreateCall(rt_release_, {core_, b_.getInt32(static_cast<int32_t>(*it)), ref(fn_.ops[*it].results[0]).base}));
}

void Emitter::emit_op(ir::OpId id) {
  const ir::Op& op = fn_.ops[id];
  switch (op.kind) {
    case OpKind::Constant: emit_constant(op); return;
    TESSERA_ARITHMETIC_OPS(TESSERA_OP_CASE)
    TESSERA_COMPARISON_OPS(TESSERA_OP_CASE) emit_binary(op); return;
    TESSERA_UNARY_OPS(TESSERA_OP_CASE) emit_unary(op); return;
    case OpKind::Cast: emit_cast(op); return;
    case OpKind::Select: emit_select(op); return;
    case OpKind::Iota: emit_iota(op); return;
    case OpKind::BroadcastTo: emit_broadcast(op); return;
    case OpKind::Transpose: emit_transpose(op); return;
    case OpKind::Reshape: emit_reshape(op); return;
    case OpKind::Slice: emit_slice(op); return;
    case OpKind::Concatenate: emit_concatenate(op); return;
    case OpKind::Bitcast: emit_bitcast(op); return;
    case OpKind::MultipleOf: emit_multiple_of(op); return;
    case OpKind::ReduceSum:
    case OpKind::ReduceMax:
    case OpKind::ReduceMin: reduce(op); return;
    case OpKind::DotGeneral: defer_dot(id); return;
    case OpKind::DotAccumulate: emit_dot_accumulate(id); return;
    case OpKind::Alloc: emit_alloc(id); return;
    case OpKind::View: view(id); return;
    case OpKind::Load: load(op); return;
    case OpKind::Store: store(id); return;
    case OpKind::FetchBlock:
    case OpKind::WritebackBlock: emit_block_copy(id); return;
    case OpKind::BlockView: emit_block_view(id); return;
    case OpKind::If: emit_if(op); return;
    case OpKind::For: emit_for(op); return;
    case OpKind::While: emit_while(op); return;
    case OpKind::Scope: emit_scope(op); return;
    case OpKind::DmaStart: emit_dma_start(id); return;
    case OpKind::DmaWait:
    case OpKind::SemaphoreWait: emit_wait(id); return;
    case OpKind::SemaphoreSignal: emit_semaphore_signal(id); return;
    case OpKind::SemaphoreRead: emit_semaphore_read(op); return;
    case OpKind::RemoteDmaStart: emit_remote_dma_start(id); return;
    case OpKind::RemoteSemaphoreSignal: emit_remote_signal(id); return;
    case OpKind::AxisIndex: emit_axis_index(op); return;
    case OpKind::PipelineBegin: emit_pipeline_begin(id); return;
    case OpKind::GridPoint: emit_grid_point(id); return;
    case OpKind::CheckGrid: emit_check_grid(id); return;
    case OpKind::TraceStart:
    case OpKind::TraceStop: emit_trace_scope(id); return;
    case OpKind::DebugPrint: emit_debug_print(id); return;
    case OpKind::ProgramId:
    case OpKind::NumPrograms:
    case OpKind::Pipeline:
    case OpKind::Yield: break;
  }
  throw InternalError("codegen", fmt::format("`{}` must be lowered before code generation", ir::mnemonic(op.kind)),
                      ir::print_op(fn_, id));
}

void Emitter::check(llvm::Value* status) {
  llvm::BasicBlock* ok = llvm::BasicBlock::Create(ctx_, "ok", f_);
  check(b_, status, ok);
  b_.SetInsertPoint(ok);
}

void Emitter::check(llvm::IRBuilderBase& b, llvm::Value* status, llvm::BasicBlock* ok) {
  b.CreateCondBr(b.CreateICmpNE(status, b.getInt32(0)), abort_, ok);
}

// An op's scalar operands stored in a stack array of `ty`, for a runtime function to read.
llvm::Value* Emitter::operand_array(const ir::Op& op, llvm::Type* ty) {
  llvm::Value* a = entry_alloca(ty, std::max<int64_t>(1, static_cast<int64_t>(op.operands.size())));
  for (size_t i = 0; i < op.operands.size(); ++i)
    b_.CreateStore(tensor(op.operands[i]).scalar, b_.CreateInBoundsGEP(ty, a, b_.getInt64(i)));
  return a;
}

// The grid sizes go to the runtime, whose rule (runtime/grid_check.h) the interpreter applies too.
void Emitter::emit_check_grid(ir::OpId id) {
  const ir::Op& op = fn_.ops[id];
  llvm::Value* sizes = operand_array(op, b_.getInt64Ty());
  check(b_.CreateCall(rt_check_grid_, {core_, b_.getInt32(static_cast<int32_t>(id)), sizes}));
  used(op);
}

void Emitter::emit_grid_point(ir::OpId id) {
  const ir::Op& op = fn_.ops[id];
  llvm::Value* ids = operand_array(op, b_.getInt32Ty());
  check(b_.CreateCall(rt_grid_point_, {core_, b_.getInt32(static_cast<int32_t>(id)), ids}));
  used(op);
}

void Emitter::emit_pipeline_begin(ir::OpId id) {
  b_.CreateCall(rt_pipeline_begin_, {core_, b_.getInt32(static_cast<int32_t>(id))});
}

void Emitter::emit_trace_scope(ir::OpId id) {
  const ir::Op& op = fn_.ops[id];
  b_.CreateCall(rt_trace_scope_, {core_, b_.getInt32(static_cast<int32_t>(id)),
                                  b_.getInt32(op.kind == OpKind::TraceStart ? 1 : 0)});
}

void Emitter::emit_debug_print(ir::OpId id) {
  const ir::Op& op = fn_.ops[id];
  llvm::Value* ptrs = entry_alloca(b_.getPtrTy(), std::max<int64_t>(1, static_cast<int64_t>(op.operands.size())));
  for (size_t i = 0; i < op.operands.size(); ++i) {
    ValueId v = op.operands[i];
    materialize(v);
    TensorCg& t = tensor(v);
    llvm::Value* p = t.buffer;
    if (t.kind == TensorCg::Kind::Scalar) {
      p = entry_alloca(storage_type(b_, t.dtype), 1);
      store_element(b_, t.dtype, p, t.scalar);
    }
    b_.CreateStore(p, b_.CreateInBoundsGEP(b_.getPtrTy(), ptrs, b_.getInt64(i)));
  }
  b_.CreateCall(rt_print_, {core_, b_.getInt32(static_cast<int32_t>(id)), ptrs});
  used(op);
}

}  // namespace cg

void emit_kernel(const ir::Function& fn, llvm::Module& module, const std::string& symbol, const CpuTarget& target) {
  cg::Emitter(fn, module, symbol, target).run();
}

}  // namespace tessera::jit
