#include "jit/llvm/gemm.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "jit/llvm/amx_gemm.h"
#include "jit/llvm/codegen_support.h"

namespace tessera::jit {

namespace {

llvm::Value* i64(llvm::IRBuilderBase& b, int64_t v) { return b.getInt64(v); }

// The address of element (row, col) of `m`.
llvm::Value* address_of(llvm::IRBuilderBase& b, const MatrixOperand& m, llvm::Value* row, llvm::Value* col) {
  llvm::Value* index = b.CreateAdd(b.CreateMul(row, i64(b, m.ld)), m.cs == 1 ? col : b.CreateMul(col, i64(b, m.cs)));
  return element_address(b, m.dtype, m.ptr, index);
}

// Element (row, col) of `m` as a compute value (f32 for float dtypes), converted to `to`.
llvm::Value* element(llvm::IRBuilderBase& b, const MatrixOperand& m, llvm::Value* row, llvm::Value* col, DType to) {
  llvm::Value* v = load_element(b, m.dtype, address_of(b, m, row, col));
  llvm::Type* want = compute_type(b, to);
  if (v->getType() == want) return v;
  if (want->isFloatingPointTy()) return v->getType()->isFloatingPointTy() ? b.CreateFPExt(v, want) : b.CreateSIToFP(v, want);
  return m.dtype == DType::i1 ? b.CreateZExt(v, want) : b.CreateSExtOrTrunc(v, want);
}

// Asks the memory system for row `row` of `m` (its first `cols` elements) ahead of use: the packing
// loops walk rows that are far apart in a large array, which the hardware prefetcher does not follow.
// A matrix with strided rows (a transposed view) is walked along its contiguous dim instead.
void prefetch_row(llvm::IRBuilderBase& b, const MatrixOperand& m, llvm::Value* row, int64_t cols) {
  if (!m.rows_contiguous()) return;
  llvm::Function* prefetch = llvm::Intrinsic::getDeclaration(b.GetInsertBlock()->getModule(), llvm::Intrinsic::prefetch,
                                                             {b.getPtrTy()});
  const int64_t line = 64 / dtype_size(m.dtype);
  for (int64_t c = 0; c < cols; c += line) {
    b.CreateCall(prefetch, {address_of(b, m, row, i64(b, c)), b.getInt32(0), b.getInt32(3), b.getInt32(1)});
  }
}

constexpr int64_t kPrefetchRows = 4;  // how far ahead the packing loops prefetch

// How many k steps one trip of a micro-tile's k loop runs. The loop counter's add, compare and branch
// are integer uops the scheduler may issue on the two ports the 512-bit FMAs need (ports 0 and 5 on
// Intel cores); eight steps a trip make them 1/64th of the FMAs' slots rather than 1/8th. On the seed
// matmul (2048 x 2048 x 1024, 128-blocks, Emerald Rapids class) f32 ran 3-9% faster than one step a
// trip (4: 3-7%, 16: 1-6%), bf16 2-3%; see design §8.
constexpr int64_t kUnrollK = 8;

// The micro-tiles' k loop: `step(kk, acc)` for kk in [first, past) (first <= past, known at run time
// or constants), kUnrollK steps a trip, then what is left in a loop of one step a trip; `on_trip(trip)`,
// if given, at the start of every whole trip. A loop with a constant count of zero is not emitted.
// Returns the accumulators after all of it.
std::vector<llvm::Value*> emit_k_loop(llvm::IRBuilderBase& b, llvm::Value* first, llvm::Value* past,
                                      std::vector<llvm::Value*> acc, const LoopBody& step,
                                      const std::function<void(llvm::Value* trip)>& on_trip = nullptr) {
  auto none = [](llvm::Value* from, llvm::Value* to) { return from == to; };  // constants are uniqued
  llvm::Value* trips = b.CreateUDiv(b.CreateSub(past, first), i64(b, kUnrollK));
  if (!none(i64(b, 0), trips))
    acc = emit_loop(b, i64(b, 0), trips, i64(b, 1), acc, [&](llvm::Value* trip, const std::vector<llvm::Value*>& cur) {
      if (on_trip) on_trip(trip);
      std::vector<llvm::Value*> next = cur;
      llvm::Value* base = b.CreateAdd(first, b.CreateMul(trip, i64(b, kUnrollK)));
      for (int64_t u = 0; u < kUnrollK; ++u) next = step(b.CreateAdd(base, i64(b, u)), next);
      return next;
    });
  llvm::Value* done = b.CreateAdd(first, b.CreateMul(trips, i64(b, kUnrollK)));
  if (!none(done, past)) acc = emit_loop(b, done, past, i64(b, 1), acc, step);
  return acc;
}

std::vector<llvm::Value*> emit_k_loop(llvm::IRBuilderBase& b, int64_t count, std::vector<llvm::Value*> acc,
                                      const LoopBody& step,
                                      const std::function<void(llvm::Value* trip)>& on_trip = nullptr) {
  return emit_k_loop(b, i64(b, 0), i64(b, count), std::move(acc), step, on_trip);
}

// The k loop of a micro-tile: over all of k, or over the span.
std::vector<llvm::Value*> emit_k_loop(llvm::IRBuilderBase& b, int64_t count, const KSpan& span,
                                      std::vector<llvm::Value*> acc, const LoopBody& step,
                                      const std::function<void(llvm::Value* trip)>& on_trip = nullptr) {
  if (span.whole()) return emit_k_loop(b, count, std::move(acc), step, on_trip);
  return emit_k_loop(b, span.lo, span.hi, std::move(acc), step, on_trip);
}

// The number of k rows a block of a transposed B spans in pack_b: 16, one 64-byte line of f32 down
// a column, and a square the transpose below works on.
constexpr int64_t kTransposeRows = 16;

// Transposes `cols` vectors of kTransposeRows elements (column j's run of k) into kTransposeRows
// vectors of `cols` (row kk across the columns), cols a multiple of kTransposeRows: each square of
// 16 columns by log2(16) perfect shuffles (new[2i] and new[2i + 1] the interleaved low and high
// halves of old[i] and old[i + 8]; after four rounds new[kk] holds element kk of every column, in
// column order), the squares' rows then joined. About one shuffle per 4 elements, where building the
// rows element by element took a load and a store each.
std::vector<llvm::Value*> transpose_columns(llvm::IRBuilderBase& b, const std::vector<llvm::Value*>& columns) {
  constexpr int64_t t = kTransposeRows;
  std::vector<int> lo_mask, hi_mask;
  for (int i = 0; i < t / 2; ++i) {
    lo_mask.insert(lo_mask.end(), {i, i + static_cast<int>(t)});
    hi_mask.insert(hi_mask.end(), {i + static_cast<int>(t / 2), i + static_cast<int>(t + t / 2)});
  }
  std::vector<std::vector<llvm::Value*>> squares;
  for (size_t first = 0; first < columns.size(); first += t) {
    std::vector<llvm::Value*> v(columns.begin() + static_cast<std::ptrdiff_t>(first),
                                columns.begin() + static_cast<std::ptrdiff_t>(first + t));
    for (int64_t round = 1; round < t; round *= 2) {
      std::vector<llvm::Value*> next(t);
      for (int64_t i = 0; i < t / 2; ++i) {
        next[2 * i] = b.CreateShuffleVector(v[i], v[i + t / 2], lo_mask);
        next[2 * i + 1] = b.CreateShuffleVector(v[i], v[i + t / 2], hi_mask);
      }
      v = std::move(next);
    }
    squares.push_back(std::move(v));
  }
  // Join the squares' rows: row kk is square 0's row kk, then square 1's, ...
  std::vector<llvm::Value*> rows(t);
  for (int64_t kk = 0; kk < t; ++kk) {
    std::vector<llvm::Value*> parts;
    for (const auto& sq : squares) parts.push_back(sq[kk]);
    while (parts.size() > 1) {
      std::vector<llvm::Value*> joined;
      for (size_t i = 0; i + 1 < parts.size(); i += 2) {
        const auto width = static_cast<int>(llvm::cast<llvm::FixedVectorType>(parts[i]->getType())->getNumElements());
        std::vector<int> concat(2 * width);
        for (int e = 0; e < 2 * width; ++e) concat[e] = e;
        joined.push_back(b.CreateShuffleVector(parts[i], parts[i + 1], concat));
      }
      if (parts.size() % 2) joined.push_back(parts.back());
      parts = std::move(joined);
    }
    rows[kk] = parts[0];
  }
  return rows;
}

// The blocks of a transposed B (its columns contiguous) that pack_b and pack_b_pairs read whole: for
// each block [0, blocks) of kTransposeRows k rows (or pairs) and each of the `full` whole panels,
// `column(block, col)` the vector down column col, and `store(p, block, q, row)` each of the
// block's rows across the panel's columns (transpose_columns).
void pack_transposed_blocks(
    llvm::IRBuilderBase& b, int64_t blocks, int64_t full, int64_t panel,
    const std::function<llvm::Value*(llvm::Value* block, llvm::Value* col)>& column,
    const std::function<void(llvm::Value* p, llvm::Value* block, int64_t q, llvm::Value* row)>& store) {
  emit_loop(b, blocks, [&](llvm::Value* block) {
    emit_loop(b, full, [&](llvm::Value* p) {
      llvm::Value* col0 = b.CreateMul(p, i64(b, panel));
      std::vector<llvm::Value*> columns;
      for (int64_t j = 0; j < panel; ++j) columns.push_back(column(block, b.CreateAdd(col0, i64(b, j))));
      const std::vector<llvm::Value*> rows = transpose_columns(b, columns);
      for (int64_t q = 0; q < kTransposeRows; ++q) store(p, block, q, rows[q]);
    });
  });
}

// Copies B into `packed` as f32 panels of `panel` columns: packed[(p * k + kk) * panel + j] =
// B[kk][p * panel + j], the columns of the last panel past n set to zero (so the micro-kernel can
// run it whole and mask only C). B is read row by row (each source row once, whatever its stride),
// the panels written interleaved. A transposed B (`x @ w.T`: B's columns contiguous, its rows
// strided) is read instead in blocks of 16 k rows by a panel's columns, one vector down each column
// and transposed in registers (transpose_columns), whatever rows and columns those blocks leave
// taken element by element.
void pack_b(llvm::IRBuilderBase& b, const MatrixOperand& bm, llvm::Value* packed, int64_t n, int64_t k, int64_t panel) {
  const int64_t full = n / panel, rest = n % panel;
  llvm::Type* f32 = b.getFloatTy();
  const bool f32_or_bf16 = bm.dtype == DType::f32 || bm.dtype == DType::bf16;
  const int64_t t = kTransposeRows;
  const bool transposed_blocks = bm.ld == 1 && !bm.rows_contiguous() && f32_or_bf16 && panel % t == 0 && full > 0;
  // A vector of `count` elements of bm from `address` on, as f32.
  auto load_f32 = [&](llvm::Value* address, int64_t count) {
    llvm::Value* v = b.CreateAlignedLoad(llvm::FixedVectorType::get(storage_type(b, bm.dtype), count), address,
                                         llvm::Align(dtype_size(bm.dtype)));
    auto* f32_vec = llvm::FixedVectorType::get(f32, count);
    if (bm.dtype == DType::bf16)  // its bits are the top half of an f32's
      v = b.CreateBitCast(b.CreateShl(b.CreateZExt(v, llvm::FixedVectorType::get(b.getInt32Ty(), count)), 16), f32_vec);
    return v;
  };
  if (transposed_blocks && k >= t)
    pack_transposed_blocks(
        b, k / t, full, panel,
        [&](llvm::Value* kb, llvm::Value* col) { return load_f32(address_of(b, bm, b.CreateMul(kb, i64(b, t)), col), t); },
        [&](llvm::Value* p, llvm::Value* kb, int64_t q, llvm::Value* row) {
          llvm::Value* kk = b.CreateAdd(b.CreateMul(kb, i64(b, t)), i64(b, q));
          llvm::Value* dst_row = b.CreateMul(b.CreateAdd(b.CreateMul(p, i64(b, k)), kk), i64(b, panel));
          b.CreateAlignedStore(row, b.CreateInBoundsGEP(f32, packed, dst_row), llvm::Align(4));
        });
  // Row kk of panel p (its first `cols` columns inside B).
  auto copy = [&](llvm::Value* kk, llvm::Value* p, int64_t cols) {
    llvm::Value* dst_row = b.CreateMul(b.CreateAdd(b.CreateMul(p, i64(b, k)), kk), i64(b, panel));
    if (cols == panel && bm.rows_contiguous() && f32_or_bf16) {
      // A full panel's row as one vector load and one store.
      b.CreateAlignedStore(load_f32(address_of(b, bm, kk, b.CreateMul(p, i64(b, panel))), panel),
                           b.CreateInBoundsGEP(f32, packed, dst_row), llvm::Align(4));
      return;
    }
    for (int64_t j = 0; j < panel; ++j) {
      llvm::Value* v = j < cols ? element(b, bm, kk, b.CreateAdd(b.CreateMul(p, i64(b, panel)), i64(b, j)), DType::f32)
                                : llvm::ConstantFP::get(f32, 0.0);
      b.CreateStore(v, b.CreateInBoundsGEP(f32, packed, b.CreateAdd(dst_row, i64(b, j))));
    }
  };
  // Rows [first, k) of the full panels, and with them (`with_rest`) of the last partial one.
  auto rows = [&](int64_t first, bool with_rest) {
    if (first >= k || (full == 0 && !with_rest)) return;
    emit_loop(b, i64(b, first), i64(b, k), i64(b, 1), {}, [&](llvm::Value* kk, const std::vector<llvm::Value*>&) {
      // Rows past the end prefetch harmlessly (a prefetch never faults).
      prefetch_row(b, bm, b.CreateAdd(kk, i64(b, kPrefetchRows)), n);
      if (full > 0) emit_loop(b, full, [&](llvm::Value* p) { copy(kk, p, panel); });
      if (with_rest) copy(kk, i64(b, full), rest);
      return std::vector<llvm::Value*>{};
    });
  };
  if (!transposed_blocks) {
    rows(0, rest > 0);
    return;
  }
  // What the blocks left: k's last rows of the full panels, and all of the last partial panel.
  rows(k / t * t, false);
  if (rest > 0) emit_loop(b, k, [&](llvm::Value* kk) { copy(kk, i64(b, full), rest); });
}

// A as the f32 micro-tile (`to` f32) or the vpmaddwd tile (`to` i16) reads it: in place when it is
// of that dtype already, else a dense row-major copy in `packed` (leading dim k), converted once
// (16-bit floats widened to f32, bytes sign-extended to i16). Packing an f32 A too measured no
// faster on the seed matmul and slower for megablox gmm, whose A blocks do not recur soon enough
// for the packed-A cache (codegen_dot.cpp) to keep them.
MatrixOperand pack_a(llvm::IRBuilderBase& b, const MatrixOperand& a, llvm::Value* packed, int64_t m, int64_t k,
                     DType to) {
  if (a.dtype == to) return a;
  emit_pack_dense(b, a, packed, m, k, to);
  return MatrixOperand{packed, to, k};
}

// A as the k-group tiles read it (one 32-bit word per group of a row): in place when its rows are
// contiguous, else a dense copy of its bits in `packed`.
MatrixOperand rows_contiguous_a(llvm::IRBuilderBase& b, const MatrixOperand& a, llvm::Value* packed, int64_t m,
                                int64_t k) {
  if (a.rows_contiguous()) return a;
  emit_pack_dense(b, a, packed, m, k, a.dtype);
  return MatrixOperand{packed, a.dtype, k};
}

// The C side of a micro-tile: rows [i, i + rows), columns [col0, col0 + cols) of C (f32, or i32
// for the int8 tiles), in `vectors` registers per row; a partial last vector (cols not a multiple
// of the width) loads and stores under a constant mask, so a column tail never touches C past n.
struct CTile {
  llvm::IRBuilderBase& b;
  const CMatrix& c;
  llvm::Value* col0;
  llvm::Value* i;
  int64_t rows, width, vectors, partial;
  llvm::Type* elem;  // f32, or i32 for the int8 tile
  llvm::FixedVectorType* vec;
  llvm::Value* mask = nullptr;

