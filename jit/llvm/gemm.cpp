#include "jit/llvm/gemm.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>

#include <vector>

#include "jit/llvm/codegen_support.h"

namespace tessera::jit {

namespace {

constexpr int64_t kRows = 4;   // rows of C per micro-tile
constexpr int64_t kWidth = 8;  // floats per vector

llvm::Value* i64(llvm::IRBuilderBase& b, int64_t v) { return b.getInt64(v); }

// Element (row, col) of `m` as a compute value (f32 for float dtypes), converted to `to`.
llvm::Value* element(llvm::IRBuilderBase& b, const MatrixOperand& m, llvm::Value* row, llvm::Value* col, DType to) {
  llvm::Value* index = b.CreateAdd(b.CreateMul(row, i64(b, m.ld)), col);
  llvm::Value* v = load_element(b, m.dtype, element_address(b, m.dtype, m.ptr, index));
  llvm::Type* want = compute_type(b, to);
  if (v->getType() == want) return v;
  if (want->isFloatingPointTy()) return v->getType()->isFloatingPointTy() ? b.CreateFPExt(v, want) : b.CreateSIToFP(v, want);
  return m.dtype == DType::i1 ? b.CreateZExt(v, want) : b.CreateSExtOrTrunc(v, want);
}

// Asks the memory system for row `row` of `m` (its first `cols` elements) ahead of use: the packing
// loops walk rows that are far apart in a large array, which the hardware prefetcher does not follow.
void prefetch_row(llvm::IRBuilderBase& b, const MatrixOperand& m, llvm::Value* row, int64_t cols) {
  llvm::Function* prefetch = llvm::Intrinsic::getDeclaration(b.GetInsertBlock()->getModule(), llvm::Intrinsic::prefetch,
                                                             {b.getPtrTy()});
  const int64_t line = 64 / dtype_size(m.dtype);
  for (int64_t c = 0; c < cols; c += line) {
    llvm::Value* address = element_address(b, m.dtype, m.ptr, b.CreateAdd(b.CreateMul(row, i64(b, m.ld)), i64(b, c)));
    b.CreateCall(prefetch, {address, b.getInt32(0), b.getInt32(3), b.getInt32(1)});
  }
}

constexpr int64_t kPrefetchRows = 4;  // how far ahead the packing loops prefetch

// Copies B's full 16-column panels into `packed` as f32: packed[(p * k + kk) * 16 + j] = B[kk][p * 16 + j].
// B is read row by row (each source row once, whatever its stride), the panels written interleaved.
void pack_b(llvm::IRBuilderBase& b, const MatrixOperand& bm, llvm::Value* packed, int64_t panels, int64_t k) {
  emit_loop(b, k, [&](llvm::Value* kk) {
    // Rows past the end prefetch harmlessly (a prefetch never faults).
    prefetch_row(b, bm, b.CreateAdd(kk, i64(b, kPrefetchRows)), panels * kGemmPanel);
    emit_loop(b, panels, [&](llvm::Value* p) {
      llvm::Value* dst_row = b.CreateMul(b.CreateAdd(b.CreateMul(p, i64(b, k)), kk), i64(b, kGemmPanel));
      for (int64_t j = 0; j < kGemmPanel; ++j) {
        llvm::Value* col = b.CreateAdd(b.CreateMul(p, i64(b, kGemmPanel)), i64(b, j));
        llvm::Value* v = element(b, bm, kk, col, DType::f32);
        b.CreateStore(v, b.CreateInBoundsGEP(b.getFloatTy(), packed, b.CreateAdd(dst_row, i64(b, j))));
      }
    });
  });
}

// Copies A into `packed` as a dense row-major f32 matrix (leading dim k), converting 16-bit floats
// once. Rows are read and written contiguously, so the loop vectorises; the micro-kernel then finds
// A on a few pages whatever its original row stride was.
MatrixOperand pack_a(llvm::IRBuilderBase& b, const MatrixOperand& a, llvm::Value* packed, int64_t m, int64_t k) {
  if (a.dtype == DType::f32 && a.ld == k) return a;  // already dense f32
  emit_pack_dense_f32(b, a, packed, m, k);
  return MatrixOperand{packed, DType::f32, k};
}

// One micro-tile: rows [i, i + rows) of C, panel p (columns p*16 .. p*16+16).
void micro_tile(llvm::IRBuilderBase& b, const MatrixOperand& a, llvm::Value* c, int64_t ldc, int64_t k, bool accumulate,
                llvm::Value* packed, llvm::Value* p, llvm::Value* i, int64_t rows) {
  llvm::Type* f32 = b.getFloatTy();
  auto* vec = llvm::FixedVectorType::get(f32, kWidth);
  const int64_t vectors = kGemmPanel / kWidth;
  llvm::Function* fma = llvm::Intrinsic::getDeclaration(b.GetInsertBlock()->getModule(), llvm::Intrinsic::fma, {vec});
  auto c_address = [&](int64_t r, int64_t v) {
    llvm::Value* row = b.CreateAdd(i, i64(b, r));
    llvm::Value* col = b.CreateAdd(b.CreateMul(p, i64(b, kGemmPanel)), i64(b, v * kWidth));
    return b.CreateInBoundsGEP(f32, c, b.CreateAdd(b.CreateMul(row, i64(b, ldc)), col));
  };
  std::vector<llvm::Value*> init;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t v = 0; v < vectors; ++v)
      init.push_back(accumulate ? static_cast<llvm::Value*>(b.CreateAlignedLoad(vec, c_address(r, v), llvm::Align(4)))
                                : llvm::Constant::getNullValue(vec));
  llvm::Value* panel_base = b.CreateMul(b.CreateMul(p, i64(b, k)), i64(b, kGemmPanel));
  std::vector<llvm::Value*> acc = emit_loop(
      b, i64(b, 0), i64(b, k), i64(b, 1), init, [&](llvm::Value* kk, const std::vector<llvm::Value*>& cur) {
        llvm::Value* row_base = b.CreateAdd(panel_base, b.CreateMul(kk, i64(b, kGemmPanel)));
        std::vector<llvm::Value*> bv;
        for (int64_t v = 0; v < vectors; ++v)
          bv.push_back(b.CreateAlignedLoad(
              vec, b.CreateInBoundsGEP(f32, packed, b.CreateAdd(row_base, i64(b, v * kWidth))), llvm::Align(4)));
        std::vector<llvm::Value*> next(cur.size());
        for (int64_t r = 0; r < rows; ++r) {
          llvm::Value* av = b.CreateVectorSplat(kWidth, element(b, a, b.CreateAdd(i, i64(b, r)), kk, DType::f32));
          for (int64_t v = 0; v < vectors; ++v)
            next[r * vectors + v] = b.CreateCall(fma, {av, bv[v], cur[r * vectors + v]});
        }
        return next;
      });
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t v = 0; v < vectors; ++v) b.CreateAlignedStore(acc[r * vectors + v], c_address(r, v), llvm::Align(4));
}

}  // namespace

