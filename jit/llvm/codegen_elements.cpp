// Element-wise ops, casts, constants, shape ops and reductions: the element rules of
// runtime/element_rules.h as LLVM IR. Each emission names the rule it mirrors;
// tests/dsl/element_rules_test.cpp checks them against the header on edge values. Element-wise
// chains stay lazy (a generator per element) until a store or a reduction consumes them, so a chain
// becomes one loop nest.
#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "jit/ir/printer.h"
#include "jit/llvm/codegen_state.h"
#include "runtime/block_ops.h"
#include "runtime/element_math.h"
#include "runtime/element_rules.h"

namespace tessera::jit::cg {

namespace {

// rules::canonical_nan: the NaN max and min return.
llvm::Value* canonical_nan(llvm::Type* t) {
  if (t->isDoubleTy()) return llvm::ConstantFP::get(t, std::bit_cast<double>(rules::kCanonicalNaN64));
  return llvm::ConstantFP::get(t, std::bit_cast<float>(rules::kCanonicalNaN32));
}

// The arithmetic policy of runtime/element_math.h as IR: each operation is one instruction (fma is
// llvm.fma, which rounds once), with no fast-math flags, so the emitted steps round exactly as the
// interpreter's ScalarMath does, and the loop vectoriser can widen all of them.
struct IrMath {
  using F = llvm::Value*;
  using I = llvm::Value*;
  using B = llvm::Value*;
  llvm::IRBuilderBase& b;
  llvm::Module& m;
  F c(float v) const { return llvm::ConstantFP::get(b.getFloatTy(), v); }
  I ci(int32_t v) const { return b.getInt32(static_cast<uint32_t>(v)); }
  F add(F x, F y) const { return b.CreateFAdd(x, y); }
  F sub(F x, F y) const { return b.CreateFSub(x, y); }
  F mul(F x, F y) const { return b.CreateFMul(x, y); }
  F div(F x, F y) const { return b.CreateFDiv(x, y); }
  F fma(F x, F y, F z) const {
    return b.CreateCall(llvm::Intrinsic::getDeclaration(&m, llvm::Intrinsic::fma, {b.getFloatTy()}), {x, y, z});
  }
  B lt(F x, F y) const { return b.CreateFCmpOLT(x, y); }
  B gt(F x, F y) const { return b.CreateFCmpOGT(x, y); }
  B ge(F x, F y) const { return b.CreateFCmpOGE(x, y); }
  B eq(F x, F y) const { return b.CreateFCmpOEQ(x, y); }
  B isnan(F x) const { return b.CreateFCmpUNO(x, x); }
  B bor(B x, B y) const { return b.CreateOr(x, y); }
  F sel(B p, F x, F y) const { return b.CreateSelect(p, x, y); }
  I seli(B p, I x, I y) const { return b.CreateSelect(p, x, y); }
  I bits(F x) const { return b.CreateBitCast(x, b.getInt32Ty()); }
  F from_bits(I x) const { return b.CreateBitCast(x, b.getFloatTy()); }
  F to_float(I x) const { return b.CreateSIToFP(x, b.getFloatTy()); }
  I iadd(I x, I y) const { return b.CreateAdd(x, y); }
  I isub(I x, I y) const { return b.CreateSub(x, y); }
  I iand(I x, I y) const { return b.CreateAnd(x, y); }
  I ior(I x, I y) const { return b.CreateOr(x, y); }
  I shl(I x, int n) const { return b.CreateShl(x, static_cast<uint64_t>(n)); }
  I sra(I x, int n) const { return b.CreateAShr(x, static_cast<uint64_t>(n)); }
  I lsr(I x, int n) const { return b.CreateLShr(x, static_cast<uint64_t>(n)); }
  I shlv(I x, I n) const { return b.CreateShl(x, n); }
  I lsrv(I x, I n) const { return b.CreateLShr(x, n); }
  I imul(I x, I y) const { return b.CreateMul(x, y); }
  // The high word of the 64-bit product of the zero-extended operands (x86: vpmuludq).
  I umulhi(I x, I y) const {
    llvm::Value* p = b.CreateMul(b.CreateZExt(x, b.getInt64Ty()), b.CreateZExt(y, b.getInt64Ty()));
    return b.CreateTrunc(b.CreateLShr(p, 32), b.getInt32Ty());
  }
  B ieq(I x, I y) const { return b.CreateICmpEQ(x, y); }
  B ult(I x, I y) const { return b.CreateICmpULT(x, y); }
};

}  // namespace

llvm::Value* Emitter::libm(const char* f32_name, const char* f64_name, DType t, std::vector<llvm::Value*> args) {
  llvm::Type* ty = args[0]->getType();
  std::vector<llvm::Type*> types(args.size(), ty);
  auto callee = m_.getOrInsertFunction(t == DType::f64 ? f64_name : f32_name, llvm::FunctionType::get(ty, types, false));
  llvm::CallInst* call = b_.CreateCall(callee, args);
  // The rule is the libm function itself, as the interpreter calls it. As a builtin, LLVM would
  // rewrite calls it can see through: powf(8, y) became exp2f(3 * y), with 3 * y rounded first.
  call->addFnAttr(llvm::Attribute::NoBuiltin);
  return call;
}

llvm::Value* Emitter::intrinsic(llvm::Intrinsic::ID id, std::vector<llvm::Value*> args) {
  llvm::Function* f = llvm::Intrinsic::getDeclaration(&m_, id, {args[0]->getType()});
  return b_.CreateCall(f, args);
}

llvm::Value* Emitter::binary(OpKind k, DType t, llvm::Value* x, llvm::Value* y) {
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
    // Bools and the unsigned types compare as unsigned (rules::int_max and C++'s comparisons on T).
    const bool u = is_bool(t) || is_unsigned(t);
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
      case OpKind::Rem: r = b_.CreateFRem(x, y); break;  // rules::float_rem (fmod)
      case OpKind::Pow: {
        // rules::float_pow: libm's pow, but 1 whenever y == 0 or x == 1.
        llvm::Value* one = llvm::ConstantFP::get(x->getType(), 1.0);
        llvm::Value* trivial =
            b_.CreateOr(b_.CreateFCmpOEQ(y, llvm::ConstantFP::get(y->getType(), 0.0)), b_.CreateFCmpOEQ(x, one));
        r = b_.CreateSelect(trivial, one, libm("powf", "pow", t, {x, y}));
        break;
      }
      case OpKind::Max:
      case OpKind::Min: {
        // rules::float_max / float_min: the canonical NaN if either is NaN; otherwise the larger
        // (smaller), with -0 below +0 whatever the operand order. Between equal operands (they
        // differ only as +0 and -0) the result is their bits ANDed (max: +0 wins) or ORed (min: -0
        // wins). Not `select(x == y && signbit, y, x)`: LLVM 19 treats a select between operands
        // it has seen compare equal as free to return either, and dropped the -0 when the other
        // operand could not be -0 (min(-0, the i32 0 converted) gave +0; fuzz seed 1002326).
        llvm::Value* either_nan = b_.CreateOr(b_.CreateFCmpUNO(x, x), b_.CreateFCmpUNO(y, y));
        llvm::Type* int_ty = b_.getIntNTy(x->getType()->getPrimitiveSizeInBits().getFixedValue());
        llvm::Value* xi = b_.CreateBitCast(x, int_ty);
        llvm::Value* yi = b_.CreateBitCast(y, int_ty);
        llvm::Value* tie = b_.CreateBitCast(k == OpKind::Max ? b_.CreateAnd(xi, yi) : b_.CreateOr(xi, yi), x->getType());
        llvm::Value* x_wins = k == OpKind::Max ? b_.CreateFCmpOGT(x, y) : b_.CreateFCmpOLT(x, y);
        llvm::Value* y_wins = k == OpKind::Max ? b_.CreateFCmpOGT(y, x) : b_.CreateFCmpOLT(y, x);
        r = b_.CreateSelect(either_nan, canonical_nan(x->getType()),
                            b_.CreateSelect(x_wins, x, b_.CreateSelect(y_wins, y, tie)));
        break;
      }
      default: throw InternalError("codegen", fmt::format("`{}` on floats", ir::mnemonic(k)));
    }
    return round_to(b_, t, r);
  }
  llvm::Type* ty = x->getType();
  const bool uns = is_unsigned(t);
  switch (k) {
    // rules::wrap_add / wrap_sub / wrap_mul: LLVM's integer arithmetic wraps (no nsw flags).
    case OpKind::Add: return b_.CreateAdd(x, y);
    case OpKind::Sub: return b_.CreateSub(x, y);
    case OpKind::Mul: return b_.CreateMul(x, y);
    case OpKind::Div:
    case OpKind::Rem: {
      // rules::int_div / int_rem: x / 0 = kIntDivByZero, x % 0 = x, MIN / -1 = MIN, MIN % -1 = 0,
      // with no division that traps. Unsigned: udiv / urem, which only a zero divisor can trap.
      llvm::Value* zero = b_.CreateICmpEQ(y, llvm::ConstantInt::get(ty, 0));
      if (uns) {
        llvm::Value* safe = b_.CreateSelect(zero, llvm::ConstantInt::get(ty, 1), y);
        if (k == OpKind::Div)
          return b_.CreateSelect(zero, llvm::ConstantInt::get(ty, rules::kIntDivByZero, true), b_.CreateUDiv(x, safe));
        return b_.CreateSelect(zero, x, b_.CreateURem(x, safe));
      }
      llvm::Value* min = llvm::ConstantInt::get(ty, llvm::APInt::getSignedMinValue(ty->getIntegerBitWidth()));
      llvm::Value* overflow = b_.CreateAnd(b_.CreateICmpEQ(x, min), b_.CreateICmpEQ(y, llvm::ConstantInt::get(ty, -1, true)));
      llvm::Value* safe = b_.CreateSelect(b_.CreateOr(zero, overflow), llvm::ConstantInt::get(ty, 1), y);
      if (k == OpKind::Div) {
        llvm::Value* q = b_.CreateSDiv(x, safe);
        return b_.CreateSelect(zero, llvm::ConstantInt::get(ty, rules::kIntDivByZero, true), q);
      }
      llvm::Value* rem = b_.CreateSRem(x, safe);
      return b_.CreateSelect(zero, x, b_.CreateSelect(overflow, llvm::ConstantInt::get(ty, 0), rem));
    }
    case OpKind::Pow: {
      // rules::int_pow, by calling the runtime's own implementation (rt::int_pow_wrapped), which
      // takes an unsigned type's width negated: a u64 exponent of 2^63 or more must not read as a
      // negative i64.
      llvm::Type* i64 = b_.getInt64Ty();
      const int32_t bits = static_cast<int32_t>(ty->getIntegerBitWidth());
      llvm::Value* r64 = uns ? b_.CreateCall(rt_ipow_, {b_.CreateZExt(x, i64), b_.CreateZExt(y, i64), b_.getInt32(-bits)})
                             : b_.CreateCall(rt_ipow_, {b_.CreateSExt(x, i64), b_.CreateSExt(y, i64), b_.getInt32(bits)});
      return b_.CreateTrunc(r64, ty);
    }
    // rules::int_max / int_min, comparing as T does.
    case OpKind::Max: return b_.CreateSelect(uns ? b_.CreateICmpULT(x, y) : b_.CreateICmpSLT(x, y), y, x);
    case OpKind::Min: return b_.CreateSelect(uns ? b_.CreateICmpULT(y, x) : b_.CreateICmpSLT(y, x), y, x);
    case OpKind::And: return b_.CreateAnd(x, y);
    case OpKind::Or: return b_.CreateOr(x, y);
    case OpKind::Xor: return b_.CreateXor(x, y);
    default: break;
  }
  throw InternalError("codegen", fmt::format("`{}` on integers", ir::mnemonic(k)));
}

