// The AMX dot on hosts without AMX, two ways, both against a reference matmul (bf16 within the dot
// tolerance, int8 exactly, wrap-around included) over odd shapes, A in place and strided, C = dot and
// C += dot (and, for the emitted code, C = S + dot with S a matrix of its own), C's columns past n a
// sentinel that must stay:
//   - its layout (jit/llvm/amx_plan.h): each plan run through the C++ emulation of tileloadd,
//     tdpbf16ps, tdpbssd and tilestored (jit/llvm/amx_emulation.h: the SDM's definitions), B packed by
//     packed_b_offset, the rectangles the plan leaves to the AVX-512 tiles filled by the reference;
//     every element of C written exactly once and no tile row outside its operand (a B tile outside
//     its panel);
//   - the code the `amx` target gets (jit/llvm/amx_gemm.cpp and gemm.cpp), its tile intrinsics
//     replaced by calls to the same emulation and everything else run as compiled (B's packing, A's
//     padded copy, every tile address, the AVX-512 tiles at the edges); needs a CPU that runs
//     avx512_bf16, the edges' instructions.
// The instructions themselves are checked in tests/dsl/target_test.cpp.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "jit/ir/diagnostics.h"
#include "jit/llvm/amx_emulation.h"
#include "jit/llvm/amx_plan.h"
#include "jit/llvm/target.h"
#include "runtime/numeric.h"

using namespace tessera;
using jit::kAmxTileBytes;
using jit::kAmxTileLanes;
using jit::kAmxTileRows;
using jit::amx_emulation::Tile;

namespace {

struct Shape {
  int64_t m, k, n;
};

// Fewer than 16 rows or columns (all on the AVX-512 tiles), k shorter than a tile step and not a
// multiple of it (A padded), row and column edges (one starting half way through a panel), half
// blocks, whole 2 x 2 blocks over several k steps.
const Shape kShapes[] = {{16, 32, 16}, {32, 64, 32}, {48, 64, 48}, {64, 256, 96}, {17, 33, 31}, {5, 40, 40},
                         {40, 40, 5},  {40, 5, 40},  {33, 96, 65}, {130, 9, 65},  {16, 1, 16},  {50, 70, 112}};

// One case's operands and starting C, and the reference.
struct Dot {
  Shape s;
  bool bf16;  // else int8
  bool accumulate;
  bool separate = false;      // accumulating, the sums start from a matrix other than C
  int64_t lo = 0, hi = -1;    // with hi >= 0 (bf16), the dot sums k in [lo, hi) alone
  std::vector<int64_t> a, b;  // element values, row-major: bf16 bits or i8
  std::vector<uint32_t> c0;   // C's starting bits, m x n

