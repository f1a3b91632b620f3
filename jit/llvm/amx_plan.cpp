#include "jit/llvm/amx_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "jit/ir/diagnostics.h"

namespace tessera::jit {

namespace {

// Tiles per block side: 2 x 2 accumulators, 2 A and 2 B tiles fill the 8 tile registers.
constexpr int64_t kBlockTiles = 2;
constexpr int64_t kBlockRows = kBlockTiles * kAmxTileRows;

}  // namespace

int64_t packed_b_groups(int64_t k, int64_t group) {
  const int64_t groups = (k + group - 1) / group;
  return (groups + kAmxTileRows - 1) / kAmxTileRows * kAmxTileRows;
}

int64_t packed_b_offset(int64_t kk, int64_t col, int64_t groups, int64_t panel, int64_t elem) {
  const int64_t group = kLaneBytes / elem;
  return ((col / panel * groups + kk / group) * panel + col % panel) * kLaneBytes + kk % group * elem;
}

std::vector<AmxBlock> AmxPlan::blocks() const {
  std::vector<AmxBlock> out;
  for (int64_t col0 = 0; col0 < tile_cols; col0 += panel)
    for (int64_t row0 = 0; row0 < tile_rows; row0 += kBlockRows)
      out.push_back(AmxBlock{row0, col0, std::min(kBlockTiles, (tile_rows - row0) / kAmxTileRows),
                             std::min(kBlockTiles, (tile_cols - col0) / kAmxTileLanes)});
  return out;
}

AmxPlan plan_amx(int64_t m, int64_t n, int64_t k, int64_t elem, bool a_rows_contiguous, int64_t a_ld, int64_t ldc,
                 int64_t panel) {
  // A column block is one panel of two tiles; the emitter walks panels (jit/llvm/amx_gemm.cpp).
  if (panel != kBlockTiles * kAmxTileLanes || (elem != 1 && elem != 2))
    throw InternalError("codegen", fmt::format("AMX tiles need 32-column panels of 1- or 2-byte elements, not {} columns "
                                               "of {}-byte elements", panel, elem));
  AmxPlan p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.elem = elem;
  p.group = kLaneBytes / elem;
  p.k_step = kAmxTileBytes / elem;
  p.k_steps = (k + p.k_step - 1) / p.k_step;
  p.panel = panel;
  p.b_row_bytes = panel * kLaneBytes;
  p.b_panel_bytes = packed_b_groups(k, p.group) * p.b_row_bytes;
  p.b_step_bytes = kAmxTileRows * p.b_row_bytes;
  p.c_row_bytes = ldc * kLaneBytes;
  p.tile_rows = m / kAmxTileRows * kAmxTileRows;
  p.tile_cols = n / kAmxTileLanes * kAmxTileLanes;
  if (p.tile_rows == 0 || p.tile_cols == 0 || k == 0) {
    // Nothing fills a tile (or there is no k to step over): the AVX-512 tiles take all of C.
    p.tile_rows = p.tile_cols = 0;
    if (m > 0 && n > 0) p.fallback.push_back(CRect{0, m, 0, n});
    p.a_row_bytes = a_ld * elem;
    return p;
  }
  p.pack_a = !a_rows_contiguous || k % p.k_step != 0;
  p.a_row_bytes = (p.pack_a ? p.k_padded() : a_ld) * elem;
  // The rows below the tiles across all of C, then the columns right of them beside the tiles.
  if (p.tile_rows < m) p.fallback.push_back(CRect{p.tile_rows, m - p.tile_rows, 0, n});
  if (p.tile_cols < n) p.fallback.push_back(CRect{0, p.tile_rows, p.tile_cols, n - p.tile_cols});
  return p;
}

}  // namespace tessera::jit
