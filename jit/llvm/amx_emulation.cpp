#include "jit/llvm/amx_emulation.h"

#include <fmt/format.h>
#include <llvm/ADT/PostOrderIterator.h>
#include <llvm/IR/CFG.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <bit>
#include <cstring>
#include <map>
#include <vector>

#include "jit/ir/diagnostics.h"
#include "jit/llvm/engine.h"
#include "jit/llvm/gemm.h"
#include "runtime/numeric.h"

namespace tessera::jit::amx_emulation {

namespace {

template <class T>
T lane(const Tile& t, int64_t r, int64_t l) {
  T v;
  std::memcpy(&v, &t.bytes[r][l * sizeof(T)], sizeof(T));
  return v;
}

template <class T>
void set_lane(Tile& t, int64_t r, int64_t l, T v) {
  std::memcpy(&t.bytes[r][l * sizeof(T)], &v, sizeof(T));
}

constexpr int64_t kLanes = kAmxTileBytes / kLaneBytes;

// The functions the emulated code calls in place of the tile intrinsics, a tile being a pointer to
// a Tile in the caller's stack frame.
void call_zero(Tile* t) { std::memset(t, 0, sizeof(Tile)); }
void call_load(Tile* t, const void* base, int64_t stride) { tileloadd(*t, base, stride); }
void call_store(const Tile* t, void* base, int64_t stride) { tilestored(*t, base, stride); }
void call_bf16(Tile* c, const Tile* a, const Tile* b) { tdpbf16ps(*c, *a, *b); }
void call_s8(Tile* c, const Tile* a, const Tile* b) { tdpbssd(*c, *a, *b); }

// Replaces `f`'s tile intrinsics (and its x86_amx phis) by calls to the functions above: each tile
// value becomes a pointer to a Tile, one stack slot per instruction that makes one (tilezero,
// tileloadd); a dot product updates its accumulator's Tile in place and stands for it, which is
// what the x86_amx value chains of the emitter mean (an accumulator is never read after the dot
// that replaces it).
void emulate_tiles(llvm::Function& f) {
  llvm::IRBuilder<> entry(&f.getEntryBlock(), f.getEntryBlock().begin());
  llvm::Type* ptr = entry.getPtrTy();
  llvm::Type* i64 = entry.getInt64Ty();
  llvm::Type* void_ty = entry.getVoidTy();
  auto callee = [&](auto* fn, std::vector<llvm::Type*> params) {
    auto* type = llvm::FunctionType::get(void_ty, params, false);
    auto* address = llvm::ConstantExpr::getIntToPtr(
        llvm::ConstantInt::get(i64, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(fn))), ptr);
    return llvm::FunctionCallee(type, address);
  };
  const llvm::FunctionCallee zero = callee(&call_zero, {ptr}), load = callee(&call_load, {ptr, ptr, i64}),
                             store = callee(&call_store, {ptr, ptr, i64}), bf16 = callee(&call_bf16, {ptr, ptr, ptr}),
                             s8 = callee(&call_s8, {ptr, ptr, ptr});
  auto* tile_type = llvm::ArrayType::get(entry.getInt8Ty(), sizeof(Tile));
  std::map<llvm::Value*, llvm::Value*> tiles;  // x86_amx value -> its Tile
  std::vector<llvm::PHINode*> phis;
  std::vector<llvm::Instruction*> dead;
  for (llvm::BasicBlock& bb : f)
    for (llvm::PHINode& phi : bb.phis())
      if (phi.getType()->isX86_AMXTy()) {
        tiles[&phi] = llvm::PHINode::Create(ptr, phi.getNumIncomingValues(), "tile", &phi);
        phis.push_back(&phi);
      }
  auto tile_of = [&](llvm::Value* v) {
    auto it = tiles.find(v);
    if (it == tiles.end()) throw InternalError("amx emulation", "a tile value the emulation does not know");
    return it->second;
  };
  llvm::ReversePostOrderTraversal<llvm::Function*> order(&f);
  for (llvm::BasicBlock* bb : order)
    for (llvm::Instruction& inst : *bb) {
      auto* call = llvm::dyn_cast<llvm::IntrinsicInst>(&inst);
      if (!call) continue;
      llvm::IRBuilder<> b(call);
      auto fresh = [&] {
        llvm::AllocaInst* t = entry.CreateAlloca(tile_type, nullptr, "tile");
        t->setAlignment(llvm::Align(64));
        return t;
      };
      switch (call->getIntrinsicID()) {
        case llvm::Intrinsic::x86_tilezero_internal: {
          llvm::Value* t = fresh();
          b.CreateCall(zero, {t});
          tiles[call] = t;
          break;
        }
        case llvm::Intrinsic::x86_tileloadd64_internal: {  // (rows, bytes, base, stride)
          llvm::Value* t = fresh();
          b.CreateCall(load, {t, call->getArgOperand(2), call->getArgOperand(3)});
          tiles[call] = t;
          break;
        }
        case llvm::Intrinsic::x86_tilestored64_internal:  // (rows, bytes, base, stride, tile)
          b.CreateCall(store, {tile_of(call->getArgOperand(4)), call->getArgOperand(2), call->getArgOperand(3)});
          break;
        case llvm::Intrinsic::x86_tdpbf16ps_internal:  // (m, n, k, c, a, b)
        case llvm::Intrinsic::x86_tdpbssd_internal: {
          llvm::Value* c = tile_of(call->getArgOperand(3));
          b.CreateCall(call->getIntrinsicID() == llvm::Intrinsic::x86_tdpbf16ps_internal ? bf16 : s8,
                       {c, tile_of(call->getArgOperand(4)), tile_of(call->getArgOperand(5))});
          tiles[call] = c;
          break;
        }
        default:
          if (call->getType()->isX86_AMXTy())
            throw InternalError("amx emulation", fmt::format("no emulation of {}", call->getCalledFunction()->getName().str()));
          continue;
      }
      dead.push_back(call);
    }
  for (llvm::PHINode* phi : phis) {
    auto* replacement = llvm::cast<llvm::PHINode>(tiles.at(phi));
    for (unsigned i = 0; i < phi->getNumIncomingValues(); ++i)
      replacement->addIncoming(tile_of(phi->getIncomingValue(i)), phi->getIncomingBlock(i));
    dead.push_back(phi);
  }
  for (llvm::Instruction* i : dead) i->dropAllReferences();
  for (llvm::Instruction* i : dead) i->eraseFromParent();
}

}  // namespace

