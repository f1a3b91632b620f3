// Seed 000's distributed matmul at its own shapes: inputs 2048x2048 bf16 sharded P('x', 'y'), weights
// 2048x1024 bf16 sharded P('x', None), on a 2x2 mesh of simulated devices. The naive AG -> GEMM -> AR
// (the seed's all-gather kernel, a tiled matmul, its all-reduce kernel), the fused AG + GEMM kernel
// (with the AR kernel, and with psum), and the host-collective version, each against one
// single-device matmul of the same work, measured in the same run. Operands are sharded before the
// clock starts and results stay sharded, as on real devices.
//
// The simulated devices share this machine's cores, so the figures say what the kernels' data
// movement and synchronisation cost on top of the same arithmetic, not what a TPU pod would do.
//
//   distributed [--json results.json] [--runs N]
#include <tessera/tessera.hpp>

#include <cstdlib>

#include "benchmarks/bench_util.h"
#include "examples/seed_distributed.h"

namespace pl = tessera;

int main(int argc, char** argv) {
  const int runs = std::atoi(bench::arg(argc, argv, "--runs", "5").c_str());
  const int64_t m = 2048, k = 2048, n = 1024;
  const double flops = 2.0 * m * k * n;
  const pl::Array inputs = pl::Array::random_normal({m, k}, pl::bf16, 0);
  const pl::Array weights = pl::Array::random_normal({k, n}, pl::bf16, 1);
  const pl::Mesh mesh({2, 2}, {"x", "y"});
  const pl::ShardedArray in_sharded = pl::device_put(inputs, pl::NamedSharding(mesh, pl::P("x", "y")));
  const pl::ShardedArray w_sharded = pl::device_put(weights, pl::NamedSharding(mesh, pl::P("x", pl::None)));

  bench::Report report("seed 000 distributed matmul 2048x2048x1024 bf16 on a 2x2 mesh (4 simulated devices, " +
                       std::to_string(pl::num_threads()) + " threads)");
  auto single = seed::make_matmul(m, k, n, pl::bf16);
  const std::string base = "single-device matmul (the same work)";
  report.add_rate(base, bench::measure([&] { single(inputs, weights); }, runs), flops, 1e-9, "GFLOP/s");

  using F = std::function<pl::Array(const pl::Array&, const pl::Array&)>;
  const pl::CallOptions compiled;
  const std::vector<std::pair<std::string, F>> variants = {
      {"naive: AG kernel -> GEMM -> AR kernel",
       [&](const pl::Array& in, const pl::Array& w) { return seed::slow_ag_gemm_ar(in, w, compiled); }},
      {"fused AG + GEMM kernel + AR kernel",
       [&](const pl::Array& in, const pl::Array& w) { return seed::make_ar(seed::fused_ag_gemm(in, w, compiled), compiled); }},
      {"fused AG + GEMM kernel + psum",
       [&](const pl::Array& in, const pl::Array& w) { return pl::psum(seed::fused_ag_gemm(in, w, compiled), "y"); }},
      {"host collectives (xla_matmul_2)", seed::xla_matmul_2},
  };
  for (const auto& [name, f] : variants) {
    auto sharded = pl::shard_map(f, mesh, {pl::P("x", "y"), pl::P("x", pl::None)}, {pl::P("x", pl::None)});
    // Check once (against the single-device result), then time.
    const pl::Array got = sharded(in_sharded, w_sharded);
    if (!pl::allclose(got.astype(pl::f32), single(inputs, weights).astype(pl::f32), 2e-2, 2.0))
      report.note(name + ": RESULT DIFFERS from the single-device matmul");
    report.add_rate(name, bench::measure([&] { sharded(in_sharded, w_sharded); }, runs), flops, 1e-9, "GFLOP/s", base);
  }
  report.note("the fused kernel computes 1.5x the GEMM work on a 2x2 mesh (the two devices off the diagonal redo theirs "
              "with the received weights), as in the seed; on a TPU that compute hides the transfer");
  report.print();
  bench::write_json(argc, argv, {&report});
  return 0;
}