  CTile(llvm::IRBuilderBase& b_, const CMatrix& c_, llvm::Value* col0_, llvm::Value* i_, int64_t rows_, int64_t cols,
        int64_t width_, llvm::Type* elem_ = nullptr)
      : b(b_), c(c_), col0(col0_), i(i_), rows(rows_), width(width_), vectors((cols + width_ - 1) / width_),
        partial(cols % width_), elem(elem_ ? elem_ : b_.getFloatTy()), vec(llvm::FixedVectorType::get(elem, width_)) {
    if (!partial) return;
    std::vector<llvm::Constant*> lanes;
    for (int64_t l = 0; l < width; ++l) lanes.push_back(b.getInt1(l < partial));
    mask = llvm::ConstantVector::get(lanes);
  }
  bool masked(int64_t v) const { return partial && v == vectors - 1; }
  llvm::Value* address(llvm::Value* base, int64_t ld, int64_t r, int64_t v) {
    llvm::Value* row = b.CreateAdd(i, i64(b, r));
    return b.CreateInBoundsGEP(elem, base,
                               b.CreateAdd(b.CreateMul(row, i64(b, ld)), b.CreateAdd(col0, i64(b, v * width))));
  }
  // The accumulators' starting values: the sum C starts from when accumulating (CMatrix::source),
  // else zeros (row-major order).
  std::vector<llvm::Value*> load() {
    std::vector<llvm::Value*> init;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t v = 0; v < vectors; ++v) {
        llvm::Value* zero = llvm::Constant::getNullValue(vec);
        if (!c.accumulate) {
          init.push_back(zero);
          continue;
        }
        llvm::Value* at = address(c.source(), c.source_ld(), r, v);
        if (masked(v)) init.push_back(b.CreateMaskedLoad(vec, at, llvm::Align(4), mask, zero));
        else init.push_back(b.CreateAlignedLoad(vec, at, llvm::Align(4)));
      }
    return init;
  }
  // Streams whole vectors when C's rows are whole lines and C starts on one (checked here, once per
  // dot after LLVM hoists it; the tiles' columns start at multiples of 16 elements), so that every
  // such vector lies at a multiple of its size.
  void store(const std::vector<llvm::Value*>& acc) {
    auto stores = [&](bool nontemporal) {
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t v = 0; v < vectors; ++v) {
          llvm::Value* at = address(c.ptr, c.ld, r, v);
          if (masked(v)) {
            b.CreateMaskedStore(acc[r * vectors + v], at, llvm::Align(4), mask);
          } else if (!nontemporal) {
            b.CreateAlignedStore(acc[r * vectors + v], at, llvm::Align(4));
          } else {
            store_nontemporal(b, acc[r * vectors + v], at, static_cast<uint64_t>(width * 4));
          }
        }
    };
    if (!c.streaming || (c.ld * 4) % 64 != 0) {
      stores(false);
      return;
    }
    llvm::Value* aligned = b.CreateICmpEQ(b.CreateAnd(b.CreatePtrToInt(c.ptr, b.getInt64Ty()), i64(b, 63)), i64(b, 0));
    llvm::Function* f = b.GetInsertBlock()->getParent();
    auto* streamed = llvm::BasicBlock::Create(b.getContext(), "c.stream", f);
    auto* cached = llvm::BasicBlock::Create(b.getContext(), "c.store", f);
    auto* done = llvm::BasicBlock::Create(b.getContext(), "c.stored", f);
    b.CreateCondBr(aligned, streamed, cached);
    b.SetInsertPoint(streamed);
    stores(true);
    b.CreateBr(done);
    b.SetInsertPoint(cached);
    stores(false);
    b.CreateBr(done);
    b.SetInsertPoint(done);
  }
};

