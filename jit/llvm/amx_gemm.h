// The AMX part of a dot: the tiles of an AmxPlan (jit/llvm/amx_plan.h) as LLVM IR, on the tile
// intrinsics with shape operands (llvm.x86.tileloadd64.internal, tdpbf16ps / tdpbssd .internal,
// tilestored64.internal, tilezero.internal). LLVM's AMX passes then pick the tile registers, write
// the one tile configuration (every tile is 16 rows of 64 bytes) and load it with ldtilecfg at
// function entry and after calls, and release the tile state (tilerelease) before the function
// returns.
//
// jit/ internal: LLVM types are only forward-declared here.
#pragma once

#include "jit/llvm/amx_plan.h"
#include "jit/llvm/gemm.h"

namespace llvm {
class IRBuilderBase;
class Value;
}  // namespace llvm

namespace tessera::jit {

// C (+)= A . B over the plan's tiled part of C, rows [0, tile_rows) x columns [0, tile_cols): `a`
// is the A the plan's a_offset walks (in place or the padded copy), `packed_b` B packed in k pairs
// (bf16, plan.elem 2: tdpbf16ps into f32 C) or k quads (i8, plan.elem 1: tdpbssd into i32 C). Each
// block's accumulator tiles start from the sum C starts from (CMatrix: C itself or another matrix,
// when accumulating) or zero and stay in tile registers across the k loop; C is read and written
// only at the block's start and end. Tile stores have no non-temporal form: `streaming` is left to
// the vector tiles. Given `first_step` and `past_step` (i64 at run time, within [0, k_steps]), the
// k loop runs those steps alone (a span of k, k_group_gemm in gemm.cpp).
void emit_amx_tiles(llvm::IRBuilderBase& b, const AmxPlan& plan, llvm::Value* a, llvm::Value* packed_b,
                    const CMatrix& c, llvm::Value* first_step = nullptr, llvm::Value* past_step = nullptr);

}  // namespace tessera::jit
