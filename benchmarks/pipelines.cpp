// Pipelines and copies: the seed's GEMM written with emit_pipeline inside one kernel (seed 000's
// `_emit_gemm`), against the same GEMM as a pallas_call grid and against OpenBLAS sgemm, all on one
// thread (an emit_pipeline runs on the core of its kernel); and how compiled kernels should run their
// copies, eagerly or on a DMA worker thread, on a double-buffered copy loop against memcpy, with a
// core to spare and without (what pl::DmaExecution::automatic decides by).
//
//   pipelines [--json results.json] [--runs N]
#include <tessera/tessera.hpp>

#include <cstdlib>
#include <cstring>

#include "benchmarks/bench_util.h"
#include "benchmarks/openblas.h"
#include "benchmarks/seed_gemm.h"
#include "examples/double_buffering.h"
#include "examples/seed_matmul.h"

namespace pl = tessera;

namespace {

// Sums a tall array chunk by chunk into one VMEM block, copying chunk c + 1 while adding chunk c.
// A 3-D array is split over the grid: program i sums x[i].
constexpr int64_t kChunkRows = 256, kCols = 1024;
void chunked_sum_kernel(pl::Ref x_hbm, pl::Ref o, pl::Ref slots, pl::Ref sems) {
  examples::double_buffered_sum(x_hbm.rank() == 3 ? x_hbm.at(pl::program_id(0)) : x_hbm, o, slots, sems);
}

}  // namespace

int main(int argc, char** argv) {
  bench::use_openblas_best_core(argv);
  std::printf("OpenBLAS core: %s\n", openblas_get_corename());
  const int runs = std::atoi(bench::arg(argc, argv, "--runs", "7").c_str());
  openblas_set_num_threads(1);
  pl::set_num_threads(1);

  bench::SeedGemm g;
  const int64_t m = g.m, k = g.k, n = g.n;
  const double flops = g.flops;
  bench::Report gemm("seed GEMM 2048x2048x1024, 128-blocks, 1 thread: emit_pipeline vs pallas_call vs OpenBLAS");
  const std::string blas = "OpenBLAS sgemm f32";
  const double blas_rate = gemm.add_rate(blas, bench::measure([&] { g.sgemm(); }, runs), flops, 1e-9, "GFLOP/s").value;
  auto grid_f32 = seed::make_matmul(m, k, n, pl::f32);
  const std::string grid_name = "pallas_call grid f32";
  gemm.add_rate(grid_name, bench::measure([&] { grid_f32(g.x32, g.y32); }, runs), flops, 1e-9, "GFLOP/s", blas);
  auto emit_f32 = seed::make_emit_gemm(m, n, pl::f32);
  const double emit_rate =
      gemm.add_rate("emit_pipeline f32", bench::measure([&] { emit_f32(g.x32, g.y32); }, runs), flops, 1e-9, "GFLOP/s",
                    grid_name)
          .value;
  gemm.note(fmt::format("emit_pipeline f32 is {:.2f}x {}", emit_rate / blas_rate, blas));
  auto grid_bf16 = seed::make_matmul(m, k, n, pl::f32);
  const std::string grid16 = "pallas_call grid bf16 in, f32 out";
  gemm.add_rate(grid16, bench::measure([&] { grid_bf16(g.x16, g.y16); }, runs), flops, 1e-9, "GFLOP/s", blas);
  auto emit_bf16 = seed::make_emit_gemm(m, n, pl::f32);
  gemm.add_rate("emit_pipeline bf16 in, f32 out", bench::measure([&] { emit_bf16(g.x16, g.y16); }, runs), flops, 1e-9,
                "GFLOP/s", grid16);
  gemm.print();

  // Copies: 64 MiB through a double-buffered loop. Eager copies happen when started, so the copy and
  // the add take turns; on the worker the next chunk's copy runs beside the add.
  bench::Report copies("double-buffered copy loop over 64 MiB f32 (256 KiB chunks), 1 kernel thread");
  const int64_t rows = (int64_t{64} << 20) / (kCols * 4);
  pl::Array big = pl::Array::random_normal({rows, kCols}, pl::f32, 2);
  std::vector<std::byte> dst(static_cast<size_t>(big.nbytes()));
  const double bytes = static_cast<double>(big.nbytes());
  copies.add_rate("memcpy", bench::measure([&] { std::memcpy(dst.data(), big.data(), dst.size()); }, runs), bytes, 1e-9,
                  "GB/s");
  auto chunked = pl::pallas_call(chunked_sum_kernel,
                                 pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                                              .scratch_shapes = {pl::VMEM({2, kChunkRows, kCols}, pl::f32),
                                                                 pl::SemaphoreType::DMA({2})}},
                                 pl::ShapeDtype({kChunkRows, kCols}, pl::f32), {.name = "chunked_sum"});
  pl::set_dma_execution(pl::DmaExecution::eager);
  copies.add_rate("copies eager", bench::measure([&] { chunked(big); }, runs), bytes, 1e-9, "GB/s", "memcpy");
  pl::set_dma_execution(pl::DmaExecution::worker);
  copies.add_rate("copies on the DMA worker", bench::measure([&] { chunked(big); }, runs), bytes, 1e-9, "GB/s",
                  "copies eager");
  pl::set_dma_execution(pl::DmaExecution::eager);
  // Two programs on two kernel threads, each summing half of the array: no core is left idle.
  pl::set_num_threads(2);
  pl::CallOptions parallel;
  parallel.compiler_params.dimension_semantics = {pl::parallel};
  parallel.name = "chunked_sum_halves";
  auto halves = pl::pallas_call(chunked_sum_kernel,
                                pl::GridSpec{.grid = {2},
                                             .in_specs = {pl::BlockSpec(pl::ANY)},
                                             .out_specs = {pl::BlockSpec({pl::squeezed, kChunkRows, kCols},
                                                                         [](pl::Value i) { return pl::idx(i, 0, 0); })},
                                             .scratch_shapes = {pl::VMEM({2, kChunkRows, kCols}, pl::f32),
                                                                pl::SemaphoreType::DMA({2})}},
                                pl::ShapeDtype({2, kChunkRows, kCols}, pl::f32), parallel);
  pl::Array halves_in = big.reshape({2, rows / 2, kCols});
  copies.add_rate("2 kernel threads, copies eager", bench::measure([&] { halves(halves_in); }, runs), bytes, 1e-9, "GB/s",
                  "memcpy");
  pl::set_dma_execution(pl::DmaExecution::worker);
  copies.add_rate("2 kernel threads, copies on the DMA worker", bench::measure([&] { halves(halves_in); }, runs), bytes, 1e-9,
                  "GB/s", "2 kernel threads, copies eager");
  pl::set_dma_execution(pl::DmaExecution::automatic);
  copies.print();

  pl::set_num_threads(0);
  bench::write_json(argc, argv, {&gemm, &copies});
  return 0;
}