// One micro-tile: rows [i, i + rows) and columns [col0, col0 + cols) of C, from the packed panel
// starting at `panel_ptr` (k rows of tile.panel() floats). The accumulators stay in registers
// across the whole k loop (loop-carried values, no memory); a partial last vector (cols not a
// multiple of the width) loads and stores C under a constant mask.
// Issues the next `count` lines of the queue, if any are left, and moves it on.
void issue_spread_prefetch(llvm::IRBuilderBase& b, const SpreadPrefetch& p, int64_t count) {
  llvm::StructType* st = spread_prefetch_state_type(b.getContext());
  llvm::Value* cursor_at = b.CreateStructGEP(st, p.state, 3);
  llvm::Value* cursor = b.CreateLoad(b.getInt64Ty(), cursor_at);
  llvm::Function* f = b.GetInsertBlock()->getParent();
  llvm::BasicBlock* issue = llvm::BasicBlock::Create(b.getContext(), "prefetch", f);
  llvm::BasicBlock* done = llvm::BasicBlock::Create(b.getContext(), "prefetch.done", f);
  b.CreateCondBr(b.CreateICmpULT(cursor, i64(b, p.lines())), issue, done);
  b.SetInsertPoint(issue);
  llvm::Function* prefetch =
      llvm::Intrinsic::getDeclaration(f->getParent(), llvm::Intrinsic::prefetch, {b.getPtrTy()});
  llvm::Value* source = b.CreateLoad(b.getPtrTy(), b.CreateStructGEP(st, p.state, 1));
  llvm::Value* packed = b.CreateLoad(b.getPtrTy(), b.CreateStructGEP(st, p.state, 2));
  // No source: the block is packed already, and the next dot reads its slot, from L2 once fetched
  // (the same dot fetching the slot for writing as well measured 1-2% slower).
  llvm::BasicBlock* packed_only = llvm::BasicBlock::Create(b.getContext(), "prefetch.slot", f);
  llvm::BasicBlock* both = llvm::BasicBlock::Create(b.getContext(), "prefetch.block", f);
  b.CreateCondBr(b.CreateIsNull(source), packed_only, both);
  b.SetInsertPoint(packed_only);
  for (int64_t u = 0; u < count; ++u) {
    llvm::Value* d =
        b.CreateBinaryIntrinsic(llvm::Intrinsic::umin, b.CreateAdd(cursor, i64(b, u)), i64(b, p.packed_bytes / 64 - 1));
    b.CreateCall(prefetch, {b.CreateGEP(b.getInt8Ty(), packed, b.CreateMul(d, i64(b, 64))), b.getInt32(0),
                            b.getInt32(2), b.getInt32(1)});
  }
  b.CreateStore(b.CreateAdd(cursor, i64(b, count)), cursor_at);
  b.CreateBr(done);
  b.SetInsertPoint(both);
  const int64_t run_lines = (p.run_bytes + 63) / 64, source_lines = p.runs * run_lines;
  for (int64_t u = 0; u < count; ++u) {
    llvm::Value* line = b.CreateAdd(cursor, i64(b, u));
    // Past its last line, either part asks for that line again: already asked for, nearly free.
    llvm::Value* s = b.CreateBinaryIntrinsic(llvm::Intrinsic::umin, line, i64(b, source_lines - 1));
    llvm::Value* at = b.CreateAdd(b.CreateMul(b.CreateUDiv(s, i64(b, run_lines)), i64(b, p.stride_bytes)),
                                  b.CreateMul(b.CreateURem(s, i64(b, run_lines)), i64(b, 64)));
    b.CreateCall(prefetch, {b.CreateGEP(b.getInt8Ty(), source, at), b.getInt32(0), b.getInt32(2), b.getInt32(1)});
    llvm::Value* d = b.CreateBinaryIntrinsic(llvm::Intrinsic::umin, line, i64(b, p.packed_bytes / 64 - 1));
    b.CreateCall(prefetch, {b.CreateGEP(b.getInt8Ty(), packed, b.CreateMul(d, i64(b, 64))), b.getInt32(1),
                            b.getInt32(2), b.getInt32(1)});
  }
  b.CreateStore(b.CreateAdd(cursor, i64(b, count)), cursor_at);
  b.CreateBr(done);
  b.SetInsertPoint(done);
}

// What the micro-tiles of one dot issue every trip of their k loops: `count` lines of `queue` (none
// without one).
struct TripPrefetch {
  const SpreadPrefetch* queue = nullptr;
  int64_t count = 0;
  std::function<void(llvm::Value*)> hook(llvm::IRBuilderBase& b) const {
    if (!queue) return nullptr;
    return [&b, this](llvm::Value*) { issue_spread_prefetch(b, *queue, count); };
  }
};

// The queue spread over the trips of a dot's micro-tiles (an m x n C, `steps` k steps each: k, or
// its pairs or quads): two lines a trip at least (the next dots take the rest), eight at most (a
// dot of a few rows, megablox gmm's chunks, would otherwise burst).
TripPrefetch trip_prefetch(const SpreadPrefetch* queue, const GemmTile& tile, int64_t m, int64_t n, int64_t steps) {
  if (!queue) return {};
  const int64_t tiles = ((m + tile.rows - 1) / tile.rows) * ((n + tile.panel() - 1) / tile.panel());
  const int64_t trips = tiles * (steps / kUnrollK);
  return {queue, std::clamp<int64_t>(trips ? (queue->lines() + trips - 1) / trips : 0, 2, 8)};
}

void micro_tile(llvm::IRBuilderBase& b, const GemmTile& tile, const MatrixOperand& a, const CMatrix& c, int64_t k,
                const KSpan& span, llvm::Value* panel_ptr, llvm::Value* col0, llvm::Value* i, int64_t rows,
                int64_t cols, const TripPrefetch& prefetch) {
  llvm::Type* f32 = b.getFloatTy();
  CTile ct(b, c, col0, i, rows, cols, tile.width);
  const int64_t width = tile.width, vectors = ct.vectors;
  auto* vec = ct.vec;
  llvm::Function* fma = llvm::Intrinsic::getDeclaration(b.GetInsertBlock()->getModule(), llvm::Intrinsic::fma, {vec});
  const std::vector<llvm::Value*> init = ct.load();
  std::vector<llvm::Value*> acc = emit_k_loop(
      b, k, span, init, [&](llvm::Value* kk, const std::vector<llvm::Value*>& cur) {
        llvm::Value* row_base = b.CreateMul(kk, i64(b, tile.panel()));
        std::vector<llvm::Value*> bv;
        for (int64_t v = 0; v < vectors; ++v)
          bv.push_back(b.CreateAlignedLoad(
              vec, b.CreateInBoundsGEP(f32, panel_ptr, b.CreateAdd(row_base, i64(b, v * width))), llvm::Align(4)));
        std::vector<llvm::Value*> next(cur.size());
        for (int64_t r = 0; r < rows; ++r) {
          llvm::Value* av = b.CreateVectorSplat(width, element(b, a, b.CreateAdd(i, i64(b, r)), kk, DType::f32));
          for (int64_t v = 0; v < vectors; ++v)
            next[r * vectors + v] = b.CreateCall(fma, {av, bv[v], cur[r * vectors + v]});
        }
        return next;
      },
      prefetch.hook(b));
  ct.store(acc);
}

// Zeroes rows [used, groups) of every panel of a k-group packed B (`panels` panels of `groups`
// rows of `panel` 32-bit lanes): the rows past k that pad a panel to whole AMX k steps
// (packed_b_groups).
void zero_padding_groups(llvm::IRBuilderBase& b, llvm::Value* packed, int64_t panels, int64_t used, int64_t groups,
                         int64_t panel) {
  if (used == groups) return;
  auto* row = llvm::FixedVectorType::get(b.getInt32Ty(), panel);
  emit_loop(b, panels, [&](llvm::Value* p) {
    emit_loop(b, groups - used, [&](llvm::Value* g) {
      llvm::Value* lane = b.CreateMul(b.CreateAdd(b.CreateMul(p, i64(b, groups)), b.CreateAdd(g, i64(b, used))),
                                      i64(b, panel));
      b.CreateAlignedStore(llvm::Constant::getNullValue(row), b.CreateInBoundsGEP(b.getInt32Ty(), packed, lane),
                           llvm::Align(4));
    });
  });
}

