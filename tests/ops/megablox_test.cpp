// Megablox gmm / tgmm against naive host references, in both backends, and their errors.
#include <doctest/doctest.h>

#include <tessera/megablox.hpp>

#include <numeric>

#include "tests/support/kernels.h"
#include "tests/support/scoped_env.h"
#include "tests/support/user_error.h"

using namespace tessera;
namespace pl = tessera;
namespace mb = tessera::megablox;
using doctest::Contains;

namespace {

// Row ranges of the groups.
std::vector<int64_t> offsets_of(const std::vector<int32_t>& sizes) {
  std::vector<int64_t> off{0};
  for (int32_t s : sizes) off.push_back(off.back() + s);
  return off;
}

// gmm in double: rows of local group g (g - first indexes rhs) times rhs; other rows zero (or the
// existing output's rows).
pl::Array naive_gmm(const pl::Array& lhs, const pl::Array& rhs, const std::vector<int32_t>& sizes, int64_t first,
                    bool transpose_rhs, const pl::Array* existing, pl::DType out_dtype) {
  const int64_t m = lhs.shape()[0], k = lhs.shape()[1], n = transpose_rhs ? rhs.shape()[1] : rhs.shape()[2];
  const int64_t local = rhs.shape()[0];
  std::vector<double> a = lhs.to_vector<double>(), b = rhs.to_vector<double>();
  std::vector<double> out = existing ? existing->to_vector<double>() : std::vector<double>(static_cast<size_t>(m * n), 0);
  const std::vector<int64_t> off = offsets_of(sizes);
  for (int64_t g = first; g < first + local; ++g)
    for (int64_t r = off[g]; r < off[g + 1]; ++r)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += a[r * k + p] * b[(g - first) * k * n + (transpose_rhs ? j * k + p : p * n + j)];
        out[r * n + j] = s;
      }
  return pl::Array::from_vector(out, {m, n}, out_dtype);
}

// tgmm in double: out[g - first] = lhs[:, rows of g] @ rhs[rows of g] (+ existing).
pl::Array naive_tgmm(const pl::Array& lhs, const pl::Array& rhs, const std::vector<int32_t>& sizes, int64_t first,
                     int64_t local, const pl::Array* existing, pl::DType out_dtype) {
  const int64_t k = lhs.shape()[0], m = lhs.shape()[1], n = rhs.shape()[1];
  std::vector<double> a = lhs.to_vector<double>(), b = rhs.to_vector<double>();
  std::vector<double> out = existing ? existing->to_vector<double>()
                                     : std::vector<double>(static_cast<size_t>(local * k * n), 0);
  const std::vector<int64_t> off = offsets_of(sizes);
  for (int64_t g = first; g < first + local; ++g)
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t r = off[g]; r < off[g + 1]; ++r) s += a[i * m + r] * b[r * n + j];
        out[((g - first) * k + i) * n + j] += s;
      }
  return pl::Array::from_vector(out, {local, k, n}, out_dtype);
}

pl::Array sizes_array(const std::vector<int32_t>& s) {
  return pl::Array::from_vector(s, {static_cast<int64_t>(s.size())});
}

// Tolerances: f32 inputs accumulate in f32; bf16 inputs are exact products summed in f32, so the
// output's rounding dominates.
double tol(pl::DType in, pl::DType out) { return in == pl::bf16 || out == pl::bf16 ? 3e-2 : 1e-4; }

// gmm and tgmm of random operands (seeded from `seed`) against the references, f32 and bf16, in
// every backend, for each tiling.
void check_gmm_and_tgmm(const std::vector<int32_t>& sizes, int64_t m, int64_t k, int64_t n,
                        const std::vector<mb::Tiling>& tilings, uint64_t seed) {
  const auto groups = static_cast<int64_t>(sizes.size());
  for (pl::DType dt : {pl::f32, pl::bf16}) {
    pl::Array x = pl::Array::random_normal({m, k}, dt, seed), w = pl::Array::random_normal({groups, k, n}, dt, seed + 1);
    pl::Array xt = pl::Array::random_normal({k, m}, dt, seed + 2), dy = pl::Array::random_normal({m, n}, dt, seed + 3);
    pl::Array want_gmm = naive_gmm(x, w, sizes, 0, false, nullptr, pl::f32);
    pl::Array want_tgmm = naive_tgmm(xt, dy, sizes, 0, groups, nullptr, pl::f32);
    for (const mb::Tiling& tiling : tilings) {
      for (auto& b : testing::backends()) {
        INFO("dtype " << pl::dtype_name(dt) << ", tm " << tiling.tm << ", " << b.name);
        CHECK(pl::allclose(mb::gmm(x, w, sizes_array(sizes), {.tiling = tiling, .interpret = b.options.interpret}),
                           want_gmm, tol(dt, pl::f32), tol(dt, pl::f32)));
        CHECK(pl::allclose(mb::tgmm(xt, dy, sizes_array(sizes), {.tiling = tiling, .interpret = b.options.interpret}),
                           want_tgmm, tol(dt, pl::f32), tol(dt, pl::f32)));
      }
    }
  }
}

}  // namespace

