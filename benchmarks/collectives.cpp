// The collective kernels of ops/collectives (ring reduce-scatter, all-to-all, ring all-gather,
// all-reduce) and the host collectives beside them (pl::psum_scatter, pl::all_to_all,
// pl::all_gather, pl::psum) on a ring of 4 devices and on a 2x2 mesh (each along x, along y, and
// the reduce-scatter over both axes), from 64 KiB to 16 MiB per device, against memcpy of the same
// bytes measured in the same run.
//
//   bench_collectives [--json results.json] [--runs N] [--sizes 64K,1M,16M] [--devices D] [--mesh RxC]
//   mpiexec -n 2 --bind-to none bench_collectives --mpi    (the devices spread over 2 processes)
//
// --devices 0 or --mesh 0 leaves that mesh out. Figures as NCCL defines them (its PERFORMANCE.md):
// `size` is the bytes of the largest buffer a device holds (reduce-scatter's and all-to-all's
// input, all-gather's output, all-reduce's buffer), algorithm bandwidth = size / time, and bus
// bandwidth = algbw * (n-1)/n (all-reduce: 2(n-1)/n), n the devices one collective spans (the axis'
// size; both axes: the mesh's), the rate each device's link would have to sustain, comparable
// across collectives and device counts. Along one axis of the 2-D mesh the other axis' groups run
// the same collective at the same time, so every device of the mesh works in every row. Only the
// reduce-scatter takes several axes; the host's counterpart over both is pl::psum_scatter along x,
// then along y, the kernel's two phases. The baseline is one thread's memcpy of `size` bytes. The
// time of one collective is (a shard_map whose function calls it `reps` times - the fastest
// shard_map that calls it none) / reps, so the shard_map's own costs (cutting the input, joining the
// output) cancel and each launch is counted. The devices are threads of one process (or of two
// under --mpi) sharing this machine's cores: with 4 devices on 2 cores their copies and adds take
// turns, so bus bandwidth above memcpy's is not expected; the ratios say how close each collective
// comes. The default run takes about 45 s on 2 cores; `pl::psum` is the slowest by far (about 1 s per
// call at 64 MiB: `--sizes 64M` for the largest figures).
#include <tessera/collectives.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "benchmarks/bench_util.h"
#include "jit/llvm/target.h"

namespace pl = tessera;
namespace cl = tessera::collectives;

namespace {

struct Collective {
  std::string name;
  double bus_factor;      // bus bandwidth / algorithm bandwidth, from the devices it spans
  int64_t input_divisor;  // a device's input is size / this (all-gather's is one chunk)
  std::function<pl::Array(const pl::Array&)> call;
};

std::string size_text(int64_t bytes) {
  return bytes >= (1 << 20) ? fmt::format("{} MiB", bytes >> 20) : fmt::format("{} KiB", bytes >> 10);
}

// "64K,1M,16M": bytes per device, each a multiple of 1 KiB.
std::vector<int64_t> size_list(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const char unit = item.empty() ? 'K' : item.back();
    const int64_t shift = unit == 'M' || unit == 'm' ? 20 : 10;
    out.push_back(std::stoll(item) << shift);
  }
  return out;
}

// The collectives along each axis of `mesh` (named in rows as " [x]" when the mesh has several), and
// the reduce-scatter over all of them (" [x,y]") when there are several.
std::vector<Collective> collectives_on(const pl::Mesh& mesh) {
  const std::vector<std::string>& axes = mesh.axis_names();
  std::vector<Collective> out;
  for (const std::string& a : axes) {
    const int64_t n = mesh.axis_size(a);
    const double ring = static_cast<double>(n - 1) / static_cast<double>(n);
    const std::string along = axes.size() == 1 ? "" : " [" + a + "]";
    out.push_back({"ring reduce_scatter kernel" + along, ring, 1, [a](const pl::Array& x) { return cl::reduce_scatter(x, a); }});
    out.push_back({"pl::psum_scatter (host)" + along, ring, 1, [a](const pl::Array& x) { return pl::psum_scatter(x, a, 0, true); }});
    out.push_back({"all_to_all kernel" + along, ring, 1, [a](const pl::Array& x) { return cl::all_to_all(x, a, 0, 0, true); }});
    out.push_back({"pl::all_to_all (host)" + along, ring, 1, [a](const pl::Array& x) { return pl::all_to_all(x, a, 0, 0, true); }});
    out.push_back({"ring all_gather kernel" + along, ring, n, [a](const pl::Array& x) { return cl::all_gather(x, a); }});
    out.push_back({"pl::all_gather (host)" + along, ring, n, [a](const pl::Array& x) { return pl::all_gather(x, a, 0, true); }});
    out.push_back({"ring all_reduce kernel" + along, 2 * ring, 1, [a](const pl::Array& x) { return cl::all_reduce(x, a); }});
    out.push_back({"pl::psum (host)" + along, 2 * ring, 1, [a](const pl::Array& x) { return pl::psum(x, a); }});
  }
  if (axes.size() > 1) {
    const double ring = static_cast<double>(mesh.size() - 1) / static_cast<double>(mesh.size());
    const std::string over = fmt::format(" [{}]", fmt::join(axes, ","));
    out.push_back({"ring reduce_scatter kernel" + over, ring, 1, [axes](const pl::Array& x) { return cl::reduce_scatter(x, axes); }});
    out.push_back({"pl::psum_scatter (host)" + over, ring, 1, [axes](const pl::Array& x) {
                     pl::Array y = x;
                     for (const std::string& a : axes) y = pl::psum_scatter(y, a, 0, true);
                     return y;
                   }});
  }
  return out;
}