llvm::Value* Emitter::unary(OpKind k, DType t, llvm::Value* x) {
  if (!is_float(t)) {
    llvm::Value* zero = llvm::ConstantInt::get(x->getType(), 0);
    switch (k) {
      case OpKind::Neg: return b_.CreateSub(zero, x);  // rules::int_neg
      case OpKind::Abs:  // rules::int_abs: an unsigned value is its own absolute value
        if (is_unsigned(t)) return x;
        return b_.CreateSelect(b_.CreateICmpSLT(x, zero), b_.CreateSub(zero, x), x);
      case OpKind::Not: return b_.CreateNot(x);
      default: throw InternalError("codegen", fmt::format("`{}` on integers", ir::mnemonic(k)));
    }
  }
  llvm::Type* ty = x->getType();
  llvm::Value* one = llvm::ConstantFP::get(ty, 1.0);
  IrMath ir_math{b_, m_};
  llvm::Value* r = nullptr;
  switch (k) {
    case OpKind::Neg: r = b_.CreateFNeg(x); break;
    case OpKind::Abs: r = intrinsic(llvm::Intrinsic::fabs, {x}); break;
    // rules::float_exp / float_log / float_tanh / float_sin / float_cos / float_erf / float_erfc /
    // float_logistic: tessera's own algorithms (runtime/element_math.h) emitted step by step for
    // f32 (and so bf16/f16); libm for f64.
    case OpKind::Exp: r = t == DType::f64 ? libm("expf", "exp", t, {x}) : rules::math::exp(ir_math, x); break;
    case OpKind::Log: r = t == DType::f64 ? libm("logf", "log", t, {x}) : rules::math::log(ir_math, x); break;
    case OpKind::Tanh: r = t == DType::f64 ? libm("tanhf", "tanh", t, {x}) : rules::math::tanh(ir_math, x); break;
    case OpKind::Sin: r = t == DType::f64 ? libm("sinf", "sin", t, {x}) : rules::math::sin(ir_math, x); break;
    case OpKind::Cos: r = t == DType::f64 ? libm("cosf", "cos", t, {x}) : rules::math::cos(ir_math, x); break;
    case OpKind::Erf: r = t == DType::f64 ? libm("erff", "erf", t, {x}) : rules::math::erf(ir_math, x); break;
    case OpKind::Erfc: r = t == DType::f64 ? libm("erfcf", "erfc", t, {x}) : rules::math::erfc(ir_math, x); break;
    case OpKind::Sqrt: r = intrinsic(llvm::Intrinsic::sqrt, {x}); break;
    case OpKind::Rsqrt: r = b_.CreateFDiv(one, intrinsic(llvm::Intrinsic::sqrt, {x})); break;
    case OpKind::Logistic:
      r = t == DType::f64 ? b_.CreateFDiv(one, b_.CreateFAdd(one, libm("expf", "exp", t, {b_.CreateFNeg(x)})))
                          : rules::math::logistic(ir_math, x);
      break;
    case OpKind::Floor: r = intrinsic(llvm::Intrinsic::floor, {x}); break;
    case OpKind::Ceil: r = intrinsic(llvm::Intrinsic::ceil, {x}); break;
    default: throw InternalError("codegen", fmt::format("`{}` on floats", ir::mnemonic(k)));
  }
  return round_to(b_, t, r);
}

