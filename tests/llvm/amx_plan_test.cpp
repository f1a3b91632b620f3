// The AMX dot's layout (jit/llvm/amx_plan.h) on any host: each plan is run through a C++ emulation
// of tileloadd, tdpbf16ps, tdpbssd and tilestored (the instructions' definitions, row by row) on
// random data, B packed by packed_b_offset and A laid out as the plan says, and the rectangles the
// plan leaves to the AVX-512 tiles filled by a reference; the result must equal a reference matmul
// (bf16: within the dot tolerance, int8: exactly), every element of C written exactly once, no tile
// row reading or writing outside its operand (a B tile outside its panel), and C's columns past n
// untouched. The emitted code follows the same plan (jit/llvm/amx_gemm.cpp); the instructions
// themselves are checked in tests/dsl/target_test.cpp.
#include <doctest/doctest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "jit/ir/diagnostics.h"
#include "jit/llvm/amx_plan.h"
#include "runtime/numeric.h"

using namespace tessera;
using jit::kAmxTileBytes;
using jit::kAmxTileRows;

namespace {

// A tile register of the plan's one shape: 16 rows of 64 bytes.
struct Tile {
  std::array<std::array<uint8_t, kAmxTileBytes>, kAmxTileRows> row{};
  template <class T>
  T lane(int64_t r, int64_t l) const {
    T v;
    std::memcpy(&v, &row[r][l * sizeof(T)], sizeof(T));
    return v;
  }
  template <class T>
  void set(int64_t r, int64_t l, T v) {
    std::memcpy(&row[r][l * sizeof(T)], &v, sizeof(T));
  }
};

// Bytes [lo, hi) of `memory` a tile may touch (a B tile: its panel).
struct Bounds {
  int64_t lo, hi;
};

// tileloadd: row r from memory[offset + r * stride], each row inside `bounds`.
Tile tileloadd(const std::vector<uint8_t>& memory, int64_t offset, int64_t stride, Bounds bounds) {
  Tile t;
  for (int64_t r = 0; r < kAmxTileRows; ++r) {
    const int64_t at = offset + r * stride;
    REQUIRE(at >= bounds.lo);
    REQUIRE(at + kAmxTileBytes <= bounds.hi);
    std::memcpy(t.row[r].data(), &memory[at], kAmxTileBytes);
  }
  return t;
}

// tilestored: row r to memory[offset + r * stride].
void tilestored(const Tile& t, std::vector<uint8_t>& memory, int64_t offset, int64_t stride) {
  for (int64_t r = 0; r < kAmxTileRows; ++r) {
    const int64_t at = offset + r * stride;
    REQUIRE(at >= 0);
    REQUIRE(at + kAmxTileBytes <= static_cast<int64_t>(memory.size()));
    std::memcpy(&memory[at], t.row[r].data(), kAmxTileBytes);
  }
}

// tdpbf16ps: c[m][n] += a[m][2k] b[k][2n] then += a[m][2k + 1] b[k][2n + 1], in f32, k in order.
void tdpbf16ps(Tile& c, const Tile& a, const Tile& b) {
  auto f32 = [](uint16_t bits) { return static_cast<float>(std::bit_cast<bfloat16>(bits)); };
  for (int64_t m = 0; m < kAmxTileRows; ++m)
    for (int64_t k = 0; k < kAmxTileBytes / 4; ++k)
      for (int64_t n = 0; n < kAmxTileBytes / 4; ++n) {
        float acc = c.lane<float>(m, n);
        acc += f32(a.lane<uint16_t>(m, 2 * k)) * f32(b.lane<uint16_t>(k, 2 * n));
        acc += f32(a.lane<uint16_t>(m, 2 * k + 1)) * f32(b.lane<uint16_t>(k, 2 * n + 1));
        c.set(m, n, acc);
      }
}

// tdpbssd: c[m][n] += the four products of signed bytes a[m][4k + e] b[k][4n + e], wrapping mod 2^32.
void tdpbssd(Tile& c, const Tile& a, const Tile& b) {
  for (int64_t m = 0; m < kAmxTileRows; ++m)
    for (int64_t k = 0; k < kAmxTileBytes / 4; ++k)
      for (int64_t n = 0; n < kAmxTileBytes / 4; ++n) {
        uint32_t acc = c.lane<uint32_t>(m, n);
        for (int64_t e = 0; e < 4; ++e)
          acc += static_cast<uint32_t>(int32_t{a.lane<int8_t>(m, 4 * k + e)} * int32_t{b.lane<int8_t>(k, 4 * n + e)});
        c.set(m, n, acc);
      }
}

struct Shape {
  int64_t m, k, n;
};

// Runs plan_amx(m, k, n) on random operands through the emulation and checks it against a reference.
// bf16 (elem 2, f32 C) or int8 (elem 1, i32 C); A's rows in place `ld` apart when contiguous, else a
// transposed view the plan must copy; C with leading dim n + 5, its 5 extra columns a sentinel.
void check_plan(const Shape& s, int64_t elem, bool a_rows_contiguous, bool accumulate, uint32_t seed) {
  const bool bf16 = elem == 2;
  const int64_t m = s.m, k = s.k, n = s.n, a_ld = a_rows_contiguous ? k + 3 : 1, ldc = n + 5;
  const jit::AmxPlan plan = jit::plan_amx(m, n, k, elem, a_rows_contiguous, a_ld, ldc, 32);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> byte(-128, 127);
  // Element values: bf16 bits or i8, and their value for the reference.
  auto value = [&] { return bf16 ? static_cast<int64_t>(bfloat16(normal(rng)).bits) : byte(rng); };
  auto real = [&](int64_t v) {
    return bf16 ? static_cast<double>(static_cast<float>(std::bit_cast<bfloat16>(static_cast<uint16_t>(v))))
                : static_cast<double>(v);
  };
  auto put = [&](std::vector<uint8_t>& memory, int64_t offset, int64_t v) {
    if (bf16) {
      const auto bits = static_cast<uint16_t>(v);
      std::memcpy(&memory[offset], &bits, 2);
    } else {
      memory[offset] = static_cast<uint8_t>(static_cast<int8_t>(v));
    }
  };
  std::vector<int64_t> av(m * k), bv(k * n);
  for (auto& v : av) v = value();
  for (auto& v : bv) v = value();

  // A as the tiles read it: in place (exactly as long as its last row reaches) or the padded copy.
  std::vector<uint8_t> a;
  if (plan.pack_a) {
    a.assign(m * plan.a_row_bytes, 0);
  } else {
    a.assign(((m - 1) * a_ld + k) * elem, 0);
  }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t kk = 0; kk < k; ++kk) put(a, i * plan.a_row_bytes + kk * elem, av[i * k + kk]);
  // B packed in k groups, zero past k and n.
  const int64_t panels = (n + plan.panel - 1) / plan.panel, groups = jit::packed_b_groups(k, plan.group);
  CHECK(plan.b_panel_bytes == groups * plan.panel * 4);
  std::vector<uint8_t> b(panels * plan.b_panel_bytes, 0);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j) put(b, jit::packed_b_offset(kk, j, groups, plan.panel, elem), bv[kk * n + j]);
  // C: random starting values (ints near the i32 limits, so that sums wrap), a sentinel past n.
  constexpr uint32_t kSentinel = 0x7fc0beefu;
  std::vector<uint8_t> c(m * ldc * 4);
  std::vector<uint32_t> c0(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      uint32_t v = kSentinel;
      if (j < n) {
        v = bf16 ? std::bit_cast<uint32_t>(normal(rng)) : (j % 2 ? 0x7fffff00u : 0x80000100u) + rng() % 256;
        c0[i * n + j] = v;
      }
      std::memcpy(&c[(i * ldc + j) * 4], &v, 4);
    }
  std::vector<int> written(m * n, 0);

  // The tiles, block by block, as the emitter runs them.
  for (const jit::AmxBlock& blk : plan.blocks()) {
    CHECK(blk.col0 % plan.panel == 0);
    std::vector<Tile> acc(blk.row_tiles * blk.col_tiles);
    auto c_tile = [&](int64_t rt, int64_t ct) {
      return plan.c_offset(blk.row0 + rt * kAmxTileRows, blk.col0 + ct * jit::kAmxTileLanes);
    };
    for (int64_t rt = 0; rt < blk.row_tiles; ++rt)
      for (int64_t ct = 0; ct < blk.col_tiles; ++ct)
        if (accumulate)
          acc[rt * blk.col_tiles + ct] = tileloadd(c, c_tile(rt, ct), plan.c_row_bytes, {0, static_cast<int64_t>(c.size())});
    for (int64_t step = 0; step < plan.k_steps; ++step) {
      std::vector<Tile> at, bt;
      for (int64_t rt = 0; rt < blk.row_tiles; ++rt)
        at.push_back(tileloadd(a, plan.a_offset(blk.row0 + rt * kAmxTileRows, step), plan.a_row_bytes,
                               {0, static_cast<int64_t>(a.size())}));
      for (int64_t ct = 0; ct < blk.col_tiles; ++ct) {
        const int64_t col = blk.col0 + ct * jit::kAmxTileLanes, panel = col / plan.panel;
        bt.push_back(tileloadd(b, plan.b_offset(col, step), plan.b_row_bytes,
                               {panel * plan.b_panel_bytes, (panel + 1) * plan.b_panel_bytes}));
      }
      for (int64_t rt = 0; rt < blk.row_tiles; ++rt)
        for (int64_t ct = 0; ct < blk.col_tiles; ++ct) {
          Tile& t = acc[rt * blk.col_tiles + ct];
          if (bf16) tdpbf16ps(t, at[rt], bt[ct]);
          else tdpbssd(t, at[rt], bt[ct]);
        }
    }
    for (int64_t rt = 0; rt < blk.row_tiles; ++rt)
      for (int64_t ct = 0; ct < blk.col_tiles; ++ct) {
        tilestored(acc[rt * blk.col_tiles + ct], c, c_tile(rt, ct), plan.c_row_bytes);
        for (int64_t r = 0; r < kAmxTileRows; ++r)
          for (int64_t l = 0; l < jit::kAmxTileLanes; ++l) {
            const int64_t i = blk.row0 + rt * kAmxTileRows + r, j = blk.col0 + ct * jit::kAmxTileLanes + l;
            REQUIRE(i < m);
            REQUIRE(j < n);
            ++written[i * n + j];
          }
      }
  }

  // The reference: C's start (or zero) plus the dot, in f64 for bf16, mod 2^32 for int8.
  auto want = [&](int64_t i, int64_t j, double* magnitude) {
    double sum = 0, mag = 0;
    uint32_t isum = accumulate ? c0[i * n + j] : 0;
    if (accumulate && bf16) {
      sum = std::bit_cast<float>(c0[i * n + j]);
      mag = std::fabs(sum);
    }
    for (int64_t kk = 0; kk < k; ++kk) {
      const double p = real(av[i * k + kk]) * real(bv[kk * n + j]);
      sum += p;
      mag += std::fabs(p);
      isum += static_cast<uint32_t>(av[i * k + kk] * bv[kk * n + j]);
    }
    if (magnitude) *magnitude = mag;
    return bf16 ? sum : static_cast<double>(isum);
  };
  // The rectangles left to the AVX-512 tiles, filled by the reference.
  for (const jit::CRect& r : plan.fallback)
    for (int64_t i = r.row0; i < r.row0 + r.rows; ++i)
      for (int64_t j = r.col0; j < r.col0 + r.cols; ++j) {
        REQUIRE(i < m);
        REQUIRE(j < n);
        const double w = want(i, j, nullptr);
        const uint32_t bits = bf16 ? std::bit_cast<uint32_t>(static_cast<float>(w)) : static_cast<uint32_t>(w);
        std::memcpy(&c[(i * ldc + j) * 4], &bits, 4);
        ++written[i * n + j];
      }

  int wrong = 0, twice = 0, sentinel = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      uint32_t got;
      std::memcpy(&got, &c[(i * ldc + j) * 4], 4);
      if (j >= n) {
        sentinel += got != kSentinel;
        continue;
      }
      twice += written[i * n + j] != 1;
      double magnitude = 0;
      const double w = want(i, j, &magnitude);
      if (bf16) wrong += !(std::fabs(std::bit_cast<float>(got) - w) <= 1e-6 * static_cast<double>(k + 1) * (magnitude + 1));
      else wrong += got != static_cast<uint32_t>(w);
    }
  CHECK(twice == 0);
  CHECK(sentinel == 0);
  CHECK(wrong == 0);
}

