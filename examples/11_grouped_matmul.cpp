// Example 11: seed 004's megablox grouped matmuls, as a mixture-of-experts layer uses them.
//
// Tokens are sorted by the expert they were routed to, so the rows of `lhs` fall into consecutive
// groups, one per expert, of data-dependent sizes (some experts get no tokens). gmm multiplies each
// group by its expert's weights; tgmm computes the weight gradient, one (k, n) matrix per expert.
// The group schedule is built on the host and reaches the kernels by scalar prefetch; tiles shared by
// two groups are visited once per group with masked stores, and k = 320 leaves a partial last k
// tile that the kernel masks. Every result is checked with pl::numerics::compare against a plain
// per-group matmul, in both backends, and the compiled kernels are timed with pl::benchmark; one
// call's timeline is written with pl::profile.
//
//   11_grouped_matmul [m k n]     (default 512 320 256)
#include <tessera/megablox.hpp>

#include <cstdio>
#include <cstdlib>

#include "examples/example_util.h"

namespace pl = tessera;
namespace mb = tessera::megablox;

namespace {

// Per-group matmuls on the host, through one host matmul per group: the reference.
pl::Array reference_gmm(const pl::Array& lhs, const pl::Array& rhs, const std::vector<int32_t>& sizes) {
  std::vector<pl::Array> rows;
  int64_t start = 0;
  for (size_t g = 0; g < sizes.size(); start += sizes[g], ++g) {
    if (sizes[g] == 0) continue;
    pl::Array x = pl::dynamic_slice_in_dim(lhs, start, sizes[g], 0);
    pl::Array w = pl::dynamic_slice_in_dim(rhs, static_cast<int64_t>(g), 1, 0).reshape({rhs.shape()[1], rhs.shape()[2]});
    rows.push_back(examples::host_matmul(x, w, pl::f32));
  }
  return pl::concatenate(rows, 0);
}

pl::Array reference_tgmm(const pl::Array& lhs, const pl::Array& rhs, const std::vector<int32_t>& sizes) {
  const int64_t k = lhs.shape()[0], n = rhs.shape()[1];
  std::vector<pl::Array> grads;
  int64_t start = 0;
  for (size_t g = 0; g < sizes.size(); start += sizes[g], ++g) {
    pl::Array grad = pl::Array::zeros({k, n}, pl::f32);
    if (sizes[g] > 0)
      grad = examples::host_matmul(pl::dynamic_slice_in_dim(lhs, start, sizes[g], 1),
                                   pl::dynamic_slice_in_dim(rhs, start, sizes[g], 0), pl::f32);
    grads.push_back(grad.reshape({1, k, n}));
  }
  return pl::concatenate(grads, 0);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t m = argc > 3 ? std::atoll(argv[1]) : 512, k = argc > 3 ? std::atoll(argv[2]) : 320,
                n = argc > 3 ? std::atoll(argv[3]) : 256;
  // Eight experts; two receive no tokens; the others' counts do not align to the 128-row tiles.
  std::vector<int32_t> sizes{static_cast<int32_t>(m / 8), 0, static_cast<int32_t>(m / 4 + 7), static_cast<int32_t>(m / 16),
                             0, static_cast<int32_t>(m / 8 + 3), static_cast<int32_t>(m / 4 - 9), 0};
  int32_t used = 0;
  for (int32_t s : sizes) used += s;
  sizes.back() = static_cast<int32_t>(m) - used;
  const pl::Array group_sizes = pl::Array::from_vector(sizes, {static_cast<int64_t>(sizes.size())});
  std::printf("tokens per expert: %s\n", group_sizes.to_string().c_str());

  const pl::Array lhs = pl::Array::random_normal({m, k}, pl::bf16, 1);                     // tokens
  const pl::Array rhs = pl::Array::random_normal({static_cast<int64_t>(sizes.size()), k, n}, pl::bf16, 2);  // experts
  const pl::Array dout = pl::Array::random_normal({m, n}, pl::bf16, 3);                    // output gradient
  const pl::Array want_out = reference_gmm(lhs, rhs, sizes);
  const pl::Array lhs_t = pl::transpose(lhs);
  const pl::Array want_grad = reference_tgmm(lhs_t, dout, sizes);
  const mb::Tiling tiling{128, 128, 128};

  int status = examples::run_in_every_backend("gmm", [&](const pl::CallOptions& options) {
    mb::GmmOptions o{.tiling = tiling, .interpret = options.interpret};
    pl::Array out = mb::gmm(lhs, rhs, group_sizes, o);
    pl::numerics::NumericsResult r =
        pl::numerics::compare(want_out, out, {.atol = 1e-2, .rtol = 1e-2, .region_grid = {4, 2}});
    if (!options.interpret) {
      pl::CostEstimate cost = mb::gmm_cost_estimate(lhs, rhs, group_sizes, o);
      pl::BenchmarkResult b = pl::benchmark([&] { return mb::gmm(lhs, rhs, group_sizes, o); });
      std::printf("  %.2f GFLOP/s at the median (cost estimate: %lld flops, %lld bytes)\n",
                  static_cast<double>(cost.flops) / b.median * 1e-6, static_cast<long long>(cost.flops),
                  static_cast<long long>(cost.bytes_accessed));
      // One call's timeline: grid steps, the kernel's "dot" and "store" scopes, block copies.
      pl::profile("gmm_timeline.json", [&] { pl::named_scope("gmm", [&] { return mb::gmm(lhs, rhs, group_sizes, o); }); });
      std::printf("  timeline of one call written to gmm_timeline.json (open it in https://ui.perfetto.dev)\n");
    }
    return examples::Outcome{r.passed, out};
  }, 1e-4, 1e-4);

  status |= examples::run_in_every_backend("tgmm", [&](const pl::CallOptions& options) {
    mb::TgmmOptions o{.tiling = tiling, .interpret = options.interpret};
    pl::Array grad = mb::tgmm(lhs_t, dout, group_sizes, o);
    pl::numerics::NumericsResult r =
        pl::numerics::compare(want_grad, grad, {.atol = 1e-2, .rtol = 1e-2, .region_grid = {4, 2}});
    if (!options.interpret) pl::benchmark([&] { return mb::tgmm(lhs_t, dout, group_sizes, o); });
    return examples::Outcome{r.passed, grad};
  }, 1e-4, 1e-4);

  // The weights sharded over two devices' worth of experts: this shard holds experts 4..7, computes
  // their rows and leaves the others zero; existing_out merges them into the first shard's result.
  status |= examples::run_in_every_backend("gmm, sharded experts", [&](const pl::CallOptions& options) {
    const int64_t half = static_cast<int64_t>(sizes.size()) / 2;
    pl::Array first = mb::gmm(lhs, pl::dynamic_slice_in_dim(rhs, 0, half, 0), group_sizes,
                              {.tiling = tiling, .group_offset = 0, .interpret = options.interpret});
    pl::Array both = mb::gmm(lhs, pl::dynamic_slice_in_dim(rhs, half, half, 0), group_sizes,
                             {.tiling = tiling, .group_offset = half, .existing_out = first, .interpret = options.interpret});
    pl::numerics::NumericsResult r =
        pl::numerics::compare(want_out, both, {.atol = 1e-2, .rtol = 1e-2, .region_grid = {4, 1}, .print = false});
    std::printf("  both shards merged: %s (max diff %.3g)\n", r.passed ? "PASS" : "FAIL", r.max_diff);
    return examples::Outcome{r.passed, both};
  }, 1e-4, 1e-4);
  return status;
}