// rules::f32_round_to_odd: an f64 rounded to f32 and, when inexact with an even last bit, moved one
// unit toward the exact value, so that the rounding to bf16/f16 after it is the only one.
llvm::Value* Emitter::f32_round_to_odd(llvm::Value* d) {
  llvm::Value* f = b_.CreateFPTrunc(d, b_.getFloatTy());
  llvm::Value* back = b_.CreateFPExt(f, b_.getDoubleTy());
  llvm::Value* u = b_.CreateBitCast(f, b_.getInt32Ty());
  llvm::Value* even = b_.CreateICmpEQ(b_.CreateAnd(u, 1), b_.getInt32(0));
  llvm::Value* inexact = b_.CreateFCmpONE(back, d);  // false for NaN
  llvm::Value* away = b_.CreateFCmpOGT(intrinsic(llvm::Intrinsic::fabs, {back}), intrinsic(llvm::Intrinsic::fabs, {d}));
  llvm::Value* odd = b_.CreateSelect(away, b_.CreateSub(u, b_.getInt32(1)), b_.CreateAdd(u, b_.getInt32(1)));
  return b_.CreateBitCast(b_.CreateSelect(b_.CreateAnd(inexact, even), odd, u), b_.getFloatTy());
}

llvm::Value* Emitter::convert(DType from, DType to, llvm::Value* x) {
  if (from == to) return x;
  llvm::Type* dst = compute_type(b_, to);
  const bool to_16 = to == DType::bf16 || to == DType::f16;
  if (is_bool(to)) {
    // x -> bool is x != 0 (NaN -> true).
    if (is_float(from)) return b_.CreateFCmpUNE(x, llvm::ConstantFP::get(x->getType(), 0.0));
    return b_.CreateICmpNE(x, llvm::ConstantInt::get(x->getType(), 0));
  }
  if (is_float(from)) {
    if (is_float(to)) {
      llvm::Value* y = x;
      if (from == DType::f64 && to_16) y = f32_round_to_odd(x);  // one rounding, into the 16-bit type
      else if (x->getType() != dst) y = to == DType::f64 ? b_.CreateFPExt(x, dst) : b_.CreateFPTrunc(x, dst);
      return round_to(b_, to, y);
    }
    // rules::float_to_int: truncate, saturate (to [0, MAX] for unsigned types), NaN -> 0.
    const llvm::Intrinsic::ID id = is_unsigned(to) ? llvm::Intrinsic::fptoui_sat : llvm::Intrinsic::fptosi_sat;
    llvm::Function* sat = llvm::Intrinsic::getDeclaration(&m_, id, {dst, x->getType()});
    return b_.CreateCall(sat, {x});
  }
  // Bools and the unsigned types convert by their unsigned value (zero-extend, uitofp).
  const bool from_unsigned = is_bool(from) || is_unsigned(from);
  if (is_float(to)) {
    auto to_fp = [&](llvm::Type* ft) { return from_unsigned ? b_.CreateUIToFP(x, ft) : b_.CreateSIToFP(x, ft); };
    if (to_16 && !is_bool(from)) {
      // As the runtime converts: integers reach bf16/f16 through f64 (exact up to 32 bits) and one
      // rounding (rules::f32_round_to_odd).
      return round_to(b_, to, f32_round_to_odd(to_fp(b_.getDoubleTy())));
    }
    return round_to(b_, to, to_fp(dst));
  }
  // Integer -> integer wraps (keeps the low bits; sign-extends a signed source, zero-extends an
  // unsigned one); bool is 0 or 1.
  return from_unsigned ? b_.CreateZExtOrTrunc(x, dst) : b_.CreateSExtOrTrunc(x, dst);
}

