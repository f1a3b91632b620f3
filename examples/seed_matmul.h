// The seed's tiled matmul (seed 000), shared by the examples that build on it and the benchmarks: an
// f32 VMEM accumulator zeroed at the first k step and written out at the last, 128-blocks; as a
// pallas_call grid, and as an emit_pipeline a kernel runs over HBM operands (the seed's `_emit_gemm`).
// Example 2 introduces the kernel; example 7 the emit_pipeline form.
#pragma once

#include <tessera/tessera.hpp>

namespace seed {

namespace pl = tessera;

inline void matmul_kernel(pl::Ref x, pl::Ref y, pl::Ref o, pl::Ref acc) {
  pl::when(pl::program_id(2) == 0, [&] { acc() = pl::zeros_like(acc); });
  acc() += pl::dot(x(), y(), pl::f32);
  pl::when(pl::program_id(2) == pl::num_programs(2) - 1, [&] { o() = acc().astype(o.dtype()); });
}

// A (b, b) block of a matmul operand on the (i, j, k) grid, at grid indices (a, c): x at (i, k), w at
// (k, j), out at (i, j).
inline pl::BlockSpec block(int a, int c, int64_t b = 128) {
  return pl::BlockSpec({b, b}, [=](pl::Value i, pl::Value j, pl::Value k) {
    pl::Value ids[] = {i, j, k};
    return pl::idx(ids[a], ids[c]);
  });
}

inline pl::PallasCall<pl::Array> make_matmul(int64_t m, int64_t k, int64_t n, pl::DType out, pl::CallOptions options = {},
                                             int64_t b = 128) {
  options.compiler_params.dimension_semantics = {pl::parallel, pl::parallel, pl::arbitrary};
  if (options.name.empty()) options.name = "matmul";
  return pl::pallas_call(matmul_kernel,
                         pl::GridSpec{.grid = {m / b, n / b, k / b},
                                      .in_specs = {block(0, 2, b), block(2, 1, b)},
                                      .out_specs = {block(0, 1, b)},
                                      .scratch_shapes = {pl::VMEM({b, b}, pl::f32)}},
                         pl::ShapeDtype({m, n}, out), options);
}

// Inside a kernel: the GEMM as a pipeline over HBM refs, with the accumulator from run_scoped.
inline void emit_gemm(pl::Ref x_hbm, pl::Ref w_hbm, pl::Ref o_hbm) {
  constexpr int64_t b = 128;
  const int64_t m = x_hbm.shape()[0], k = x_hbm.shape()[1], n = w_hbm.shape()[1];
  pl::run_scoped(
      [&](pl::Ref acc) {
        pl::emit_pipeline([&](pl::Ref x, pl::Ref w, pl::Ref o) { matmul_kernel(x, w, o, acc); },
                          {.grid = {m / b, n / b, k / b},
                           .in_specs = {block(0, 2), block(2, 1)},
                           .out_specs = {block(0, 1)}})(x_hbm, w_hbm, o_hbm);
      },
      pl::VMEM({b, b}, pl::f32));
}

// A kernel that is just that GEMM, over operands in HBM.
inline pl::PallasCall<pl::Array> make_emit_gemm(int64_t m, int64_t n, pl::DType out, pl::CallOptions options = {}) {
  if (options.name.empty()) options.name = "emit_gemm";
  return pl::pallas_call(emit_gemm,
                         pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::ANY)},
                                      .out_specs = {pl::BlockSpec(pl::ANY)}},
                         pl::ShapeDtype({m, n}, out), options);
}

}  // namespace seed