void emit_gemm_f32(llvm::IRBuilderBase& b, const MatrixOperand& a, const MatrixOperand& bm, llvm::Value* c, int64_t ldc,
                   int64_t m, int64_t n, int64_t k, bool accumulate, llvm::Value* packed, llvm::Value* packed_a) {
  const int64_t panels = n / kGemmPanel;
  const int64_t full_rows = m / kRows * kRows;
  if (panels > 0) {
    pack_b(b, bm, packed, panels, k);
    const MatrixOperand dense_a = pack_a(b, a, packed_a, m, k);
    emit_loop(b, panels, [&](llvm::Value* p) {
      if (full_rows > 0)
        emit_loop(b, i64(b, 0), i64(b, full_rows), i64(b, kRows), {}, [&](llvm::Value* i, const std::vector<llvm::Value*>&) {
          micro_tile(b, dense_a, c, ldc, k, accumulate, packed, p, i, kRows);
          return std::vector<llvm::Value*>{};
        });
      if (full_rows < m)
        emit_loop(b, i64(b, full_rows), i64(b, m), i64(b, 1), {}, [&](llvm::Value* i, const std::vector<llvm::Value*>&) {
          micro_tile(b, dense_a, c, ldc, k, accumulate, packed, p, i, 1);
          return std::vector<llvm::Value*>{};
        });
    });
  }
  // Columns past the last full panel: a scalar loop with the same FMA accumulation.
  if (panels * kGemmPanel < n) {
    llvm::Type* f32 = b.getFloatTy();
    llvm::Function* fma = llvm::Intrinsic::getDeclaration(b.GetInsertBlock()->getModule(), llvm::Intrinsic::fma, {f32});
    emit_loop(b, m, [&](llvm::Value* i) {
      emit_loop(b, i64(b, panels * kGemmPanel), i64(b, n), i64(b, 1), {}, [&](llvm::Value* j, const std::vector<llvm::Value*>&) {
        llvm::Value* address = b.CreateInBoundsGEP(f32, c, b.CreateAdd(b.CreateMul(i, i64(b, ldc)), j));
        llvm::Value* init = accumulate ? static_cast<llvm::Value*>(b.CreateLoad(f32, address)) : llvm::ConstantFP::get(f32, 0.0);
        std::vector<llvm::Value*> sum =
            emit_loop(b, i64(b, 0), i64(b, k), i64(b, 1), {init}, [&](llvm::Value* kk, const std::vector<llvm::Value*>& s) {
              return std::vector<llvm::Value*>{
                  b.CreateCall(fma, {element(b, a, i, kk, DType::f32), element(b, bm, kk, j, DType::f32), s[0]})};
            });
        b.CreateStore(sum[0], address);
        return std::vector<llvm::Value*>{};
      });
    });
  }
}