llvm::Value* Emitter::constant(const ir::Literal& lit, DType t) {
  // The element the runtime's splat makes, so both backends agree on every literal.
  Array s = rt::splat(lit, t, {});
  if (is_float(t)) return llvm::ConstantFP::get(compute_type(b_, t), s.item());
  if (is_bool(t)) return b_.getInt1(s.item_int() != 0);
  return llvm::ConstantInt::get(compute_type(b_, t), static_cast<uint64_t>(s.item_int()), true);
}

void Emitter::elementwise(const ir::Op& op, std::function<llvm::Value*(const Index&)> gen) {
  used(op);
  const Type t = fn_.type(op.results[0]);
  if (t.is_scalar()) {
    set_scalar(op.results[0], t.dtype, gen({}));
    return;
  }
  set_lazy(op.results[0], t, op.operands, std::move(gen));
}

void Emitter::emit_constant(const ir::Op& op) {
  const Type t = fn_.type(op.results[0]);
  llvm::Value* c = constant(std::get<ir::Literal>(op.attr), t.dtype);
  if (t.is_scalar()) set_scalar(op.results[0], t.dtype, c);
  else set_lazy(op.results[0], t, {}, [c](const Index&) { return c; });
}

void Emitter::emit_binary(const ir::Op& op) {
  const DType t = fn_.type(op.operands[0]).dtype;
  ValueId a = op.operands[0], c = op.operands[1];
  elementwise(op, [this, k = op.kind, t, a, c](const Index& i) { return binary(k, t, elem(a, i), elem(c, i)); });
}

