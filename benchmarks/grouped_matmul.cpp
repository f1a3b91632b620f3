// Grouped matmul benchmarks: megablox gmm and tgmm (f32 and bf16 inputs, f32 out, 128-tiles) on an
// MoE-like problem (m = 2048 tokens, k = 1024, n = 512, 8 experts with uneven token counts, one
// empty), on 1 and 2 threads. Each is compared with tessera's dense matmul of the same flops and
// input dtype (gmm: 2048 x 1024 x 512; tgmm: its k x m times m x n, 1024 x 2048 x 512), which is
// what grouping costs, and with OpenBLAS doing the same per-group products (one sgemm per group),
// all measured in the same run. Each grouped op and its dense matmul are called in turn, call by
// call, and the ratio printed is the median of the pairs' ratios: this host's speed drifts by up to
// 2x within a second (a shared VM), which made the ratio of two medians taken one after the other
// read 0.6x-1.4x for the same binary. OpenBLAS's rows are followed by a pause that lets its worker
// threads, which spin a while after each call, go to sleep: they held one of the two cores through
// the next row, the dense matmul on 2 threads, which then ran at 1-thread speed. A last report gives
// each grouped op's scaling from 1 to 2 threads, in pairs of neighbouring calls.
//
//   grouped_matmul [--json results.json] [--runs N]
//   grouped_matmul --profile OP [--versus OP2 | --versus-threads T2] --dtype f32|bf16 [--groups 1|8] [--aligned] [--sizes a,b,...] [--threads T] [--iters N]
//
// --profile runs only OP (gmm, tgmm, dense: the gmm-shaped matmul, dense_t: the tgmm-shaped one,
// dense_n: the gmm-shaped matmul on gmm's grid order, n tiles outermost) N times after a warm-up
// and prints one line, its wall and CPU-time medians, for `perf record` to see that op alone and
// for comparing builds on a loaded machine; --versus OP2 calls OP and OP2 in turn and prints the
// median of the pairs' ratios (OP's speed relative to OP2's), --versus-threads T2 the same against OP
// on T2 threads (the scaling from T2 to T threads); --groups 1 puts every row in one group and --aligned
// makes the 8 groups whole m-tiles (neither has boundary tiles); --sizes gives any group sizes
// summing to m (e.g. 64,128,...,128,64: a boundary in the middle of every tile).
#include <fmt/format.h>

#include <tessera/megablox.hpp>

#include <cinttypes>
#include <cstdlib>
#include <ctime>

#include "benchmarks/bench_util.h"
#include "benchmarks/openblas.h"
#include "examples/seed_matmul.h"

namespace pl = tessera;
namespace mb = tessera::megablox;