// Odd shapes: fewer than 16 rows or columns (all fallback), row and column edges, k not a multiple
// of the k step (padded A), k shorter than one step, an odd number of 16s in rows and columns (the
// half blocks), and whole 2 x 2 blocks.
const Shape kShapes[] = {{16, 32, 16}, {32, 64, 32}, {48, 64, 48},  {64, 128, 96}, {17, 33, 31}, {5, 40, 40},
                         {40, 40, 5},  {40, 5, 40},  {33, 96, 65}, {130, 9, 65},  {16, 1, 16},  {50, 70, 112}};

// check_plan over every shape, A in place and strided, C = dot and C += dot.
void check_plans(int64_t elem, uint32_t seed) {
  for (const Shape& s : kShapes)
    for (bool contiguous : {true, false})
      for (bool accumulate : {false, true}) {
        INFO("m, k, n = " << s.m << ", " << s.k << ", " << s.n << std::string(contiguous ? ", A in place" : ", A strided")
                          << std::string(accumulate ? ", C += dot" : ", C = dot"));
        check_plan(s, elem, contiguous, accumulate, seed++);
      }
}

}  // namespace

TEST_SUITE("jit") {
  TEST_CASE("amx plan: bf16 tiles, emulated, equal a reference matmul, each element of C written once") {
    check_plans(2, 1);
  }

  TEST_CASE("amx plan: int8 tiles, emulated, equal a reference matmul exactly, wrap-around included") {
    check_plans(1, 100);
  }

  TEST_CASE("amx plan: what runs on tiles, what falls back, and when A is copied") {
    // 50 x 112 of C, k 70 bf16: 48 rows and all 112 columns (3 panels and a half) on tiles, k padded
    // to 96 (3 steps of 32), so A is copied; rows 48 and 49 fall back.
    const jit::AmxPlan p = jit::plan_amx(50, 112, 70, 2, true, 70, 112, 32);
    CHECK(p.tile_rows == 48);
    CHECK(p.tile_cols == 112);
    CHECK(p.k_steps == 3);
    CHECK(p.k_padded() == 96);
    CHECK(p.pack_a);
    CHECK(p.a_row_bytes == 96 * 2);
    REQUIRE(p.fallback.size() == 1);
    CHECK(p.fallback[0].row0 == 48);
    CHECK(p.fallback[0].rows == 2);
    CHECK(p.fallback[0].cols == 112);
    // Blocks: per panel two row blocks (32 rows, then 16); the last panel half wide.
    const std::vector<jit::AmxBlock> blocks = p.blocks();
    REQUIRE(blocks.size() == 8);
    CHECK(blocks[0].row_tiles == 2);
    CHECK(blocks[1].row_tiles == 1);
    CHECK(blocks[0].col_tiles == 2);
    CHECK(blocks[7].col_tiles == 1);
    CHECK(blocks[7].col0 == 96);
    // int8, k 128 (two steps of 64), A in place: nothing copied.
    const jit::AmxPlan q = jit::plan_amx(64, 64, 128, 1, true, 200, 64, 32);
    CHECK(!q.pack_a);
    CHECK(q.k_steps == 2);
    CHECK(q.a_row_bytes == 200);
    CHECK(q.fallback.empty());
    // Fewer than 16 columns: nothing on tiles.
    const jit::AmxPlan r = jit::plan_amx(64, 15, 64, 2, true, 64, 15, 32);
    CHECK(r.tile_rows == 0);
    CHECK(r.blocks().empty());
    REQUIRE(r.fallback.size() == 1);
    CHECK(r.fallback[0].rows == 64);
    CHECK(r.fallback[0].cols == 15);
    // The packed B layout pads k to whole steps of 16 groups.
    CHECK(jit::packed_b_groups(1, 2) == 16);
    CHECK(jit::packed_b_groups(32, 2) == 16);
    CHECK(jit::packed_b_groups(33, 2) == 32);
    CHECK(jit::packed_b_groups(65, 4) == 32);
  }

  TEST_CASE("amx plan: a panel other than 32 columns is an InternalError naming it") {
    try {
      jit::plan_amx(32, 32, 32, 2, true, 32, 32, 16);
      FAIL("no error");
    } catch (const InternalError& e) {
      const std::string what = e.what();
      CHECK(what.find("32-column panels") != std::string::npos);
      CHECK(what.find("not 16 columns") != std::string::npos);
    }
  }
}
