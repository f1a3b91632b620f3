// The layout of an AMX dot (C (+)= A . B on tdpbf16ps for bf16, tdpbssd for int8) as plain
// numbers: which part of C runs on tiles and in what blocks, where each tile of A, B and C starts
// and its row stride, how far k is padded, and which rectangles of C fall back to the AVX-512 k-group
// tiles (vdpbf16ps / vpdpbusd, jit/llvm/gemm.cpp). The emitter (jit/llvm/amx_gemm.cpp) follows a plan;
// tests/llvm/amx_test.cpp runs the same plan through a C++ emulation of tileloadd / tdpbf16ps /
// tdpbssd / tilestored (jit/llvm/amx_emulation.h) and compares with a reference matmul, which proves
// the layout on hosts that cannot execute AMX.
//
// Every tile of a plan has one shape, 16 rows of 64 bytes (A: 16 rows x one k step; B: 16 k groups x
// 16 columns; C: 16 rows x 16 f32 or i32), so the kernel needs one tile configuration. C is blocked
// in 2 x 2 tiles (32 x 32; 4 accumulators, 2 A and 2 B tiles: the 8 tile registers), with a block of
// one tile row or column where the tiled part of C is an odd number of 16s.
//
// No LLVM here: the plan is shared by the emitter and the tests.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera::jit {

// Bytes per 32-bit lane: a k group of A or B (2 bf16 or 4 i8), an element of C (f32 or i32).
inline constexpr int64_t kLaneBytes = 4;
// The one tile shape: 16 rows of 64 bytes.
inline constexpr int64_t kAmxTileRows = 16, kAmxTileBytes = 64;
// Columns (lanes) per tile row: 16.
inline constexpr int64_t kAmxTileLanes = kAmxTileBytes / kLaneBytes;

// k groups per panel of a pair- or quad-packed B (`group` k elements per group): ceil(k / group)
// rounded up to a multiple of 16, the groups past k zero. An AMX B tile is 16 groups of a panel, so
// the last k step never reads the next panel; every target packs this same layout, so the packing
// is run wherever the AVX-512 k-group tiles run.
int64_t packed_b_groups(int64_t k, int64_t group);

// Byte offset of B[kk][col] in a pair- or quad-packed B with `groups` k groups per panel of `panel`
// columns (elements of `elem` bytes, `group` per lane): panel col / panel, its row kk / group, lane
// col % panel, byte kk % group of the lane.
int64_t packed_b_offset(int64_t kk, int64_t col, int64_t groups, int64_t panel, int64_t elem);

// A rectangle of C: rows [row0, row0 + rows), columns [col0, col0 + cols).
struct CRect {
  int64_t row0, rows, col0, cols;
};

// A block of C on tiles: rows [row0, row0 + 16 row_tiles), columns [col0, col0 + 16 col_tiles).
struct AmxBlock {
  int64_t row0, col0, row_tiles, col_tiles;
};

struct AmxPlan {
  int64_t m = 0, n = 0, k = 0;
  int64_t elem = 0;     // bytes per A and B element: 2 (bf16) or 1 (i8)
  int64_t group = 0;    // k elements per lane: 2 or 4
  int64_t k_step = 0;   // k elements per tile product: one A tile row, 32 bf16 or 64 i8
  int64_t k_steps = 0;  // ceil(k / k_step)
  int64_t panel = 0;    // columns per packed-B panel (a multiple of 16)

  // A tiles: A row-major, k_step elements of 16 consecutive rows per tile. In place when its rows are
  // contiguous and k is a multiple of k_step; else (pack_a) first copied into a dense m x k_padded()
  // matrix, zero past k, so that the last k step reads zeros rather than past a row's end.
  bool pack_a = false;
  int64_t a_row_bytes = 0;  // row stride of the A the tiles read (in bytes)
  // B tiles: 16 k groups x 16 columns of a packed panel (packed_b_offset), rows panel lanes apart.
  int64_t b_row_bytes = 0;    // panel * 4
  int64_t b_panel_bytes = 0;  // packed_b_groups(k, group) rows of a panel
  int64_t b_step_bytes = 0;   // 16 rows: one k step down a panel
  // C tiles: 16 rows of 16 lanes, rows ldc elements apart.
  int64_t c_row_bytes = 0;

  // C rows [0, tile_rows) x columns [0, tile_cols) run on tiles (multiples of 16: the column blocks
  // are the panels, 32 columns each, and a last half panel); `fallback` covers the rest of C,
  // each element exactly once.
  int64_t tile_rows = 0, tile_cols = 0;
  std::vector<CRect> fallback;

  int64_t k_padded() const { return k_steps * k_step; }
  // Byte offsets of the tile starting at A row `row` (k step `step`), at packed-B column `col` (a
  // multiple of 16) and at C (row, col): each the sum of the fields above times the indices, which is
  // how the emitter computes them.
  int64_t a_offset(int64_t row, int64_t step) const { return row * a_row_bytes + step * kAmxTileBytes; }
  int64_t b_offset(int64_t col, int64_t step) const {
    return col / panel * b_panel_bytes + col % panel * kLaneBytes + step * b_step_bytes;
  }
  int64_t c_offset(int64_t row, int64_t col) const { return row * c_row_bytes + col * kLaneBytes; }
  // The tile blocks in the emitter's order: column blocks (panels) outside, 32-row blocks inside.
  std::vector<AmxBlock> blocks() const;
};

// The plan for an m x k A (elements of `elem` bytes: 2 for bf16, 1 for i8; rows `a_ld` elements apart
// when `a_rows_contiguous`) times a packed B (panels of `panel` columns) into C with leading dim `ldc`.
// A C with fewer than 16 rows or columns runs wholly on the fallback (tile_rows = tile_cols = 0).
AmxPlan plan_amx(int64_t m, int64_t n, int64_t k, int64_t elem, bool a_rows_contiguous, int64_t a_ld, int64_t ldc,
                 int64_t panel);

}  // namespace tessera::jit