// ---- k pairs of 16-bit elements: bf16 on vdpbf16ps, int8 widened to words on vpmaddwd ----
// B is packed into panels of k pairs: packed[((p * k2 + kp) * panel + j) * 2 + e] = B[2 kp + e][p *
// panel + j] as raw bf16 bits, k2 = packed_b_groups(k, 2) (ceil(k / 2) rounded up to whole AMX k
// steps), zero where 2 kp + e >= k (an odd k's last pair, the padding pairs) or the column is past n.
// One 64-byte load then holds 16 columns' pairs, the layout vdpbf16ps multiplies against an A pair
// broadcast to every lane, and 16 pairs of 16 columns are an AMX B tile (jit/llvm/amx_plan.h).
// An i8 B is packed the same way, each element sign-extended to 16 bits: the layout of the words
// tile's vpmaddwd (micro_tile_pairs).
void pack_b_pairs(llvm::IRBuilderBase& b, const MatrixOperand& bm, llvm::Value* packed, int64_t n, int64_t k,
                  int64_t panel) {
  const int64_t full = n / panel, rest = n % panel, k2 = packed_b_groups(k, 2);
  llvm::Type* i16 = b.getInt16Ty();
  const bool widen = bm.dtype == DType::i8;
  llvm::Type* source = widen ? b.getInt8Ty() : i16;
  auto load16 = [&](llvm::Type* t16, llvm::Type* t, llvm::Value* address) {
    llvm::Value* v = b.CreateAlignedLoad(t, address, llvm::Align(widen ? 1 : 2));
    return widen ? b.CreateSExt(v, t16) : v;
  };
  // A transposed 16-bit B (`x @ w.T`): a pair is two neighbours down a column, one 32-bit word, so
  // blocks of 16 pairs by a panel's columns are a vector of words down each column, transposed in
  // registers as pack_b does.
  const int64_t t = kTransposeRows;
  const bool transposed_blocks = !widen && bm.ld == 1 && !bm.rows_contiguous() && panel % t == 0 && full > 0;
  if (transposed_blocks && k >= 2 * t) {
    auto* words = llvm::FixedVectorType::get(b.getInt32Ty(), t);
    pack_transposed_blocks(
        b, k / (2 * t), full, panel,
        [&](llvm::Value* kb, llvm::Value* col) {
          return b.CreateAlignedLoad(words, address_of(b, bm, b.CreateMul(kb, i64(b, 2 * t)), col), llvm::Align(2));
        },
        [&](llvm::Value* p, llvm::Value* kb, int64_t q, llvm::Value* row) {
          llvm::Value* kp = b.CreateAdd(b.CreateMul(kb, i64(b, t)), i64(b, q));
          llvm::Value* dst_row = b.CreateMul(b.CreateAdd(b.CreateMul(p, i64(b, k2)), kp), i64(b, panel * 2));
          b.CreateAlignedStore(row, b.CreateInBoundsGEP(i16, packed, dst_row), llvm::Align(2));
        });
  }
  const int64_t pairs_done = transposed_blocks ? k / (2 * t) * t : 0;
  auto pair = [&](llvm::Value* kp, bool odd_tail, bool full_panels, bool rest_panel) {
    llvm::Value* k0 = b.CreateMul(kp, i64(b, 2));
    prefetch_row(b, bm, b.CreateAdd(k0, i64(b, kPrefetchRows)), n);
    prefetch_row(b, bm, b.CreateAdd(k0, i64(b, kPrefetchRows + 1)), n);
    auto copy = [&](llvm::Value* p, int64_t cols) {
      llvm::Value* dst_row = b.CreateMul(b.CreateAdd(b.CreateMul(p, i64(b, k2)), kp), i64(b, panel * 2));
      if (cols == panel && !odd_tail && bm.rows_contiguous()) {
        // A whole pair of a full panel as vectors: its 2 row loads interleaved into one store.
        auto* row_vec = llvm::FixedVectorType::get(i16, panel);
        auto* source_vec = llvm::FixedVectorType::get(source, panel);
        llvm::Value* col0 = b.CreateMul(p, i64(b, panel));
        llvm::Value* lo = load16(row_vec, source_vec, address_of(b, bm, k0, col0));
        llvm::Value* hi = load16(row_vec, source_vec, address_of(b, bm, b.CreateAdd(k0, i64(b, 1)), col0));
        std::vector<int> interleave(2 * panel);
        for (int64_t j = 0; j < panel; ++j)
          for (int64_t e = 0; e < 2; ++e) interleave[2 * j + e] = static_cast<int>(e * panel + j);
        b.CreateAlignedStore(b.CreateShuffleVector(lo, hi, interleave), b.CreateInBoundsGEP(i16, packed, dst_row),
                             llvm::Align(2));
        return;
      }
      for (int64_t j = 0; j < panel; ++j) {
        llvm::Value* col = b.CreateAdd(b.CreateMul(p, i64(b, panel)), i64(b, j));
        for (int64_t e = 0; e < 2; ++e) {
          llvm::Value* v = b.getInt16(0);
          if (j < cols && !(odd_tail && e == 1))
            v = load16(i16, source, address_of(b, bm, b.CreateAdd(k0, i64(b, e)), col));
          b.CreateStore(v, b.CreateInBoundsGEP(i16, packed, b.CreateAdd(dst_row, i64(b, 2 * j + e))));
        }
      }
    };
    if (full_panels && full > 0) emit_loop(b, full, [&](llvm::Value* p) { copy(p, panel); });
    if (rest_panel && rest > 0) copy(i64(b, full), rest);
  };
  // The pairs the blocks left, for every panel: the last ones (all of them when no block was taken),
  // and the first ones of the last partial panel.
  if (pairs_done < k / 2)
    emit_loop(b, i64(b, pairs_done), i64(b, k / 2), i64(b, 1), {}, [&](llvm::Value* kp, const std::vector<llvm::Value*>&) {
      pair(kp, false, true, true);
      return std::vector<llvm::Value*>{};
    });
  if (pairs_done > 0 && rest > 0)
    emit_loop(b, pairs_done, [&](llvm::Value* kp) { pair(kp, false, false, true); });
  if (k % 2) pair(i64(b, k / 2), true, true, true);
  zero_padding_groups(b, packed, full + (rest > 0), (k + 1) / 2, k2, panel);
}

// The k loop of the tiles on packed k groups (vdpbf16ps and vpmaddwd pairs, vpdpbusd quads): B's
// `group` rows of each column were packed side by side, so one `bvec` load (4 bytes a column) per
// vector holds a group of k for `width` columns; A's group of row r is one 32-bit word broadcast by
// `a_vector` (`present` < group only for the last, partial group of k); `fold(acc, a, b)` folds a
// group into each accumulator. A's rows must be contiguous (rows_contiguous_a). Returns the
// accumulators after all of k.
// Over a span (pairs, an even k): the pairs it touches, the first and the last of them with the
// elements outside the span zeroed in both operands (a 32-bit mask over each A word and B lane),
// so that no product outside it, not even 0 x inf, reaches the sums. The two edge steps always
// run, their masks zero where they hold nothing (an empty span, a span inside one pair).
template <class AVector, class Fold>
std::vector<llvm::Value*> k_group_loop(llvm::IRBuilderBase& b, const GemmTile& tile, const MatrixOperand& a,
                                       llvm::Value* panel_ptr, llvm::Value* i, int64_t rows, int64_t vectors, int64_t k,
                                       const KSpan& span, int64_t group, llvm::Type* bvec, const Fold& fold,
                                       const AVector& a_vector, std::vector<llvm::Value*> init,
                                       const TripPrefetch& prefetch) {
  const int64_t width = tile.width;
  auto* lanes = llvm::FixedVectorType::get(b.getInt32Ty(), width);
  auto masked = [&](llvm::Value* v, llvm::Value* mask) {
    if (!mask) return v;
    llvm::Value* words = b.CreateBitCast(v, lanes);
    return b.CreateBitCast(b.CreateAnd(words, b.CreateVectorSplat(width, mask)), v->getType());
  };
  auto step = [&](llvm::Value* kg, const std::vector<llvm::Value*>& cur, int64_t present, llvm::Value* mask) {
    llvm::Value* row_base = b.CreateMul(kg, i64(b, tile.panel() * 4));  // bytes
    std::vector<llvm::Value*> bv;
    for (int64_t v = 0; v < vectors; ++v)
      bv.push_back(masked(b.CreateAlignedLoad(bvec,
                                              b.CreateInBoundsGEP(b.getInt8Ty(), panel_ptr,
                                                                  b.CreateAdd(row_base, i64(b, v * width * 4))),
                                              llvm::Align(4)),
                          mask));
    std::vector<llvm::Value*> next(cur.size());
    for (int64_t r = 0; r < rows; ++r) {
      llvm::Value* index =
          b.CreateAdd(b.CreateMul(b.CreateAdd(i, i64(b, r)), i64(b, a.ld)), b.CreateMul(kg, i64(b, group)));
      llvm::Value* av = masked(a_vector(element_address(b, a.dtype, a.ptr, index), present), mask);
      for (int64_t v = 0; v < vectors; ++v) next[r * vectors + v] = fold(cur[r * vectors + v], av, bv[v]);
    }
    return next;
  };
  auto whole_step = [&](llvm::Value* kg, const std::vector<llvm::Value*>& cur) { return step(kg, cur, group, nullptr); };
  std::vector<llvm::Value*> acc = std::move(init);
  if (!span.whole()) {
    // Pairs: element 0 of a pair is the low half of its word.
    llvm::Type* i32 = b.getInt32Ty();
    llvm::Value* all = b.getInt32(-1);
    llvm::Value* first = b.CreateUDiv(span.lo, i64(b, 2));
    llvm::Value* last = b.CreateSub(b.CreateUDiv(b.CreateAdd(span.hi, i64(b, 1)), i64(b, 2)), i64(b, 1));
    llvm::Value* empty = b.CreateICmpSGE(span.lo, span.hi);
    llvm::Value* single = b.CreateICmpEQ(first, last);
    auto odd = [&](llvm::Value* x) { return b.CreateICmpNE(b.CreateAnd(x, i64(b, 1)), i64(b, 0)); };
    llvm::Value* lo_mask = b.CreateSelect(odd(span.lo), llvm::ConstantInt::get(i32, 0xFFFF0000u), all);
    llvm::Value* hi_mask = b.CreateSelect(odd(span.hi), llvm::ConstantInt::get(i32, 0x0000FFFFu), all);
    llvm::Value* none = b.getInt32(0);
    llvm::Value* first_mask = b.CreateSelect(empty, none, b.CreateAnd(lo_mask, b.CreateSelect(single, hi_mask, all)));
    llvm::Value* last_mask = b.CreateSelect(b.CreateOr(empty, single), none, hi_mask);
    // Edge steps that hold nothing still read: at a pair inside k.
    auto inside = [&](llvm::Value* g) { return b.CreateBinaryIntrinsic(llvm::Intrinsic::umin, g, i64(b, k / 2 - 1)); };
    acc = step(inside(first), acc, group, first_mask);
    llvm::Value* second = b.CreateAdd(first, i64(b, 1));
    acc = emit_k_loop(b, second, b.CreateBinaryIntrinsic(llvm::Intrinsic::smax, last, second), std::move(acc), whole_step,
                      prefetch.hook(b));
    return step(inside(last), acc, group, last_mask);
  }
  acc = emit_k_loop(b, k / group, std::move(acc), whole_step, prefetch.hook(b));
  if (k % group) acc = step(i64(b, k / group), acc, k % group, nullptr);
  return acc;
}

