// The collective kernels of ops/collectives (ring reduce-scatter, all-to-all, ring all-gather,
// all-reduce) and the host collectives beside them (pl::psum_scatter, pl::all_to_all,
// pl::all_gather, pl::psum) on a ring of 4 devices, from 64 KiB to 64 MiB per device, against
// memcpy of the same bytes measured in the same run.
//
//   bench_collectives [--json results.json] [--runs N] [--max-mib M] [--devices D]
//   mpiexec -n 2 --bind-to none bench_collectives --mpi    (the devices spread over 2 processes)
//
// Figures as NCCL defines them (its PERFORMANCE.md): `size` is the bytes of the largest buffer a
// device holds (reduce-scatter's and all-to-all's input, all-gather's output, all-reduce's buffer),
// algorithm bandwidth = size / time, and bus bandwidth = algbw * (n-1)/n (all-reduce: 2(n-1)/n), the
// rate each device's link would have to sustain, comparable across collectives and device counts.
// The baseline is one thread's memcpy of `size` bytes. The time of one collective is (a shard_map
// whose function calls it `reps` times - the fastest shard_map that calls it none) / reps, so the
// shard_map's own costs (cutting the input, joining the output) cancel and each launch is counted.
// The devices are threads of one process (or of two under --mpi) sharing this machine's cores: with
// 4 devices on 2 cores their copies and adds take turns, so bus bandwidth above memcpy's is not
// expected; the ratios say how close each collective comes.
#include <tessera/collectives.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "benchmarks/bench_util.h"

namespace pl = tessera;
namespace cl = tessera::collectives;

namespace {

struct Collective {
  const char* name;
  double bus_factor;  // bus bandwidth / algorithm bandwidth, from n
  int64_t input_divisor;  // a device's input is size / this (all-gather's is one chunk)
  std::function<pl::Array(const pl::Array&)> call;
};

std::string size_text(int64_t bytes) {
  return bytes >= (1 << 20) ? fmt::format("{} MiB", bytes >> 20) : fmt::format("{} KiB", bytes >> 10);
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = std::atoi(bench::arg(argc, argv, "--runs", "5").c_str());
  const int64_t max_mib = std::atoll(bench::arg(argc, argv, "--max-mib", "64").c_str());
  const int64_t n = std::atoll(bench::arg(argc, argv, "--devices", "4").c_str());
  const bool mpi = bench::has_flag(argc, argv, "--mpi");
  if (mpi) pl::distributed::initialize();
  const bool printer = !mpi || pl::process_index() == 0;
  const pl::Mesh mesh({n}, {"x"});
  const double ring = static_cast<double>(n - 1) / static_cast<double>(n);

  const std::vector<Collective> collectives = {
      {"ring reduce_scatter kernel", ring, 1, [](const pl::Array& x) { return cl::reduce_scatter(x, "x"); }},
      {"pl::psum_scatter (host)", ring, 1, [](const pl::Array& x) { return pl::psum_scatter(x, "x", 0, true); }},
      {"all_to_all kernel", ring, 1, [](const pl::Array& x) { return cl::all_to_all(x, "x", 0, 0, true); }},
      {"pl::all_to_all (host)", ring, 1, [](const pl::Array& x) { return pl::all_to_all(x, "x", 0, 0, true); }},
      {"ring all_gather kernel", ring, n, [](const pl::Array& x) { return cl::all_gather(x, "x"); }},
      {"pl::all_gather (host)", ring, n, [](const pl::Array& x) { return pl::all_gather(x, "x", 0, true); }},
      {"ring all_reduce kernel", 2 * ring, 1, [](const pl::Array& x) { return cl::all_reduce(x, "x"); }},
      {"pl::psum (host)", 2 * ring, 1, [](const pl::Array& x) { return pl::psum(x, "x"); }},
  };

  bench::Report report(fmt::format("collectives on a ring of {} devices ({}), f32, against memcpy", n,
                                   mpi ? fmt::format("{} processes", pl::process_count()) : "threads of one process"));
  report.note("CPU: " + bench::cpu_model());
  for (int64_t bytes = int64_t{64} << 10; bytes <= (max_mib << 20); bytes *= 4) {
    const std::string size = size_text(bytes);
    std::vector<std::byte> src(static_cast<size_t>(bytes)), dst(static_cast<size_t>(bytes));
    const std::string memcpy_row = "memcpy, " + size;
    report.add_rate(memcpy_row,
                    bench::measure([&] { std::memcpy(dst.data(), src.data(), src.size()); }, runs, 1,
                                   bytes < (4 << 20) ? 16 : 2),
                    static_cast<double>(bytes), 1e-9, "GB/s");
    // Calls per shard_map: about 128 MiB of collective data, from 2 to 64 calls.
    const int64_t reps = std::clamp<int64_t>((int64_t{128} << 20) / bytes, 2, 64);
    for (const Collective& c : collectives) {
      const pl::Array x = pl::Array::full({n * bytes / 4 / c.input_divisor}, 1.0, pl::f32);
      auto run = [&](int64_t calls) {
        return pl::shard_map(
            [&](const pl::Array& block) {
              pl::Array y = block;
              for (int64_t i = 0; i < calls; ++i) y = c.call(block);
              return y.reshape({y.size()});
            },
            mesh, {pl::P("x")}, {pl::P("x")})(x);
      };
      run(1);  // compile
      const bench::Stats empty = bench::measure([&] { run(0); }, runs);
      bench::Stats per_call = bench::measure([&] { run(reps); }, runs);
      for (double& t : per_call.seconds) t = std::max(0.0, t - empty.min()) / static_cast<double>(reps);
      const std::string row = fmt::format("{}, {}", c.name, size);
      if (per_call.median() <= 0) {
        report.note(row + ": below the noise of an empty shard_map in this run");
        continue;
      }
      report.add_rate(row + ", algbw", per_call, static_cast<double>(bytes), 1e-9, "GB/s", memcpy_row);
      report.add_rate(row + ", busbw", per_call, static_cast<double>(bytes) * c.bus_factor, 1e-9, "GB/s", memcpy_row);
    }
  }
  if (printer) {
    report.print();
    bench::write_json(argc, argv, {&report});
  }
  return 0;
}
