// The seed's tiled matmul, shared by the benchmarks: an f32 VMEM accumulator zeroed at the first k
// step and written out at the last, 128-blocks, parallel over (i, j); as a pallas_call grid, and as
// an emit_pipeline inside one kernel over HBM operands (seed 000's `_emit_gemm`).
#pragma once

#include <tessera/tessera.hpp>

namespace bench {

namespace pl = tessera;

inline void matmul_kernel(pl::Ref x, pl::Ref y, pl::Ref o, pl::Ref acc) {
  pl::when(pl::program_id(2) == 0, [&] { acc() = pl::zeros_like(acc); });
  acc() += pl::dot(x(), y(), pl::f32);
  pl::when(pl::program_id(2) == pl::num_programs(2) - 1, [&] { o() = acc().astype(o.dtype()); });
}

inline pl::PallasCall<pl::Array> make_matmul(int64_t m, int64_t k, int64_t n, pl::DType out, pl::CallOptions options = {},
                                             int64_t b = 128) {
  options.compiler_params.dimension_semantics = {pl::parallel, pl::parallel, pl::arbitrary};
  if (options.name.empty()) options.name = "matmul";
  return pl::pallas_call(
      matmul_kernel,
      pl::GridSpec{.grid = {m / b, n / b, k / b},
                   .in_specs = {pl::BlockSpec({b, b}, [](pl::Value i, pl::Value, pl::Value kk) { return pl::idx(i, kk); }),
                                pl::BlockSpec({b, b}, [](pl::Value, pl::Value j, pl::Value kk) { return pl::idx(kk, j); })},
                   .out_specs = {pl::BlockSpec({b, b}, [](pl::Value i, pl::Value j, pl::Value) { return pl::idx(i, j); })},
                   .scratch_shapes = {pl::VMEM({b, b}, pl::f32)}},
      pl::ShapeDtype({m, n}, out), options);
}

// The same GEMM as a pipeline the kernel emits itself over its HBM operands, with the accumulator
// from run_scoped.
inline void emit_gemm_kernel(pl::Ref x_hbm, pl::Ref w_hbm, pl::Ref o_hbm) {
  constexpr int64_t b = 128;
  const int64_t m = x_hbm.shape()[0], k = x_hbm.shape()[1], n = w_hbm.shape()[1];
  pl::run_scoped(
      [&](pl::Ref acc) {
        pl::emit_pipeline(
            [&](pl::Ref x, pl::Ref w, pl::Ref o) { matmul_kernel(x, w, o, acc); },
            {.grid = {m / b, n / b, k / b},
             .in_specs = {pl::BlockSpec({b, b}, [](pl::Value i, pl::Value, pl::Value kk) { return pl::idx(i, kk); }),
                          pl::BlockSpec({b, b}, [](pl::Value, pl::Value j, pl::Value kk) { return pl::idx(kk, j); })},
             .out_specs = {pl::BlockSpec({b, b}, [](pl::Value i, pl::Value j, pl::Value) { return pl::idx(i, j); })}})(
            x_hbm, w_hbm, o_hbm);
      },
      pl::VMEM({b, b}, pl::f32));
}

inline pl::PallasCall<pl::Array> make_emit_gemm(int64_t m, int64_t n, pl::DType out) {
  return pl::pallas_call(emit_gemm_kernel,
                         pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::ANY)},
                                      .out_specs = {pl::BlockSpec(pl::ANY)}},
                         pl::ShapeDtype({m, n}, out), {.name = "emit_gemm"});
}

}  // namespace bench
