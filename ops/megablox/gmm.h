// Megablox grouped matmuls (seed 004), as tessera kernels.
//
//   namespace mb = tessera::megablox;
//   pl::Array out = mb::gmm(lhs, rhs, group_sizes);                 // lhs (m, k), rhs (groups, k, n)
//   pl::Array dw  = mb::tgmm(lhs_t, dout, group_sizes);             // lhs_t (k, m), dout (m, n)
//
// gmm: out[rows of group g] = lhs[rows of group g] @ rhs[g] -> (m, n).
// tgmm: out[g] = lhs[:, rows of group g] @ rhs[rows of group g] -> (num_actual_groups, k, n): the
// weight gradient of gmm.
//
// group_sizes is an i32 array of rows per group (consecutive rows of lhs, summing to at most m). The
// schedule (GroupMetadata) is built on the host and handed to the kernel by scalar prefetch; the
// index maps read it to pick lhs / rhs / output blocks, tiles shared by two groups are visited once
// per group with the other group's rows masked out of the store, and a partial last k tile is masked
// to zero before the dot. Options mirror the seed's keyword arguments:
//   - tiling: (tm, tk, tn), or a function of (m, k, n) returning one (nullopt: no tuned tiling, an
//     error); m must be a multiple of tm, k and n need not be multiples of tk and tn;
//   - group_offset: the first group this shard computes (rhs then holds rhs.shape[0] groups from there
//     for gmm; tgmm computes num_actual_groups groups from there); rows of other groups are zero in
//     gmm's output (and rows past the last group);
//   - existing_out: accumulate into (tgmm) or merge into (gmm: rows outside the groups keep its
//     values) an existing output, aliased to the kernel's output; it is not modified itself;
//   - transpose_rhs (gmm): rhs is (groups, n, k).
// Inputs are f32 or bf16; the dot runs in bf16 when both are bf16, else f32, and accumulates in f32.
// The grid's group axis has one step per (group, m-tile) pair, so it depends on the group sizes: each
// distinct step count is compiled once and cached.
//
// Library layer (ops/), over the front end.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <source_location>
#include <variant>

#include "dsl/specs.h"
#include "runtime/array.h"

namespace tessera::megablox {

struct Tiling {
  int64_t tm = 128, tk = 128, tn = 128;
};
// A table of tuned tilings: (m, k, n) -> a tiling, or nullopt when there is none for that problem.
using TilingFn = std::function<std::optional<Tiling>(int64_t m, int64_t k, int64_t n)>;

struct GmmOptions {
  DType preferred_element_type = DType::f32;
  std::variant<Tiling, TilingFn> tiling = Tiling{};
  std::optional<int64_t> group_offset;
  std::optional<Array> existing_out;
  bool transpose_rhs = false;
  std::optional<InterpretParams> interpret;  // run in the interpreter (also: TESSERA_INTERPRET=1)
};

struct TgmmOptions {
  DType preferred_element_type = DType::f32;
  std::variant<Tiling, TilingFn> tiling = Tiling{};
  std::optional<int64_t> group_offset;
  std::optional<int64_t> num_actual_groups;  // groups computed from group_offset (default: all)
  std::optional<Array> existing_out;
  std::optional<InterpretParams> interpret;
};

Array gmm(const Array& lhs, const Array& rhs, const Array& group_sizes, const GmmOptions& options = {},
          std::source_location loc = std::source_location::current());
Array tgmm(const Array& lhs, const Array& rhs, const Array& group_sizes, const TgmmOptions& options = {},
           std::source_location loc = std::source_location::current());

// What gmm / tgmm tell the scheduler about a call (the pallas_call's CostEstimate): 2 m k n flops;
// bytes: lhs once per n tile, the rhs slab once per step, the output once (gmm); lhs once per n
// tile, rhs once per k tile, the output once (tgmm).
CostEstimate gmm_cost_estimate(const Array& lhs, const Array& rhs, const Array& group_sizes,
                               const GmmOptions& options = {},
                               std::source_location loc = std::source_location::current());
CostEstimate tgmm_cost_estimate(const Array& lhs, const Array& rhs, const Array& group_sizes,
                                const TgmmOptions& options = {},
                                std::source_location loc = std::source_location::current());

}  // namespace tessera::megablox
