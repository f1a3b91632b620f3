// AMX without AMX, for tests: the tile instructions the dot uses, as C++ following their definitions
// in the Intel SDM, and a way to run the dot code generated for the `amx` target on a host that
// has no AMX, its tile intrinsics replaced by calls to those functions. The rest of that code (B's
// packing, A's padded copy, the AVX-512 tiles at the edges, every address the emitter computes)
// runs as compiled. tests/llvm/amx_test.cpp uses it; the kernels tessera compiles never do.
//
// jit/ internal; no LLVM types appear here.
#pragma once

#include <cstdint>

#include "jit/ir/dtype.h"
#include "jit/llvm/amx_plan.h"

namespace tessera::jit::amx_emulation {

// A tile register of the dot's one shape: 16 rows of 64 bytes.
struct Tile {
  uint8_t bytes[kAmxTileRows][kAmxTileBytes];
};

// tileloadd / tilestored: row r at base + r * stride.
void tileloadd(Tile& t, const void* base, int64_t stride);
void tilestored(const Tile& t, void* base, int64_t stride);
// tdpbf16ps: c[m][n] (f32) += a[m][2k] b[k][2n], then += a[m][2k + 1] b[k][2n + 1] (bf16 products
// in f32), k in order. Denormals are not flushed (the hardware flushes them; the tests' data has
// none).
void tdpbf16ps(Tile& c, const Tile& a, const Tile& b);
// tdpbssd: c[m][n] (i32) += the four products of signed bytes a[m][4k + e] b[k][4n + e], mod 2^32.
void tdpbssd(Tile& c, const Tile& a, const Tile& b);

// C (+)= A . B by the code the `amx` target gets for it (emit_gemm_f32 for bf16 x bf16 -> f32,
// emit_gemm_i8 for i8 x i8 -> i32), tiles emulated, compiled for and run on this host, which must
// run the avx512_bf16 target (the edges' vdpbf16ps / vpdpbusd tiles). A is m x k with element (r, c)
// at a[r * lda + c * a_cs], B k x n row-major with leading dim ldb, C m x n (f32 or i32) with
// leading dim ldc; accumulating, the sums start from C or, given `from`, from that m x n matrix
// (leading dim from_ld). With `span` (bf16 only), k in [span_lo, span_hi) alone, the bounds read at
// run time as a KSpan's are.
struct Dot {
  DType dtype;  // bf16 or i8: both operands
  int64_t m, n, k;
  const void* a;
  int64_t lda, a_cs;
  const void* b;
  int64_t ldb;
  void* c;
  int64_t ldc;
  bool accumulate;
  const void* from = nullptr;
  int64_t from_ld = 0;
  bool span = false;
  int64_t span_lo = 0, span_hi = 0;
};
void run_dot(const Dot& dot);

}  // namespace tessera::jit::amx_emulation
