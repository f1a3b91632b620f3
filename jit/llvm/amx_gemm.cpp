#include "jit/llvm/amx_gemm.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>

#include <vector>

#include "jit/llvm/codegen_support.h"

namespace tessera::jit {

namespace {

// The tile operations, every tile the plan's one shape (16 rows of 64 bytes): the shape operands
// are constants, so LLVM's tile configuration is fixed and written once.
struct TileOps {
  llvm::IRBuilderBase& b;
  llvm::Function *zero, *load, *store, *product;
  llvm::Value *rows, *bytes;

  TileOps(llvm::IRBuilderBase& b_, bool bf16) : b(b_) {
    llvm::Module* module = b.GetInsertBlock()->getModule();
    auto get = [&](llvm::Intrinsic::ID id) { return llvm::Intrinsic::getDeclaration(module, id); };
    zero = get(llvm::Intrinsic::x86_tilezero_internal);
    load = get(llvm::Intrinsic::x86_tileloadd64_internal);
    store = get(llvm::Intrinsic::x86_tilestored64_internal);
    // tdpbssd: signed bytes times signed bytes, as the interpreter multiplies i8 by i8.
    product = get(bf16 ? llvm::Intrinsic::x86_tdpbf16ps_internal : llvm::Intrinsic::x86_tdpbssd_internal);
    rows = b.getInt16(kAmxTileRows);
    bytes = b.getInt16(kAmxTileBytes);
  }
  llvm::Value* zeros() { return b.CreateCall(zero, {rows, bytes}); }
  llvm::Value* loaded(llvm::Value* ptr, int64_t stride) { return b.CreateCall(load, {rows, bytes, ptr, b.getInt64(stride)}); }
  void stored(llvm::Value* ptr, int64_t stride, llvm::Value* tile) {
    b.CreateCall(store, {rows, bytes, ptr, b.getInt64(stride), tile});
  }
  // c + a . b: C's rows, C's row bytes, A's row bytes (one k step).
  llvm::Value* dot(llvm::Value* c, llvm::Value* a, llvm::Value* bt) { return b.CreateCall(product, {rows, bytes, bytes, c, a, bt}); }
};

}  // namespace

void emit_amx_tiles(llvm::IRBuilderBase& b, const AmxPlan& plan, llvm::Value* a, llvm::Value* packed_b,
                    const CMatrix& c, llvm::Value* first_step, llvm::Value* past_step) {
  if (plan.tile_rows == 0 || plan.tile_cols == 0) return;
  TileOps tiles(b, plan.elem == 2);
  auto i64 = [&](int64_t v) { return b.getInt64(v); };
  auto at = [&](llvm::Value* base, llvm::Value* offset) { return b.CreateInBoundsGEP(b.getInt8Ty(), base, offset); };
  // One block at rows [row0, row0 + 16 row_tiles) of panel p's first 16 col_tiles columns. The byte
  // offsets are AmxPlan::c_offset, a_offset and b_offset, with col = p * panel + 16 ct.
  auto block = [&](llvm::Value* p, llvm::Value* row0, int64_t row_tiles, int64_t col_tiles) {
    auto tile_row = [&](int64_t rt) { return b.CreateAdd(row0, i64(rt * kAmxTileRows)); };
    std::vector<llvm::Value*> c_tiles, init;
    for (int64_t rt = 0; rt < row_tiles; ++rt)
      for (int64_t ct = 0; ct < col_tiles; ++ct) {
        llvm::Value* col = b.CreateAdd(b.CreateMul(p, i64(plan.panel)), i64(ct * kAmxTileLanes));
        auto tile_at = [&](llvm::Value* base, int64_t row_bytes) {
          return at(base, b.CreateAdd(b.CreateMul(tile_row(rt), i64(row_bytes)), b.CreateMul(col, i64(kLaneBytes))));
        };
        c_tiles.push_back(tile_at(c.ptr, plan.c_row_bytes));
        const int64_t from_row_bytes = c.source_ld() * kLaneBytes;
        init.push_back(c.accumulate ? tiles.loaded(tile_at(c.source(), from_row_bytes), from_row_bytes) : tiles.zeros());
      }
    llvm::Value* panel_base = at(packed_b, b.CreateMul(p, i64(plan.b_panel_bytes)));
    const std::vector<llvm::Value*> acc = emit_loop(
        b, first_step ? first_step : i64(0), past_step ? past_step : i64(plan.k_steps), i64(1), init,
        [&](llvm::Value* step, const std::vector<llvm::Value*>& cur) {
          std::vector<llvm::Value*> a_tiles, b_tiles, next;
          for (int64_t rt = 0; rt < row_tiles; ++rt)
            a_tiles.push_back(tiles.loaded(at(a, b.CreateAdd(b.CreateMul(tile_row(rt), i64(plan.a_row_bytes)),
                                                              b.CreateMul(step, i64(kAmxTileBytes)))),
                                           plan.a_row_bytes));
          for (int64_t ct = 0; ct < col_tiles; ++ct)
            b_tiles.push_back(tiles.loaded(at(panel_base, b.CreateAdd(i64(ct * kAmxTileLanes * kLaneBytes),
                                                                      b.CreateMul(step, i64(plan.b_step_bytes)))),
                                           plan.b_row_bytes));
          for (int64_t rt = 0; rt < row_tiles; ++rt)
            for (int64_t ct = 0; ct < col_tiles; ++ct)
              next.push_back(tiles.dot(cur[rt * col_tiles + ct], a_tiles[rt], b_tiles[ct]));
          return next;
        });
    for (size_t t = 0; t < acc.size(); ++t) tiles.stored(c_tiles[t], plan.c_row_bytes, acc[t]);
  };
  // The blocks in AmxPlan::blocks()'s order: panels outside (two tiles of columns each, the last one
  // half when tile_cols is an odd number of 16s), blocks of 32 rows inside (the last one 16 rows).
  const int64_t block_rows = 2 * kAmxTileRows;
  const int64_t full_panels = plan.tile_cols / plan.panel, full_rows = plan.tile_rows / block_rows * block_rows;
  auto panel_blocks = [&](llvm::Value* p, int64_t col_tiles) {
    if (full_rows > 0)
      emit_loop(b, i64(0), i64(full_rows), i64(block_rows), {}, [&](llvm::Value* row0, const std::vector<llvm::Value*>&) {
        block(p, row0, 2, col_tiles);
        return std::vector<llvm::Value*>{};
      });
    if (full_rows < plan.tile_rows) block(p, i64(full_rows), 1, col_tiles);
  };
  if (full_panels > 0) emit_loop(b, full_panels, [&](llvm::Value* p) { panel_blocks(p, 2); });
  if (plan.tile_cols % plan.panel) panel_blocks(i64(full_panels), 1);
}

}  // namespace tessera::jit
