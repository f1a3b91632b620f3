// Example 7: the seed's GEMM with emit_pipeline, inside run_scoped.
//
// The kernel gets its operands whole, in HBM (pl::BlockSpec(pl::ANY)), and runs a pipeline of its
// own over them: emit_pipeline walks a (m / 128, n / 128, k / 128) grid, brings 128-blocks of x and
// w into VMEM (two buffers each: the next block is fetched while the current one is multiplied),
// and writes output blocks back when the grid moves on. The accumulator is VMEM that lives only
// while the pipeline runs, from run_scoped. This is seed 000's `_emit_gemm`, the building block of
// its fused all-gather + GEMM kernels; here it is checked against a plain pallas_call matmul with
// the same body.
//
//   07_emit_pipeline_gemm [m k n]     (default 512 512 512)
#include <tessera/tessera.hpp>

#include <cstdio>
#include <cstdlib>

#include "examples/example_util.h"
#include "examples/seed_matmul.h"

namespace pl = tessera;

constexpr int64_t kBlock = 128;

void emit_gemm_kernel(pl::Ref x_hbm, pl::Ref w_hbm, pl::Ref o_hbm) {
  const int64_t m = x_hbm.shape()[0], k = x_hbm.shape()[1], n = w_hbm.shape()[1];
  pl::run_scoped(
      [&](pl::Ref acc) {
        // The body of example 2's pallas_call matmul works unchanged as an emit_pipeline body.
        pl::emit_pipeline([&](pl::Ref x, pl::Ref w, pl::Ref o) { seed::matmul_kernel(x, w, o, acc); },
                          {.grid = {m / kBlock, n / kBlock, k / kBlock},
                           .in_specs = {seed::block(0, 2), seed::block(2, 1)},
                           .out_specs = {seed::block(0, 1)}})(x_hbm, w_hbm, o_hbm);
      },
      pl::VMEM({kBlock, kBlock}, pl::f32));
}

int main(int argc, char** argv) {
  const int64_t m = argc > 3 ? std::atoll(argv[1]) : 512, k = argc > 3 ? std::atoll(argv[2]) : 512,
                n = argc > 3 ? std::atoll(argv[3]) : 512;
  if (m % kBlock || k % kBlock || n % kBlock) {
    std::fprintf(stderr, "m, k and n must be multiples of %lld\n", static_cast<long long>(kBlock));
    return 2;
  }
  pl::Array x = pl::Array::random_normal({m, k}, pl::bf16, /*seed=*/7);
  pl::Array w = pl::Array::random_normal({k, n}, pl::bf16, /*seed=*/8);

  auto plain = seed::make_matmul(m, k, n, pl::f32);
  const pl::Array reference = plain(x, w);

  return examples::run_in_every_backend("emit_pipeline_gemm", [&](const pl::CallOptions& options) {
    auto gemm = pl::pallas_call(emit_gemm_kernel,
                                pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::ANY)},
                                             .out_specs = {pl::BlockSpec(pl::ANY)}},
                                pl::ShapeDtype({m, n}, pl::f32), options);
    pl::Array out = gemm(x, w);
    return examples::Outcome{examples::check("emit_pipeline GEMM == pallas_call matmul", out, reference, 1e-5, 1e-4), out};
  }, 1e-5, 1e-4);
}