void Emitter::emit_unary(const ir::Op& op) {
  const DType t = fn_.type(op.operands[0]).dtype;
  ValueId a = op.operands[0];
  elementwise(op, [this, k = op.kind, t, a](const Index& i) { return unary(k, t, elem(a, i)); });
}

void Emitter::emit_cast(const ir::Op& op) {
  const DType from = fn_.type(op.operands[0]).dtype, to = fn_.type(op.results[0]).dtype;
  ValueId a = op.operands[0];
  elementwise(op, [this, from, to, a](const Index& i) { return convert(from, to, elem(a, i)); });
}

void Emitter::emit_select(const ir::Op& op) {
  ValueId c = op.operands[0], x = op.operands[1], y = op.operands[2];
  elementwise(op, [this, c, x, y](const Index& i) { return b_.CreateSelect(elem(c, i), elem(x, i), elem(y, i)); });
}

void Emitter::emit_iota(const ir::Op& op) {
  const Type t = fn_.type(op.results[0]);
  const int64_t axis = std::get<int64_t>(op.attr);
  set_lazy(op.results[0], t, {}, [this, t, axis](const Index& i) { return convert(DType::i64, t.dtype, i[axis]); });
}

void Emitter::emit_broadcast(const ir::Op& op) {
  const Type t = fn_.type(op.results[0]);
  const Shape src = fn_.type(op.operands[0]).shape;
  ValueId a = op.operands[0];
  used(op);
  set_lazy(op.results[0], t, {a}, [this, t, src, a](const Index& i) {
    Index j;
    const size_t lead = t.shape.size() - src.size();
    for (size_t d = 0; d < src.size(); ++d) j.push_back(src[d] == 1 ? b_.getInt64(0) : i[lead + d]);
    return elem(a, j);
  });
}

void Emitter::emit_transpose(const ir::Op& op) {
  const Type t = fn_.type(op.results[0]);
  const auto perm = std::get<std::vector<int64_t>>(op.attr);
  ValueId a = op.operands[0];
  used(op);
  set_lazy(op.results[0], t, {a}, [this, perm, a](const Index& i) {
    Index j(perm.size());
    for (size_t d = 0; d < perm.size(); ++d) j[perm[d]] = i[d];
    return elem(a, j);
  });
}

void Emitter::emit_reshape(const ir::Op& op) {
  ValueId a = op.operands[0];
  used(op);
  TensorCg& src = tensor(a);
  if (src.kind == TensorCg::Kind::Scalar) {
    llvm::Value* s = src.scalar;
    set_lazy(op.results[0], fn_.type(op.results[0]), {}, [s](const Index&) { return s; });
    return;
  }
  // A reshape that only inserts or drops size-1 dims keeps every other dim in order: it stays lazy
  // (an index map), so pl::broadcast_in_dim, pl::repeat and pl::tile fuse into what reads them.
  const Type t = fn_.type(op.results[0]);
  const Shape from = fn_.type(a).shape;
  std::vector<size_t> src_dims, dst_dims;
  for (size_t d = 0; d < from.size(); ++d)
    if (from[d] != 1) src_dims.push_back(d);
  for (size_t d = 0; d < t.shape.size(); ++d)
    if (t.shape[d] != 1) dst_dims.push_back(d);
  const bool unit_dims_only = !t.is_scalar() && src_dims.size() == dst_dims.size() &&
                              std::equal(src_dims.begin(), src_dims.end(), dst_dims.begin(),
                                         [&](size_t s, size_t d) { return from[s] == t.shape[d]; });
  if (unit_dims_only) {
    set_lazy(op.results[0], t, {a}, [this, a, rank = from.size(), src_dims, dst_dims](const Index& i) {
      Index j(rank, b_.getInt64(0));
      for (size_t k = 0; k < src_dims.size(); ++k) j[src_dims[k]] = i[dst_dims[k]];
      return elem(a, j);
    });
    return;
  }
  materialize(a);
  TensorCg r = tensor(a);
  r.shape = t.shape;
  values_[op.results[0]] = r;
}