  Dot(const Shape& shape, bool bf16_, bool accumulate_, uint32_t seed)
      : s(shape), bf16(bf16_), accumulate(accumulate_), a(s.m * s.k), b(s.k * s.n), c0(s.m * s.n) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    std::uniform_int_distribution<int> byte(-128, 127);
    for (auto* v : {&a, &b})
      for (auto& e : *v) e = bf16 ? static_cast<int64_t>(bfloat16(normal(rng)).bits) : byte(rng);
    // i32 C near the limits, so that sums wrap.
    for (size_t e = 0; e < c0.size(); ++e)
      c0[e] = bf16 ? std::bit_cast<uint32_t>(normal(rng)) : (e % 2 ? 0x7fffff00u : 0x80000100u) + rng() % 256;
  }
  int64_t elem() const { return bf16 ? 2 : 1; }
  double real(int64_t v) const {
    return bf16 ? static_cast<double>(static_cast<float>(std::bit_cast<bfloat16>(static_cast<uint16_t>(v))))
                : static_cast<double>(v);
  }
  // Element value v at byte `offset` of `memory`.
  void put(std::vector<uint8_t>& memory, int64_t offset, int64_t v) const {
    if (bf16) {
      const auto bits = static_cast<uint16_t>(v);
      std::memcpy(&memory[offset], &bits, 2);
    } else {
      memory[offset] = static_cast<uint8_t>(static_cast<int8_t>(v));
    }
  }
  static constexpr uint32_t kSentinel = 0x7fc0beefu;
  // C with leading dim ldc: c0, the sentinel past n.
  std::vector<uint32_t> c(int64_t ldc) const {
    std::vector<uint32_t> out(s.m * ldc, kSentinel);
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) out[i * ldc + j] = c0[i * s.n + j];
    return out;
  }
  // The reference C[i][j] as bits (f32 or i32), and whether `got` is close enough to it.
  uint32_t want(int64_t i, int64_t j) const { return bits(sum(i, j, nullptr)); }
  bool agrees(int64_t i, int64_t j, uint32_t got) const {
    double magnitude = 0;
    const double w = sum(i, j, &magnitude);
    if (!bf16) return got == bits(w);
    return std::fabs(std::bit_cast<float>(got) - w) <= 1e-6 * static_cast<double>(s.k + 1) * (magnitude + 1);
  }
  // Counts the elements of C (leading dim ldc) that disagree with the reference, and the sentinels
  // past n that changed.
  void check(const std::vector<uint32_t>& got, int64_t ldc) const {
    int wrong = 0, sentinel = 0;
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < ldc; ++j) {
        if (j >= s.n) sentinel += got[i * ldc + j] != kSentinel;
        else wrong += !agrees(i, j, got[i * ldc + j]);
      }
    CHECK(sentinel == 0);
    CHECK(wrong == 0);
  }

 private:
  // C's start (or zero) plus the dot: in f64 for bf16 (with the sum of magnitudes), mod 2^32 for int8.
  double sum(int64_t i, int64_t j, double* magnitude) const {
    double total = accumulate && bf16 ? std::bit_cast<float>(c0[i * s.n + j]) : 0, mag = std::fabs(total);
    uint32_t wrapped = accumulate ? c0[i * s.n + j] : 0;
    for (int64_t kk = hi >= 0 ? lo : 0; kk < (hi >= 0 ? hi : s.k); ++kk) {
      const double p = real(a[i * s.k + kk]) * real(b[kk * s.n + j]);
      total += p;
      mag += std::fabs(p);
      wrapped += static_cast<uint32_t>(a[i * s.k + kk] * b[kk * s.n + j]);
    }
    if (magnitude) *magnitude = mag;
    return bf16 ? total : static_cast<double>(wrapped);
  }
  uint32_t bits(double v) const {
    return bf16 ? std::bit_cast<uint32_t>(static_cast<float>(v)) : static_cast<uint32_t>(static_cast<int64_t>(v));
  }
};

// ---- the plan through the emulated instructions ----

// Bytes [lo, hi) of a buffer a tile may touch (a B tile: its panel).
struct Bounds {
  int64_t lo, hi;
};

Tile tileloadd(const uint8_t* memory, int64_t offset, int64_t stride, Bounds bounds) {
  for (int64_t r = 0; r < kAmxTileRows; ++r) {
    REQUIRE(offset + r * stride >= bounds.lo);
    REQUIRE(offset + r * stride + kAmxTileBytes <= bounds.hi);
  }
  Tile t;
  jit::amx_emulation::tileloadd(t, memory + offset, stride);
  return t;
}

void tilestored(const Tile& t, uint8_t* memory, int64_t offset, int64_t stride, Bounds bounds) {
  for (int64_t r = 0; r < kAmxTileRows; ++r) {
    REQUIRE(offset + r * stride >= bounds.lo);
    REQUIRE(offset + r * stride + kAmxTileBytes <= bounds.hi);
  }
  jit::amx_emulation::tilestored(t, memory + offset, stride);
}

