// Element-wise throughput: o = x + y over 64 MiB f32 arrays (4096 x 4096, 64 x 1024 blocks) on 1
// and 2 threads, against memcpy of 64 MiB and a plain C++ add loop measured in the same run.
// Bandwidth counts the bytes each one must move: memcpy reads and writes 64 MiB, the add reads two
// arrays and writes one.
//
//   elementwise [--json results.json] [--runs N]
#include <tessera/tessera.hpp>

#include <cstring>
#include <thread>

#include "benchmarks/bench_util.h"

namespace pl = tessera;

namespace {

void add_kernel(pl::Ref x, pl::Ref y, pl::Ref o) { o() = x() + y(); }

// The plain C++ add, split over `threads` threads the way a careful C++ programmer would.
void host_add(const float* x, const float* y, float* o, int64_t n, int threads) {
  auto part = [&](int t) {
    const int64_t lo = n * t / threads, hi = n * (t + 1) / threads;
    for (int64_t i = lo; i < hi; ++i) o[i] = x[i] + y[i];
  };
  if (threads == 1) return part(0);
  std::thread other(part, 1);
  part(0);
  other.join();
}

void host_memcpy(void* dst, const void* src, size_t bytes, int threads) {
  if (threads == 1) {
    std::memcpy(dst, src, bytes);
    return;
  }
  std::thread other([&] { std::memcpy(static_cast<char*>(dst) + bytes / 2, static_cast<const char*>(src) + bytes / 2, bytes - bytes / 2); });
  std::memcpy(dst, src, bytes / 2);
  other.join();
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = std::atoi(bench::arg(argc, argv, "--runs", "9").c_str());
  const int64_t rows = 4096, cols = 4096, n = rows * cols;
  const double mib64 = static_cast<double>(n) * 4;
  pl::Array x = pl::Array::random_normal({rows, cols}, pl::f32, 1), y = pl::Array::random_normal({rows, cols}, pl::f32, 2);
  pl::Array dst = pl::Array::zeros({rows, cols}, pl::f32);
  std::vector<float> o(static_cast<size_t>(n));
  auto spec = pl::BlockSpec({64, 1024}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); });
  auto add = pl::pallas_call(add_kernel, pl::GridSpec{.grid = {rows / 64, cols / 1024}, .in_specs = {spec, spec}, .out_specs = {spec}},
                             pl::ShapeDtype({rows, cols}, pl::f32),
                             {.compiler_params = {.dimension_semantics = {pl::parallel, pl::parallel}}});
  bench::Report report("element-wise add, 64 MiB f32 arrays");
  for (int threads : {1, 2}) {
    const std::string t = fmt::format(", {} thread{}", threads, threads > 1 ? "s" : "");
    pl::set_num_threads(threads);
    report.add_rate("memcpy 64 MiB" + t,
                    bench::measure([&] { host_memcpy(dst.mutable_data(), x.data(), static_cast<size_t>(mib64), threads); }, runs),
                    2 * mib64, 1e-9, "GB/s");
    report.add_rate("plain C++ add loop" + t,
                    bench::measure([&] { host_add(x.data_as<float>(), y.data_as<float>(), o.data(), n, threads); }, runs),
                    3 * mib64, 1e-9, "GB/s", "memcpy 64 MiB" + t);
    report.add_rate("tessera add" + t, bench::measure([&] { add(x, y); }, runs), 3 * mib64, 1e-9, "GB/s",
                    "memcpy 64 MiB" + t);
  }
  pl::set_num_threads(0);
  report.note("tessera's time includes allocating the 64 MiB output of every call (from its cache of freed arrays)");
  report.print();
  bench::write_json(argc, argv, {&report});
  return 0;
}
