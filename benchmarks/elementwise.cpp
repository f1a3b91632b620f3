// Element-wise throughput over 64 MiB f32 arrays (4096 x 4096, 64 x 1024 blocks, both grid dims
// parallel) on 1 and 2 threads: o = x + y, and the fused o = a*x + b*y + c with scalar constants
// (written as a Pallas user writes it: two input arrays, the scalars captured by the kernel), each
// against the plain C++ streaming loop that computes the same thing and against memcpy of 64 MiB, all
// measured in the same run. Bandwidth counts the bytes each one must move: memcpy reads and writes
// 64 MiB, the kernels read two arrays and write one.
//
// Then the compute-bound side on 1 thread, over a 16 MiB f32 array (1024 x 4096, blocks of 16
// whole rows): o = exp(x), and a row softmax o = exp(x - max(x)) / sum(exp(x - max(x))) over the
// last axis, the row step of attention and of every normalisation, each against the plain C++ loop
// that computes the same thing with libm's expf, in elements per second. Beside them, on 1 and 2
// threads over the same 16 MiB: exact GELU o = 0.5 x (1 + erf(x / sqrt(2))) and o = sin(x), against
// the plain C++ loops calling libm's erff and sinf on the same threads (tessera's own f32 erf and
// sin, runtime/element_math.h, are straight-line code the loop vectoriser widens); and sin again, on
// 1 thread, of arguments around 2^40, where sin's reduction must be exact (Payne-Hanek).
//
// The machine is shared and noisy, so the candidates of one thread count are measured interleaved
// (one call of each per round, in turn) and compared by their medians: a burst of load from
// elsewhere slows all of them alike instead of whichever happened to run then.
//
//   elementwise [--json results.json] [--runs N]
#include <tessera/tessera.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "benchmarks/bench_util.h"

namespace pl = tessera;

namespace {

constexpr float kA = 1.5f, kB = -0.5f, kC = 0.25f;

void add_kernel(pl::Ref x, pl::Ref y, pl::Ref o) { o() = x() + y(); }
void axpby_kernel(pl::Ref x, pl::Ref y, pl::Ref o) { o() = kA * x() + kB * y() + kC; }
void exp_kernel(pl::Ref x, pl::Ref o) { o() = pl::exp(x()); }
constexpr float kSqrtHalf = 0.70710678f;
void gelu_kernel(pl::Ref x, pl::Ref o) { o() = 0.5f * x() * (1.0f + pl::erf(x() * kSqrtHalf)); }
void sin_kernel(pl::Ref x, pl::Ref o) { o() = pl::sin(x()); }
void softmax_kernel(pl::Ref x, pl::Ref o) {
  pl::Value v = x();
  pl::Value e = pl::exp(v - pl::max(v, 1, /*keepdims=*/true));
  o() = e / pl::sum(e, 1, /*keepdims=*/true);
}

// Runs part(t) for t in [0, threads) on that many threads, the way a careful C++ programmer would.
template <class F>
void split(int threads, F part) {
  if (threads == 1) return part(0);
  std::thread other(part, 1);
  part(0);
  other.join();
}

// The plain C++ loops, each thread on a contiguous share of the elements.
void host_add(const float* x, const float* y, float* o, int64_t n, int threads) {
  split(threads, [&](int t) {
    const int64_t lo = n * t / threads, hi = n * (t + 1) / threads;
    for (int64_t i = lo; i < hi; ++i) o[i] = x[i] + y[i];
  });
}
void host_axpby(const float* x, const float* y, float* o, int64_t n, int threads) {
  split(threads, [&](int t) {
    const int64_t lo = n * t / threads, hi = n * (t + 1) / threads;
    for (int64_t i = lo; i < hi; ++i) o[i] = kA * x[i] + kB * y[i] + kC;
  });
}
void host_memcpy(std::byte* dst, const std::byte* src, int64_t bytes, int threads) {
  split(threads, [&](int t) {
    const int64_t lo = bytes * t / threads, hi = bytes * (t + 1) / threads;
    std::memcpy(dst + lo, src + lo, static_cast<size_t>(hi - lo));
  });
}

void host_exp(const float* x, float* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = std::exp(x[i]);
}
void host_gelu(const float* x, float* o, int64_t n, int threads) {
  split(threads, [&](int t) {
    const int64_t lo = n * t / threads, hi = n * (t + 1) / threads;
    for (int64_t i = lo; i < hi; ++i) o[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * kSqrtHalf));
  });
}
void host_sin(const float* x, float* o, int64_t n, int threads) {
  split(threads, [&](int t) {
    const int64_t lo = n * t / threads, hi = n * (t + 1) / threads;
    for (int64_t i = lo; i < hi; ++i) o[i] = std::sin(x[i]);
  });
}
void host_softmax(const float* x, float* o, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * cols;
    float* out = o + r * cols;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, in[c]);
    float sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += out[c] = std::exp(in[c] - m);
    for (int64_t c = 0; c < cols; ++c) out[c] /= sum;
  }
}

