#include "jit/llvm/codegen.h"

#include <fmt/format.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <functional>
#include <set>
#include <variant>

#include "jit/ir/printer.h"
#include "jit/llvm/codegen_support.h"
#include "jit/llvm/gemm.h"
#include "runtime/block_ops.h"

namespace tessera::jit {

using ir::OpKind;
using ir::ValueId;

namespace {

using Index = std::vector<llvm::Value*>;  // one i64 per dim

// A ref while generating code: a strided window starting at `base`.
struct RefCg {
  llvm::Value* base = nullptr;
  DType dtype = DType::f32;
  Shape shape;
  std::vector<int64_t> strides;  // in elements
  ValueId root = ir::kNone;      // the alloc or parameter it points into
};

// A tensor while generating code.
struct TensorCg {
  enum class Kind {
    Scalar,  // `scalar` holds the compute value
    Buffer,  // contiguous elements of the storage dtype at `buffer`
    Lazy,    // `gen` computes an element from its index where it is used
    Dot,     // a dot_general not yet computed (it may fuse into an accumulating store)
  };
  Kind kind = Kind::Scalar;
  DType dtype = DType::f32;
  Shape shape;
  llvm::Value* scalar = nullptr;
  llvm::Value* buffer = nullptr;
  std::function<llvm::Value*(const Index&)> gen;
  std::vector<ValueId> deps;  // tensors `gen` reads (lazy ones are prepared before a loop nest)
  std::set<ValueId> roots;    // memory (allocs, parameters) `gen` reads, transitively
  std::set<ValueId> views;    // the ref values it loads from
  ir::OpId dot = ir::kNone;
};

using Cg = std::variant<std::monostate, RefCg, TensorCg>;

std::vector<int64_t> row_major(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int64_t d = static_cast<int64_t>(s.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * s[d + 1];
  return st;
}

bool is_comparison(OpKind k) {
  return k == OpKind::Eq || k == OpKind::Ne || k == OpKind::Lt || k == OpKind::Le || k == OpKind::Gt || k == OpKind::Ge;
}

class Emitter {
 public:
  Emitter(const ir::Function& fn, llvm::Module& module, const std::string& symbol)
      : fn_(fn), m_(module), ctx_(module.getContext()), b_(ctx_), entry_b_(ctx_), values_(fn.values.size()),
        uses_(fn.values.size(), 0), nonlocal_use_(fn.values.size(), false) {
    count_uses();
    static_uses_ = uses_;
    llvm::Type* ptr = b_.getPtrTy();
    auto* type = llvm::FunctionType::get(b_.getVoidTy(), {ptr, b_.getInt64Ty(), b_.getInt64Ty(), ptr}, false);
    f_ = llvm::Function::Create(type, llvm::Function::ExternalLinkage, symbol, module);
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

  void run() {
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

 private:
  // ---- setup ----

  void count_uses() {
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

  void declare_runtime() {
    llvm::Type* ptr = b_.getPtrTy();
    llvm::Type* i32 = b_.getInt32Ty();
    llvm::Type* i64 = b_.getInt64Ty();
    auto declare = [&](const char* name, llvm::Type* ret, std::vector<llvm::Type*> args) {
      return m_.getOrInsertFunction(name, llvm::FunctionType::get(ret, args, false));
    };
    rt_grid_point_ = declare("tessera_rt_grid_point", i32, {ptr, i32, ptr});
    rt_failed_ = declare("tessera_rt_failed", i32, {ptr});
    rt_alloc_ = declare("tessera_rt_alloc", ptr, {ptr, i32});
    rt_release_ = declare("tessera_rt_release", i32, {ptr, i32, ptr});
    rt_temp_ = declare("tessera_rt_temp", ptr, {ptr, i64});
    rt_ipow_ = declare("tessera_rt_ipow", i64, {i64, i64, i32});
    rt_fetch_ = declare("tessera_rt_fetch_block", i32, {ptr, i32, ptr, ptr, ptr, ptr, ptr});
    rt_writeback_ = declare("tessera_rt_writeback_block", i32, {ptr, i32, ptr, ptr, ptr, ptr, ptr});
    rt_dma_start_ = declare("tessera_rt_dma_start", i32, {ptr, i32, ptr, ptr, ptr, ptr});
    rt_dma_wait_ = declare("tessera_rt_dma_wait", i32, {ptr, i32, ptr});
    rt_sem_signal_ = declare("tessera_rt_semaphore_signal", i32, {ptr, i32, ptr, i32});
    rt_sem_wait_ = declare("tessera_rt_semaphore_wait", i32, {ptr, i32, ptr, i32});
    rt_sem_read_ = declare("tessera_rt_semaphore_read", i32, {ptr, ptr});
    rt_pipeline_begin_ = declare("tessera_rt_pipeline_begin", b_.getVoidTy(), {ptr, i32});
    rt_ready_ = declare("tessera_rt_ready", i32, {ptr});
    rt_remote_dma_ = declare("tessera_rt_remote_dma_start", i32, {ptr, i32, ptr, ptr, ptr, ptr, ptr, ptr});
    rt_remote_signal_ = declare("tessera_rt_remote_signal", i32, {ptr, i32, ptr, i32, ptr});
    rt_axis_index_ = declare("tessera_rt_axis_index", i32, {ptr, i32});
    rt_view_fault_ = declare("tessera_rt_view_fault", b_.getVoidTy(), {ptr, i32, i32, i64});
    rt_block_view_fault_ = declare("tessera_rt_block_view_fault", b_.getVoidTy(), {ptr, i32, ptr});
    rt_print_ = declare("tessera_rt_debug_print", b_.getVoidTy(), {ptr, i32, ptr});
    rt_trace_scope_ = declare("tessera_rt_trace_scope", b_.getVoidTy(), {ptr, i32, i32});
  }

  void bind_params() {
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

  // ---- values ----

  void set_scalar(ValueId v, DType t, llvm::Value* x) {
    TensorCg s;
    s.kind = TensorCg::Kind::Scalar;
    s.dtype = t;
    s.scalar = x;
    values_[v] = std::move(s);
  }
  TensorCg& tensor(ValueId v) { return std::get<TensorCg>(values_.at(v)); }
  RefCg& ref(ValueId v) { return std::get<RefCg>(values_.at(v)); }

  llvm::Value* linear(const Index& idx, const Shape& shape) {
    std::vector<int64_t> st = row_major(shape);
    llvm::Value* off = b_.getInt64(0);
    for (size_t d = 0; d < idx.size(); ++d) off = b_.CreateAdd(off, b_.CreateMul(idx[d], b_.getInt64(st[d])));
    return off;
  }
  llvm::Value* ref_address(const RefCg& r, const Index& idx) {
    llvm::Value* off = b_.getInt64(0);
    for (size_t d = 0; d < idx.size(); ++d) off = b_.CreateAdd(off, b_.CreateMul(idx[d], b_.getInt64(r.strides[d])));
    return element_address(b_, r.dtype, r.base, off);
  }

  // The element of tensor `v` at `idx` (a scalar ignores the index).
  llvm::Value* elem(ValueId v, const Index& idx) {
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

  // A lazy tensor of `type` whose elements come from `gen`, reading the given operand tensors.
  void set_lazy(ValueId v, const Type& type, std::vector<ValueId> deps, std::function<llvm::Value*(const Index&)> gen) {
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

  // Remembers a tensor that reads memory, so that a later store can put it in a temporary first.
  void track(ValueId v) {
    const TensorCg& t = tensor(v);
    if ((t.kind == TensorCg::Kind::Lazy || t.kind == TensorCg::Kind::Dot) && !t.roots.empty()) pending_.back().push_back(v);
  }

  // Scratch of `bytes`, allocated once when the kernel starts.
  llvm::Value* temp(int64_t bytes) {
    return entry_b_.CreateCall(rt_temp_, {core_, entry_b_.getInt64(std::max<int64_t>(bytes, 1))});
  }
  llvm::Value* entry_alloca(llvm::Type* t, int64_t n) {
    return entry_b_.CreateAlloca(t, entry_b_.getInt64(n));
  }

  // Emits a loop nest over `shape`; body(idx) at the innermost level.
  void loop_nest(const Shape& shape, const std::function<void(const Index&)>& body, Index idx = {}) {
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

  // Computes everything a lazy tensor needs (dots, reductions) before a loop nest reads it.
  void prepare(ValueId v) {
    TensorCg& t = tensor(v);
    if (t.kind == TensorCg::Kind::Dot) {
      compute_dot(v, nullptr);
      return;
    }
    if (t.kind != TensorCg::Kind::Lazy) return;
    for (ValueId d : std::vector<ValueId>(t.deps)) prepare(d);
  }

  // Puts a lazy or deferred tensor into a temporary buffer; afterwards it is a Buffer.
  void materialize(ValueId v) {
    TensorCg& t = tensor(v);
    if (t.kind == TensorCg::Kind::Dot) {
      compute_dot(v, nullptr);
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

  // Before an op that writes memory of `root` (or any memory when root is kNone): tensors still to
  // be used that read it are computed now, so they see the memory as it was when they were made.
  void flush_readers(ValueId root, const std::set<ValueId>& except = {}) {
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

  // The tensors a value's lazy computation consists of (itself included).
  void tree(ValueId v, std::set<ValueId>& out) {
    if (!out.insert(v).second) return;
    const TensorCg& t = tensor(v);
    if (t.kind == TensorCg::Kind::Lazy)
      for (ValueId d : t.deps) tree(d, out);
  }

  void used(const ir::Op& op) {
    for (ValueId v : op.operands) --uses_[v];
  }

  // ---- element arithmetic (the runtime's rules, see ops.def) ----

  llvm::Value* nan_of(llvm::Type* t) { return llvm::ConstantFP::getNaN(t); }

  llvm::Value* libm(const char* f32_name, const char* f64_name, DType t, std::vector<llvm::Value*> args) {
    llvm::Type* ty = args[0]->getType();
    std::vector<llvm::Type*> types(args.size(), ty);
    auto callee = m_.getOrInsertFunction(t == DType::f64 ? f64_name : f32_name, llvm::FunctionType::get(ty, types, false));
    return b_.CreateCall(callee, args);
  }
  llvm::Value* intrinsic(llvm::Intrinsic::ID id, std::vector<llvm::Value*> args) {
    llvm::Function* f = llvm::Intrinsic::getDeclaration(&m_, id, {args[0]->getType()});
    return b_.CreateCall(f, args);
  }

  llvm::Value* binary(OpKind k, DType t, llvm::Value* x, llvm::Value* y) {
    const bool fp = is_float(t);
    if (is_comparison(k)) {
      if (fp) {
        switch (k) {
          case OpKind::Eq: return b_.CreateFCmpOEQ(x, y);
          case OpKind::Ne: return b_.CreateFCmpUNE(x, y);
          case OpKind::Lt: return b_.CreateFCmpOLT(x, y);
          case OpKind::Le: return b_.CreateFCmpOLE(x, y);
          case OpKind::Gt: return b_.CreateFCmpOGT(x, y);
          default: return b_.CreateFCmpOGE(x, y);
        }
      }
      const bool u = is_bool(t);
      switch (k) {
        case OpKind::Eq: return b_.CreateICmpEQ(x, y);
        case OpKind::Ne: return b_.CreateICmpNE(x, y);
        case OpKind::Lt: return u ? b_.CreateICmpULT(x, y) : b_.CreateICmpSLT(x, y);
        case OpKind::Le: return u ? b_.CreateICmpULE(x, y) : b_.CreateICmpSLE(x, y);
        case OpKind::Gt: return u ? b_.CreateICmpUGT(x, y) : b_.CreateICmpSGT(x, y);
        default: return u ? b_.CreateICmpUGE(x, y) : b_.CreateICmpSGE(x, y);
      }
    }
    llvm::Value* r = nullptr;
    if (fp) {
      switch (k) {
        case OpKind::Add: r = b_.CreateFAdd(x, y); break;
        case OpKind::Sub: r = b_.CreateFSub(x, y); break;
        case OpKind::Mul: r = b_.CreateFMul(x, y); break;
        case OpKind::Div: r = b_.CreateFDiv(x, y); break;
        case OpKind::Rem: r = b_.CreateFRem(x, y); break;
        case OpKind::Pow: r = libm("powf", "pow", t, {x, y}); break;
        case OpKind::Max:
        case OpKind::Min: {
          llvm::Value* either_nan = b_.CreateOr(b_.CreateFCmpUNO(x, x), b_.CreateFCmpUNO(y, y));
          llvm::Value* pick = k == OpKind::Max ? b_.CreateSelect(b_.CreateFCmpOLT(x, y), y, x)
                                               : b_.CreateSelect(b_.CreateFCmpOLT(y, x), y, x);
          r = b_.CreateSelect(either_nan, nan_of(x->getType()), pick);
          break;
        }
        default: throw InternalError("codegen", fmt::format("`{}` on floats", ir::mnemonic(k)));
      }
      return round_to(b_, t, r);
    }
    llvm::Type* ty = x->getType();
    switch (k) {
      case OpKind::Add: return b_.CreateAdd(x, y);
      case OpKind::Sub: return b_.CreateSub(x, y);
      case OpKind::Mul: return b_.CreateMul(x, y);
      case OpKind::Div:
      case OpKind::Rem: {
        // x / 0 = -1, x % 0 = x, MIN / -1 = MIN, MIN % -1 = 0: no division that traps.
        llvm::Value* zero = b_.CreateICmpEQ(y, llvm::ConstantInt::get(ty, 0));
        llvm::Value* min = llvm::ConstantInt::get(ty, llvm::APInt::getSignedMinValue(ty->getIntegerBitWidth()));
        llvm::Value* overflow = b_.CreateAnd(b_.CreateICmpEQ(x, min), b_.CreateICmpEQ(y, llvm::ConstantInt::get(ty, -1, true)));
        llvm::Value* safe = b_.CreateSelect(b_.CreateOr(zero, overflow), llvm::ConstantInt::get(ty, 1), y);
        if (k == OpKind::Div) {
          llvm::Value* q = b_.CreateSDiv(x, safe);
          return b_.CreateSelect(zero, llvm::ConstantInt::get(ty, -1, true), q);
        }
        llvm::Value* rem = b_.CreateSRem(x, safe);
        return b_.CreateSelect(zero, x, b_.CreateSelect(overflow, llvm::ConstantInt::get(ty, 0), rem));
      }
      case OpKind::Pow: {
        llvm::Value* r64 = b_.CreateCall(rt_ipow_, {b_.CreateSExt(x, b_.getInt64Ty()), b_.CreateSExt(y, b_.getInt64Ty()),
                                                   b_.getInt32(ty->getIntegerBitWidth())});
        return b_.CreateTrunc(r64, ty);
      }
      case OpKind::Max: return b_.CreateSelect(b_.CreateICmpSLT(x, y), y, x);
      case OpKind::Min: return b_.CreateSelect(b_.CreateICmpSLT(y, x), y, x);
      case OpKind::And: return b_.CreateAnd(x, y);
      case OpKind::Or: return b_.CreateOr(x, y);
      case OpKind::Xor: return b_.CreateXor(x, y);
      default: break;
    }
    throw InternalError("codegen", fmt::format("`{}` on integers", ir::mnemonic(k)));
  }

  llvm::Value* unary(OpKind k, DType t, llvm::Value* x) {
    if (!is_float(t)) {
      llvm::Value* zero = llvm::ConstantInt::get(x->getType(), 0);
      switch (k) {
        case OpKind::Neg: return b_.CreateSub(zero, x);
        case OpKind::Abs: return b_.CreateSelect(b_.CreateICmpSLT(x, zero), b_.CreateSub(zero, x), x);
        case OpKind::Not: return b_.CreateNot(x);
        default: throw InternalError("codegen", fmt::format("`{}` on integers", ir::mnemonic(k)));
      }
    }
    llvm::Type* ty = x->getType();
    llvm::Value* one = llvm::ConstantFP::get(ty, 1.0);
    llvm::Value* r = nullptr;
    switch (k) {
      case OpKind::Neg: r = b_.CreateFNeg(x); break;
      case OpKind::Abs: r = intrinsic(llvm::Intrinsic::fabs, {x}); break;
      case OpKind::Exp: r = libm("expf", "exp", t, {x}); break;
      case OpKind::Log: r = libm("logf", "log", t, {x}); break;
      case OpKind::Tanh: r = libm("tanhf", "tanh", t, {x}); break;
      case OpKind::Sin: r = libm("sinf", "sin", t, {x}); break;
      case OpKind::Cos: r = libm("cosf", "cos", t, {x}); break;
      case OpKind::Sqrt: r = intrinsic(llvm::Intrinsic::sqrt, {x}); break;
      case OpKind::Rsqrt: r = b_.CreateFDiv(one, intrinsic(llvm::Intrinsic::sqrt, {x})); break;
      case OpKind::Logistic: r = b_.CreateFDiv(one, b_.CreateFAdd(one, libm("expf", "exp", t, {b_.CreateFNeg(x)}))); break;
      case OpKind::Floor: r = intrinsic(llvm::Intrinsic::floor, {x}); break;
      case OpKind::Ceil: r = intrinsic(llvm::Intrinsic::ceil, {x}); break;
      default: throw InternalError("codegen", fmt::format("`{}` on floats", ir::mnemonic(k)));
    }
    return round_to(b_, t, r);
  }

  // astype: the runtime's conversion rules (saturating float -> int, x != 0 -> bool, RNE rounding).
  llvm::Value* convert(DType from, DType to, llvm::Value* x) {
    if (from == to) return x;
    llvm::Type* dst = compute_type(b_, to);
    if (is_bool(to)) {
      if (is_float(from)) return b_.CreateFCmpUNE(x, llvm::ConstantFP::get(x->getType(), 0.0));
      return b_.CreateICmpNE(x, llvm::ConstantInt::get(x->getType(), 0));
    }
    if (is_float(from)) {
      if (is_float(to)) {
        llvm::Value* y = x;
        if (x->getType() != dst) y = to == DType::f64 ? b_.CreateFPExt(x, dst) : b_.CreateFPTrunc(x, dst);
        return round_to(b_, to, y);
      }
      llvm::Function* sat = llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::fptosi_sat, {dst, x->getType()});
      return b_.CreateCall(sat, {x});
    }
    if (is_float(to)) {
      // Integers go through f32 for the 16-bit floats (as the runtime converts), rounding once more.
      llvm::Value* y = is_bool(from) ? b_.CreateUIToFP(x, dst) : b_.CreateSIToFP(x, dst);
      return round_to(b_, to, y);
    }
    return is_bool(from) ? b_.CreateZExt(x, dst) : b_.CreateSExtOrTrunc(x, dst);
  }

  llvm::Value* constant(const ir::Literal& lit, DType t) {
    // The element the runtime's splat makes, so both backends agree on every literal.
    Array s = rt::splat(lit, t, {});
    if (is_float(t)) return llvm::ConstantFP::get(compute_type(b_, t), s.item());
    if (is_bool(t)) return b_.getInt1(s.item_int() != 0);
    return llvm::ConstantInt::get(compute_type(b_, t), static_cast<uint64_t>(s.item_int()), true);
  }

  // ---- regions and ops ----

  // Emits a region's ops; returns the yielded values' ids (the region's arguments are bound by the caller).
  std::vector<ValueId> emit_region(ir::RegionId r) {
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

  // The allocations of a region end with it: the copies touching them complete and their semaphores
  // must be back at zero (the storage itself stays, allocated once when the kernel starts).
  void release_allocations(ir::RegionId r) {
    if (!tracks_copies_) return;
    std::vector<ir::OpId> allocs;
    for (ir::OpId id : fn_.regions[r].ops)
      if (fn_.ops[id].kind == OpKind::Alloc) allocs.push_back(id);
    if (allocs.empty()) return;
    flush_readers(ir::kNone);
    for (auto it = allocs.rbegin(); it != allocs.rend(); ++it)
      check(b_.CreateCall(rt_release_, {core_, b_.getInt32(static_cast<int32_t>(*it)), ref(fn_.ops[*it].results[0]).base}));
  }

  // The device operands of a remote op (from `first` on) as an i32 array on the stack.
  llvm::Value* device_operands(const ir::Op& op, size_t first) {
    const size_t n = op.operands.size() - first;
    llvm::Value* ids = entry_alloca(b_.getInt32Ty(), static_cast<int64_t>(n));
    for (size_t i = 0; i < n; ++i)
      b_.CreateStore(tensor(op.operands[first + i]).scalar, b_.CreateInBoundsGEP(b_.getInt32Ty(), ids, b_.getInt64(i)));
    return ids;
  }

  // A constant array of i64 in the module (strides the runtime needs).
  llvm::Value* i64_array(const std::vector<int64_t>& values) {
    std::vector<llvm::Constant*> elems;
    for (int64_t v : values) elems.push_back(b_.getInt64(v));
    if (elems.empty()) elems.push_back(b_.getInt64(0));
    auto* type = llvm::ArrayType::get(b_.getInt64Ty(), elems.size());
    return new llvm::GlobalVariable(m_, type, /*isConstant=*/true, llvm::GlobalValue::PrivateLinkage,
                                    llvm::ConstantArray::get(type, elems), "strides");
  }

  // Lazy tensors that are cheap to recompute at every use.
  bool cheap(ValueId v) const {
    const ir::Op* d = fn_.def(v);
    if (!d) return false;
    if (d->kind == OpKind::Constant || d->kind == OpKind::Iota) return true;
    return d->kind == OpKind::BroadcastTo && fn_.type(d->operands[0]).is_scalar();
  }

  void emit_op(ir::OpId id) {
    const ir::Op& op = fn_.ops[id];
    const auto out_type = [&]() { return fn_.type(op.results[0]); };
    switch (op.kind) {
      case OpKind::Constant: {
        const Type t = out_type();
        llvm::Value* c = constant(std::get<ir::Literal>(op.attr), t.dtype);
        if (t.is_scalar()) set_scalar(op.results[0], t.dtype, c);
        else set_lazy(op.results[0], t, {}, [c](const Index&) { return c; });
        return;
      }
      case OpKind::Add:
      case OpKind::Sub:
      case OpKind::Mul:
      case OpKind::Div:
      case OpKind::Rem:
      case OpKind::Pow:
      case OpKind::Max:
      case OpKind::Min:
      case OpKind::And:
      case OpKind::Or:
      case OpKind::Xor:
      case OpKind::Eq:
      case OpKind::Ne:
      case OpKind::Lt:
      case OpKind::Le:
      case OpKind::Gt:
      case OpKind::Ge: {
        const DType t = fn_.type(op.operands[0]).dtype;
        ValueId a = op.operands[0], c = op.operands[1];
        elementwise(op, [this, k = op.kind, t, a, c](const Index& i) { return binary(k, t, elem(a, i), elem(c, i)); });
        return;
      }
      case OpKind::Neg:
      case OpKind::Abs:
      case OpKind::Not:
      case OpKind::Exp:
      case OpKind::Log:
      case OpKind::Tanh:
      case OpKind::Sqrt:
      case OpKind::Rsqrt:
      case OpKind::Logistic:
      case OpKind::Sin:
      case OpKind::Cos:
      case OpKind::Floor:
      case OpKind::Ceil: {
        const DType t = fn_.type(op.operands[0]).dtype;
        ValueId a = op.operands[0];
        elementwise(op, [this, k = op.kind, t, a](const Index& i) { return unary(k, t, elem(a, i)); });
        return;
      }
      case OpKind::Cast: {
        const DType from = fn_.type(op.operands[0]).dtype, to = out_type().dtype;
        ValueId a = op.operands[0];
        elementwise(op, [this, from, to, a](const Index& i) { return convert(from, to, elem(a, i)); });
        return;
      }
      case OpKind::Select: {
        ValueId c = op.operands[0], x = op.operands[1], y = op.operands[2];
        elementwise(op, [this, c, x, y](const Index& i) { return b_.CreateSelect(elem(c, i), elem(x, i), elem(y, i)); });
        return;
      }
      case OpKind::Iota: {
        const Type t = out_type();
        const int64_t axis = std::get<int64_t>(op.attr);
        set_lazy(op.results[0], t, {}, [this, t, axis](const Index& i) { return convert(DType::i64, t.dtype, i[axis]); });
        return;
      }
      case OpKind::BroadcastTo: {
        const Type t = out_type();
        const Shape src = fn_.type(op.operands[0]).shape;
        ValueId a = op.operands[0];
        used(op);
        set_lazy(op.results[0], t, {a}, [this, t, src, a](const Index& i) {
          Index j;
          const size_t lead = t.shape.size() - src.size();
          for (size_t d = 0; d < src.size(); ++d) j.push_back(src[d] == 1 ? b_.getInt64(0) : i[lead + d]);
          return elem(a, j);
        });
        return;
      }
      case OpKind::Transpose: {
        const Type t = out_type();
        const auto perm = std::get<std::vector<int64_t>>(op.attr);
        ValueId a = op.operands[0];
        used(op);
        set_lazy(op.results[0], t, {a}, [this, perm, a](const Index& i) {
          Index j(perm.size());
          for (size_t d = 0; d < perm.size(); ++d) j[perm[d]] = i[d];
          return elem(a, j);
        });
        return;
      }
      case OpKind::Reshape: {
        ValueId a = op.operands[0];
        used(op);
        TensorCg& src = tensor(a);
        if (src.kind == TensorCg::Kind::Scalar) {
          llvm::Value* s = src.scalar;
          set_lazy(op.results[0], out_type(), {}, [s](const Index&) { return s; });
          return;
        }
        materialize(a);
        TensorCg r = tensor(a);
        r.shape = out_type().shape;
        values_[op.results[0]] = r;
        return;
      }
      case OpKind::ReduceSum:
      case OpKind::ReduceMax:
      case OpKind::ReduceMin: reduce(op); return;
      case OpKind::DotGeneral: {
        const Type t = out_type();
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
        return;
      }
      case OpKind::Alloc: {
        const Type t = out_type();
        llvm::Value* p = entry_b_.CreateCall(rt_alloc_, {core_, entry_b_.getInt32(static_cast<int32_t>(id))});
        values_[op.results[0]] = RefCg{p, t.dtype, t.shape, row_major(t.shape), op.results[0]};
        return;
      }
      case OpKind::View: view(id); return;
      case OpKind::Load: load(op); return;
      case OpKind::Store: store(id); return;
      case OpKind::If: emit_if(op); return;
      case OpKind::For: emit_for(op); return;
      case OpKind::Scope: emit_scope(op); return;
      case OpKind::DmaStart: {
        const RefCg& src = ref(op.operands[0]);
        const RefCg& dst = ref(op.operands[1]);
        flush_readers(dst.root);  // tensors still to be read from the destination see it as before
        std::vector<int64_t> strides = src.strides;
        strides.insert(strides.end(), dst.strides.begin(), dst.strides.end());
        check(b_.CreateCall(rt_dma_start_, {core_, b_.getInt32(static_cast<int32_t>(id)), src.base, dst.base,
                                            ref(op.operands[2]).base, i64_array(strides)}));
        used(op);
        return;
      }
      case OpKind::DmaWait:
      case OpKind::SemaphoreWait: {
        // After a wait, memory may hold what copies brought: tensors read before see it as it was.
        flush_readers(ir::kNone);
        llvm::Value* sem = ref(op.operands[0]).base;
        llvm::Value* opid = b_.getInt32(static_cast<int32_t>(id));
        check(op.kind == OpKind::DmaWait ? b_.CreateCall(rt_dma_wait_, {core_, opid, sem})
                                         : b_.CreateCall(rt_sem_wait_, {core_, opid, sem, tensor(op.operands[1]).scalar}));
        used(op);
        return;
      }
      case OpKind::SemaphoreSignal:
        check(b_.CreateCall(rt_sem_signal_, {core_, b_.getInt32(static_cast<int32_t>(id)), ref(op.operands[0]).base,
                                             tensor(op.operands[1]).scalar}));
        used(op);
        return;
      case OpKind::SemaphoreRead:
        used(op);
        set_scalar(op.results[0], DType::i32, b_.CreateCall(rt_sem_read_, {core_, ref(op.operands[0]).base}));
        return;
      case OpKind::RemoteDmaStart: {
        const RefCg& src = ref(op.operands[0]);
        const RefCg& dst = ref(op.operands[1]);
        flush_readers(dst.root);  // the target may be this device
        std::vector<int64_t> strides = src.strides;
        strides.insert(strides.end(), dst.strides.begin(), dst.strides.end());
        check(b_.CreateCall(rt_remote_dma_, {core_, b_.getInt32(static_cast<int32_t>(id)), src.base, dst.base,
                                             ref(op.operands[2]).base, ref(op.operands[3]).base, i64_array(strides),
                                             device_operands(op, 4)}));
        used(op);
        return;
      }
      case OpKind::RemoteSemaphoreSignal:
        check(b_.CreateCall(rt_remote_signal_, {core_, b_.getInt32(static_cast<int32_t>(id)), ref(op.operands[0]).base,
                                                tensor(op.operands[1]).scalar, device_operands(op, 2)}));
        used(op);
        return;
      case OpKind::AxisIndex:
        set_scalar(op.results[0], DType::i32,
                   b_.CreateCall(rt_axis_index_, {core_, b_.getInt32(static_cast<int32_t>(std::get<int64_t>(op.attr)))}));
        return;
      case OpKind::PipelineBegin:
        b_.CreateCall(rt_pipeline_begin_, {core_, b_.getInt32(static_cast<int32_t>(id))});
        return;
      case OpKind::GridPoint: {
        llvm::Value* ids = entry_alloca(b_.getInt32Ty(), std::max<int64_t>(1, static_cast<int64_t>(op.operands.size())));
        for (size_t i = 0; i < op.operands.size(); ++i)
          b_.CreateStore(tensor(op.operands[i]).scalar, b_.CreateInBoundsGEP(b_.getInt32Ty(), ids, b_.getInt64(i)));
        check(b_.CreateCall(rt_grid_point_, {core_, b_.getInt32(static_cast<int32_t>(id)), ids}));
        used(op);
        return;
      }
      case OpKind::FetchBlock:
      case OpKind::WritebackBlock: {
        const bool fetch = op.kind == OpKind::FetchBlock;
        const RefCg& array = ref(op.operands[fetch ? 0 : 1]);
        const RefCg& block = ref(op.operands[fetch ? 1 : 0]);
        if (block.strides != row_major(block.shape))
          throw InternalError("codegen", "a pipeline block buffer must be contiguous", ir::print_op(fn_, id));
        flush_readers(fetch ? block.root : array.root);
        const size_t rank = array.shape.size();
        llvm::Value* starts = entry_alloca(b_.getInt32Ty(), std::max<int64_t>(1, static_cast<int64_t>(rank)));
        for (size_t i = 0; i < rank; ++i)
          b_.CreateStore(tensor(op.operands[2 + i]).scalar, b_.CreateInBoundsGEP(b_.getInt32Ty(), starts, b_.getInt64(i)));
        llvm::Value* sem = op.operands.size() > 2 + rank ? ref(op.operands[2 + rank]).base
                                                         : llvm::ConstantPointerNull::get(b_.getPtrTy());
        llvm::Value* opid = b_.getInt32(static_cast<int32_t>(id));
        llvm::Value* strides = i64_array(array.strides);
        check(fetch ? b_.CreateCall(rt_fetch_, {core_, opid, array.base, strides, block.base, starts, sem})
                    : b_.CreateCall(rt_writeback_, {core_, opid, block.base, array.base, strides, starts, sem}));
        used(op);
        return;
      }
      case OpKind::BlockView: {
        const RefCg array = ref(op.operands[0]);
        const Type t = out_type();
        const size_t rank = array.shape.size();
        llvm::Value* bad = b_.getFalse();
        llvm::Value* offset = b_.getInt64(0);
        for (size_t d = 0; d < rank; ++d) {
          llvm::Value* start = b_.CreateSExt(tensor(op.operands[1 + d]).scalar, b_.getInt64Ty());
          bad = b_.CreateOr(bad, b_.CreateOr(b_.CreateICmpSLT(start, b_.getInt64(0)),
                                             b_.CreateICmpSGE(start, b_.getInt64(array.shape[d]))));
          offset = b_.CreateAdd(offset, b_.CreateMul(start, b_.getInt64(array.strides[d])));
        }
        llvm::BasicBlock* fault = llvm::BasicBlock::Create(ctx_, "block.fault", f_);
        llvm::BasicBlock* ok = llvm::BasicBlock::Create(ctx_, "block.ok", f_);
        b_.CreateCondBr(bad, fault, ok);
        b_.SetInsertPoint(fault);
        llvm::Value* starts = entry_alloca(b_.getInt32Ty(), std::max<int64_t>(1, static_cast<int64_t>(rank)));
        for (size_t d = 0; d < rank; ++d)
          b_.CreateStore(tensor(op.operands[1 + d]).scalar, b_.CreateInBoundsGEP(b_.getInt32Ty(), starts, b_.getInt64(d)));
        b_.CreateCall(rt_block_view_fault_, {core_, b_.getInt32(static_cast<int32_t>(id)), starts});
        b_.CreateBr(abort_);
        b_.SetInsertPoint(ok);
        values_[op.results[0]] =
            RefCg{element_address(b_, array.dtype, array.base, offset), array.dtype, t.shape, array.strides, array.root};
        used(op);
        return;
      }
      case OpKind::TraceStart:
      case OpKind::TraceStop:
        b_.CreateCall(rt_trace_scope_, {core_, b_.getInt32(static_cast<int32_t>(id)),
                                        b_.getInt32(op.kind == OpKind::TraceStart ? 1 : 0)});
        return;
      case OpKind::DebugPrint: {
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
        return;
      }
      case OpKind::ProgramId:
      case OpKind::NumPrograms:
      case OpKind::Pipeline:
      case OpKind::Yield: break;
    }
    throw InternalError("codegen", fmt::format("`{}` must be lowered before code generation", ir::mnemonic(op.kind)),
                        ir::print_op(fn_, id));
  }

  // Branches to the kernel's exit when a runtime call reported a failure.
  void check(llvm::Value* status) {
    llvm::BasicBlock* ok = llvm::BasicBlock::Create(ctx_, "ok", f_);
    check(b_, status, ok);
    b_.SetInsertPoint(ok);
  }
  void check(llvm::IRBuilderBase& b, llvm::Value* status, llvm::BasicBlock* ok) {
    b.CreateCondBr(b.CreateICmpNE(status, b.getInt32(0)), abort_, ok);
  }

  // An element-wise op: a scalar when every operand is one, else a lazy tensor.
  void elementwise(const ir::Op& op, std::function<llvm::Value*(const Index&)> gen) {
    used(op);
    const Type t = fn_.type(op.results[0]);
    if (t.is_scalar()) {
      set_scalar(op.results[0], t.dtype, gen({}));
      return;
    }
    set_lazy(op.results[0], t, op.operands, std::move(gen));
  }

  void view(ir::OpId id) {
    const ir::Op& op = fn_.ops[id];
    const RefCg src = ref(op.operands[0]);
    const auto& attr = std::get<ir::ViewAttr>(op.attr);
    RefCg out{nullptr, src.dtype, {}, {}, src.root};
    llvm::Value* offset = b_.getInt64(0);
    for (size_t d = 0; d < attr.dims.size(); ++d) {
      const ir::ViewDim& dim = attr.dims[d];
      llvm::Value* start = b_.CreateSExt(tensor(op.operands[1 + d]).scalar, b_.getInt64Ty());
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

  void load(const ir::Op& op) {
    const ValueId rv = op.operands[0];
    const RefCg r = ref(rv);
    const Type t = fn_.type(op.results[0]);
    used(op);
    if (t.is_scalar() && op.operands.size() == 1) {
      set_scalar(op.results[0], t.dtype, load_element(b_, r.dtype, r.base));
      return;
    }
    std::vector<ValueId> deps(op.operands.begin() + 1, op.operands.end());
    const bool masked = op.operands.size() > 1;
    const ValueId mask = masked ? op.operands[1] : ir::kNone;
    const ValueId other = op.operands.size() > 2 ? op.operands[2] : ir::kNone;
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

  // The accumulate-into-ref pattern: store(r, add(load(r), dot)) or store(r, dot), f32.
  bool store_dot(const ir::Op& op) {
    if (op.operands.size() != 2) return false;
    const ValueId target = op.operands[0], value = op.operands[1];
    const RefCg& r = ref(target);
    if (r.dtype != DType::f32 || r.shape.size() != 2 || r.strides[1] != 1) return false;
    if (static_uses_[value] != 1) return false;
    auto is_deferred_dot = [&](ValueId v) {
      const Cg& cg = values_[v];
      return std::holds_alternative<TensorCg>(cg) && std::get<TensorCg>(cg).kind == TensorCg::Kind::Dot &&
             std::get<TensorCg>(cg).dtype == DType::f32 && static_uses_[v] == 1;
    };
    auto is_load_of_target = [&](ValueId v) {
      const ir::Op* d = fn_.def(v);
      return d && d->kind == OpKind::Load && d->operands.size() == 1 && d->operands[0] == target && static_uses_[v] == 1;
    };
    ValueId dot = ir::kNone;
    bool accumulate = false;
    if (is_deferred_dot(value)) {
      dot = value;
    } else {
      const ir::Op* add = fn_.def(value);
      if (!add || add->kind != OpKind::Add) return false;
      for (int s = 0; s < 2; ++s)
        if (is_load_of_target(add->operands[s]) && is_deferred_dot(add->operands[1 - s])) {
          dot = add->operands[1 - s];
          accumulate = true;
        }
      if (dot == ir::kNone) return false;
      uses_[add->operands[0]] = uses_[add->operands[1]] = 0;
    }
    // The dot's operands must not read the target (the GEMM writes it while reading them).
    if (tensor(dot).roots.count(r.root)) return false;
    std::set<ValueId> mine;
    tree(value, mine);
    flush_readers(r.root, mine);
    compute_dot(dot, &r, accumulate);
    uses_[dot] = 0;
    used(op);
    return true;
  }

  void store(ir::OpId id) {
    const ir::Op& op = fn_.ops[id];
    if (store_dot(op)) return;
    const ValueId target = op.operands[0], value = op.operands[1];
    const RefCg r = ref(target);
    std::set<ValueId> mine;
    tree(value, mine);
    if (op.operands.size() > 2) tree(op.operands[2], mine);
    // Reading another window of the memory being written while writing it element by element could
    // read elements this store already changed: compute the value first then.
    const TensorCg& vt = tensor(value);
    bool hazard = false;
    if (vt.roots.count(r.root))
      for (ValueId w : vt.views) hazard |= w != target;
    if (hazard) materialize(value);
    flush_readers(r.root, mine);
    prepare(value);
    if (op.operands.size() > 2) prepare(op.operands[2]);
    const ValueId mask = op.operands.size() > 2 ? op.operands[2] : ir::kNone;
    loop_nest(r.shape, [&](const Index& i) {
      llvm::Value* address = ref_address(r, i);
      llvm::Value* v = elem(value, i);
      if (mask != ir::kNone) v = b_.CreateSelect(elem(mask, i), v, load_element(b_, r.dtype, address));
      store_element(b_, r.dtype, address, v);
    });
    used(op);
  }

  // A matrix view of a tensor for the GEMM: in place when it is a plain load of a row-major window,
  // else from a temporary. `rows` x `cols` with the given element order (d0 = rows dim).
  MatrixOperand matrix(ValueId v) {
    const ir::Op* d = fn_.def(v);
    const TensorCg& t = tensor(v);
    if (t.kind == TensorCg::Kind::Lazy && d && d->kind == OpKind::Load && d->operands.size() == 1) {
      const RefCg& r = ref(d->operands[0]);
      if (r.shape.size() == 2 && r.strides[1] == 1) return MatrixOperand{r.base, r.dtype, r.strides[0]};
    }
    materialize(v);
    const TensorCg& m = tensor(v);
    return MatrixOperand{m.buffer, m.dtype, m.shape.size() == 2 ? m.shape[1] : 1};
  }

  // The lhs of a GEMM as a dense f32 matrix, packed at most once per kernel run when it is read in
  // place from a kernel parameter. Parameters do not change while a kernel runs (inputs are
  // read-only, outputs are only written back, never loaded), so a block packed once stays valid;
  // across grid steps the same lhs block recurs (a matmul's A(i, k) for every j), and a small
  // direct-mapped cache keyed by its address turns those repacks into lookups.
  MatrixOperand cached_dense_lhs(ValueId lhs, const MatrixOperand& a, int64_t m, int64_t k) {
    const ir::Op* d = fn_.def(lhs);
    if (!d || d->kind != OpKind::Load || d->operands.size() != 1) return a;
    const RefCg& r = ref(d->operands[0]);
    const ir::ValueInfo& root = fn_.values[r.root];
    if (root.def != ir::kNone || a.ptr != r.base) return a;  // not a parameter read in place
    if (a.dtype == DType::f32 && a.ld == k) return a;        // already dense
    const int64_t bytes = m * k * 4;
    int64_t slots = 1;  // a power of two, up to 16 blocks or 2 MiB
    while (slots < 16 && 2 * slots * bytes <= (int64_t{2} << 20)) slots *= 2;
    llvm::Value* keys = entry_alloca(b_.getPtrTy(), slots);
    for (int64_t s = 0; s < slots; ++s)
      entry_b_.CreateStore(llvm::ConstantPointerNull::get(b_.getPtrTy()),
                           entry_b_.CreateInBoundsGEP(entry_b_.getPtrTy(), keys, entry_b_.getInt64(s)));
    llvm::Value* buffers = temp(slots * bytes);
    // Blocks side by side along a row of A start k elements apart: consecutive slots.
    llvm::Value* slot = b_.CreateAnd(
        b_.CreateUDiv(b_.CreatePtrToInt(a.ptr, b_.getInt64Ty()), b_.getInt64(k * dtype_size(a.dtype))),
        b_.getInt64(slots - 1));
    llvm::Value* key_slot = b_.CreateInBoundsGEP(b_.getPtrTy(), keys, slot);
    llvm::Value* dense = b_.CreateInBoundsGEP(b_.getFloatTy(), buffers, b_.CreateMul(slot, b_.getInt64(m * k)));
    llvm::BasicBlock* pack = llvm::BasicBlock::Create(ctx_, "pack.a", f_);
    llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "pack.a.done", f_);
    b_.CreateCondBr(b_.CreateICmpNE(b_.CreateLoad(b_.getPtrTy(), key_slot), a.ptr), pack, done);
    b_.SetInsertPoint(pack);
    emit_pack_dense_f32(b_, a, dense, m, k);
    b_.CreateStore(a.ptr, key_slot);
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
    return MatrixOperand{dense, DType::f32, k};
  }

  // Computes a deferred dot_general: into `into` (an f32 2-D ref, accumulating or not), or into a
  // temporary that the tensor then holds.
  void compute_dot(ValueId v, const RefCg* into, bool accumulate = false) {
    TensorCg& t = tensor(v);
    const ir::Op& op = fn_.ops[t.dot];
    const auto& dims = std::get<ir::DotAttr>(op.attr);
    ValueId lhs = op.operands[0], rhs = op.operands[1];
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
    const bool simple = B == 1 && lt.rank() == 2 && rt_.rank() == 2 && dims.lhs_contract == std::vector<int64_t>{1} &&
                        dims.rhs_contract == std::vector<int64_t>{0};
    std::vector<MatrixOperand> a_ops, b_ops;
    if (simple) {
      a_ops.push_back(matrix(lhs));
      b_ops.push_back(matrix(rhs));
      if (acc == DType::f32 && N >= kGemmPanel) a_ops[0] = cached_dense_lhs(lhs, a_ops[0], M, K);
    } else {
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
    llvm::Value* packed = acc == DType::f32 && N >= kGemmPanel ? temp(K * (N / kGemmPanel) * kGemmPanel * 4) : nullptr;
    llvm::Value* packed_a = acc == DType::f32 && N >= kGemmPanel ? temp(K * M * 4) : nullptr;
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
      if (acc == DType::f32) emit_gemm_f32(b_, a_ops[bt], b_ops[bt], cb, ldc, M, N, K, accumulate, packed, packed_a);
      else emit_gemm_loops(b_, a_ops[bt], b_ops[bt], cb, ldc, acc, M, N, K, accumulate);
    }
    if (into) return;
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
    values_[v] = std::move(m);
  }

  void reduce(const ir::Op& op) {
    const ValueId src = op.operands[0];
    const Type st = fn_.type(src), t = fn_.type(op.results[0]);
    const auto axes = std::get<std::vector<int64_t>>(op.attr);
    used(op);
    prepare(src);
    const DType dtype = st.dtype;
    llvm::Type* ct = compute_type(b_, dtype);
    const bool fp = ct->isFloatingPointTy();
    std::vector<int64_t> kept;
    Shape reduced;
    for (int64_t d = 0; d < st.rank(); ++d) {
      if (std::find(axes.begin(), axes.end(), d) == axes.end()) kept.push_back(d);
      else reduced.push_back(st.shape[d]);
    }
    llvm::Value* init;
    if (op.kind == OpKind::ReduceSum) init = llvm::Constant::getNullValue(ct);
    else if (fp) init = llvm::ConstantFP::getInfinity(ct, op.kind == OpKind::ReduceMax);
    else if (is_bool(dtype)) init = b_.getInt1(op.kind == OpKind::ReduceMin);
    else init = op.kind == OpKind::ReduceMax ? llvm::ConstantInt::get(ct, llvm::APInt::getSignedMinValue(ct->getIntegerBitWidth()))
                                             : llvm::ConstantInt::get(ct, llvm::APInt::getSignedMaxValue(ct->getIntegerBitWidth()));
    llvm::Value* acc_slot = entry_alloca(ct, 1);
    llvm::Value* out = temp(std::max<int64_t>(1, t.num_elements()) * dtype_size(dtype));
    const OpKind kind = op.kind == OpKind::ReduceSum ? OpKind::Add : op.kind == OpKind::ReduceMax ? OpKind::Max : OpKind::Min;
    loop_nest(t.shape, [&](const Index& o) {
      b_.CreateStore(init, acc_slot);
      // The reduced dims in increasing order, innermost last: the runtime's summation order.
      loop_nest(reduced, [&](const Index& r) {
        Index full(st.shape.size());
        for (size_t i = 0; i < kept.size(); ++i) full[kept[i]] = o[i];
        size_t ri = 0;
        for (int64_t d = 0; d < st.rank(); ++d)
          if (std::find(axes.begin(), axes.end(), d) != axes.end()) full[d] = r[ri++];
        llvm::Value* cur = b_.CreateLoad(ct, acc_slot);
        llvm::Value* x = elem(src, full);
        // Floats accumulate in f32 (f64 for f64) without rounding to the dtype until the end.
        llvm::Value* next = fp ? binary(kind, dtype == DType::f64 ? DType::f64 : DType::f32, cur, x)
                               : (is_bool(dtype) ? (kind == OpKind::Min ? b_.CreateAnd(cur, x) : b_.CreateOr(cur, x))
                                                 : binary(kind, dtype, cur, x));
        b_.CreateStore(next, acc_slot);
      });
      llvm::Value* result = round_to(b_, dtype, b_.CreateLoad(ct, acc_slot));
      store_element(b_, dtype, element_address(b_, dtype, out, t.shape.empty() ? b_.getInt64(0) : linear(o, t.shape)), result);
    });
    if (t.is_scalar()) {
      set_scalar(op.results[0], dtype, load_element(b_, dtype, out));
      return;
    }
    TensorCg m;
    m.kind = TensorCg::Kind::Buffer;
    m.dtype = dtype;
    m.shape = t.shape;
    m.buffer = out;
    values_[op.results[0]] = std::move(m);
  }

  // Block values crossing a control-flow boundary live in buffers allocated once.
  llvm::Value* block_slot(const Type& t) { return temp(t.num_elements() * dtype_size(t.dtype)); }
  void copy_into(ValueId v, llvm::Value* slot) {
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
  void bind_buffer(ValueId v, const Type& t, llvm::Value* slot) {
    TensorCg m;
    m.kind = TensorCg::Kind::Buffer;
    m.dtype = t.dtype;
    m.shape = t.shape;
    m.buffer = slot;
    values_[v] = std::move(m);
  }

  void emit_if(const ir::Op& op) {
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

  // run_scoped: the body inline; block results are copied out of memory the scope may reuse.
  void emit_scope(const ir::Op& op) {
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

  void emit_for(const ir::Op& op) {
    flush_readers(ir::kNone);
    const ir::Region& body = fn_.regions[op.regions[0]];
    llvm::Value* lo = tensor(op.operands[0]).scalar;
    llvm::Value* hi = tensor(op.operands[1]).scalar;
    llvm::Value* step = tensor(op.operands[2]).scalar;
    const DType iv_type = fn_.type(op.operands[0]).dtype;
    // Scalars are carried in registers; blocks in a buffer each, updated at the end of every iteration.
    std::vector<llvm::Value*> slots, init;
    for (size_t i = 3; i < op.operands.size(); ++i) {
      const Type t = fn_.type(op.operands[i]);
      if (t.is_block()) {
        llvm::Value* slot = block_slot(t);
        copy_into(op.operands[i], slot);
        slots.push_back(slot);
      } else {
        slots.push_back(nullptr);
        init.push_back(tensor(op.operands[i]).scalar);
      }
    }
    used(op);
    std::vector<llvm::Value*> final = emit_loop(b_, lo, hi, step, init, [&](llvm::Value* iv, const std::vector<llvm::Value*>& carried) {
      set_scalar(body.args[0], iv_type, iv);
      size_t s = 0;
      for (size_t i = 0; i < slots.size(); ++i) {
        const Type t = fn_.type(body.args[1 + i]);
        if (slots[i]) bind_buffer(body.args[1 + i], t, slots[i]);
        else set_scalar(body.args[1 + i], t.dtype, carried[s++]);
      }
      pending_.emplace_back();
      std::vector<ValueId> yielded = emit_region(op.regions[0]);
      std::vector<llvm::Value*> next;
      // Compute every new block before overwriting any carried buffer the yields might read (a
      // yield of another carried block is copied aside first).
      std::vector<llvm::Value*> staged(slots.size(), nullptr);
      for (size_t i = 0; i < slots.size(); ++i)
        if (slots[i]) {
          const TensorCg& y = tensor(yielded[i]);
          if (y.kind == TensorCg::Kind::Buffer && y.buffer == slots[i]) continue;
          materialize(yielded[i]);
          staged[i] = tensor(yielded[i]).buffer;
          if (std::find(slots.begin(), slots.end(), staged[i]) != slots.end()) {
            const Type t = fn_.type(body.args[1 + i]);
            llvm::Value* aside = block_slot(t);
            b_.CreateMemCpy(aside, llvm::MaybeAlign(), staged[i], llvm::MaybeAlign(), t.num_elements() * dtype_size(t.dtype));
            staged[i] = aside;
          }
        }
      for (size_t i = 0; i < slots.size(); ++i) {
        if (slots[i]) {
          if (staged[i]) {
            const Type t = fn_.type(body.args[1 + i]);
            b_.CreateMemCpy(slots[i], llvm::MaybeAlign(), staged[i], llvm::MaybeAlign(), t.num_elements() * dtype_size(t.dtype));
          }
        } else {
          next.push_back(tensor(yielded[i]).scalar);
        }
      }
      pending_.pop_back();
      return next;
    });
    size_t s = 0;
    for (size_t i = 0; i < op.results.size(); ++i) {
      const Type t = fn_.type(op.results[i]);
      if (slots[i]) bind_buffer(op.results[i], t, slots[i]);
      else set_scalar(op.results[i], t.dtype, final[s++]);
    }
  }

  const ir::Function& fn_;
  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  llvm::IRBuilder<> entry_b_;  // allocations and stack slots, made once when the kernel starts
  llvm::Function* f_ = nullptr;
  llvm::Value* core_ = nullptr;
  llvm::BasicBlock* entry_ = nullptr;
  llvm::BasicBlock* body_ = nullptr;
  llvm::BasicBlock* abort_ = nullptr;
  std::vector<Cg> values_;
  std::vector<int> uses_;           // uses not yet emitted
  std::vector<int> static_uses_;    // uses in the IR
  std::vector<bool> nonlocal_use_;  // used in a region other than its own
  std::vector<std::vector<ValueId>> pending_;  // per open region: tensors that read memory
  bool tracks_copies_ = false;  // the kernel has DMAs or semaphores: allocations are released at region ends
  llvm::FunctionCallee rt_trace_scope_, rt_grid_point_, rt_failed_, rt_alloc_, rt_release_, rt_temp_, rt_ipow_, rt_fetch_, rt_writeback_,
      rt_dma_start_, rt_dma_wait_, rt_sem_signal_, rt_sem_wait_, rt_sem_read_, rt_pipeline_begin_, rt_ready_,
      rt_remote_dma_, rt_remote_signal_, rt_axis_index_, rt_view_fault_, rt_block_view_fault_, rt_print_;
};

}  // namespace

void emit_kernel(const ir::Function& fn, llvm::Module& module, const std::string& symbol) {
  Emitter(fn, module, symbol).run();
}

}  // namespace tessera::jit
