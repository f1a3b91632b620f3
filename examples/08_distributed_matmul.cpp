// Example 8: seed 000's distributed matmul, on 2x2 and 4x4 meshes.
//
// out = inputs @ weights with inputs sharded P('x', 'y') and weights P('x', None): the contracting
// dim is split over y in the inputs and over x in the weights, so data has to move. The seed builds
// the same product several ways, and every one is checked against a plain matmul:
//   xla_matmul_1/2/3      host collectives (all_gather, psum) around a local matmul
//   AG kernels            hand-written all-gathers of the weights over x with remote copies: a 1-D
//                         ring and a bidirectional ring
//   AR kernel             a hand-written all-reduce over y with remote copies, summed in VMEM
//   AG -> GEMM -> AR      the AG kernel, a tiled Pallas matmul, the AR kernel
//   fused AG + GEMM       one kernel: start sending the weights, run an emit_pipeline GEMM on what is
//                         local meanwhile, wait, and redo the GEMM where the local weights were wrong
//   fused AG + GEMM + AR  that, then the AR kernel
// (The seed's fused kernel shifts weights one step along x, which on a 2x2 mesh is the same as
// sending them to the transposed device; on any square mesh the transposed device is the one that
// needs them, so that is what this kernel does.)
//
//   08_distributed_matmul [m k n]     (default 512 512 256)
#include <tessera/tessera.hpp>

#include <cstdio>
#include <cstdlib>

#include "examples/example_util.h"
#include "examples/seed_distributed.h"

namespace pl = tessera;

int main(int argc, char** argv) {
  const int64_t m = argc > 3 ? std::atoll(argv[1]) : 512, k = argc > 3 ? std::atoll(argv[2]) : 512,
                n = argc > 3 ? std::atoll(argv[3]) : 256;
  const pl::Array inputs = pl::Array::random_normal({m, k}, pl::bf16, /*seed=*/0);
  const pl::Array weights = pl::Array::random_normal({k, n}, pl::bf16, /*seed=*/1);
  const pl::Array reference = pl::matmul(inputs, weights, pl::f32);

  int status = 0;
  for (int64_t side : {2, 4}) {
    const pl::Mesh mesh({side, side}, {"x", "y"});
    if (side == 2) {
      std::printf("inputs, sharded P('x', 'y'):\n");
      pl::visualize_array_sharding(pl::device_put(inputs, pl::NamedSharding(mesh, pl::P("x", "y"))));
      std::printf("weights, sharded P('x', None):\n");
      pl::visualize_array_sharding(pl::device_put(weights, pl::NamedSharding(mesh, pl::P("x", pl::None))));
    }
    const std::string name = "distributed_matmul " + std::to_string(side) + "x" + std::to_string(side);
    status |= examples::run_in_every_backend(name.c_str(), [&](const pl::CallOptions& options) {
      using F = std::function<pl::Array(const pl::Array&, const pl::Array&)>;
      const std::vector<std::pair<const char*, F>> variants = {
          {"xla_matmul_1 (all_gather x2, matmul)", seed::xla_matmul_1},
          {"xla_matmul_2 (all_gather, matmul, psum)", seed::xla_matmul_2},
          {"xla_matmul_3 (the same in f32)", seed::xla_matmul_3},
          {"AG kernel (1-D ring) -> GEMM -> AR kernel",
           [&](const pl::Array& in, const pl::Array& w) { return seed::slow_ag_gemm_ar(in, w, options); }},
          {"AG kernel (bidirectional) -> matmul -> psum",
           [&](const pl::Array& in, const pl::Array& w) {
             const int64_t k_local = in.shape()[1];
             pl::Array w_slice = pl::dynamic_slice(seed::make_ag(w, true, options), {pl::host_axis_index("y") * k_local, 0},
                                                   {k_local, w.shape()[1]});
             return pl::psum(pl::matmul(in, w_slice), "y");
           }},
          {"fused AG + GEMM -> psum",
           [&](const pl::Array& in, const pl::Array& w) { return pl::psum(seed::fused_ag_gemm(in, w, options), "y"); }},
          {"fused AG + GEMM + AR kernel",
           [&](const pl::Array& in, const pl::Array& w) { return seed::make_ar(seed::fused_ag_gemm(in, w, options), options); }},
      };
      bool ok = true;
      pl::Array last;
      for (const auto& [what, f] : variants) {
        last = pl::shard_map(f, mesh, {pl::P("x", "y"), pl::P("x", pl::None)}, {pl::P("x", pl::None)})(inputs, weights);
        // bf16 partial products are rounded before they are summed: about two bf16 roundings of values
        // up to ~100 (an ulp of 0.5) from the exact f32 reference.
        ok = examples::check(what, last.astype(pl::f32), reference, 1e-2, 1.0) && ok;
      }
      return examples::Outcome{ok, last.astype(pl::f32)};
    }, 1e-2, 1.0);
  }
  return status;
}