// One warm-up call of each, then `runs` rounds that time one call of each in turn.
std::vector<bench::Stats> measure_interleaved(const std::vector<std::function<void()>>& fs, int runs) {
  for (const auto& f : fs) f();
  std::vector<bench::Stats> stats(fs.size());
  for (int r = 0; r < runs; ++r)
    for (size_t i = 0; i < fs.size(); ++i) {
      const double t0 = bench::now();
      fs[i]();
      stats[i].seconds.push_back(bench::now() - t0);
    }
  return stats;
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = std::atoi(bench::arg(argc, argv, "--runs", "15").c_str());
  const int64_t rows = 4096, cols = 4096, n = rows * cols;
  const double bytes = static_cast<double>(n) * 4;
  pl::Array x = pl::Array::random_normal({rows, cols}, pl::f32, 1), y = pl::Array::random_normal({rows, cols}, pl::f32, 2);
  pl::Array dst = pl::Array::zeros({rows, cols}, pl::f32);
  std::vector<float> o(static_cast<size_t>(n));
  auto spec = pl::BlockSpec({64, 1024}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); });
  const pl::GridSpec grid{.grid = {rows / 64, cols / 1024}, .in_specs = {spec, spec}, .out_specs = {spec}};
  const pl::CallOptions options{.compiler_params = {.dimension_semantics = {pl::parallel, pl::parallel}}};
  auto add = pl::pallas_call(add_kernel, grid, pl::ShapeDtype({rows, cols}, pl::f32), options);
  auto axpby = pl::pallas_call(axpby_kernel, grid, pl::ShapeDtype({rows, cols}, pl::f32), options);

  bench::Report report("element-wise kernels, 64 MiB f32 arrays");
  std::map<std::string, double> rate;  // GB/s by row name, for the notes
  for (int threads : {1, 2}) {
    const std::string t = fmt::format(", {} thread{}", threads, threads > 1 ? "s" : "");
    pl::set_num_threads(threads);
    const std::vector<bench::Stats> s = measure_interleaved(
        {[&] { host_memcpy(dst.mutable_data(), x.data(), n * 4, threads); },
         [&] { host_add(x.data_as<float>(), y.data_as<float>(), o.data(), n, threads); },
         [&] { add(x, y); },
         [&] { host_axpby(x.data_as<float>(), y.data_as<float>(), o.data(), n, threads); },
         [&] { axpby(x, y); }},
        runs);
    const std::string memcpy_row = "memcpy 64 MiB" + t, add_loop = "plain C++ add loop" + t,
                      axpby_loop = "plain C++ a*x + b*y + c loop" + t;
    rate[memcpy_row] = report.add_rate(memcpy_row, s[0], 2 * bytes, 1e-9, "GB/s").value;
    rate[add_loop] = report.add_rate(add_loop, s[1], 3 * bytes, 1e-9, "GB/s", memcpy_row).value;
    rate["tessera add" + t] = report.add_rate("tessera add" + t, s[2], 3 * bytes, 1e-9, "GB/s", add_loop).value;
    rate[axpby_loop] = report.add_rate(axpby_loop, s[3], 3 * bytes, 1e-9, "GB/s", memcpy_row).value;
    rate["tessera a*x + b*y + c" + t] =
        report.add_rate("tessera a*x + b*y + c" + t, s[4], 3 * bytes, 1e-9, "GB/s", axpby_loop).value;
    report.note(fmt::format("tessera vs memcpy{}: add {:.2f}x, a*x + b*y + c {:.2f}x", t,
                            rate["tessera add" + t] / rate[memcpy_row],
                            rate["tessera a*x + b*y + c" + t] / rate[memcpy_row]));
  }
  {
    // exp and row softmax on 1 thread: compute-bound, set by whether the loops are vector code.
    pl::set_num_threads(1);
    const int64_t srows = 1024, scols = 4096, sn = srows * scols;
    pl::Array sx = pl::Array::random_normal({srows, scols}, pl::f32, 3);
    std::vector<float> so(static_cast<size_t>(sn));
    auto row_spec = pl::BlockSpec({16, scols}, [](pl::Value i) { return pl::idx(i, 0); });
    const pl::GridSpec row_grid{.grid = {srows / 16}, .in_specs = {row_spec}, .out_specs = {row_spec}};
    const pl::CallOptions row_options{.compiler_params = {.dimension_semantics = {pl::parallel}}};
    auto exp_call = pl::pallas_call(exp_kernel, row_grid, pl::ShapeDtype({srows, scols}, pl::f32), row_options);
    auto softmax_call = pl::pallas_call(softmax_kernel, row_grid, pl::ShapeDtype({srows, scols}, pl::f32), row_options);
    const float* px = sx.data_as<float>();
    const std::vector<bench::Stats> s = measure_interleaved(
        {[&] { host_exp(px, so.data(), sn); }, [&] { exp_call(sx); }, [&] { host_softmax(px, so.data(), srows, scols); },
         [&] { softmax_call(sx); }},
        runs);
    const double elems = static_cast<double>(sn);
    report.add_rate("plain C++ expf loop, 1 thread", s[0], elems, 1e-6, "M elem/s");
    report.add_rate("tessera exp, 1 thread", s[1], elems, 1e-6, "M elem/s", "plain C++ expf loop, 1 thread");
    report.add_rate("plain C++ row softmax loop, 1 thread", s[2], elems, 1e-6, "M elem/s");
    report.add_rate("tessera row softmax, 1 thread", s[3], elems, 1e-6, "M elem/s", "plain C++ row softmax loop, 1 thread");
    // Exact GELU and sin, on 1 and 2 threads: the inputs scaled by 3 so that sin's reduction runs
    // through several quadrants and erf through all of its pieces.
    pl::Array wide = pl::Array::from_vector(std::vector<float>(px, px + sn), {srows, scols});
    for (int64_t i = 0; i < sn; ++i) wide.mutable_data_as<float>()[i] *= 3.0f;
    const float* pw = wide.data_as<float>();
    auto gelu_call = pl::pallas_call(gelu_kernel, row_grid, pl::ShapeDtype({srows, scols}, pl::f32), row_options);
    auto sin_call = pl::pallas_call(sin_kernel, row_grid, pl::ShapeDtype({srows, scols}, pl::f32), row_options);
    for (int threads : {1, 2}) {
      const std::string t = fmt::format(", {} thread{}", threads, threads > 1 ? "s" : "");
      pl::set_num_threads(threads);
      const std::vector<bench::Stats> g = measure_interleaved(
          {[&] { host_gelu(pw, so.data(), sn, threads); }, [&] { gelu_call(wide); },
           [&] { host_sin(pw, so.data(), sn, threads); }, [&] { sin_call(wide); }},
          runs);
      report.add_rate("plain C++ exact GELU loop (erff)" + t, g[0], elems, 1e-6, "M elem/s");
      report.add_rate("tessera exact GELU" + t, g[1], elems, 1e-6, "M elem/s", "plain C++ exact GELU loop (erff)" + t);
      report.add_rate("plain C++ sinf loop" + t, g[2], elems, 1e-6, "M elem/s");
      report.add_rate("tessera sin" + t, g[3], elems, 1e-6, "M elem/s", "plain C++ sinf loop" + t);
    }
    // sin of large arguments (normal samples times 2^40, |x| up to about 2^42), on 1 thread: tessera's
    // reduction is the same straight-line code for every input, libm's sinf takes its slow path.
    pl::set_num_threads(1);
    pl::Array large = pl::Array::from_vector(std::vector<float>(px, px + sn), {srows, scols});
    for (int64_t i = 0; i < sn; ++i) large.mutable_data_as<float>()[i] *= 0x1p40f;
    const float* pbig = large.data_as<float>();
    const std::vector<bench::Stats> big =
        measure_interleaved({[&] { host_sin(pbig, so.data(), sn, 1); }, [&] { sin_call(large); }}, runs);
    report.add_rate("plain C++ sinf loop, |x| ~ 2^40, 1 thread", big[0], elems, 1e-6, "M elem/s");
    report.add_rate("tessera sin, |x| ~ 2^40, 1 thread", big[1], elems, 1e-6, "M elem/s",
                    "plain C++ sinf loop, |x| ~ 2^40, 1 thread");
  }
  pl::set_num_threads(0);
  for (const char* name : {"memcpy 64 MiB", "plain C++ add loop", "tessera add", "plain C++ a*x + b*y + c loop",
                           "tessera a*x + b*y + c"})
    report.note(fmt::format("2 threads / 1 thread, {}: {:.2f}x", name,
                            rate[fmt::format("{}, 2 threads", name)] / rate[fmt::format("{}, 1 thread", name)]));
  report.note("tessera's time includes allocating the 64 MiB output of every call (from its cache of freed arrays)");
  report.print();
  bench::write_json(argc, argv, {&report});
  return 0;
}