namespace {

constexpr int64_t m = 2048, k = 1024, n = 512;
const std::vector<int32_t> kSizes{256, 301, 0, 199, 384, 141, 512, 255};  // sums to m
constexpr double kFlops = 2.0 * m * k * n;

struct Problem {
  int64_t groups = static_cast<int64_t>(kSizes.size());
  pl::Array group_sizes = pl::Array::from_vector(kSizes, {groups});
  pl::Array lhs = pl::Array::random_normal({m, k}, pl::f32, 0), rhs = pl::Array::random_normal({groups, k, n}, pl::f32, 1);
  pl::Array dout = pl::Array::random_normal({m, n}, pl::f32, 2), lhs_t = pl::transpose(lhs);
};

bench::Report run(const Problem& p, int threads, int runs) {
  pl::set_num_threads(threads);
  openblas_set_num_threads(threads);
  bench::Report report(fmt::format("grouped matmul m=2048 k=1024 n=512, 8 groups, {} thread{}", threads, threads > 1 ? "s" : ""));
  const mb::Tiling tiling{128, 128, 128};
  auto rate = [&](const std::string& name, const std::function<void()>& f) {
    return report.add_rate(name, bench::measure(f, runs), kFlops, 1e-9, "GFLOP/s").value;
  };
  // An OpenBLAS row, then the pause that lets its spinning workers sleep (see the top of the file).
  auto blas_rate = [&](const std::string& name, const std::function<void()>& f) {
    const double v = rate(name, f);
    bench::settle();
    return v;
  };
  // A grouped row against the dense one of its dtype, called in turn (which goes first alternates),
  // its ratio the median of the pairs' ratios; its ratio to OpenBLAS as a note.
  auto grouped = [&](const std::string& dense_name, const std::function<void()>& dense, const std::string& name,
                     const std::function<void()>& f, double blas) {
    const bench::Paired pr = bench::paired(f, dense, runs);
    report.add_rate(dense_name, pr.b, kFlops, 1e-9, "GFLOP/s");
    bench::Row& row = report.add_rate(name, pr.a, kFlops, 1e-9, "GFLOP/s", dense_name);
    row.ratio = pr.ratio;
    const double v = row.value;
    report.note(fmt::format("{}: {:.2f}x OpenBLAS sgemm per group", name, v / blas));
  };
  std::vector<float> c(static_cast<size_t>(m * n)), w(static_cast<size_t>(p.groups * k * n));

  const double blas = blas_rate("OpenBLAS sgemm per group (gmm)", [&] {
    int64_t row = 0;
    for (int64_t g = 0; g < p.groups; row += kSizes[g], ++g)
      if (kSizes[g])
        bench::sgemm(p.lhs.data_as<float>() + row * k, p.rhs.data_as<float>() + g * k * n, c.data() + row * n, kSizes[g], k, n);
  });
  const pl::Array rhs0 = pl::dynamic_slice_in_dim(p.rhs, 0, 1, 0).reshape({k, n});
  for (pl::DType dt : {pl::f32, pl::bf16}) {
    const std::string d(pl::dtype_name(dt));
    const pl::Array lhs = p.lhs.astype(dt), rhs = p.rhs.astype(dt), dense_rhs = rhs0.astype(dt);
    auto dense = seed::make_matmul(m, k, n, pl::f32, {});
    const std::string dense_name = "tessera dense matmul " + d + ", 2048x1024x512";
    grouped(dense_name, [&] { dense(lhs, dense_rhs); }, "megablox gmm " + d,
            [&] { mb::gmm(lhs, rhs, p.group_sizes, {.tiling = tiling}); }, blas);
  }

  const double blas_t = blas_rate("OpenBLAS sgemm per group (tgmm)", [&] {
    int64_t row = 0;
    for (int64_t g = 0; g < p.groups; row += kSizes[g], ++g)
      if (kSizes[g])
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(k), static_cast<int>(n), kSizes[g], 1.0f,
                    p.lhs_t.data_as<float>() + row, static_cast<int>(m), p.dout.data_as<float>() + row * n,
                    static_cast<int>(n), 0.0f, w.data() + g * k * n, static_cast<int>(n));
  });
  for (pl::DType dt : {pl::f32, pl::bf16}) {
    const std::string d(pl::dtype_name(dt));
    const pl::Array lhs_t = p.lhs_t.astype(dt), dout = p.dout.astype(dt);
    auto dense = seed::make_matmul(k, m, n, pl::f32, {});
    const std::string dense_name = "tessera dense matmul " + d + ", 1024x2048x512";
    grouped(dense_name, [&] { dense(lhs_t, dout); }, "megablox tgmm " + d,
            [&] { mb::tgmm(lhs_t, dout, p.group_sizes, {.tiling = tiling}); }, blas_t);
  }
  return report;
}