// One report: every collective on `mesh` at every size, each size's memcpy measured just before.
bench::Report measure_mesh(const pl::Mesh& mesh, const std::string& title, const std::vector<int64_t>& sizes, int runs) {
  bench::Report report(title);
  const std::vector<Collective> collectives = collectives_on(mesh);
  // Every device's block is one row of the input, over all the mesh's axes.
  const std::vector<std::string>& axes = mesh.axis_names();
  const pl::P spec(axes.size() == 1 ? pl::PartitionDim(axes[0]) : pl::PartitionDim({axes[0], axes[1]}));
  for (int64_t bytes : sizes) {
    const std::string size = size_text(bytes);
    std::vector<std::byte> src(static_cast<size_t>(bytes)), dst(static_cast<size_t>(bytes));
    const std::string memcpy_row = "memcpy, " + size;
    report.add_rate(memcpy_row,
                    bench::measure([&] { std::memcpy(dst.data(), src.data(), src.size()); }, runs, 1,
                                   bytes < (4 << 20) ? 16 : 2),
                    static_cast<double>(bytes), 1e-9, "GB/s");
    // Calls per shard_map: about 32 MiB of collective data, from 2 to 64 calls.
    const int64_t reps = std::clamp<int64_t>((int64_t{32} << 20) / bytes, 2, 64);
    for (const Collective& c : collectives) {
      const pl::Array x = pl::Array::full({mesh.size() * bytes / 4 / c.input_divisor}, 1.0, pl::f32);
      auto run = [&](int64_t calls) {
        return pl::shard_map(
            [&](const pl::Array& block) {
              pl::Array y = block;
              for (int64_t i = 0; i < calls; ++i) y = c.call(block);
              return y.reshape({y.size()});
            },
            mesh, {spec}, {spec})(x);
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
  return report;
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = std::atoi(bench::arg(argc, argv, "--runs", "5").c_str());
  const std::vector<int64_t> sizes = size_list(bench::arg(argc, argv, "--sizes", "64K,1M,16M"));
  const int64_t n = std::atoll(bench::arg(argc, argv, "--devices", "4").c_str());
  const std::string mesh2 = bench::arg(argc, argv, "--mesh", "2x2");
  const size_t cross = mesh2.find('x');
  const int64_t rows = mesh2 == "0" ? 0 : std::atoll(mesh2.substr(0, cross).c_str());
  const int64_t cols = cross == std::string::npos ? 0 : std::atoll(mesh2.substr(cross + 1).c_str());
  if (mesh2 != "0" && (rows < 1 || cols < 1)) {
    std::fprintf(stderr, "--mesh %s: expected RxC (e.g. 2x2), or 0 for none\n", mesh2.c_str());
    return 2;
  }
  const bool mpi = bench::has_flag(argc, argv, "--mpi");
  if (mpi) pl::distributed::initialize();
  const bool printer = !mpi || pl::process_index() == 0;
  const std::string where = mpi ? fmt::format("{} processes", pl::process_count()) : "threads of one process";

  if (printer) {
    const pl::jit::HostCpu& host = pl::jit::host_cpu();
    std::vector<std::string> shown;
    for (const char* f : {"avx2", "avx512f", "avx512bf16"}) shown.push_back(fmt::format("{}{}", host.has(f) ? "+" : "-", f));
    std::printf("CPU: %s (LLVM: %s), %u hardware threads; %s\n", bench::cpu_model().c_str(), host.cpu.c_str(),
                std::thread::hardware_concurrency(), fmt::format("{}", fmt::join(shown, " ")).c_str());
    std::printf("tessera target: %s\n", pl::jit::cpu_target("native").str().c_str());
  }
  std::vector<bench::Report> reports;
  if (n > 0)
    reports.push_back(measure_mesh(pl::Mesh({n}, {"x"}),
                                   fmt::format("collectives on a ring of {} devices ({}), f32, against memcpy", n, where),
                                   sizes, runs));
  if (rows > 0)
    reports.push_back(measure_mesh(pl::Mesh({rows, cols}, {"x", "y"}),
                                   fmt::format("collectives on a {}x{} mesh ({}), f32, against memcpy", rows, cols, where),
                                   sizes, runs));
  if (printer) {
    for (bench::Report& r : reports) {
      r.note("CPU: " + bench::cpu_model());
      r.print();
    }
    bench::write_reports_json(argc, argv, reports);
  }
  return 0;
}