void tileloadd(Tile& t, const void* base, int64_t stride) {
  for (int64_t r = 0; r < kAmxTileRows; ++r) std::memcpy(t.bytes[r], static_cast<const uint8_t*>(base) + r * stride, kAmxTileBytes);
}

void tilestored(const Tile& t, void* base, int64_t stride) {
  for (int64_t r = 0; r < kAmxTileRows; ++r) std::memcpy(static_cast<uint8_t*>(base) + r * stride, t.bytes[r], kAmxTileBytes);
}

void tdpbf16ps(Tile& c, const Tile& a, const Tile& b) {
  auto f32 = [](uint16_t bits) { return static_cast<float>(std::bit_cast<bfloat16>(bits)); };
  for (int64_t m = 0; m < kAmxTileRows; ++m)
    for (int64_t k = 0; k < kLanes; ++k)
      for (int64_t n = 0; n < kLanes; ++n) {
        float acc = lane<float>(c, m, n);
        acc += f32(lane<uint16_t>(a, m, 2 * k)) * f32(lane<uint16_t>(b, k, 2 * n));
        acc += f32(lane<uint16_t>(a, m, 2 * k + 1)) * f32(lane<uint16_t>(b, k, 2 * n + 1));
        set_lane(c, m, n, acc);
      }
}

