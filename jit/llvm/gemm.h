// The matrix-multiply code generator behind dot_general: a register-blocked micro-kernel for f32
// accumulation (a 4 x 16 tile of C in eight <8 x float> registers, A broadcast, B loaded as vectors
// from a packed panel, FMA), and a plain loop nest for f64 and integer accumulation.
//
// jit/ internal: LLVM types are only forward-declared here.
#pragma once

#include <cstdint>

#include "jit/ir/dtype.h"

namespace llvm {
class IRBuilderBase;
class Value;
}  // namespace llvm

namespace tessera::jit {

// A row-major matrix in memory: element (r, c) is at ptr[r * ld + c].
struct MatrixOperand {
  llvm::Value* ptr;
  DType dtype;
  int64_t ld;
};

inline constexpr int64_t kGemmPanel = 16;  // columns of B per packed panel (two 8-float vectors)

// C (+)= A . B with f32 products and f32 sums (FMA): A is m x k, B k x n (any float dtypes), C an f32
// matrix with leading dim ldc. B is packed into 16-column f32 panels (`packed`: k * (n / 16) * 16
// floats) and A, unless it is dense f32 already, into a dense f32 copy (`packed_a`: m * k floats),
// converting 16-bit floats once.
void emit_gemm_f32(llvm::IRBuilderBase& b, const MatrixOperand& a, const MatrixOperand& bm, llvm::Value* c, int64_t ldc,
                   int64_t m, int64_t n, int64_t k, bool accumulate, llvm::Value* packed, llvm::Value* packed_a);

// Writes A (m x k) into `packed` as a dense row-major f32 matrix, converting 16-bit floats.
void emit_pack_dense_f32(llvm::IRBuilderBase& b, const MatrixOperand& a, llvm::Value* packed, int64_t m, int64_t k);

// C (+)= A . B in the accumulator type `acc` (f64, i32 or i64): each C[i][j] sums its products in k
// order, as the interpreter does. C has dtype `acc` and leading dim ldc.
void emit_gemm_loops(llvm::IRBuilderBase& b, const MatrixOperand& a, const MatrixOperand& bm, llvm::Value* c,
                     int64_t ldc, DType acc, int64_t m, int64_t n, int64_t k, bool accumulate);

}  // namespace tessera::jit