// The two tiles on k pairs of 16-bit elements, B pair-packed (pack_b_pairs) and a pair of A's row
// one 32-bit broadcast (an odd k's last element widened alone, its partner zero, so no read passes
// the end of A's row):
// - bf16: vdpbf16ps into f32 C, A read in place as bf16 pairs.
// - words (int8 x int8 on targets without VNNI): i32 C, B's bytes sign-extended to 16 bits when
//   packed, A a dense i16 copy (its bytes widened once per dot or per block, codegen_dot.cpp).
//   vpmaddwd multiplies the 16-bit halves and adds each lane's two products (each at most 2^14 in
//   magnitude, so exactly), and vpaddd adds that to the accumulator, wrapping as the interpreter's
//   i32 sums do: results equal the interpreter's bit for bit. Two instructions per pair of k and
//   vector, where vpdpbusd takes one per quad; the bytes' own products (vpmaddubsw) would saturate
//   their 16-bit pair sums.
enum class PairDot { bf16, words };

void micro_tile_pairs(llvm::IRBuilderBase& b, const GemmTile& tile, PairDot kind, const MatrixOperand& a,
                      const CMatrix& c, int64_t k, const KSpan& span, llvm::Value* panel_ptr, llvm::Value* col0, llvm::Value* i,
                      int64_t rows, int64_t cols, const TripPrefetch& prefetch) {
  const bool words = kind == PairDot::words;
  llvm::Type* i32 = b.getInt32Ty();
  CTile ct(b, c, col0, i, rows, cols, tile.width, words ? i32 : b.getFloatTy());
  const int64_t width = tile.width, vectors = ct.vectors;
  auto* pairs = llvm::FixedVectorType::get(words ? b.getInt16Ty() : b.getBFloatTy(), 2 * width);
  llvm::Function* dot = llvm::Intrinsic::getDeclaration(
      b.GetInsertBlock()->getModule(),
      !words        ? llvm::Intrinsic::x86_avx512bf16_dpbf16ps_512
      : width == 16 ? llvm::Intrinsic::x86_avx512_pmaddw_d_512
                    : llvm::Intrinsic::x86_avx2_pmadd_wd);
  auto a_pair = [&](llvm::Value* address, int64_t present) {
    llvm::Value* word = present == 2 ? static_cast<llvm::Value*>(b.CreateAlignedLoad(i32, address, llvm::Align(2)))
                                     : b.CreateZExt(b.CreateLoad(b.getInt16Ty(), address), i32);
    return b.CreateBitCast(b.CreateVectorSplat(width, word), pairs);
  };
  auto fold = [&](llvm::Value* acc, llvm::Value* av, llvm::Value* bv) {
    return words ? b.CreateAdd(acc, b.CreateCall(dot, {av, bv})) : b.CreateCall(dot, {acc, av, bv});
  };
  const std::vector<llvm::Value*> acc =
      k_group_loop(b, tile, a, panel_ptr, i, rows, vectors, k, span, 2, pairs, fold, a_pair, ct.load(), prefetch);
  ct.store(acc);
}

// ---- int8 x int8 on vpdpbusd ----
// B is packed into panels of k quads: packed[((p * k4 + kq) * panel + j) * 4 + e] = B[4 kq + e][p *
// panel + j], k4 = packed_b_groups(k, 4) (ceil(k / 4) rounded up to whole AMX k steps), zero where
// 4 kq + e >= k or the column is past n; one 64-byte load holds 16 columns' quads, the layout
// vpdpbusd multiplies against an A quad broadcast to every lane, and 16 quads of 16 columns are an
// AMX B tile.
// vpdpbusd multiplies unsigned bytes (its first source) by signed ones (its second, the one it can
// broadcast from memory), so one operand of the s8 x s8 dot is biased by 128 (its sign bit flipped)
// and 128 times the other one's sums over k taken back off: (x + 128) y summed minus 128 sum(y) is
// sum(x y), exact modulo 2^32 since vpdpbusd and the i32 adds wrap as the interpreter's i32
// arithmetic does. Which operand carries the bias (int8_b_biased):
// - B (`biased`): its bytes are stored with the sign bit flipped, and the micro-tile subtracts 128
//   times the row sums of A (emit_a_row_sums). The tile's A quad is then the instruction's memory
//   broadcast operand as it is in memory: no instruction per row and k quad besides the vpdpbusd.
// - A (AMX targets, whose tdpbssd tiles read the same packed B signed): each column's sum of B over
//   k is written after the panels as i32 (`colsum`, zero past n), and the micro-tile flips the sign
//   bits of each A quad before broadcasting it.
void pack_b_quads(llvm::IRBuilderBase& b, const MatrixOperand& bm, llvm::Value* packed, llvm::Value* colsum, int64_t n,
                  int64_t k, int64_t panel, bool biased) {
  const int64_t full = n / panel, rest = n % panel, k4 = packed_b_groups(k, 4), panels = full + (rest > 0);
  llvm::Type* i8 = b.getInt8Ty();
  llvm::Type* i32 = b.getInt32Ty();
  if (!biased)
    emit_loop(b, panels * panel, [&](llvm::Value* j) {
      b.CreateStore(b.getInt32(0), b.CreateInBoundsGEP(i32, colsum, j));
    });
  auto quad = [&](llvm::Value* kq, int64_t present) {  // present: the quad's rows inside k (1..4)
    llvm::Value* k0 = b.CreateMul(kq, i64(b, 4));
    for (int64_t e = 0; e < 4; ++e) prefetch_row(b, bm, b.CreateAdd(k0, i64(b, kPrefetchRows + e)), n);
    auto copy = [&](llvm::Value* p, int64_t cols) {
      llvm::Value* dst_row = b.CreateMul(b.CreateAdd(b.CreateMul(p, i64(b, k4)), kq), i64(b, panel * 4));
      if (cols == panel && present == 4 && bm.rows_contiguous()) {
        // A whole quad of a full panel as vectors: 4 row loads interleaved into one 4 * panel byte
        // store, and the panel's column sums updated.
        auto* row_vec = llvm::FixedVectorType::get(i8, panel);
        llvm::Value* col0 = b.CreateMul(p, i64(b, panel));
        std::vector<llvm::Value*> rows;
        for (int64_t e = 0; e < 4; ++e)
          rows.push_back(b.CreateAlignedLoad(row_vec, address_of(b, bm, b.CreateAdd(k0, i64(b, e)), col0), llvm::Align(1)));
        std::vector<int> lo_hi(2 * panel), interleave(4 * panel);
        for (int64_t l = 0; l < 2 * panel; ++l) lo_hi[l] = static_cast<int>(l);
        for (int64_t j = 0; j < panel; ++j)
          for (int64_t e = 0; e < 4; ++e) interleave[4 * j + e] = static_cast<int>(e * panel + j);
        llvm::Value* all = b.CreateShuffleVector(b.CreateShuffleVector(rows[0], rows[1], lo_hi),
                                                 b.CreateShuffleVector(rows[2], rows[3], lo_hi), interleave);
        if (biased) {
          all = b.CreateXor(all, b.CreateVectorSplat(4 * panel, b.getInt8(0x80)));
          b.CreateAlignedStore(all, b.CreateInBoundsGEP(i8, packed, dst_row), llvm::Align(1));
          return;
        }
        b.CreateAlignedStore(all, b.CreateInBoundsGEP(i8, packed, dst_row), llvm::Align(1));
        // The column sums serve only the AMX plan's fallback tiles: widening adds keep the AMX
        // kernel free of vpdpbusd.
        auto* wide = llvm::FixedVectorType::get(i32, panel);
        llvm::Value* sum = llvm::Constant::getNullValue(wide);
        for (llvm::Value* row : rows) sum = b.CreateAdd(sum, b.CreateSExt(row, wide));
        llvm::Value* address = b.CreateInBoundsGEP(i32, colsum, col0);
        b.CreateAlignedStore(b.CreateAdd(b.CreateAlignedLoad(wide, address, llvm::Align(4)), sum), address,
                             llvm::Align(4));
        return;
      }
      for (int64_t j = 0; j < panel; ++j) {
        llvm::Value* col = b.CreateAdd(b.CreateMul(p, i64(b, panel)), i64(b, j));
        llvm::Value* sum = b.getInt32(0);
        for (int64_t e = 0; e < 4; ++e) {
          llvm::Value* v = b.getInt8(0);
          if (j < cols && e < present) {
            v = b.CreateLoad(i8, address_of(b, bm, b.CreateAdd(k0, i64(b, e)), col));
            sum = b.CreateAdd(sum, b.CreateSExt(v, i32));
            // Biased, a byte past k or n stays zero: the A bytes it meets are zero, or its column
            // is never stored.
            if (biased) v = b.CreateXor(v, b.getInt8(0x80));
          }
          b.CreateStore(v, b.CreateInBoundsGEP(i8, packed, b.CreateAdd(dst_row, i64(b, 4 * j + e))));
        }
        if (j < cols && !biased) {
          llvm::Value* address = b.CreateInBoundsGEP(i32, colsum, col);
          b.CreateStore(b.CreateAdd(b.CreateLoad(i32, address), sum), address);
        }
      }
    };
    if (full > 0) emit_loop(b, full, [&](llvm::Value* p) { copy(p, panel); });
    if (rest > 0) copy(i64(b, full), rest);
  };
  if (k / 4 > 0) emit_loop(b, k / 4, [&](llvm::Value* kq) { quad(kq, 4); });
  if (k % 4) quad(i64(b, k / 4), k % 4);
  zero_padding_groups(b, packed, panels, (k + 3) / 4, k4, panel);
}