// plan_amx for the case, run block by block as the emitter runs it; A's rows in place `k + 3` apart,
// or strided (then the plan must copy A); C with leading dim n + 5.
void check_plan(const Dot& d, bool a_rows_contiguous) {
  const int64_t m = d.s.m, k = d.s.k, n = d.s.n, elem = d.elem(), a_ld = a_rows_contiguous ? k + 3 : 1, ldc = n + 5;
  const jit::AmxPlan plan = jit::plan_amx(m, n, k, elem, a_rows_contiguous, a_ld, ldc, 32);
  // A as the tiles read it: in place (exactly as long as its last row reaches) or the padded copy.
  std::vector<uint8_t> a(plan.pack_a ? m * plan.a_row_bytes : ((m - 1) * a_ld + k) * elem, 0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t kk = 0; kk < k; ++kk) d.put(a, i * plan.a_row_bytes + kk * elem, d.a[i * k + kk]);
  // B packed in k groups, zero past k and n.
  const int64_t panels = (n + plan.panel - 1) / plan.panel, groups = jit::packed_b_groups(k, plan.group);
  CHECK(plan.b_panel_bytes == groups * plan.panel * 4);
  std::vector<uint8_t> b(panels * plan.b_panel_bytes, 0);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j) d.put(b, jit::packed_b_offset(kk, j, groups, plan.panel, elem), d.b[kk * n + j]);
  std::vector<uint32_t> c = d.c(ldc);
  auto* c_bytes = reinterpret_cast<uint8_t*>(c.data());
  const Bounds all_a{0, static_cast<int64_t>(a.size())}, all_c{0, static_cast<int64_t>(c.size() * 4)};
  std::vector<int> written(m * n, 0);

  for (const jit::AmxBlock& blk : plan.blocks()) {
    CHECK(blk.col0 % plan.panel == 0);
    std::vector<Tile> acc(blk.row_tiles * blk.col_tiles);  // zeros
    auto c_tile = [&](int64_t rt, int64_t ct) {
      return plan.c_offset(blk.row0 + rt * kAmxTileRows, blk.col0 + ct * kAmxTileLanes);
    };
    for (int64_t rt = 0; rt < blk.row_tiles; ++rt)
      for (int64_t ct = 0; ct < blk.col_tiles; ++ct)
        if (d.accumulate) acc[rt * blk.col_tiles + ct] = tileloadd(c_bytes, c_tile(rt, ct), plan.c_row_bytes, all_c);
    for (int64_t step = 0; step < plan.k_steps; ++step) {
      std::vector<Tile> at, bt;
      for (int64_t rt = 0; rt < blk.row_tiles; ++rt)
        at.push_back(tileloadd(a.data(), plan.a_offset(blk.row0 + rt * kAmxTileRows, step), plan.a_row_bytes, all_a));
      for (int64_t ct = 0; ct < blk.col_tiles; ++ct) {
        const int64_t col = blk.col0 + ct * kAmxTileLanes, panel = col / plan.panel;
        bt.push_back(tileloadd(b.data(), plan.b_offset(col, step), plan.b_row_bytes,
                               {panel * plan.b_panel_bytes, (panel + 1) * plan.b_panel_bytes}));
      }
      for (int64_t rt = 0; rt < blk.row_tiles; ++rt)
        for (int64_t ct = 0; ct < blk.col_tiles; ++ct) {
          Tile& t = acc[rt * blk.col_tiles + ct];
          if (d.bf16) jit::amx_emulation::tdpbf16ps(t, at[rt], bt[ct]);
          else jit::amx_emulation::tdpbssd(t, at[rt], bt[ct]);
        }
    }
    for (int64_t rt = 0; rt < blk.row_tiles; ++rt)
      for (int64_t ct = 0; ct < blk.col_tiles; ++ct) {
        tilestored(acc[rt * blk.col_tiles + ct], c_bytes, c_tile(rt, ct), plan.c_row_bytes, all_c);
        for (int64_t r = 0; r < kAmxTileRows; ++r)
          for (int64_t l = 0; l < kAmxTileLanes; ++l) {
            const int64_t i = blk.row0 + rt * kAmxTileRows + r, j = blk.col0 + ct * kAmxTileLanes + l;
            REQUIRE(i < m);
            REQUIRE(j < n);
            ++written[i * n + j];
          }
      }
  }
  // The rectangles left to the AVX-512 tiles, filled by the reference.
  for (const jit::CRect& r : plan.fallback)
    for (int64_t i = r.row0; i < r.row0 + r.rows; ++i)
      for (int64_t j = r.col0; j < r.col0 + r.cols; ++j) {
        REQUIRE(i < m);
        REQUIRE(j < n);
        c[i * ldc + j] = d.want(i, j);
        ++written[i * n + j];
      }
  int twice = 0;
  for (int w : written) twice += w != 1;
  CHECK(twice == 0);
  d.check(c, ldc);
}

// ---- the emitted code, tiles emulated ----