void emit_pack_dense_f32(llvm::IRBuilderBase& b, const MatrixOperand& a, llvm::Value* packed, int64_t m, int64_t k) {
  emit_loop(b, m, [&](llvm::Value* r) {
    prefetch_row(b, a, b.CreateAdd(r, i64(b, kPrefetchRows)), k);
    emit_loop(b, k, [&](llvm::Value* kk) {
      b.CreateStore(element(b, a, r, kk, DType::f32),
                    b.CreateInBoundsGEP(b.getFloatTy(), packed, b.CreateAdd(b.CreateMul(r, i64(b, k)), kk)));
    });
  });
}

void emit_gemm_loops(llvm::IRBuilderBase& b, const MatrixOperand& a, const MatrixOperand& bm, llvm::Value* c,
                     int64_t ldc, DType acc, int64_t m, int64_t n, int64_t k, bool accumulate) {
  llvm::Type* t = compute_type(b, acc);
  const bool is_fp = t->isFloatingPointTy();
  emit_loop(b, m, [&](llvm::Value* i) {
    if (!accumulate)
      emit_loop(b, n, [&](llvm::Value* j) {
        b.CreateStore(llvm::Constant::getNullValue(t),
                      b.CreateInBoundsGEP(t, c, b.CreateAdd(b.CreateMul(i, i64(b, ldc)), j)));
      });
    emit_loop(b, k, [&](llvm::Value* kk) {
      llvm::Value* av = element(b, a, i, kk, acc);
      emit_loop(b, n, [&](llvm::Value* j) {
        llvm::Value* address = b.CreateInBoundsGEP(t, c, b.CreateAdd(b.CreateMul(i, i64(b, ldc)), j));
        llvm::Value* prod = is_fp ? b.CreateFMul(av, element(b, bm, kk, j, acc)) : b.CreateMul(av, element(b, bm, kk, j, acc));
        llvm::Value* old = b.CreateLoad(t, address);
        b.CreateStore(is_fp ? b.CreateFAdd(old, prod) : b.CreateAdd(old, prod), address);
      });
    });
  });
}

}  // namespace tessera::jit
