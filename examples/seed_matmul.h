// The seed's tiled matmul (seed 000), shared by the examples that build on it and the benchmarks: an
// f32 VMEM accumulator zeroed at the first k step and written out at the last, 128-blocks; as a
// pallas_call grid, and as an emit_pipeline a kernel runs over HBM operands (the seed's `_emit_gemm`).
// Example 2 introduces the kernel; example 7 the emit_pipeline form.
#pragma once

#include <tessera/tessera.hpp>

namespace seed {

namespace pl = tessera;

// The accumulator is f32 in the seed; an i32 one (int8 inputs, as in bench_gemm) accumulates in i32.
inline void matmul_kernel(pl::Ref x, pl::Ref y, pl::Ref o, pl::Ref acc) {
  pl::when(pl::program_id(2) == 0, [&] { acc() = pl::zeros_like(acc); });
  acc() += pl::dot(x(), y(), acc.dtype() == pl::i32 ? pl::i32 : pl::f32);
  pl::when(pl::program_id(2) == pl::num_programs(2) - 1, [&] { o() = acc().astype(o.dtype()); });
}

// A (b, b) block of a matmul operand on the (i, j, k) grid, at grid indices (a, c): x at (i, k), w at
// (k, j), out at (i, j).
inline pl::BlockSpec block(int a, int c, int64_t rows, int64_t cols) {
  return pl::BlockSpec({rows, cols}, [=](pl::Value i, pl::Value j, pl::Value k) {
    pl::Value ids[] = {i, j, k};
    return pl::idx(ids[a], ids[c]);
  });
}
inline pl::BlockSpec block(int a, int c, int64_t b = 128) { return block(a, c, b, b); }

// The block shape of the grid: bm rows of x and out, a k step of bk, bn columns of y and out; and
// the accumulator's dtype.
struct Blocks {
  int64_t bm = 128, bk = 128, bn = 128;
  pl::DType acc = pl::f32;
};

inline pl::PallasCall<pl::Array> make_matmul(int64_t m, int64_t k, int64_t n, pl::DType out, pl::CallOptions options,
                                             Blocks b) {
  options.compiler_params.dimension_semantics = {pl::parallel, pl::parallel, pl::arbitrary};
  if (options.name.empty()) options.name = "matmul";
  return pl::pallas_call(matmul_kernel,
                         pl::GridSpec{.grid = {m / b.bm, n / b.bn, k / b.bk},
                                      .in_specs = {block(0, 2, b.bm, b.bk), block(2, 1, b.bk, b.bn)},
                                      .out_specs = {block(0, 1, b.bm, b.bn)},
                                      .scratch_shapes = {pl::VMEM({b.bm, b.bn}, b.acc)}},
                         pl::ShapeDtype({m, n}, out), options);
}

inline pl::PallasCall<pl::Array> make_matmul(int64_t m, int64_t k, int64_t n, pl::DType out, pl::CallOptions options = {},
                                             int64_t b = 128) {
  return make_matmul(m, k, n, out, std::move(options), Blocks{b, b, b});
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
