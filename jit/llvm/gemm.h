// The matrix-multiply code generator behind dot_general: a register-blocked micro-kernel for f32
// accumulation chosen by the CPU target (a tile of C held in vector registers, A broadcast, B loaded
// as vectors from a packed panel, FMA), the same tile on vpdpbusd for int8 x int8 -> i32 on VNNI
// targets and on vpmaddwd on other AVX2 targets, and a plain loop nest for f64 and the other integer
// accumulations.
//
// The tiles, by target (jit/llvm/target.h):
//   AVX-512 (vector_bits 512): 8 x 32 of C in 16 zmm accumulators;
//   AVX2 and narrower:          6 x 16 of C in 12 ymm accumulators.
// Rows past the last full tile run a tile of the remaining rows; columns past the last full panel
// run the same tile on a zero-padded panel with masked loads and stores of C.
// When both operands are bf16 and the target has AVX512_BF16, the 8 x 32 tile runs vdpbf16ps on
// k pairs instead of FMAs: B packed as [k/2][panel][2] bf16 (an odd k padded with a zero), A read
// in place, a pair broadcast as one 32-bit word. vdpbf16ps adds the pair's two exact products into
// the accumulator one after the other, each rounded (odd element first), and flushes bf16 denormal
// inputs and denormal results to zero: results differ from the interpreter's k-order f32 sums in
// the last bits, within the same tolerance as the FMA path, plus the flush (README, "Backends").
// Where vdpbf16ps issues at half the FMAs' rate (CpuTarget::bf16_on_fma: the native target of an
// Intel core without AMX) bf16 dots take the f32 tile instead, on B packed as f32 and A widened
// once: the products of bf16 are exact in f32, so each FMA rounds once, as the interpreter's sums do.
// When both operands are i8 (i32 accumulation) and the target has AVX512_VNNI, the 8 x 32 tile holds
// i32 accumulators and runs vpdpbusd on k quads (emit_gemm_i8), B packed with its sign bits flipped
// so that each A quad is the instruction's signed operand straight from memory (AMX targets flip A's
// instead); integer sums are exact, so its results equal the interpreter's bit for bit.
// Without VNNI (AVX2, or AVX-512 without it) the i8 dot runs the target's f32 tile shape with i32
// accumulators on vpmaddwd (gemm_int8_words): both operands widened to 16 bits, two k a step, exact.
// On a target with AMX (amx_bf16, amx_int8) those two dots run on tile registers instead
// (tdpbf16ps, tdpbssd: jit/llvm/amx_plan.h lays them out, jit/llvm/amx_gemm.cpp emits them) for the
// rows and columns of C that fill whole 16 x 16 tiles, reading the same packed B; the rest of C takes
// the vdpbf16ps / vpdpbusd tiles above.
//
// jit/ internal: LLVM types are only forward-declared here.
#pragma once

#include <algorithm>

#include <cstdint>

#include "jit/ir/dtype.h"
#include "jit/llvm/target.h"

namespace llvm {
class IRBuilderBase;
class Value;
class StructType;
class LLVMContext;
}  // namespace llvm