// Where the column sums of a quad-packed B start: after its k4 quads of every panel.
llvm::Value* quad_column_sums(llvm::IRBuilderBase& b, llvm::Value* packed, int64_t n, int64_t k, int64_t panel) {
  const int64_t panels = (n + panel - 1) / panel;
  return b.CreateInBoundsGEP(b.getInt8Ty(), packed, i64(b, packed_b_groups(k, 4) * panels * panel * 4));
}

// Whether the int8 tiles read B packed with its bias (pack_b_quads): on every vpdpbusd target but
// those with AMX, whose tiles multiply the same packed B as signed bytes.
bool int8_b_biased(const CpuTarget& target, DType a, DType b) {
  return gemm_int8_quads(target, a, b) && !gemm_amx(target, a, b);
}

// Where A's row sums (emit_a_row_sums) start in the packed-A scratch: after a dense i8 copy of A.
int64_t row_sums_offset(int64_t m, int64_t k) { return (m * k + 63) / 64 * 64; }

// Writes each row's sum of the i8 A (m x k) as i32 into `sums` (m values), for the micro-tiles on a
// biased B (pack_b_quads). Rows with contiguous bytes run one vpdpbusd of ones (unsigned) by 64 of
// their bytes (signed) at a time, the last k % 64 bytes added one by one; 1/n of the dot's own
// vpdpbusd count. A transposed A is summed element by element.
void emit_a_row_sums(llvm::IRBuilderBase& b, const MatrixOperand& a, llvm::Value* sums, int64_t m, int64_t k) {
  llvm::Type* i8 = b.getInt8Ty();
  llvm::Type* i32 = b.getInt32Ty();
  constexpr int64_t lanes = 16, chunk = 4 * lanes;  // i32 lanes of a zmm, the bytes one vpdpbusd reads
  auto* vec = llvm::FixedVectorType::get(i32, lanes);
  llvm::Function* dot = llvm::Intrinsic::getDeclaration(b.GetInsertBlock()->getModule(),
                                                        llvm::Intrinsic::x86_avx512_vpdpbusd_512);
  const int64_t whole = a.rows_contiguous() ? k / chunk : 0;
  emit_loop(b, m, [&](llvm::Value* r) {
    llvm::Value* sum = b.getInt32(0);
    if (whole > 0) {
      llvm::Value* ones = b.CreateVectorSplat(lanes, b.getInt32(0x01010101));
      const std::vector<llvm::Value*> acc = emit_loop(
          b, i64(b, 0), i64(b, whole), i64(b, 1), {llvm::Constant::getNullValue(vec)},
          [&](llvm::Value* q, const std::vector<llvm::Value*>& cur) {
            llvm::Value* bytes = b.CreateAlignedLoad(vec, address_of(b, a, r, b.CreateMul(q, i64(b, chunk))), llvm::Align(1));
            return std::vector<llvm::Value*>{b.CreateCall(dot, {cur[0], ones, bytes})};
          });
      sum = b.CreateAddReduce(acc[0]);
    }
    const std::vector<llvm::Value*> total = emit_loop(
        b, i64(b, whole * chunk), i64(b, k), i64(b, 1), {sum}, [&](llvm::Value* kk, const std::vector<llvm::Value*>& cur) {
          return std::vector<llvm::Value*>{b.CreateAdd(cur[0], b.CreateSExt(b.CreateLoad(i8, address_of(b, a, r, kk)), i32))};
        });
    b.CreateStore(total[0], b.CreateInBoundsGEP(i32, sums, r));
  });
}

// One micro-tile on vpdpbusd: as micro_tile_pairs, with an i32 C, B from the quad-packed panel at
// `panel_ptr` (k4 quads of tile.panel() columns) and A read in place, 4 bytes as one 32-bit
// broadcast. The last partial quad of a k that is not a multiple of 4 is assembled from its bytes
// alone (the missing ones zero), so no read passes the end of A's row. With `row_sums` (B packed
// biased, pack_b_quads) the A quad is vpdpbusd's signed operand as it is and the accumulators start
// at C (or zero) minus 128 * the row's sum of A; else the quad is the unsigned operand with each
// byte's sign bit flipped (the missing bytes meet zero B rows) and they start at C minus 128 * colsum.
void micro_tile_quads(llvm::IRBuilderBase& b, const GemmTile& tile, const MatrixOperand& a, const CMatrix& c,
                      int64_t k, llvm::Value* panel_ptr, llvm::Value* colsum, llvm::Value* row_sums, llvm::Value* col0,
                      llvm::Value* i, int64_t rows, int64_t cols, const TripPrefetch& prefetch) {
  llvm::Type* i32 = b.getInt32Ty();
  CTile ct(b, c, col0, i, rows, cols, tile.width, i32);
  const int64_t width = tile.width, vectors = ct.vectors;
  auto* vec = ct.vec;
  llvm::Function* dot = llvm::Intrinsic::getDeclaration(b.GetInsertBlock()->getModule(),
                                                        llvm::Intrinsic::x86_avx512_vpdpbusd_512);
  std::vector<llvm::Value*> init = ct.load();
  if (row_sums) {
    for (int64_t r = 0; r < rows; ++r) {
      llvm::Value* sum = b.CreateLoad(i32, b.CreateInBoundsGEP(i32, row_sums, b.CreateAdd(i, i64(b, r))));
      llvm::Value* correction = b.CreateVectorSplat(width, b.CreateShl(sum, b.getInt32(7)));
      for (int64_t v = 0; v < vectors; ++v) init[r * vectors + v] = b.CreateSub(init[r * vectors + v], correction);
    }
  } else {
    for (int64_t v = 0; v < vectors; ++v) {
      llvm::Value* sums = b.CreateAlignedLoad(
          vec, b.CreateInBoundsGEP(i32, colsum, b.CreateAdd(col0, i64(b, v * width))), llvm::Align(4));
      llvm::Value* correction = b.CreateShl(sums, b.CreateVectorSplat(width, b.getInt32(7)));
      for (int64_t r = 0; r < rows; ++r) init[r * vectors + v] = b.CreateSub(init[r * vectors + v], correction);
    }
  }
  llvm::Value* bias = b.getInt32(row_sums ? 0 : 0x80808080u);
  auto a_quad = [&](llvm::Value* address, int64_t present) {
    llvm::Value* word = nullptr;
    if (present == 4) {
      word = b.CreateAlignedLoad(i32, address, llvm::Align(1));
    } else {
      word = b.getInt32(0);
      for (int64_t e = 0; e < present; ++e) {
        llvm::Value* byte = b.CreateLoad(b.getInt8Ty(), b.CreateInBoundsGEP(b.getInt8Ty(), address, i64(b, e)));
        word = b.CreateOr(word, b.CreateShl(b.CreateZExt(byte, i32), b.getInt32(8 * e)));
      }
    }
    return b.CreateVectorSplat(width, row_sums ? word : b.CreateXor(word, bias));
  };
  // Biased B (row_sums): the A quad is the signed, second operand.
  auto fold = [&](llvm::Value* acc, llvm::Value* av, llvm::Value* bv) {
    return row_sums ? b.CreateCall(dot, {acc, bv, av}) : b.CreateCall(dot, {acc, av, bv});
  };
  const std::vector<llvm::Value*> acc =
      k_group_loop(b, tile, a, panel_ptr, i, rows, vectors, k, KSpan{}, 4, vec, fold, a_quad, init, prefetch);
  ct.store(acc);
}

}  // namespace

GemmTile gemm_tile(const CpuTarget& target) {
  // 8 x 32 on zmm: 16 accumulators cover the FMA latency (4 cycles x 2 pipes needs >= 8) and
  // vdpbf16ps's (6 x 2 needs >= 12), with 2 B vectors and a broadcast well inside 32 registers. On
  // the seed matmul (128-blocks, Zen 4) it beat 6 x 64, 4 x 64 and 14 x 32 for f32 (96 against 90-93
  // GFLOP/s, 1 thread) and bf16 (185 against 165-173); 8 rows and 32 columns also divide the usual
  // block sizes, so no tail tiles run there. On ymm (16 registers) 6 x 16 keeps 12 accumulators, 2 B
  // vectors and a broadcast without spilling.
  if (target.avx512 && target.vector_bits >= 512) return GemmTile{.rows = 8, .width = 16, .vectors = 2};
  return GemmTile{.rows = 6, .width = 8, .vectors = 2};
}

