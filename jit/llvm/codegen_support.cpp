#include "jit/llvm/codegen_support.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/IntrinsicsX86.h>

#include "runtime/element_rules.h"

namespace tessera::jit {

llvm::Type* compute_type(llvm::IRBuilderBase& b, DType t) {
  switch (t) {
    case DType::i1: return b.getInt1Ty();
    case DType::i8:
    case DType::u8: return b.getInt8Ty();
    case DType::i16:
    case DType::u16: return b.getInt16Ty();
    case DType::i32:
    case DType::u32: return b.getInt32Ty();
    case DType::i64:
    case DType::u64:
    case DType::index:
    case DType::sem:
    case DType::dma_sem: return b.getInt64Ty();
    case DType::bf16:
    case DType::f16:
    case DType::f32: return b.getFloatTy();
    case DType::f64: return b.getDoubleTy();
  }
  return nullptr;
}

namespace {

// How an element is kept in memory where that differs from its compute type; every other dtype is
// stored as it is computed on. One list, read by storage_type and both directions of the conversion.
enum class Stored { AsComputed, Byte, Bf16Bits, Half };

Stored stored(DType t) {
  switch (t) {
    case DType::i1: return Stored::Byte;       // 0 or 1 in an i8
    case DType::bf16: return Stored::Bf16Bits;  // the top half of an f32's bits
    case DType::f16: return Stored::Half;       // IEEE binary16
    case DType::i8:
    case DType::i16:
    case DType::i32:
    case DType::i64:
    case DType::u8:
    case DType::u16:
    case DType::u32:
    case DType::u64:
    case DType::index:
    case DType::sem:
    case DType::dma_sem:
    case DType::f32:
    case DType::f64: return Stored::AsComputed;
  }
  return Stored::AsComputed;
}

}  // namespace

llvm::Type* storage_type(llvm::IRBuilderBase& b, DType t) {
  switch (stored(t)) {
    case Stored::Byte: return b.getInt8Ty();
    case Stored::Bf16Bits: return b.getInt16Ty();
    case Stored::Half: return b.getHalfTy();
    case Stored::AsComputed: return compute_type(b, t);
  }
  return nullptr;
}

llvm::Value* element_address(llvm::IRBuilderBase& b, DType t, llvm::Value* base, llvm::Value* index) {
  return b.CreateInBoundsGEP(storage_type(b, t), base, index);
}

void store_nontemporal(llvm::IRBuilderBase& b, llvm::Value* vector, llvm::Value* address, uint64_t bytes) {
  llvm::StoreInst* store = b.CreateAlignedStore(vector, address, llvm::Align(bytes));
  store->setMetadata(llvm::LLVMContext::MD_nontemporal,
                     llvm::MDNode::get(b.getContext(), llvm::ConstantAsMetadata::get(b.getInt32(1))));
}

void fence_nontemporal(llvm::IRBuilderBase& b) { b.CreateIntrinsic(llvm::Intrinsic::x86_sse_sfence, {}, {}); }

namespace {

// A compute value as its storage type, and back (the conversions a store and a load make).
llvm::Value* to_storage(llvm::IRBuilderBase& b, DType t, llvm::Value* value) {
  switch (stored(t)) {
    case Stored::Byte: return b.CreateZExt(value, b.getInt8Ty());
    case Stored::Bf16Bits: return b.CreateTrunc(b.CreateLShr(b.CreateBitCast(value, b.getInt32Ty()), 16), b.getInt16Ty());
    case Stored::Half: return b.CreateFPTrunc(value, b.getHalfTy());
    case Stored::AsComputed: return value;
  }
  return value;
}
llvm::Value* from_storage(llvm::IRBuilderBase& b, DType t, llvm::Value* v) {
  switch (stored(t)) {
    case Stored::Byte: return b.CreateICmpNE(v, b.getInt8(0));
    case Stored::Bf16Bits: return b.CreateBitCast(b.CreateShl(b.CreateZExt(v, b.getInt32Ty()), 16), b.getFloatTy());
    case Stored::Half: return b.CreateFPExt(v, b.getFloatTy());
    case Stored::AsComputed: return v;
  }
  return v;
}

}  // namespace

llvm::Value* load_element(llvm::IRBuilderBase& b, DType t, llvm::Value* ptr) {
  return from_storage(b, t, b.CreateLoad(storage_type(b, t), ptr));
}

void store_element(llvm::IRBuilderBase& b, DType t, llvm::Value* ptr, llvm::Value* value) {
  b.CreateStore(to_storage(b, t, value), ptr);
}

llvm::Value* storage_bits(llvm::IRBuilderBase& b, DType t, llvm::Value* value) {
  return b.CreateBitCast(to_storage(b, t, value), b.getIntNTy(static_cast<unsigned>(8 * dtype_size(t))));
}

llvm::Value* from_storage_bits(llvm::IRBuilderBase& b, DType t, llvm::Value* bits) {
  return from_storage(b, t, b.CreateBitCast(bits, storage_type(b, t)));
}

llvm::Value* round_to(llvm::IRBuilderBase& b, DType t, llvm::Value* value) {
  // rules::f16_from_f32 then rules::f32_from_f16: LLVM's fptrunc / fpext (F16C) round to
  // nearest-even, keep subnormals, and keep a NaN's sign and payload top, quieting it.
  if (t == DType::f16) return b.CreateFPExt(b.CreateFPTrunc(value, b.getHalfTy()), b.getFloatTy());
  if (t != DType::bf16) return value;
  // rules::bf16_from_f32: round to nearest-even on the bits; a NaN stays a quiet NaN.
  llvm::Value* u = b.CreateBitCast(value, b.getInt32Ty());
  llvm::Value* is_nan = b.CreateICmpUGT(b.CreateAnd(u, 0x7fffffff), b.getInt32(0x7f800000));
  llvm::Value* lsb = b.CreateAnd(b.CreateLShr(u, 16), 1);
  llvm::Value* rounded = b.CreateAnd(b.CreateAdd(b.CreateAdd(u, b.getInt32(0x7fff)), lsb), b.getInt32(0xffff0000u));
  llvm::Value* quiet = b.CreateAnd(b.CreateOr(u, b.getInt32(rules::kBf16QuietBit32)), b.getInt32(0xffff0000u));
  return b.CreateBitCast(b.CreateSelect(is_nan, quiet, rounded), b.getFloatTy());
}

std::vector<llvm::Value*> emit_loop(llvm::IRBuilderBase& b, llvm::Value* lo, llvm::Value* hi, llvm::Value* step,
                                    const std::vector<llvm::Value*>& init, const LoopBody& body) {
  llvm::Function* fn = b.GetInsertBlock()->getParent();
  llvm::LLVMContext& ctx = fn->getContext();
  llvm::BasicBlock* pre = b.GetInsertBlock();
  llvm::BasicBlock* header = llvm::BasicBlock::Create(ctx, "loop", fn);
  llvm::BasicBlock* body_bb = llvm::BasicBlock::Create(ctx, "loop.body", fn);
  llvm::BasicBlock* exit = llvm::BasicBlock::Create(ctx, "loop.exit", fn);
  b.CreateBr(header);
  b.SetInsertPoint(header);
  llvm::PHINode* iv = b.CreatePHI(lo->getType(), 2, "iv");
  iv->addIncoming(lo, pre);
  std::vector<llvm::PHINode*> phis;
  std::vector<llvm::Value*> carried;
  for (llvm::Value* v : init) {
    llvm::PHINode* phi = b.CreatePHI(v->getType(), 2);
    phi->addIncoming(v, pre);
    phis.push_back(phi);
    carried.push_back(phi);
  }
  b.CreateCondBr(b.CreateICmpSLT(iv, hi), body_bb, exit);
  b.SetInsertPoint(body_bb);
  std::vector<llvm::Value*> next = body(iv, carried);
  llvm::BasicBlock* latch = b.GetInsertBlock();
  iv->addIncoming(b.CreateAdd(iv, step), latch);
  for (size_t i = 0; i < phis.size(); ++i) phis[i]->addIncoming(next[i], latch);
  b.CreateBr(header);
  b.SetInsertPoint(exit);
  return carried;  // the phis hold the final values on exit
}

void emit_loop(llvm::IRBuilderBase& b, int64_t n, const std::function<void(llvm::Value* iv)>& body) {
  emit_loop(b, b.getInt64(0), b.getInt64(n), b.getInt64(1), {}, [&](llvm::Value* iv, const std::vector<llvm::Value*>&) {
    body(iv);
    return std::vector<llvm::Value*>{};
  });
}

}  // namespace tessera::jit