namespace {

// rules::clamp_slice_start's index arithmetic as IR instructions.
struct IrIndexOps {
  llvm::IRBuilderBase& b;
  llvm::Value* constant(int64_t v) const { return b.getInt64(v); }
  llvm::Value* less(llvm::Value* x, llvm::Value* y) const { return b.CreateICmpSLT(x, y); }
  llvm::Value* select(llvm::Value* c, llvm::Value* x, llvm::Value* y) const { return b.CreateSelect(c, x, y); }
};

}  // namespace

// slice: a lazy window of the operand. Each start is clamped once, before the loops that read the
// window (rules::clamp_slice_start), so an element costs only the index arithmetic.
void Emitter::emit_slice(const ir::Op& op) {
  const auto& attr = std::get<ir::ViewAttr>(op.attr);
  const ir::WindowOperands operands = ir::window_operands(op);
  const Shape src = fn_.type(operands.ref).shape;
  Index first;
  for (size_t d = 0; d < attr.dims.size(); ++d) {
    const ir::ViewDim& dim = attr.dims[d];
    const int64_t extent = dim.squeeze ? 1 : rules::slice_extent(dim.size, dim.stride);
    llvm::Value* start = b_.CreateSExt(tensor(operands.starts[d]).scalar, b_.getInt64Ty());
    first.push_back(rules::clamp_slice_start(IrIndexOps{b_}, start, extent, src[d]));
  }
  const ValueId a = operands.ref;
  used(op);
  auto gen = [this, attr, first, a](const Index& i) {
    Index j;
    size_t r = 0;
    for (size_t d = 0; d < attr.dims.size(); ++d) {
      const ir::ViewDim& dim = attr.dims[d];
      if (dim.squeeze) j.push_back(first[d]);
      else j.push_back(b_.CreateAdd(first[d], b_.CreateMul(i[r++], b_.getInt64(dim.stride))));
    }
    return elem(a, j);
  };
  const Type t = fn_.type(op.results[0]);
  if (t.is_scalar()) {
    prepare(a);  // one element, read now
    set_scalar(op.results[0], t.dtype, gen({}));
  } else {
    set_lazy(op.results[0], t, {a}, std::move(gen));
  }
}

// bitcast: the bits each element has in memory, read as the result dtype (ir::bitcast_shape). To a
// narrower dtype, result element (..., j) is part j of source element (...): its bits shifted down
// by j parts (little-endian, the lowest-addressed part first, as the interpreter's copy of the bytes
// reads them); to a wider one, result element (...) joins source elements (..., 0..ratio-1) the
// same way.
void Emitter::emit_bitcast(const ir::Op& op) {
  const DType from = fn_.type(op.operands[0]).dtype, to = fn_.type(op.results[0]).dtype;
  const int64_t fs = dtype_size(from), ts = dtype_size(to);
  ValueId a = op.operands[0];
  if (fs == ts) {
    elementwise(op, [this, from, to, a](const Index& i) { return from_storage_bits(b_, to, storage_bits(b_, from, elem(a, i))); });
    return;
  }
  const Type t = fn_.type(op.results[0]);
  used(op);
  if (fs > ts) {
    set_lazy(op.results[0], t, {a}, [this, from, to, ts, a](const Index& i) {
      const Index src(i.begin(), i.end() - 1);
      llvm::Value* bits = storage_bits(b_, from, elem(a, src));
      llvm::Value* shift = b_.CreateMul(b_.CreateZExtOrTrunc(i.back(), bits->getType()),
                                        llvm::ConstantInt::get(bits->getType(), static_cast<uint64_t>(8 * ts)));
      llvm::Value* part = b_.CreateTrunc(b_.CreateLShr(bits, shift), b_.getIntNTy(static_cast<unsigned>(8 * ts)));
      return from_storage_bits(b_, to, part);
    });
    return;
  }
  const int64_t ratio = ts / fs;
  auto gen = [this, from, to, ratio, fs, ts, a](const Index& i) {
    llvm::Type* wide = b_.getIntNTy(static_cast<unsigned>(8 * ts));
    llvm::Value* bits = llvm::ConstantInt::get(wide, 0);
    for (int64_t j = 0; j < ratio; ++j) {
      Index src = i;
      src.push_back(b_.getInt64(j));
      llvm::Value* part = b_.CreateZExt(storage_bits(b_, from, elem(a, src)), wide);
      bits = b_.CreateOr(bits, b_.CreateShl(part, static_cast<uint64_t>(8 * fs * j)));
    }
    return from_storage_bits(b_, to, bits);
  };
  if (t.is_scalar()) {
    prepare(a);
    set_scalar(op.results[0], to, gen({}));
  } else {
    set_lazy(op.results[0], t, {a}, std::move(gen));
  }
}

// multiple_of: the value itself; the promise is checked by the interpreter only.
void Emitter::emit_multiple_of(const ir::Op& op) {
  used(op);
  set_scalar(op.results[0], fn_.type(op.results[0]).dtype, tensor(op.operands[0]).scalar);
}

