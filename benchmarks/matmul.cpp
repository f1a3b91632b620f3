// Matmul benchmarks: the seed's tiled matmul (2048 x 2048 x 1024, 128-blocks) compiled, against
// OpenBLAS sgemm measured in the same run, on 1 and 2 threads, for f32 and for bf16 inputs with f32
// accumulation (the OpenBLAS baseline then includes converting the inputs to f32); and the
// interpreter against compiled code on a 512^3 matmul.
//
//   matmul [--json results.json] [--runs N]
#include <tessera/tessera.hpp>

#include <cstdlib>

#include "benchmarks/bench_util.h"
#include "benchmarks/openblas.h"
#include "benchmarks/seed_gemm.h"
#include "examples/seed_matmul.h"

namespace pl = tessera;

int main(int argc, char** argv) {
  bench::use_openblas_best_core(argv);
  std::printf("OpenBLAS core: %s\n", openblas_get_corename());
  const int runs = std::atoi(bench::arg(argc, argv, "--runs", "7").c_str());
  bench::SeedGemm g;
  const int64_t m = g.m, k = g.k, n = g.n;
  const double flops = g.flops;

  bench::Report seed("matmul 2048x2048x1024, 128-blocks");
  for (int threads : {1, 2}) {
    openblas_set_num_threads(threads);
    pl::set_num_threads(threads);
    const std::string t = fmt::format("{} thread{}", threads, threads > 1 ? "s" : "");
    const std::string blas = "OpenBLAS sgemm f32, " + t;
    seed.add_rate(blas, bench::measure([&] { g.sgemm(); }, runs), flops, 1e-9, "GFLOP/s");
    auto f32_call = seed::make_matmul(m, k, n, pl::f32, {});
    seed.add_rate("tessera f32, " + t, bench::measure([&] { f32_call(g.x32, g.y32); }, runs), flops, 1e-9, "GFLOP/s", blas);
    const std::string blas16 = "OpenBLAS, bf16 inputs converted to f32, " + t;
    seed.add_rate(blas16,
                  bench::measure(
                      [&] {
                        pl::Array a = g.x16.astype(pl::f32), b = g.y16.astype(pl::f32);
                        bench::sgemm(a.data_as<float>(), b.data_as<float>(), g.c.data(), m, k, n);
                      },
                      runs),
                  flops, 1e-9, "GFLOP/s");
    auto bf16_call = seed::make_matmul(m, k, n, pl::bf16, {});
    seed.add_rate("tessera bf16 in, f32 acc, bf16 out, " + t, bench::measure([&] { bf16_call(g.x16, g.y16); }, runs), flops,
                  1e-9, "GFLOP/s", blas16);
  }
  // Parallel scaling of tessera itself.
  {
    pl::set_num_threads(1);
    auto call = seed::make_matmul(m, k, n, pl::f32, {});
    bench::Stats one = bench::measure([&] { call(g.x32, g.y32); }, runs);
    pl::set_num_threads(2);
    bench::Stats two = bench::measure([&] { call(g.x32, g.y32); }, runs);
    seed.add_rate("tessera f32 on 1 thread (scaling base)", one, flops, 1e-9, "GFLOP/s");
    seed.add_rate("tessera f32 on 2 threads (parallel dims)", two, flops, 1e-9, "GFLOP/s",
                  "tessera f32 on 1 thread (scaling base)");
  }
  pl::set_num_threads(0);
  seed.print();

  bench::Report interp("interpreter vs compiled, 512^3 f32 matmul, 128-blocks, 1 thread");
  {
    pl::set_num_threads(1);
    const int64_t s = 512;
    pl::Array a = pl::Array::random_normal({s, s}, pl::f32, 2), b = pl::Array::random_normal({s, s}, pl::f32, 3);
    pl::CallOptions io;
    io.interpret = pl::InterpretParams{};
    auto interpreted = seed::make_matmul(s, s, s, pl::f32, io);
    auto compiled = seed::make_matmul(s, s, s, pl::f32, {});
    interp.add_time("interpreter", bench::measure([&] { interpreted(a, b); }, runs), "ms");
    interp.add_time("compiled", bench::measure([&] { compiled(a, b); }, runs), "ms", "interpreter");
    pl::set_num_threads(0);
  }
  interp.print();
  bench::write_json(argc, argv, {&seed, &interp});
  return 0;
}