// Each grouped op's scaling from 1 to 2 threads: a 2-thread call next to a 1-thread call, the
// median of the pairs' ratios (the rows' own medians, taken seconds apart, compare the host's drift
// as much as the threads).
bench::Report scaling(const Problem& p, int runs) {
  bench::Report report("grouped matmul m=2048 k=1024 n=512, 8 groups: scaling from 1 to 2 threads");
  const mb::Tiling tiling{128, 128, 128};
  for (pl::DType dt : {pl::f32, pl::bf16}) {
    const pl::Array lhs = p.lhs.astype(dt), rhs = p.rhs.astype(dt);
    const pl::Array lhs_t = p.lhs_t.astype(dt), dout = p.dout.astype(dt);
    const std::pair<const char*, std::function<void()>> ops[] = {
        {"gmm", [&] { mb::gmm(lhs, rhs, p.group_sizes, {.tiling = tiling}); }},
        {"tgmm", [&] { mb::tgmm(lhs_t, dout, p.group_sizes, {.tiling = tiling}); }}};
    for (const auto& [name, op] : ops) {
      auto on = [&op](int threads) {
        return [&op, threads] {
          pl::set_num_threads(threads);
          op();
        };
      };
      const bench::Paired pr = bench::paired(on(2), on(1), runs);
      report.note(fmt::format("megablox {} {}: {:.2f}x from 1 to 2 threads (median of {} paired calls)", name,
                              pl::dtype_name(dt), pr.ratio, runs));
    }
  }
  pl::set_num_threads(0);
  return report;
}