// concatenate: each operand's loop nest writes its part of a buffer, so every part is one plain
// (vectorisable) loop instead of a select between operands at every element.
void Emitter::emit_concatenate(const ir::Op& op) {
  const Type t = fn_.type(op.results[0]);
  const int64_t axis = std::get<int64_t>(op.attr);
  used(op);
  llvm::Value* out = temp(std::max<int64_t>(1, t.num_elements()) * dtype_size(t.dtype));
  int64_t offset = 0;
  for (ValueId v : op.operands) {
    prepare(v);
    const Shape part = fn_.type(v).shape;
    loop_nest(part, [&](const Index& i) {
      Index o = i;
      o[axis] = b_.CreateAdd(i[axis], b_.getInt64(offset));
      store_element(b_, t.dtype, element_address(b_, t.dtype, out, linear(o, t.shape)), elem(v, i));
    });
    offset += part[axis];
  }
  values_[op.results[0]] = TensorCg{.kind = TensorCg::Kind::Buffer, .dtype = t.dtype, .shape = t.shape, .buffer = out};
}

namespace {

// Marks the loop that just exited into `exit` (entered from `pre`) as one the unroller leaves
// alone, so that the loop vectoriser sees it as a loop however short it is (it still widens and
// interleaves it; a vector loop of one iteration folds away afterwards).
void keep_rolled(llvm::BasicBlock* exit, llvm::BasicBlock* pre) {
  llvm::BasicBlock* header = exit->getSinglePredecessor();
  if (!header) return;
  for (llvm::BasicBlock* latch : llvm::predecessors(header)) {
    if (latch == pre) continue;
    llvm::LLVMContext& ctx = header->getContext();
    llvm::MDNode* disable = llvm::MDNode::get(ctx, llvm::MDString::get(ctx, "llvm.loop.unroll.disable"));
    llvm::MDNode* loop = llvm::MDNode::getDistinct(ctx, {nullptr, disable});
    loop->replaceOperandWith(0, loop);
    latch->getTerminator()->setMetadata(llvm::LLVMContext::MD_loop, loop);
  }
}

}  // namespace

