// Example 2: the seed's tiled matmul.
//
// x (m, k) @ y (k, n) with bf16 inputs, accumulated in an f32 VMEM scratch buffer over the k axis of
// a 3-D grid (i, j, k): the accumulator is zeroed at k == 0 and written to the bf16 output at the
// last k. The output block (i, j) stays the same while k runs, so it is written back once, after
// the last k step (docs/design.md §4: consecutive revisits accumulate).
//
//   02_matmul                  512 x 512 x 512, checked against a naive host matmul
//   02_matmul 2048 2048 1024   the seed's shape (m k n)
#include <tessera/tessera.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "examples/example_util.h"

namespace pl = tessera;

void matmul_kernel(pl::Ref x, pl::Ref y, pl::Ref o, pl::Ref acc) {
  pl::when(pl::program_id(2) == 0, [&] { acc() = pl::zeros_like(acc); });
  acc() += pl::dot(x(), y(), /*preferred_element_type=*/pl::f32);
  pl::when(pl::program_id(2) == pl::num_programs(2) - 1, [&] { o() = acc().astype(o.dtype()); });
}

pl::Array matmul(const pl::Array& x, const pl::Array& y, const pl::CallOptions& options, int64_t bm = 128,
                 int64_t bk = 128, int64_t bn = 128) {
  auto [m, k] = x.shape2();
  const int64_t n = y.shape()[1];
  pl::CallOptions opts = options;
  opts.compiler_params.dimension_semantics = {pl::parallel, pl::parallel, pl::arbitrary};
  auto call = pl::pallas_call(
      matmul_kernel,
      pl::PrefetchScalarGridSpec{
          .num_scalar_prefetch = 0,
          .grid = {m / bm, n / bn, k / bk},
          .in_specs = {pl::BlockSpec({bm, bk}, [](pl::Value i, pl::Value, pl::Value kk) { return pl::idx(i, kk); }),
                       pl::BlockSpec({bk, bn}, [](pl::Value, pl::Value j, pl::Value kk) { return pl::idx(kk, j); })},
          .out_specs = {pl::BlockSpec({bm, bn}, [](pl::Value i, pl::Value j, pl::Value) { return pl::idx(i, j); })},
          .scratch_shapes = {pl::VMEM({bm, bn}, pl::f32)}},
      pl::ShapeDtype({m, n}, pl::bf16), opts);
  return call(x, y);
}

int main(int argc, char** argv) {
  const int64_t m = argc > 1 ? std::atoll(argv[1]) : 512;
  const int64_t k = argc > 2 ? std::atoll(argv[2]) : 512;
  const int64_t n = argc > 3 ? std::atoll(argv[3]) : 512;
  pl::Array x = pl::Array::random_normal({m, k}, pl::bf16, /*seed=*/0);
  pl::Array y = pl::Array::random_normal({k, n}, pl::bf16, /*seed=*/1);
  std::printf("x: %s\ny: %s\n", x.to_string(2).c_str(), y.to_string(2).c_str());

  // The reference is computed in double and rounded to bf16 once; the kernel rounds its f32 sums
  // once too, so they differ by at most a bf16 rounding step of the result.
  pl::Array reference = examples::host_matmul(x, y, pl::bf16);

  return examples::run_in_every_backend("matmul", [&](const pl::CallOptions& options) {
    auto start = std::chrono::steady_clock::now();
    pl::Array out = matmul(x, y, options);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("  %lld x %lld x %lld in %.3f s (first call: traces, lowers and runs)\n", static_cast<long long>(m),
                static_cast<long long>(k), static_cast<long long>(n), seconds);
    std::printf("  out = %s\n", out.to_string(2).c_str());
    return examples::Outcome{examples::check("out == x @ y (bf16)", out, reference, 1e-2, 1e-2), out};
  },
  // Both accumulate in f32 in k order; the compiled kernel uses FMA, so results can differ in the
  // last bf16 bit.
  /*rtol=*/1e-2, /*atol=*/1e-2);
}