// The --profile mode: one op, one dtype, repeated.
int profile(int argc, char** argv) {
  const std::string op = bench::arg(argc, argv, "--profile", "gmm");
  const pl::DType dt = bench::arg(argc, argv, "--dtype", "f32") == "bf16" ? pl::bf16 : pl::f32;
  const int groups = std::atoi(bench::arg(argc, argv, "--groups", "8").c_str());
  const int iters = std::atoi(bench::arg(argc, argv, "--iters", "20").c_str());
  pl::set_num_threads(std::atoi(bench::arg(argc, argv, "--threads", "1").c_str()));
  // --aligned: 8 groups of whole m-tiles (no tile crosses a boundary), to tell the cost of more
  // groups (more rhs to read and pack) from that of boundary tiles.
  const std::vector<int32_t> aligned{256, 384, 0, 128, 384, 128, 512, 256};
  std::vector<int32_t> sizes = groups == 1                           ? std::vector<int32_t>{static_cast<int32_t>(m)}
                               : bench::has_flag(argc, argv, "--aligned") ? aligned
                                                                          : kSizes;
  // --sizes a,b,...: any group sizes summing to m, to move the boundaries around.
  if (const std::string list = bench::arg(argc, argv, "--sizes"); !list.empty()) {
    sizes.clear();
    for (size_t at = 0; at <= list.size();) {
      const size_t comma = std::min(list.find(',', at), list.size());
      sizes.push_back(std::atoi(list.substr(at, comma - at).c_str()));
      at = comma + 1;
    }
  }
  const int64_t g = static_cast<int64_t>(sizes.size());
  const pl::Array group_sizes = pl::Array::from_vector(sizes, {g});
  const pl::Array lhs = pl::Array::random_normal({m, k}, pl::f32, 0).astype(dt);
  const pl::Array rhs = pl::Array::random_normal({g, k, n}, pl::f32, 1).astype(dt);
  const pl::Array dout = pl::Array::random_normal({m, n}, pl::f32, 2).astype(dt), lhs_t = pl::transpose(lhs);
  const pl::Array rhs0 = pl::dynamic_slice_in_dim(rhs, 0, 1, 0).reshape({k, n});
  mb::Tiling tiling{128, 128, 128};
  // --tiling tm,tk,tn: gmm's and tgmm's tiles (the dense matmuls keep 128-blocks).
  if (const std::string t = bench::arg(argc, argv, "--tiling"); !t.empty())
    std::sscanf(t.c_str(), "%" SCNd64 ",%" SCNd64 ",%" SCNd64, &tiling.tm, &tiling.tk, &tiling.tn);
  auto dense = seed::make_matmul(m, k, n, pl::f32, {}), dense_t = seed::make_matmul(k, m, n, pl::f32, {});
  // The gmm-shaped dense matmul on gmm's grid order, (n, m, k): n outer, so lhs is read once per n
  // tile instead of once, as gmm reads it.
  auto dense_n_outer = pl::pallas_call(
      seed::matmul_kernel,
      pl::GridSpec{.grid = {n / 128, m / 128, k / 128},
                   .in_specs = {seed::block(1, 2), seed::block(2, 0)},
                   .out_specs = {seed::block(1, 0)},
                   .scratch_shapes = {pl::VMEM({128, 128}, pl::f32)}},
      pl::ShapeDtype({m, n}, pl::f32), {.compiler_params = {.dimension_semantics = {pl::parallel, pl::arbitrary, pl::arbitrary}}});
  auto make = [&](const std::string& name) -> std::function<void()> {
    if (name == "gmm") return [&] { mb::gmm(lhs, rhs, group_sizes, {.tiling = tiling}); };
    if (name == "tgmm") return [&] { mb::tgmm(lhs_t, dout, group_sizes, {.tiling = tiling}); };
    if (name == "dense") return [&] { dense(lhs, rhs0); };
    if (name == "dense_t") return [&] { dense_t(lhs_t, dout); };
    if (name == "dense_n") return [&] { dense_n_outer(lhs, rhs0); };
    return {};
  };
  const std::function<void()> f = make(op);
  std::string versus = bench::arg(argc, argv, "--versus");
  std::function<void()> other = versus.empty() ? nullptr : make(versus);
  if (!f || (!versus.empty() && !other)) {
    std::fprintf(stderr, "--profile / --versus: unknown op '%s'; pass gmm, tgmm, dense, dense_t or dense_n\n",
                 (f ? versus : op).c_str());
    return 2;
  }
  // --versus-threads T2: OP on --threads T against OP itself on T2 threads, called in turn (the
  // ratio is then the scaling from T2 to T threads).
  if (const std::string t2 = bench::arg(argc, argv, "--versus-threads"); !t2.empty()) {
    const int t1 = std::atoi(bench::arg(argc, argv, "--threads", "1").c_str()), t2n = std::atoi(t2.c_str());
    const std::function<void()> op_alone = f;
    versus = fmt::format("{} on {} thread{}", op, t2n, t2n > 1 ? "s" : "");
    other = [=] {
      pl::set_num_threads(t2n);
      op_alone();
      pl::set_num_threads(t1);
    };
  }
  if (other) {
    // Called in turn with the other op: the median of the pairs' ratios is steadier on this host
    // than two medians taken one after the other.
    const bench::Paired pr = bench::paired(f, other, iters);
    std::printf("%s %s groups=%d: median %.3f ms, %s %.3f ms, paired ratio %.3fx %s\n", op.c_str(),
                pl::dtype_name(dt).data(), static_cast<int>(g), pr.a.median() * 1e3, versus.c_str(),
                pr.b.median() * 1e3, pr.ratio, versus.c_str());
    return 0;
  }
  // CPU time of the process too: on a loaded machine it leaves out the time spent waiting for a core.
  auto cpu_seconds = [] {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  };
  f();
  bench::Stats cpu;
  const bench::Stats s = bench::measure(
      [&] {
        const double c0 = cpu_seconds();
        f();
        cpu.seconds.push_back(cpu_seconds() - c0);
      },
      iters, 0);
  std::printf("%s %s groups=%d: median %.3f ms, cpu %.3f ms\n", op.c_str(), pl::dtype_name(dt).data(), static_cast<int>(g),
              s.median() * 1e3, cpu.median() * 1e3);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bench::use_openblas_best_core(argv);
  std::printf("OpenBLAS core: %s\n", openblas_get_corename());
  if (!bench::arg(argc, argv, "--profile", "").empty()) return profile(argc, argv);
  const int runs = std::atoi(bench::arg(argc, argv, "--runs", "7").c_str());
  const Problem p;
  std::vector<bench::Report> reports;
  for (int threads : {1, 2}) {
    reports.push_back(run(p, threads, runs));
    reports.back().print();
  }
  reports.push_back(scaling(p, runs));
  reports.back().print();
  bench::write_json(argc, argv, {&reports[0], &reports[1], &reports[2]});
  return 0;
}