void tdpbssd(Tile& c, const Tile& a, const Tile& b) {
  for (int64_t m = 0; m < kAmxTileRows; ++m)
    for (int64_t k = 0; k < kLanes; ++k)
      for (int64_t n = 0; n < kLanes; ++n) {
        uint32_t acc = lane<uint32_t>(c, m, n);
        for (int64_t e = 0; e < 4; ++e)
          acc += static_cast<uint32_t>(int32_t{lane<int8_t>(a, m, 4 * k + e)} * int32_t{lane<int8_t>(b, k, 4 * n + e)});
        set_lane(c, m, n, acc);
      }
}

void run_dot(const Dot& dot) {
  const CpuTarget& amx = cpu_target("amx");
  // The host runs the result: the avx512_bf16 target has the edges' instructions and nothing of AMX.
  const CpuTarget& host = cpu_target("avx512_bf16");
  if (!missing_on_host(host).empty())
    throw InternalError("amx emulation", "the emulated AMX dot runs on a CPU that runs the avx512_bf16 target");
  const bool bf16 = dot.dtype == DType::bf16;
  if (!bf16 && dot.dtype != DType::i8) throw InternalError("amx emulation", "only bf16 and i8 dots run on AMX tiles");
  llvm::LLVMContext ctx;
  llvm::Module module("amx_emulation", ctx);
  Engine& engine = Engine::get();
  engine.configure(module, host);
  llvm::IRBuilder<> b(ctx);
  llvm::Type* ptr = b.getPtrTy();
  auto* type = llvm::FunctionType::get(b.getVoidTy(), {ptr, ptr, ptr, ptr, ptr, ptr, b.getInt64Ty(), b.getInt64Ty()}, false);
  const std::string name = "tessera_amx_emulated_dot";
  llvm::Function* f = llvm::Function::Create(type, llvm::Function::ExternalLinkage, name, module);
  b.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", f));
  const MatrixOperand a{f->getArg(0), dot.dtype, dot.lda, dot.a_cs}, bm{f->getArg(1), dot.dtype, dot.ldb};
  const CMatrix c{.ptr = f->getArg(2),
                  .ld = dot.ldc,
                  .accumulate = dot.accumulate,
                  .from = dot.from ? f->getArg(5) : nullptr,
                  .from_ld = dot.from_ld};
  if (dot.span && !bf16) throw InternalError("amx emulation", "only bf16 dots sum over a span of k");
  const KSpan span = dot.span ? KSpan{f->getArg(6), f->getArg(7)} : KSpan{};
  if (bf16) emit_gemm_f32(b, amx, a, bm, c, dot.m, dot.n, dot.k, f->getArg(3), f->getArg(4), false, nullptr, span);
  else emit_gemm_i8(b, amx, a, bm, c, dot.m, dot.n, dot.k, f->getArg(3), f->getArg(4));
  b.CreateRetVoid();
  emulate_tiles(*f);
  std::string errors;
  llvm::raw_string_ostream os(errors);
  if (llvm::verifyModule(module, &os)) throw InternalError("amx emulation", "generated invalid LLVM IR: " + os.str());
  const auto object = engine.load(engine.compile(module, host), name);
  if (!object) throw InternalError("amx emulation", "the emulated dot did not load");
  std::vector<uint8_t> packed(gemm_packed_b_bytes(amx, dot.dtype, dot.dtype, dot.n, dot.k) + 64),
      packed_a(gemm_packed_a_bytes(amx, dot.dtype, dot.dtype, dot.m, dot.k) + 64);
  auto run = reinterpret_cast<void (*)(const void*, const void*, void*, void*, void*, const void*, int64_t, int64_t)>(
      object->address());
  run(dot.a, dot.b, dot.c, packed.data(), packed_a.data(), dot.from, dot.span_lo, dot.span_hi);
}

}  // namespace tessera::jit::amx_emulation