bool gemm_f32_reads_a_in_place(const MatrixOperand& a) {
  return a.dtype == DType::f32;
}

bool gemm_bf16_pairs(const CpuTarget& target, DType a, DType b) {
  return target.avx512_bf16 && !target.bf16_on_fma && target.avx512 && target.vector_bits >= 512 && a == DType::bf16 &&
         b == DType::bf16;
}

bool gemm_spans_k(const CpuTarget& target, DType a, DType b, int64_t k) {
  if (gemm_bf16_pairs(target, a, b)) return k % 2 == 0;
  // The f32 tile: a float operand, no f64 (emit_gemm_f32's dots).
  return (is_float(a) || is_float(b)) && a != DType::f64 && b != DType::f64;
}

bool gemm_int8_quads(const CpuTarget& target, DType a, DType b) {
  return target.avx512_vnni && target.avx512 && target.vector_bits >= 512 && a == DType::i8 && b == DType::i8;
}

bool gemm_int8_words(const CpuTarget& target, DType a, DType b) {
  return target.avx2 && a == DType::i8 && b == DType::i8 && !gemm_int8_quads(target, a, b);
}

bool gemm_int8_tiles(const CpuTarget& target, DType a, DType b) {
  return gemm_int8_quads(target, a, b) || gemm_int8_words(target, a, b);
}

bool gemm_amx(const CpuTarget& target, DType a, DType b) {
  return (target.amx_bf16 && gemm_bf16_pairs(target, a, b)) || (target.amx_int8 && gemm_int8_quads(target, a, b));
}

int64_t gemm_packed_b_bytes(const CpuTarget& target, DType a, DType b, int64_t n, int64_t k) {
  const int64_t panel = gemm_tile(target).panel(), panels = (n + panel - 1) / panel;
  if (gemm_int8_quads(target, a, b)) return (packed_b_groups(k, 4) + 1) * panels * panel * 4;  // quads, colsum
  if (gemm_bf16_pairs(target, a, b) || gemm_int8_words(target, a, b))
    return packed_b_groups(k, 2) * panels * panel * 4;  // 16-bit pairs
  return k * panels * panel * 4;
}

int64_t gemm_packed_a_bytes(const CpuTarget& target, DType a, DType b, int64_t m, int64_t k) {
  const int64_t dense_f32 = m * k * 4;
  if (int8_b_biased(target, a, b)) return std::max(dense_f32, row_sums_offset(m, k) + m * 4);
  if (!gemm_amx(target, a, b)) return dense_f32;
  const int64_t elem = dtype_size(a), step = kAmxTileBytes / elem;
  return std::max(dense_f32, m * ((k + step - 1) / step * step) * elem);
}

namespace {

// Runs `tile_at(panel_ptr, col0, i, rows, cols)` over the rectangle `r` of C in micro-tiles of
// tile.rows rows by one panel of columns (a last tile of the remaining rows, a last panel of the
// remaining columns), reading B from `packed`, panels `panel_bytes` apart. A rectangle may start
// 16 lanes into a panel (the columns right of AMX tiles that end half way through one): its first
// micro-tile's panel pointer starts there.
template <class TileAt>
void rect_tiles(llvm::IRBuilderBase& b, const GemmTile& tile, const CRect& r, llvm::Value* packed, int64_t panel_bytes,
                const TileAt& tile_at) {
  const int64_t panel = tile.panel(), full_rows = r.rows / tile.rows * tile.rows;
  auto chunk = [&](llvm::Value* p, int64_t lane, int64_t cols) {
    llvm::Value* panel_ptr = b.CreateInBoundsGEP(
        b.getInt8Ty(), packed, b.CreateAdd(b.CreateMul(p, i64(b, panel_bytes)), i64(b, lane * kLaneBytes)));
    llvm::Value* col0 = b.CreateAdd(b.CreateMul(p, i64(b, panel)), i64(b, lane));
    if (full_rows > 0)
      emit_loop(b, i64(b, r.row0), i64(b, r.row0 + full_rows), i64(b, tile.rows), {},
                [&](llvm::Value* i, const std::vector<llvm::Value*>&) {
                  tile_at(panel_ptr, col0, i, tile.rows, cols);
                  return std::vector<llvm::Value*>{};
                });
    if (full_rows < r.rows) tile_at(panel_ptr, col0, i64(b, r.row0 + full_rows), r.rows - full_rows, cols);
  };
  const int64_t end = r.col0 + r.cols, lane = r.col0 % panel;
  const int64_t head = lane ? std::min(panel - lane, r.cols) : 0;  // columns up to the next panel
  if (head) chunk(i64(b, r.col0 / panel), lane, head);
  // Past the head: at a panel's start, or at the end when the rectangle ends inside its first panel.
  const int64_t body = r.col0 + head, full = (end - body) / panel, rest = body + full * panel;
  if (full > 0) emit_loop(b, full, [&](llvm::Value* p) { chunk(b.CreateAdd(p, i64(b, body / panel)), 0, panel); });
  if (rest < end) chunk(i64(b, rest / panel), 0, end - rest);
}

// The k-group dots (bf16 pairs, int8 quads) over all of C, B packed already, over `span` (bf16
// only): on an AMX target the tiles of the plan (jit/llvm/amx_plan.h) take what they cover and
// `tile_at(a, c, span, panel_ptr, col0, i, rows, cols)`, the AVX-512 micro-tile, the plan's fallback
// rectangles; elsewhere the micro-tiles take all of C. A is read in place when its rows are
// contiguous (and k fills whole AMX k steps), else copied into `packed_a` first. A span on AMX
// tiles: the tiles run the whole k steps inside it, and the micro-tiles its ragged ends over the
// tiles' part of C (each end's edge pair masked as on any pair target), adding to what the tiles
// stored; an end that is empty is skipped at run time.
template <class TileAt>
void k_group_gemm(llvm::IRBuilderBase& b, const CpuTarget& target, const MatrixOperand& a, DType b_dtype,
                  const CMatrix& c, int64_t m, int64_t n, int64_t k, const KSpan& span, llvm::Value* packed,
                  llvm::Value* packed_a, const TileAt& tile_at) {
  const GemmTile tile = gemm_tile(target);
  const int64_t elem = dtype_size(a.dtype), groups = packed_b_groups(k, kLaneBytes / elem);
  const int64_t panel_bytes = groups * tile.panel() * kLaneBytes;
  auto micro_tiles = [&](const MatrixOperand& at, const CRect& r, const CMatrix& cm, const KSpan& s) {
    rect_tiles(b, tile, r, packed, panel_bytes, [&](llvm::Value* panel_ptr, llvm::Value* col0, llvm::Value* i,
                                                      int64_t rows, int64_t cols) {
      tile_at(at, cm, s, panel_ptr, col0, i, rows, cols);
    });
  };
  if (!gemm_amx(target, a.dtype, b_dtype)) {
    micro_tiles(rows_contiguous_a(b, a, packed_a, m, k), CRect{0, m, 0, n}, c, span);
    return;
  }
  const AmxPlan plan = plan_amx(m, n, k, elem, a.rows_contiguous(), a.ld, c.ld, tile.panel());
  MatrixOperand at = a;
  if (plan.pack_a) {
    // Dense rows of k_padded elements, zero past k: the last k step's tiles read zeros.
    const int64_t ld = plan.k_padded();
    emit_pack_dense(b, a, packed_a, m, k, a.dtype, ld);
    llvm::Type* bits = b.getIntNTy(8 * static_cast<unsigned>(elem));
    emit_loop(b, m, [&](llvm::Value* r) {
      emit_loop(b, ld - k, [&](llvm::Value* kk) {
        b.CreateStore(llvm::ConstantInt::get(bits, 0),
                      b.CreateInBoundsGEP(bits, packed_a, b.CreateAdd(b.CreateMul(r, i64(b, ld)), b.CreateAdd(kk, i64(b, k)))));
      });
    });
    at = MatrixOperand{packed_a, a.dtype, ld};
  } else if (!plan.fallback.empty()) {
    at = rows_contiguous_a(b, a, packed_a, m, k);
  }
  if (span.whole()) {
    emit_amx_tiles(b, plan, at.ptr, packed, c);
  } else {
    // Steps [s0, s1) lie inside [lo, hi); the ends [lo, mid0) and [mid1, hi) are what is left.
    llvm::Value* step = i64(b, plan.k_step);
    auto umax = [&](llvm::Value* x, llvm::Value* y) { return b.CreateBinaryIntrinsic(llvm::Intrinsic::umax, x, y); };
    auto umin = [&](llvm::Value* x, llvm::Value* y) { return b.CreateBinaryIntrinsic(llvm::Intrinsic::umin, x, y); };
    llvm::Value* s0 = b.CreateUDiv(b.CreateAdd(span.lo, i64(b, plan.k_step - 1)), step);
    llvm::Value* s1 = umax(b.CreateUDiv(span.hi, step), s0);
    llvm::Value* mid0 = umin(b.CreateMul(s0, step), span.hi);
    llvm::Value* mid1 = umax(b.CreateMul(s1, step), mid0);
    emit_amx_tiles(b, plan, at.ptr, packed, c, s0, s1);
    const CMatrix onto{.ptr = c.ptr, .ld = c.ld, .accumulate = true};
    const CRect tiled{0, plan.tile_rows, 0, plan.tile_cols};
    auto end = [&](llvm::Value* from, llvm::Value* to) {
      llvm::Function* f = b.GetInsertBlock()->getParent();
      llvm::BasicBlock* run = llvm::BasicBlock::Create(b.getContext(), "span.end", f);
      llvm::BasicBlock* done = llvm::BasicBlock::Create(b.getContext(), "span.end.done", f);
      b.CreateCondBr(b.CreateICmpULT(from, to), run, done);
      b.SetInsertPoint(run);
      micro_tiles(at, tiled, onto, KSpan{from, to});
      b.CreateBr(done);
      b.SetInsertPoint(done);
    };
    if (plan.tile_rows > 0 && plan.tile_cols > 0) {
      end(span.lo, mid0);
      end(mid1, span.hi);
    }
  }
  for (const CRect& r : plan.fallback) micro_tiles(at, r, c, span);
}

// C (+)= A . B on the pair tiles of `kind` (or AMX tiles, k_group_gemm), B packed already and A as
// micro_tile_pairs reads it, over `span`.
void pair_gemm(llvm::IRBuilderBase& b, const CpuTarget& target, PairDot kind, const MatrixOperand& a, DType b_dtype,
               const CMatrix& c, int64_t m, int64_t n, int64_t k, const KSpan& span, llvm::Value* packed,
               llvm::Value* packed_a, const SpreadPrefetch* prefetch) {
  const GemmTile tile = gemm_tile(target);
  const TripPrefetch trip = trip_prefetch(prefetch, tile, m, n, k / 2);
  k_group_gemm(b, target, a, b_dtype, c, m, n, k, span, packed, packed_a,
               [&](const MatrixOperand& at, const CMatrix& cm, const KSpan& s, llvm::Value* panel_ptr, llvm::Value* col0,
                   llvm::Value* i, int64_t rows, int64_t cols) {
                 micro_tile_pairs(b, tile, kind, at, cm, k, s, panel_ptr, col0, i, rows, cols, trip);
               });
}

// A dot that streamed C fences its non-temporal stores.
void fence_streamed(llvm::IRBuilderBase& b, const CMatrix& c) {
  if (c.streaming) fence_nontemporal(b);
}

}  // namespace