// The amx target's dot for the case; A row-major (rows k + 3 apart) or transposed (stored k x m),
// B with leading dim n + 2, C with n + 5; A and B exactly as long as their last element reaches.
void check_emitted(const Dot& d, bool a_rows_contiguous) {
  const int64_t m = d.s.m, k = d.s.k, n = d.s.n, elem = d.elem(), ldb = n + 2, ldc = n + 5;
  const int64_t lda = a_rows_contiguous ? k + 3 : 1, a_cs = a_rows_contiguous ? 1 : m;
  std::vector<uint8_t> a(((m - 1) * lda + (k - 1) * a_cs + 1) * elem), b(((k - 1) * ldb + n) * elem);
  // Outside a span, inf in A and NaN in B: a product of them reaching a sum would show.
  const bool span = d.hi >= 0;
  auto outside = [&](int64_t kk) { return span && (kk < d.lo || kk >= d.hi); };
  for (int64_t i = 0; i < m; ++i)
    for (int64_t kk = 0; kk < k; ++kk) d.put(a, (i * lda + kk * a_cs) * elem, outside(kk) ? 0x7f80 : d.a[i * k + kk]);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j) d.put(b, (kk * ldb + j) * elem, outside(kk) ? 0x7fc0 : d.b[kk * n + j]);
  // Separate: the starting values in S (leading dim n + 9), C all sentinels before the dot.
  const int64_t ld_s = n + 9;
  const std::vector<uint32_t> s = d.c(ld_s);
  std::vector<uint32_t> c = d.separate ? std::vector<uint32_t>(m * ldc, Dot::kSentinel) : d.c(ldc);
  jit::amx_emulation::run_dot({.dtype = d.bf16 ? DType::bf16 : DType::i8, .m = m, .n = n, .k = k, .a = a.data(),
                               .lda = lda, .a_cs = a_cs, .b = b.data(), .ldb = ldb, .c = c.data(), .ldc = ldc,
                               .accumulate = d.accumulate, .from = d.separate ? s.data() : nullptr, .from_ld = ld_s,
                               .span = span, .span_lo = d.lo, .span_hi = span ? d.hi : 0});
  d.check(c, ldc);
  if (d.separate) CHECK(s == d.c(ld_s));
}

// `run` over every shape, A in place and strided, C = dot and C += dot, and with `separate` C = S + dot.
template <class Run>
void each_case(bool bf16, uint32_t seed, const Run& run, bool separate = false) {
  const char* forms[] = {", C = dot", ", C += dot", ", C = S + dot"};
  for (const Shape& s : kShapes)
    for (bool contiguous : {true, false})
      for (int form = 0; form < (separate ? 3 : 2); ++form) {
        INFO("m, k, n = " << s.m << ", " << s.k << ", " << s.n << std::string(contiguous ? ", A in place" : ", A strided")
                          << forms[form]);
        Dot d(s, bf16, form > 0, seed++);
        d.separate = form == 2;
        run(d, contiguous);
      }
}

// Whether this CPU runs the emulated code (the edges' AVX-512 instructions); says so when not.
bool runs_emulated() {
  if (jit::missing_on_host(jit::cpu_target("avx512_bf16")).empty()) return true;
  MESSAGE("skipped: this CPU does not run the avx512_bf16 target, which the emulated code needs");
  return false;
}

}  // namespace

TEST_SUITE("jit") {
  TEST_CASE("amx plan: bf16 tiles, emulated, equal a reference matmul, each element of C written once") {
    each_case(true, 1, check_plan);
  }

  TEST_CASE("amx plan: int8 tiles, emulated, equal a reference matmul exactly, wrap-around included") {
    each_case(false, 100, check_plan);
  }

  TEST_CASE("amx emulated: the amx target's bf16 dot, its tiles emulated, agrees with a reference matmul") {
    if (runs_emulated()) each_case(true, 200, check_emitted, true);
  }

  // A span of k (a dot of operands zeroed outside it, KSpan): the tiles take its whole k steps, the
  // pair tiles its ends. Spans empty, whole, inside one step, one element, exactly one step, across
  // steps from odd and even ends, clamped at k; k a multiple of the step and not (A padded).
  TEST_CASE("amx emulated: the amx target's bf16 dot over a span of k agrees with a reference over it") {
    if (!runs_emulated()) return;
    const Shape shapes[] = {{32, 64, 32}, {64, 256, 96}, {33, 96, 65}, {50, 70, 112}};
    uint32_t seed = 400;
    for (const Shape& s : shapes)
      for (auto [lo, hi] : std::vector<std::pair<int64_t, int64_t>>{
               {0, 0}, {0, s.k}, {3, 30}, {7, 8}, {32, 64}, {31, s.k - 5}, {33, s.k}, {s.k / 2, s.k / 2}})
        for (bool contiguous : {true, false})
          for (int form : {0, 2}) {
            INFO("m, k, n = " << s.m << ", " << s.k << ", " << s.n << ", span [" << lo << ", " << hi << ")"
                              << (contiguous ? ", A in place" : ", A strided") << (form ? ", C = S + dot" : ", C = dot"));
            Dot d(s, true, form > 0, seed++);
            d.separate = form == 2;
            d.lo = std::min(lo, s.k);
            d.hi = std::min(hi, s.k);
            check_emitted(d, contiguous);
          }
  }

  TEST_CASE("amx emulated: the amx target's int8 dot, its tiles emulated, equals a reference matmul") {
    if (runs_emulated()) each_case(false, 300, check_emitted, true);
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