TEST_SUITE("ops") {
  TEST_CASE("megablox: group metadata schedules each (group, m-tile) pair once, shard first") {
    // m = 32, tm = 8: groups of 10, 0, 14, 8 rows. Group 0 owns tiles 0 and 1 (rows 0..9), group 2
    // starts inside tile 1 (row 10) and owns tile 2 (rows 16..23), group 3 starts in tile 3 (row 24).
    const std::vector<int32_t> sizes{10, 0, 14, 8};
    mb::GroupMetadata md = mb::make_group_metadata(sizes, 32, 8, 0, 4, false);
    CHECK(md.group_offsets == std::vector<int32_t>{0, 10, 10, 24, 32});
    CHECK(md.num_tiles == 5);
    CHECK(std::vector<int32_t>(md.group_ids.begin(), md.group_ids.begin() + 5) == std::vector<int32_t>{0, 0, 2, 2, 3});
    CHECK(std::vector<int32_t>(md.m_tile_ids.begin(), md.m_tile_ids.begin() + 5) == std::vector<int32_t>{0, 1, 1, 2, 3});
    CHECK(md.group_ids.size() == 32 / 8 + 4 - 1);

    // Empty groups get a step of their own for tgmm.
    mb::GroupMetadata visit = mb::make_group_metadata(sizes, 32, 8, 0, 4, true);
    CHECK(visit.num_tiles == 6);
    CHECK(std::vector<int32_t>(visit.group_ids.begin(), visit.group_ids.begin() + 6) ==
          std::vector<int32_t>{0, 0, 1, 2, 2, 3});
    CHECK(std::vector<int32_t>(visit.m_tile_ids.begin(), visit.m_tile_ids.begin() + 6) ==
          std::vector<int32_t>{0, 1, 1, 1, 2, 3});

    // A shard holding groups 2 and 3: its steps come first.
    mb::GroupMetadata shard = mb::make_group_metadata(sizes, 32, 8, 2, 2, false);
    CHECK(shard.num_tiles == 3);
    CHECK(std::vector<int32_t>(shard.group_ids.begin(), shard.group_ids.begin() + 3) == std::vector<int32_t>{2, 2, 3});
    CHECK(std::vector<int32_t>(shard.m_tile_ids.begin(), shard.m_tile_ids.begin() + 3) == std::vector<int32_t>{1, 2, 3});
  }

  TEST_CASE("megablox: gmm matches the reference (unaligned and empty groups, partial k and n tiles)") {
    // m = 64 rows in tiles of 16; k = 40 (tk = 16: a partial last k tile); n = 48 (tn = 32: a partial
    // last n tile). Groups straddle tiles, one is empty, one ends exactly on a tile edge.
    const std::vector<int32_t> sizes{10, 0, 22, 16, 3, 13};
    const mb::Tiling tiling{16, 16, 32};
    for (pl::DType dt : {pl::f32, pl::bf16}) {
      for (bool tr : {false, true}) {
        pl::Array lhs = pl::Array::random_normal({64, 40}, dt, 1);
        pl::Array rhs = pl::Array::random_normal(tr ? pl::Shape{6, 48, 40} : pl::Shape{6, 40, 48}, dt, 2);
        pl::Array want = naive_gmm(lhs, rhs, sizes, 0, tr, nullptr, pl::f32);
        for (auto& b : testing::backends()) {
          INFO("dtype " << pl::dtype_name(dt) << ", transpose_rhs " << tr << ", " << b.name);
          pl::Array got = mb::gmm(lhs, rhs, sizes_array(sizes),
                                  {.tiling = tiling, .transpose_rhs = tr, .interpret = b.options.interpret});
          CHECK(got.dtype() == pl::f32);
          CHECK(pl::allclose(got, want, tol(dt, pl::f32), tol(dt, pl::f32)));
        }
      }
    }
  }

  TEST_CASE("megablox: gmm with a bf16 output, group_offset, a tiling table and existing_out") {
    const std::vector<int32_t> sizes{5, 19, 0, 24, 16};
    pl::Array lhs = pl::Array::random_normal({64, 32}, pl::f32, 3);
    pl::Array rhs_all = pl::Array::random_normal({5, 32, 24}, pl::f32, 4);
    for (auto& b : testing::backends()) {
      INFO(b.name);
      pl::Array bf = mb::gmm(lhs, rhs_all, sizes_array(sizes),
                             {.preferred_element_type = pl::bf16, .tiling = mb::Tiling{16, 16, 16}, .interpret = b.options.interpret});
      CHECK(bf.dtype() == pl::bf16);
      CHECK(pl::allclose(bf, naive_gmm(lhs, rhs_all, sizes, 0, false, nullptr, pl::bf16), 2e-2, 2e-2));

      // A shard with groups 1..3 (rhs holds those three): rows of groups 0 and 4 are zero.
      pl::Array rhs_shard = pl::dynamic_slice(rhs_all, {1, 0, 0}, {3, 32, 24});
      mb::TilingFn table = [](int64_t m, int64_t k, int64_t n) -> std::optional<mb::Tiling> {
        if (m == 64 && k == 32 && n == 24) return mb::Tiling{8, 32, 8};
        return std::nullopt;
      };
      pl::Array shard = mb::gmm(lhs, rhs_shard, sizes_array(sizes),
                                {.tiling = table, .group_offset = 1, .interpret = b.options.interpret});
      CHECK(pl::allclose(shard, naive_gmm(lhs, rhs_shard, sizes, 1, false, nullptr, pl::f32), 1e-4, 1e-4));

      // existing_out: the shard's rows are replaced, every other row keeps its value; the array
      // passed in is not modified.
      pl::Array existing = pl::Array::random_normal({64, 24}, pl::f32, 5);
      const std::vector<float> before = existing.to_vector<float>();
      pl::Array merged = mb::gmm(lhs, rhs_shard, sizes_array(sizes),
                                 {.tiling = mb::Tiling{16, 16, 16}, .group_offset = 1, .existing_out = existing,
                                  .interpret = b.options.interpret});
      CHECK(pl::allclose(merged, naive_gmm(lhs, rhs_shard, sizes, 1, false, &existing, pl::f32), 1e-4, 1e-4));
      CHECK(existing.to_vector<float>() == before);

      // Only empty local groups: nothing to compute, the output is zero.
      pl::Array empty = mb::gmm(lhs, pl::dynamic_slice(rhs_all, {2, 0, 0}, {1, 32, 24}), sizes_array(sizes),
                                {.tiling = mb::Tiling{16, 16, 16}, .group_offset = 2, .interpret = b.options.interpret});
      CHECK(pl::allclose(empty, pl::Array::zeros({64, 24}, pl::f32), 0, 0));
    }
  }

  TEST_CASE("megablox: tgmm matches the reference (empty groups are zero, partial k tiles)") {
    const std::vector<int32_t> sizes{10, 0, 22, 16, 3, 13};
    for (pl::DType dt : {pl::f32, pl::bf16}) {
      pl::Array lhs = pl::Array::random_normal({40, 64}, dt, 6);  // (k, m)
      pl::Array rhs = pl::Array::random_normal({64, 48}, dt, 7);  // (m, n)
      pl::Array want = naive_tgmm(lhs, rhs, sizes, 0, 6, nullptr, pl::f32);
      for (auto& b : testing::backends()) {
        INFO("dtype " << pl::dtype_name(dt) << ", " << b.name);
        pl::Array got = mb::tgmm(lhs, rhs, sizes_array(sizes), {.tiling = mb::Tiling{16, 16, 32}, .interpret = b.options.interpret});
        CHECK(got.shape() == pl::Shape{6, 40, 48});
        CHECK(pl::allclose(got, want, tol(dt, pl::f32), tol(dt, pl::f32)));
      }
    }
  }

  // m-tiles of 64 rows, which gmm splits into chunks of 8 where a group boundary crosses the tile
  // (tgmm's dot sums over the group's rows of the tile): groups ending inside the first chunk, at a
  // chunk's edge, inside a later chunk, a group wholly inside one chunk, an empty group, and a tile
  // wholly inside one group.
  TEST_CASE("megablox: gmm and tgmm on m-tiles split in chunks at group boundaries match the reference") {
    check_gmm_and_tgmm({5, 27, 0, 40, 3, 53, 64}, 192, 40, 48, {mb::Tiling{64, 16, 32}}, 11);
  }

  // Groups chosen so that tiles hold: a group inside one 8-row chunk with both ends ragged (rows
  // 3-6), runs of whole chunks of every length from 8 to 64 rows between ragged ends, a
  // group ending on a chunk boundary, one starting on one, an empty group inside a chunk, and groups
  // spanning tiles; on 128-row tiles, and on 12-row tiles, which are not cut in chunks.
  TEST_CASE("megablox: gmm and tgmm on boundary tiles taken as pieces of whole chunks and ragged chunks") {
    check_gmm_and_tgmm({3, 3, 117, 0, 8, 5, 120, 56, 11, 61}, 384, 24, 40,
                       {mb::Tiling{128, 16, 32}, mb::Tiling{12, 16, 32}}, 21);
  }

  TEST_CASE("megablox: tgmm over a shard of groups, accumulating into existing_out") {
    const std::vector<int32_t> sizes{7, 25, 0, 16, 16};
    pl::Array lhs = pl::Array::random_normal({24, 64}, pl::f32, 8);
    pl::Array rhs = pl::Array::random_normal({64, 16}, pl::f32, 9);
    pl::Array existing = pl::Array::random_normal({3, 24, 16}, pl::f32, 10);
    for (auto& b : testing::backends()) {
      INFO(b.name);
      pl::Array got = mb::tgmm(lhs, rhs, sizes_array(sizes),
                               {.tiling = mb::Tiling{16, 8, 16}, .group_offset = 1, .num_actual_groups = 3,
                                .existing_out = existing, .interpret = b.options.interpret});
      CHECK(pl::allclose(got, naive_tgmm(lhs, rhs, sizes, 1, 3, &existing, pl::f32), 1e-4, 1e-4));
    }
  }

  TEST_CASE("megablox: cost estimates follow the seed's formulas") {
    const std::vector<int32_t> sizes{32, 32};
    pl::Array lhs = pl::Array::zeros({64, 32}, pl::bf16), rhs = pl::Array::zeros({2, 32, 16}, pl::bf16);
    pl::CostEstimate c = mb::gmm_cost_estimate(lhs, rhs, sizes_array(sizes), {.tiling = mb::Tiling{16, 16, 16}});
    CHECK(c.flops == 2 * 64 * 32 * 16);
    // lhs once per n tile (1), the (k, n) slab per table entry (64/16 + 2 - 1 = 5), the f32 output.
    CHECK(c.bytes_accessed == 64 * 32 * 2 + 32 * 16 * 2 * 5 + 64 * 16 * 4);
    pl::Array tl = pl::Array::zeros({32, 64}, pl::f32), tr = pl::Array::zeros({64, 16}, pl::f32);
    pl::CostEstimate t = mb::tgmm_cost_estimate(tl, tr, sizes_array(sizes), {.tiling = mb::Tiling{16, 16, 16}});
    CHECK(t.bytes_accessed == 32 * 64 * 4 * 1 + 64 * 16 * 4 * 2 + 2 * 32 * 16 * 4);
  }

  TEST_CASE("megablox: misuse is a UserError naming what was given") {
    pl::Array lhs = pl::Array::zeros({32, 16}, pl::f32), rhs = pl::Array::zeros({2, 16, 8}, pl::f32);
    pl::Array sizes = sizes_array({16, 16});
    CHECK_THROWS_WITH_AS(mb::gmm(lhs.reshape({32, 16, 1}), rhs, sizes),
                         Contains("megablox::gmm: expected a 2-tensor for 'lhs' but got a 3-tensor"), UserError);
    CHECK_THROWS_WITH_AS(mb::gmm(lhs, rhs.reshape({32, 8}), sizes),
                         Contains("expected a 3-tensor for 'rhs' but got a 2-tensor"), UserError);
    CHECK_THROWS_WITH_AS(mb::gmm(lhs, rhs, pl::Array::zeros({2}, pl::i64)),
                         Contains("'group_sizes' must be a 1-D i32 array"), UserError);
    CHECK_THROWS_WITH_AS(mb::gmm(lhs.astype(pl::f16), rhs, sizes), Contains("'lhs' must be f32 or bf16"), UserError);
    CHECK_THROWS_WITH_AS(mb::gmm(lhs, rhs, sizes_array({20, 20})),
                         Contains("sum(group_sizes) = 40 for m = 32"), UserError);
    CHECK_THROWS_WITH_AS(mb::gmm(lhs, rhs, sizes, {.tiling = mb::Tiling{24, 16, 8}}),
                         Contains("m = 32 must be divisible by the m tile size (24)"), UserError);
    CHECK_THROWS_WITH_AS(mb::gmm(lhs, rhs, sizes, {.tiling = mb::TilingFn([](int64_t, int64_t, int64_t) {
                                                     return std::optional<mb::Tiling>{};
                                                   })}),
                         Contains("no tuned tiling found for (m, k, n) = (32, 16, 8)"), UserError);
    CHECK_THROWS_WITH_AS(mb::gmm(lhs, rhs, sizes, {.tiling = mb::Tiling{16, 16, 8}, .existing_out = pl::Array::zeros({32, 8}, pl::bf16)}),
                         Contains("existing output dtype must match preferred_element_type"), UserError);
    CHECK_THROWS_WITH_AS(mb::gmm(lhs, rhs, sizes, {.tiling = mb::Tiling{16, 16, 8}, .group_offset = 1}),
                         Contains("group_offset = 1, rhs.shape[0] = 2, 2 groups"), UserError);
    CHECK_THROWS_WITH_AS(mb::gmm(lhs, rhs, sizes, {.transpose_rhs = true}),
                         Contains("lhs and rhs differ in the contracted dim"), UserError);
    CHECK_THROWS_WITH_AS(mb::tgmm(lhs, rhs, sizes), Contains("megablox::tgmm: expected a 2-tensor for 'rhs'"), UserError);
    try {
      mb::gmm(lhs, rhs, sizes_array({-1, 16}));
      FAIL("expected a UserError");
    } catch (const UserError& e) {
      CHECK(e.problem() == "megablox::gmm: group 0 has a negative size");
      CHECK(std::string(e.loc().file).find("megablox_test.cpp") != std::string::npos);
    }
  }

  TEST_CASE("megablox: gmm with group_offset passes the differential check (rows outside the shard are unwritten)") {
    // The kernel leaves the rows of groups outside the shard unwritten and gmm zeroes them after the
    // call; differential mode took them for a difference (compiled: what the memory held,
    // interpreted: poison). A tiling no other case uses, so that the call is made afresh with the
    // check on.
    const testing::ScopedEnv check("TESSERA_CHECK_AGAINST_INTERPRETER", "1");
    const std::vector<int32_t> sizes{5, 19, 0, 24, 16};
    const pl::Array lhs = pl::Array::random_normal({64, 32}, pl::f32, 3);
    const pl::Array rhs_shard = pl::dynamic_slice(pl::Array::random_normal({5, 32, 24}, pl::f32, 4), {1, 0, 0}, {3, 32, 24});
    const pl::Array shard = mb::gmm(lhs, rhs_shard, sizes_array(sizes), {.tiling = mb::Tiling{8, 32, 24}, .group_offset = 1});
    CHECK(pl::allclose(shard, naive_gmm(lhs, rhs_shard, sizes, 1, false, nullptr, pl::f32), 1e-4, 1e-4));
  }

  TEST_CASE("megablox: an invalid TESSERA_INTERPRET fails gmm at the user's line, and the next call works") {
    // gmm's kept call reads the variable (dsl/kept_call.h): the error is gmm's, at its line.
    const std::vector<int32_t> sizes{8, 0, 24};
    const pl::Array lhs = pl::Array::random_normal({32, 16}, pl::f32, 26);
    const pl::Array rhs = pl::Array::random_normal({3, 16, 8}, pl::f32, 27);
    const mb::GmmOptions o{.tiling = mb::Tiling{8, 16, 8}};
    {
      const testing::ScopedEnv interpret("TESSERA_INTERPRET", "maybe");
      testing::check_user_error_at(__LINE__, "megablox_test.cpp", [&] { (void)mb::gmm(lhs, rhs, sizes_array(sizes), o); },
                                   "TESSERA_INTERPRET=maybe");
    }
    const pl::Array want = naive_gmm(lhs, rhs, sizes, 0, false, nullptr, pl::f32);
    CHECK(pl::allclose(mb::gmm(lhs, rhs, sizes_array(sizes), o), want, 1e-4, 1e-4));
  }
}