void emit_gemm_f32(llvm::IRBuilderBase& b, const CpuTarget& target, const MatrixOperand& a, const MatrixOperand& bm,
                   const CMatrix& c, int64_t m, int64_t n, int64_t k, llvm::Value* packed, llvm::Value* packed_a,
                   bool b_packed, const SpreadPrefetch* prefetch, const KSpan& span) {
  if (m == 0 || n == 0) return;
  const GemmTile tile = gemm_tile(target);
  if (!b_packed) emit_pack_b(b, target, a.dtype, bm, packed, n, k);
  if (gemm_bf16_pairs(target, a.dtype, bm.dtype)) {
    // bf16 pairs: A stays where it is (a pair is one 32-bit broadcast) unless its rows are strided.
    pair_gemm(b, target, PairDot::bf16, a, bm.dtype, c, m, n, k, span, packed, packed_a, prefetch);
  } else {
    // f32: A dense f32 or transposed f32, read in place; anything else converted once.
    const MatrixOperand a_tiles = pack_a(b, a, packed_a, m, k, DType::f32);
    const TripPrefetch trip = trip_prefetch(prefetch, tile, m, n, k);
    rect_tiles(b, tile, CRect{0, m, 0, n}, packed, k * tile.panel() * 4,
               [&](llvm::Value* panel_ptr, llvm::Value* col0, llvm::Value* i, int64_t rows, int64_t cols) {
                 micro_tile(b, tile, a_tiles, c, k, span, panel_ptr, col0, i, rows, cols, trip);
               });
  }
  fence_streamed(b, c);
}

void emit_gemm_i8(llvm::IRBuilderBase& b, const CpuTarget& target, const MatrixOperand& a, const MatrixOperand& bm,
                  const CMatrix& c, int64_t m, int64_t n, int64_t k, llvm::Value* packed, llvm::Value* packed_a,
                  bool b_packed, const SpreadPrefetch* prefetch) {
  if (m == 0 || n == 0) return;
  if (gemm_int8_words(target, DType::i8, bm.dtype)) {
    if (!b_packed) emit_pack_b(b, target, DType::i8, bm, packed, n, k);
    pair_gemm(b, target, PairDot::words, pack_a(b, a, packed_a, m, k, DType::i16), bm.dtype, c, m, n, k, KSpan{},
              packed, packed_a, prefetch);
    fence_streamed(b, c);
    return;
  }
  const GemmTile tile = gemm_tile(target);
  llvm::Value* colsum = quad_column_sums(b, packed, n, k, tile.panel());
  if (!b_packed) emit_pack_b(b, target, a.dtype, bm, packed, n, k);
  llvm::Value* row_sums = nullptr;
  if (int8_b_biased(target, a.dtype, bm.dtype)) {
    row_sums = b.CreateInBoundsGEP(b.getInt8Ty(), packed_a, i64(b, row_sums_offset(m, k)));
    emit_a_row_sums(b, a, row_sums, m, k);
  }
  const TripPrefetch trip = trip_prefetch(prefetch, tile, m, n, k / 4);
  k_group_gemm(b, target, a, bm.dtype, c, m, n, k, KSpan{}, packed, packed_a,
               [&](const MatrixOperand& at, const CMatrix& cm, const KSpan&, llvm::Value* panel_ptr, llvm::Value* col0,
                   llvm::Value* i, int64_t rows, int64_t cols) {
                 micro_tile_quads(b, tile, at, cm, k, panel_ptr, colsum, row_sums, col0, i, rows, cols, trip);
               });
  fence_streamed(b, c);
}

llvm::StructType* spread_prefetch_state_type(llvm::LLVMContext& context) {
  llvm::Type* ptr = llvm::PointerType::get(context, 0);
  llvm::Type* i64t = llvm::Type::getInt64Ty(context);
  return llvm::StructType::get(context, {ptr, ptr, ptr, i64t});
}

void emit_spread_prefetch_init(llvm::IRBuilderBase& b, const SpreadPrefetch& p) {
  llvm::StructType* st = spread_prefetch_state_type(b.getContext());
  b.CreateStore(llvm::ConstantPointerNull::get(b.getPtrTy()), b.CreateStructGEP(st, p.state, 0));
  b.CreateStore(i64(b, INT64_MAX), b.CreateStructGEP(st, p.state, 3));
}

void emit_spread_prefetch_queue(llvm::IRBuilderBase& b, const SpreadPrefetch& p, llvm::Value* block,
                                llvm::Value* source, llvm::Value* packed) {
  llvm::StructType* st = spread_prefetch_state_type(b.getContext());
  llvm::Value* block_at = b.CreateStructGEP(st, p.state, 0);
  llvm::Function* f = b.GetInsertBlock()->getParent();
  llvm::BasicBlock* start = llvm::BasicBlock::Create(b.getContext(), "prefetch.queue", f);
  llvm::BasicBlock* done = llvm::BasicBlock::Create(b.getContext(), "prefetch.queued", f);
  b.CreateCondBr(b.CreateICmpNE(b.CreateLoad(b.getPtrTy(), block_at), block), start, done);
  b.SetInsertPoint(start);
  b.CreateStore(block, block_at);
  b.CreateStore(source, b.CreateStructGEP(st, p.state, 1));
  b.CreateStore(packed, b.CreateStructGEP(st, p.state, 2));
  b.CreateStore(i64(b, 0), b.CreateStructGEP(st, p.state, 3));
  b.CreateBr(done);
  b.SetInsertPoint(done);
}

void emit_pack_b(llvm::IRBuilderBase& b, const CpuTarget& target, DType a, const MatrixOperand& bm, llvm::Value* packed,
                 int64_t n, int64_t k) {
  const int64_t panel = gemm_tile(target).panel();
  if (gemm_int8_quads(target, a, bm.dtype)) {
    pack_b_quads(b, bm, packed, quad_column_sums(b, packed, n, k, panel), n, k, panel,
                 int8_b_biased(target, a, bm.dtype));
  } else if (gemm_bf16_pairs(target, a, bm.dtype) || gemm_int8_words(target, a, bm.dtype)) {
    pack_b_pairs(b, bm, packed, n, k, panel);
  } else {
    pack_b(b, bm, packed, n, k, panel);
  }
}

void emit_pack_dense(llvm::IRBuilderBase& b, const MatrixOperand& a, llvm::Value* packed, int64_t m, int64_t k, DType to,
                     int64_t ld) {
  llvm::Type* bits = b.getIntNTy(8 * static_cast<unsigned>(dtype_size(a.dtype)));
  auto copy = [&](llvm::Value* r, llvm::Value* kk) {
    llvm::Value* index = b.CreateAdd(b.CreateMul(r, i64(b, ld ? ld : k)), kk);
    if (to == a.dtype)
      b.CreateStore(b.CreateLoad(bits, address_of(b, a, r, kk)), b.CreateInBoundsGEP(bits, packed, index));
    else
      store_element(b, to, element_address(b, to, packed, index), element(b, a, r, kk, to));
  };
  if (a.rows_contiguous()) {
    emit_loop(b, m, [&](llvm::Value* r) {
      prefetch_row(b, a, b.CreateAdd(r, i64(b, kPrefetchRows)), k);
      emit_loop(b, k, [&](llvm::Value* kk) { copy(r, kk); });
    });
  } else {
    // A transposed view: read down A's columns, which are its contiguous runs.
    emit_loop(b, k, [&](llvm::Value* kk) { emit_loop(b, m, [&](llvm::Value* r) { copy(r, kk); }); });
  }
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