void Emitter::reduce(const ir::Op& op) {
  const ValueId src = op.operands[0];
  const Type st = fn_.type(src), t = fn_.type(op.results[0]);
  const auto axes = std::get<std::vector<int64_t>>(op.attr);
  used(op);
  prepare(src);
  const DType dtype = st.dtype;
  llvm::Type* ct = compute_type(b_, dtype);
  const bool fp = ct->isFloatingPointTy();
  auto reduced_dim = [&](int64_t d) { return std::find(axes.begin(), axes.end(), d) != axes.end(); };
  std::vector<int64_t> kept;
  Shape reduced;
  for (int64_t d = 0; d < st.rank(); ++d) {
    if (!reduced_dim(d)) kept.push_back(d);
    else reduced.push_back(st.shape[d]);
  }
  llvm::Value* init;
  if (op.kind == OpKind::ReduceSum) init = llvm::Constant::getNullValue(ct);
  else if (fp) init = llvm::ConstantFP::getInfinity(ct, op.kind == OpKind::ReduceMax);  // folds with rules::float_max / min
  else if (is_bool(dtype)) init = b_.getInt1(op.kind == OpKind::ReduceMin);
  else {
    // The identity of max / min: T's lowest and largest value (0 and all ones when unsigned).
    const unsigned w = ct->getIntegerBitWidth();
    const bool uns = is_unsigned(dtype);
    init = op.kind == OpKind::ReduceMax
               ? llvm::ConstantInt::get(ct, uns ? llvm::APInt::getMinValue(w) : llvm::APInt::getSignedMinValue(w))
               : llvm::ConstantInt::get(ct, uns ? llvm::APInt::getMaxValue(w) : llvm::APInt::getSignedMaxValue(w));
  }
  llvm::Value* out = temp(std::max<int64_t>(1, t.num_elements()) * dtype_size(dtype));
  const OpKind kind = op.kind == OpKind::ReduceSum ? OpKind::Add : op.kind == OpKind::ReduceMax ? OpKind::Max : OpKind::Min;
  // One step of the fold, acc (op) x. Floats accumulate in f32 (f64 for f64) without rounding to
  // the dtype until the end, in a form the loop vectoriser recognises as a reduction, so that a
  // loop over a contiguous axis becomes several vector accumulators folded at the end:
  // - a sum is an fadd marked reassociable: §4.14 lets compiled code sum in another order;
  // - max / min are llvm.maximum / llvm.minimum, IEEE 754-2019's maximum / minimum, which are
  //   rules::float_max / float_min except for which NaN they return; they are associative and
  //   commutative, so any grouping gives the interpreter's result, and the NaN is made the
  //   canonical one once, by `finish`. Not for f16: LLVM 19 narrows the maximum of two values
  //   widened from half to a half maximum, whose x86 lowering lost NaNs (max(0, NaN) gave 0), so
  //   f16 keeps the rule's selects.
  auto step = [&](llvm::Value* acc, llvm::Value* x) -> llvm::Value* {
    if (fp && kind == OpKind::Add) {
      llvm::Value* next = b_.CreateFAdd(acc, x);
      if (auto* inst = llvm::dyn_cast<llvm::Instruction>(next)) inst->setHasAllowReassoc(true);
      return next;
    }
    if (fp && dtype == DType::f16) return binary(kind, DType::f32, acc, x);
    if (fp) return intrinsic(kind == OpKind::Max ? llvm::Intrinsic::maximum : llvm::Intrinsic::minimum, {acc, x});
    if (is_bool(dtype)) return kind == OpKind::Min ? b_.CreateAnd(acc, x) : b_.CreateOr(acc, x);
    return binary(kind, dtype, acc, x);
  };
  // The folded value as the result's element: the canonical NaN, rounded into the dtype.
  auto finish = [&](llvm::Value* acc) {
    if (fp && kind != OpKind::Add && dtype != DType::f16) acc = b_.CreateSelect(b_.CreateFCmpUNO(acc, acc), canonical_nan(ct), acc);
    return round_to(b_, dtype, acc);
  };
  auto out_address = [&](const Index& o) {
    return element_address(b_, dtype, out, t.shape.empty() ? b_.getInt64(0) : linear(o, t.shape));
  };
  // The source index of result index o and reduced index r.
  auto source_index = [&](const Index& o, const Index& r) {
    Index full(st.shape.size());
    size_t oi = 0, ri = 0;
    for (int64_t d = 0; d < st.rank(); ++d) full[d] = reduced_dim(d) ? r[ri++] : o[oi++];
    return full;
  };
  // The innermost dim that is not 1 (the one a loop over the source walks contiguously).
  int64_t inner = st.rank() - 1;
  while (inner >= 0 && st.shape[inner] == 1) --inner;
  if (inner >= 0 && !reduced_dim(inner)) {
    // A contiguous axis is kept (column sums, a middle axis of three): the source is walked in its
    // own order, each slice over the reduced dims folded element by element into a buffer of
    // accumulators shaped like the result ("row into row"). The innermost loop then reads the
    // source and the accumulators at unit stride and is element-wise, so it vectorises without
    // being a reduction; a chain down each column would load one element per row stride. Each
    // result element still folds its terms with the reduced dims in increasing order, innermost
    // last: the interpreter's order (only the order of the loops changes).
    llvm::Value* acc = temp(std::max<int64_t>(1, t.num_elements()) * static_cast<int64_t>(m_.getDataLayout().getTypeAllocSize(ct)));
    // Each temporary is a buffer of its own, which nothing else points into: said so, the
    // vectoriser knows the accumulators alias no operand and checks no overlap before each row.
    if (auto* call = llvm::dyn_cast<llvm::CallInst>(acc)) call->addRetAttr(llvm::Attribute::NoAlias);
    auto acc_address = [&](const Index& o) { return b_.CreateGEP(ct, acc, linear(o, t.shape)); };
    // Every loop over the contiguous axis stays a loop for the vectoriser: LLVM fully unrolls a
    // short innermost loop first (16 long in a fold of (rows, n, 16)), and then vectorised the loop
    // around it with a gather or scatter per element.
    auto vector_loop_nest = [&](const Shape& shape, const std::function<void(const Index&)>& body) {
      const Shape outer(shape.begin(), shape.end() - 1);
      loop_nest(outer, [&](const Index& idx) {
        llvm::BasicBlock* pre = b_.GetInsertBlock();
        emit_loop(b_, shape.back(), [&](llvm::Value* i) {
          Index full = idx;
          full.push_back(i);
          body(full);
        });
        keep_rolled(b_.GetInsertBlock(), pre);
      });
    };
    vector_loop_nest(t.shape, [&](const Index& o) { b_.CreateStore(init, acc_address(o)); });
    vector_loop_nest(st.shape, [&](const Index& full) {
      Index o;
      for (int64_t d : kept) o.push_back(full[d]);
      llvm::Value* slot = acc_address(o);
      b_.CreateStore(step(b_.CreateLoad(ct, slot), elem(src, full)), slot);
    });
    vector_loop_nest(t.shape, [&](const Index& o) {
      store_element(b_, dtype, out_address(o), finish(b_.CreateLoad(ct, acc_address(o))));
    });
  } else {
    // The reduced dims innermost (a row's sum): one accumulator per result element, a chain the
    // loop vectoriser splits into vector partial accumulators when the innermost dim is contiguous.
    llvm::Value* acc_slot = entry_alloca(ct, 1);
    loop_nest(t.shape, [&](const Index& o) {
      b_.CreateStore(init, acc_slot);
      // The reduced dims in increasing order, innermost last: the runtime's summation order.
      loop_nest(reduced, [&](const Index& r) {
        b_.CreateStore(step(b_.CreateLoad(ct, acc_slot), elem(src, source_index(o, r))), acc_slot);
      });
      store_element(b_, dtype, out_address(o), finish(b_.CreateLoad(ct, acc_slot)));
    });
  }
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

}  // namespace tessera::jit::cg
