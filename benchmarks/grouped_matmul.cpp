// Grouped matmul benchmarks: megablox gmm and tgmm (f32 and bf16 inputs, 128-tiles) on an MoE-like
// problem (m = 2048 tokens, k = 1024, n = 512, 8 experts with uneven token counts, one empty),
// against OpenBLAS doing the same per-group products (one sgemm per group, measured in the same run),
// and against a dense tessera matmul of the same m, k, n (what the grouping costs).
//
//   grouped_matmul [--json results.json] [--runs N]
#include <tessera/megablox.hpp>

#include <cstdlib>

#include "benchmarks/bench_util.h"
#include "benchmarks/openblas.h"
#include "examples/seed_matmul.h"

namespace pl = tessera;
namespace mb = tessera::megablox;

int main(int argc, char** argv) {
  const int runs = std::atoi(bench::arg(argc, argv, "--runs", "7").c_str());
  const int64_t m = 2048, k = 1024, n = 512;
  const std::vector<int32_t> sizes{256, 301, 0, 199, 384, 141, 512, 255};  // sums to m
  const double flops = 2.0 * m * k * n;
  const int64_t groups = static_cast<int64_t>(sizes.size());
  pl::Array group_sizes = pl::Array::from_vector(sizes, {groups});
  pl::Array lhs = pl::Array::random_normal({m, k}, pl::f32, 0), rhs = pl::Array::random_normal({groups, k, n}, pl::f32, 1);
  pl::Array dout = pl::Array::random_normal({m, n}, pl::f32, 2), lhs_t = pl::transpose(lhs);
  std::vector<float> c(static_cast<size_t>(m * n)), w(static_cast<size_t>(groups * k * n));
  const mb::Tiling tiling{128, 128, 128};

  pl::set_num_threads(1);
  openblas_set_num_threads(1);
  bench::Report report("grouped matmul m=2048 k=1024 n=512, 8 groups, 1 thread");
  const std::string blas = "OpenBLAS sgemm per group (gmm)";
  report.add_rate(blas, bench::measure([&] {
    int64_t row = 0;
    for (int64_t g = 0; g < groups; row += sizes[g], ++g)
      if (sizes[g]) bench::sgemm(lhs.data_as<float>() + row * k, rhs.data_as<float>() + g * k * n, c.data() + row * n, sizes[g], k, n);
  }, runs), flops, 1e-9, "GFLOP/s");
  auto dense = seed::make_matmul(m, k, n, pl::f32, {});
  pl::Array rhs0 = pl::dynamic_slice_in_dim(rhs, 0, 1, 0).reshape({k, n});
  report.add_rate("tessera dense matmul, same m k n", bench::measure([&] { dense(lhs, rhs0); }, runs), flops, 1e-9,
                  "GFLOP/s", blas);
  report.add_rate("megablox gmm f32", bench::measure([&] { mb::gmm(lhs, rhs, group_sizes, {.tiling = tiling}); }, runs),
                  flops, 1e-9, "GFLOP/s", blas);
  pl::Array lhs16 = lhs.astype(pl::bf16), rhs16 = rhs.astype(pl::bf16);
  report.add_rate("megablox gmm bf16 in, f32 out",
                  bench::measure([&] { mb::gmm(lhs16, rhs16, group_sizes, {.tiling = tiling}); }, runs), flops, 1e-9,
                  "GFLOP/s", blas);

  const std::string blas_t = "OpenBLAS sgemm per group (tgmm)";
  report.add_rate(blas_t, bench::measure([&] {
    int64_t row = 0;
    for (int64_t g = 0; g < groups; row += sizes[g], ++g)
      if (sizes[g])
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(k), static_cast<int>(n), sizes[g], 1.0f,
                    lhs_t.data_as<float>() + row, static_cast<int>(m), dout.data_as<float>() + row * n,
                    static_cast<int>(n), 0.0f, w.data() + g * k * n, static_cast<int>(n));
  }, runs), flops, 1e-9, "GFLOP/s");
  report.add_rate("megablox tgmm f32",
                  bench::measure([&] { mb::tgmm(lhs_t, dout, group_sizes, {.tiling = tiling}); }, runs), flops, 1e-9,
                  "GFLOP/s", blas_t);
  report.print();
  bench::write_json(argc, argv, {&report});
  return 0;
}