namespace tessera::jit {

// A strided matrix in memory: element (r, c) is at ptr[r * ld + c * cs]. Row-major has cs = 1; a
// transposed view (the contracting dim of `x.T @ w`, or of w in `x @ w.T`) has ld = 1.
struct MatrixOperand {
  llvm::Value* ptr;
  DType dtype;
  int64_t ld;
  int64_t cs = 1;
  bool rows_contiguous() const { return cs == 1; }
};

// The C of a tile dot: C = A . B, or with `accumulate` C = S + A . B, the sum S read from C itself
// (`from` null: C += A . B) or from another matrix of C's dtype and shape (`from`, leading dim
// `from_ld`): an accumulator read and an output written by the same pass, megablox tgmm's group
// end `out = acc + dot` (each micro-tile stores its part of C as it finishes, rather than a pass
// over the accumulator after the dot). With `streaming`, whole vectors of C are written with
// non-temporal stores when C's rows start on 64-byte lines (an output past the caches, whose stores
// then drain under the next micro-tiles' arithmetic; a fence follows the dot).
struct CMatrix {
  llvm::Value* ptr;
  int64_t ld;
  bool accumulate = false;
  llvm::Value* from = nullptr;
  int64_t from_ld = 0;
  bool streaming = false;
  llvm::Value* source() const { return from ? from : ptr; }
  int64_t source_ld() const { return from ? from_ld : ld; }
};

// The part of k a dot sums: all of it, or [lo, hi) known at run time (i64, 0 <= lo <= hi <= k). A dot
// whose operands are both zero outside one range of their contracted dim (megablox tgmm's rows of
// one group, masked by a select) skips the products outside it, which the interpreter computes as
// 0 x 0: a micro-tile's k loop runs over the range alone, its sums starting from C once and written
// once, where the same dot as pieces of static length read and wrote all of C once a piece.
struct KSpan {
  llvm::Value* lo = nullptr;
  llvm::Value* hi = nullptr;
  bool whole() const { return lo == nullptr; }
};

// The shape of the f32 micro-kernel for a target: `rows` x (`vectors` * `width`) of C.
struct GemmTile {
  int64_t rows;     // rows of C per tile (A elements broadcast per k step)
  int64_t width;    // floats per vector register: 16 (zmm) or 8 (ymm)
  int64_t vectors;  // vector registers per row of the tile
  int64_t panel() const { return width * vectors; }  // columns of B per packed panel
};

GemmTile gemm_tile(const CpuTarget& target);

// Whether the f32 tile reads A where it is: any f32 A, whatever its strides (a tile broadcasts one
// element of each of its rows per k step, from 8 rows' cache lines, or from adjacent elements of a
// transposed A); else emit_gemm_f32 converts it into a dense f32 copy first.
bool gemm_f32_reads_a_in_place(const MatrixOperand& a);

// Whether A . B (dtypes a and b) runs on vdpbf16ps for `target`: both bf16 on an AVX512_BF16 target
// that keeps its bf16 dots off the FMAs (CpuTarget::bf16_on_fma).
bool gemm_bf16_pairs(const CpuTarget& target, DType a, DType b);

// Whether A . B runs on vpdpbusd for `target`: both i8 (i32 accumulation) on an AVX512_VNNI target.
bool gemm_int8_quads(const CpuTarget& target, DType a, DType b);

// Whether A . B runs on vpmaddwd for `target`: both i8 (i32 accumulation) on an AVX2 target without
// the vpdpbusd tile (gemm_int8_quads), B and A widened to 16 bits.
bool gemm_int8_words(const CpuTarget& target, DType a, DType b);

// Whether A . B runs on either integer tile (emit_gemm_i8): gemm_int8_quads or gemm_int8_words.
bool gemm_int8_tiles(const CpuTarget& target, DType a, DType b);

// Whether A . B runs on AMX tiles for `target`: the bf16 pairs with AMX_BF16, the int8 quads with
// AMX_INT8.
bool gemm_amx(const CpuTarget& target, DType a, DType b);

// Whether emit_gemm_f32 sums A . B over a KSpan for `target` (a k x n B): on the f32 tile, and on
// the bf16 pairs for an even k (an edge pair of the span has its other element zeroed in both
// operands, in registers), AMX tiles included (they take the whole k steps inside the span, the pair
// tiles its ends). Not the integer tiles: their dots of such operands take the operands as the
// selects make them.
bool gemm_spans_k(const CpuTarget& target, DType a, DType b, int64_t k);

// Bytes of the packed-B scratch emit_gemm_f32 needs for a k x n B (operand dtypes a, b) on `target`.
int64_t gemm_packed_b_bytes(const CpuTarget& target, DType a, DType b, int64_t n, int64_t k);

// Bytes of the packed-A scratch emit_gemm_f32 and emit_gemm_i8 may use for an m x k A: a dense f32
// copy, or on AMX a copy with k padded to whole tile k steps.
int64_t gemm_packed_a_bytes(const CpuTarget& target, DType a, DType b, int64_t m, int64_t k);

// The lines of one block the micro-tiles ask the memory system for while they run, 2 to 8 a
// trip of their k loops (eight k steps), whichever dots of the kernel run next, rather than in one burst
// that would stall the core on its fill buffers: the next block of B as its packing will read it
// (`runs` runs of `run_bytes` bytes, `stride_bytes` apart, into L2) and the packed slot it will be
// written to (`packed_bytes`, for writing, so that the pack's stores find their lines owned rather
// than each waiting for memory); or, when that block is packed already (no source), its slot's
// lines, which the next dot reads. `state` is the queue, in memory for the whole kernel run:
// {ptr block, ptr source, ptr packed, i64 next line}, empty once the next line reaches the end.
struct SpreadPrefetch {
  llvm::Value* state;
  int64_t runs, run_bytes, stride_bytes, packed_bytes;
  int64_t lines() const { return std::max(runs * ((run_bytes + 63) / 64), packed_bytes / 64); }
};
// The LLVM type of SpreadPrefetch::state.
llvm::StructType* spread_prefetch_state_type(llvm::LLVMContext& context);
// Makes the queue empty, holding no block (at the kernel's entry).
void emit_spread_prefetch_init(llvm::IRBuilderBase& b, const SpreadPrefetch& p);
// Starts the queue over `block`, read from `source` (null: packed already) and packed at `packed`,
// unless it holds that block already (another dot on the same block asked first).
void emit_spread_prefetch_queue(llvm::IRBuilderBase& b, const SpreadPrefetch& p, llvm::Value* block,
                                llvm::Value* source, llvm::Value* packed);

// C (+)= A . B with f32 products and f32 sums (FMA): A is m x k, B k x n (any float dtypes, any
// strides), C an f32 matrix (CMatrix). B is packed into panels of gemm_tile(target).panel()
// f32 columns (`packed`: gemm_packed_b_bytes), the last one zero-padded; an f32 A is read in place,
// another one converted once into a dense f32 copy (`packed_a`: gemm_packed_a_bytes).
// On the bf16-pair path (gemm_bf16_pairs) B is packed in k pairs and A read in place, or, when its
// k pairs are not adjacent (cs != 1), first copied to a dense bf16 matrix in `packed_a`.
// With `b_packed`, `packed` holds B packed already (emit_pack_b) and B itself is not read. With
// `prefetch`, the micro-tiles issue its prefetches. With a `span` (gemm_spans_k), only k in the span.
void emit_gemm_f32(llvm::IRBuilderBase& b, const CpuTarget& target, const MatrixOperand& a, const MatrixOperand& bm,
                   const CMatrix& c, int64_t m, int64_t n, int64_t k, llvm::Value* packed, llvm::Value* packed_a,
                   bool b_packed = false, const SpreadPrefetch* prefetch = nullptr, const KSpan& span = {});

// C (+)= A . B for i8 A (m x k) and B (k x n) into an i32 C (CMatrix) on vpdpbusd, for
// gemm_int8_quads targets: the 8 x 32 tile of i32 accumulators, B packed in k quads (`packed`:
// gemm_packed_b_bytes; biased, or with its column sums after them on AMX targets), A read in place
// (or, when cs != 1, copied to a dense i8 matrix in `packed_a`, which also holds A's row sums:
// gemm_packed_a_bytes). Exact: equal to the interpreter's k-order i32 sums, wrap-around included.
// On gemm_int8_words targets the same tile shape as the f32 tile's runs vpmaddwd on k pairs, B
// packed in pairs of 16-bit words and A widened into a dense i16 copy in `packed_a` (or given as
// one already: an i16 A, its widened bytes).
void emit_gemm_i8(llvm::IRBuilderBase& b, const CpuTarget& target, const MatrixOperand& a, const MatrixOperand& bm,
                  const CMatrix& c, int64_t m, int64_t n, int64_t k, llvm::Value* packed, llvm::Value* packed_a,
                  bool b_packed = false, const SpreadPrefetch* prefetch = nullptr);

// Packs a k x n B into `packed` (gemm_packed_b_bytes) as the tile for `target` and A's dtype `a`
// reads it: f32 panels, bf16 k pairs or int8 k quads with their column sums. A packed B depends on
// B alone, so a caller may pack a block once and run several GEMMs on it (b_packed).
void emit_pack_b(llvm::IRBuilderBase& b, const CpuTarget& target, DType a, const MatrixOperand& bm, llvm::Value* packed,
                 int64_t n, int64_t k);

// Writes A (m x k) into `packed` as a dense row-major matrix of dtype `to` with leading dim `ld` (0:
// k): f32 converts 16-bit floats, A's own dtype copies the bits. Reads along whichever of A's dims is
// contiguous.
void emit_pack_dense(llvm::IRBuilderBase& b, const MatrixOperand& a, llvm::Value* packed, int64_t m, int64_t k, DType to,
                     int64_t ld = 0);

// C (+)= A . B in the accumulator type `acc` (f64, i32 or i64): each C[i][j] sums its products in k
// order, as the interpreter does. C has dtype `acc` and leading dim ldc.
void emit_gemm_loops(llvm::IRBuilderBase& b, const MatrixOperand& a, const MatrixOperand& bm, llvm::Value* c,
                     int64_t ldc, DType acc, int64_t m, int64_t n, int64_t k, bool accumulate);

}  // namespace tessera::jit
