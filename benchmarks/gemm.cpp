// GEMM against the machine: the seed matmul compiled by tessera for the native target — f32, bf16
// inputs with f32 accumulation and output, and int8 inputs with i32 accumulation — at 2048 x 2048 x
// 1024 (m x k x n), 512^3, a decode shape (m = 16, k = n = 4096) and, with --large, 4096^3, on 1 and
// 2 threads. Baselines measured in the same run: OpenBLAS sgemm; oneDNN's matmul primitive (f32;
// bf16 in, f32 out; s8 in, s32 out) when the benchmark was built with it; and this CPU's peak,
// measured by a register-only FMA loop (f32) and VDPBF16PS loop (bf16) compiled for those
// instructions and run only where the CPU has them.
//
// OpenBLAS runs its best kernel for this CPU (bench::use_openblas_best_core) and the benchmark prints
// the core it used.
//
//   gemm [--json FILE] [--runs N] [--large] [--no-int8] [--shape TEXT] [--dtype f32|bf16|int8]
//
// --shape keeps only the shapes whose name contains TEXT ("512", "decode"), --dtype only one dtype's
// rows (tessera's and its baselines'; the peak loops are skipped): quicker comparisons.
//
// A tessera row's ratio to its baseline is the median of the ratios of `runs` pairs of neighbouring
// calls, tessera's and the baseline's (which goes first alternates, a pause before each call lets
// the libraries' spinning workers sleep); its figure is the median of its own calls in those pairs.
// The baseline's row is its own run of calls, so the two rows' figures may disagree with the ratio
// by the host's drift between them.
//
// Each shape ends with a note per tessera row: its scaling from 1 to 2 threads measured in pairs,
// a 2-thread call next to a 1-thread call, the median of the pairs' ratios. The rows' own 1- and
// 2-thread medians are taken seconds apart, and on a host whose speed drifts (a shared VM) their
// ratio read 1.33x-2.40x in three runs in a row of the same build.
#include <tessera/tessera.hpp>

#include <immintrin.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <thread>

#include "benchmarks/bench_util.h"
#include "benchmarks/openblas.h"
#include "examples/seed_matmul.h"
#include "jit/llvm/gemm.h"
#include "jit/llvm/target.h"

#if TESSERA_BENCH_DNNL
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace pl = tessera;

namespace {

// ---- the CPU's peak: independent accumulator chains in registers, no memory traffic ----
// Enough chains to cover latency x pipes (FMA 4 x 2, VDPBF16PS 6 x 2 on current cores).

// The loops share one shape: CHAINS accumulators of vector type V, each stepped `iters` times by
// STEP(acc, a, b) with the constant operands a and b, then summed so that none is dead. A macro
// rather than a template because each loop is compiled for its own ISA (the target attribute) and
// must have that ISA's intrinsics inline in it. An unroll of 32 unrolls every chain loop fully.
#define PEAK_LOOP(NAME, ISA, V, CHAINS, LANES, SPLAT, ADD, STOREU, OPERAND, A, B, STEP)   \
  __attribute__((target(ISA))) float NAME(int64_t iters) {                                \
    V acc[CHAINS];                                                                        \
    for (int j = 0; j < CHAINS; ++j) acc[j] = SPLAT(0.001f * static_cast<float>(j));      \
    const OPERAND a = A, b = B;                                                           \
    for (int64_t i = 0; i < iters; ++i) {                                                 \
      _Pragma("GCC unroll 32") for (int j = 0; j < CHAINS; ++j) acc[j] = STEP(acc[j], a, b); \
    }                                                                                     \
    V s = acc[0];                                                                         \
    for (int j = 1; j < CHAINS; ++j) s = ADD(s, acc[j]);                                  \
    float out[LANES];                                                                     \
    STOREU(out, s);                                                                       \
    return out[0];                                                                        \
  }

PEAK_LOOP(fma_loop_256, "avx2,fma", __m256, 12, 8, _mm256_set1_ps, _mm256_add_ps, _mm256_storeu_ps, __m256,
          _mm256_set1_ps(0.999999f), _mm256_set1_ps(1e-6f), _mm256_fmadd_ps)
constexpr double kFlopsPerIter256 = 12 * 8 * 2;

PEAK_LOOP(fma_loop_512, "avx512f", __m512, 16, 16, _mm512_set1_ps, _mm512_add_ps, _mm512_storeu_ps, __m512,
          _mm512_set1_ps(0.999999f), _mm512_set1_ps(1e-6f), _mm512_fmadd_ps)
constexpr double kFlopsPerIter512 = 16 * 16 * 2;

PEAK_LOOP(dpbf16_loop, "avx512f,avx512bf16", __m512, 24, 16, _mm512_set1_ps, _mm512_add_ps, _mm512_storeu_ps, __m512bh,
          _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.001f), _mm512_set1_ps(0.002f)),
          _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.003f), _mm512_set1_ps(0.004f)), _mm512_dpbf16_ps)
constexpr double kFlopsPerIterBf16 = 24 * 16 * 2 * 2;  // 16 lanes, each a pair of products

#undef PEAK_LOOP

volatile float sink;

// GFLOP/s of `loop` on `threads` threads at once, the median of `runs`.
bench::Stats peak(float (*loop)(int64_t), int64_t iters, int threads, int runs) {
  return bench::measure(
      [&] {
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; ++t) pool.emplace_back([&] { sink = loop(iters); });
        for (std::thread& t : pool) t.join();
      },
      runs);
}

// ---- oneDNN's matmul primitive, C = A B, row-major, created for the current thread count ----
#if TESSERA_BENCH_DNNL
class DnnlMatmul {
 public:
  DnnlMatmul(int64_t m, int64_t k, int64_t n, dnnl::memory::data_type in, dnnl::memory::data_type out, const void* a,
             const void* b, void* c)
      : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    using tag = dnnl::memory::format_tag;
    dnnl::memory::desc ad({m, k}, in, tag::ab), bd({k, n}, in, tag::ab), cd({m, n}, out, tag::ab);
#if DNNL_VERSION_MAJOR >= 3
    dnnl::matmul::primitive_desc pd(engine_, ad, bd, cd);
#else
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), engine_);
#endif
    impl_ = pd.impl_info_str();
    prim_ = dnnl::matmul(pd);
    a_ = dnnl::memory(ad, engine_, const_cast<void*>(a));
    b_ = dnnl::memory(bd, engine_, const_cast<void*>(b));
    c_ = dnnl::memory(cd, engine_, c);
  }
  void operator()() {
    prim_.execute(stream_, {{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, b_}, {DNNL_ARG_DST, c_}});
    stream_.wait();
  }
  const std::string& impl() const { return impl_; }

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  dnnl::matmul prim_;
  dnnl::memory a_, b_, c_;
  std::string impl_;
};
#endif

struct Shape {
  const char* name;
  int64_t m, k, n;
  seed::Blocks blocks;
};

}  // namespace

int main(int argc, char** argv) {
  bench::use_openblas_best_core(argv);
  const int runs = std::atoi(bench::arg(argc, argv, "--runs", "5").c_str());
  const bool large = bench::has_flag(argc, argv, "--large");
  const std::string only_dtype = bench::arg(argc, argv, "--dtype", "");
  if (!only_dtype.empty() && only_dtype != "f32" && only_dtype != "bf16" && only_dtype != "int8") {
    std::fprintf(stderr, "--dtype %s: expected f32, bf16 or int8\n", only_dtype.c_str());
    return 2;
  }
  auto wanted = [&](const char* dtype) { return only_dtype.empty() || only_dtype == dtype; };
  const bool int8 = !bench::has_flag(argc, argv, "--no-int8") && wanted("int8");

  const pl::jit::HostCpu& host = pl::jit::host_cpu();
  const pl::jit::CpuTarget& native = pl::jit::cpu_target("native");
  std::vector<std::string> shown;
  for (const char* f : {"fma", "avx2", "avx512f", "avx512bf16", "avx512vnni", "avxvnni", "amx-tile", "amx-bf16", "amx-int8"})
    shown.push_back(fmt::format("{}{}", host.has(f) ? "+" : "-", f));
  std::printf("CPU: %s (LLVM: %s), %u hardware threads\n", bench::cpu_model().c_str(), host.cpu.c_str(),
              std::thread::hardware_concurrency());
  std::printf("features: %s%s\n", fmt::format("{}", fmt::join(shown, " ")).c_str(),
              host.has("amx-tile") && !host.amx_permission ? " (AMX refused by the OS)" : "");
  std::printf("tessera target: %s\n", native.str().c_str());
  std::printf("OpenBLAS core: %s\n", openblas_get_corename());
#if TESSERA_BENCH_DNNL
  std::printf("oneDNN: %d.%d.%d\n", dnnl_version()->major, dnnl_version()->minor, dnnl_version()->patch);
#else
  std::printf("oneDNN: not built in (install libdnnl-dev and reconfigure): its columns are skipped\n");
#endif

  // ---- peak ----
  bench::Report peaks("this CPU's peak: register-only loops");
  std::map<int, double> peak_f32, peak_bf16;  // GFLOP/s by thread count
  for (int threads : {1, 2}) {
    if (!only_dtype.empty()) break;
    const std::string t = fmt::format("{} thread{}", threads, threads > 1 ? "s" : "");
    if (host.has("avx512f")) {
      const int64_t iters = 10'000'000;
      peak_f32[threads] = peaks.add_rate("f32 FMA zmm, " + t, peak(fma_loop_512, iters, threads, runs),
                                         threads * iters * kFlopsPerIter512, 1e-9, "GFLOP/s").value;
    } else if (host.has("avx2") && host.has("fma")) {
      const int64_t iters = 20'000'000;
      peak_f32[threads] = peaks.add_rate("f32 FMA ymm, " + t, peak(fma_loop_256, iters, threads, runs),
                                         threads * iters * kFlopsPerIter256, 1e-9, "GFLOP/s").value;
    }
    if (host.has("avx512bf16")) {
      const int64_t iters = 5'000'000;
      peak_bf16[threads] = peaks.add_rate("bf16 VDPBF16PS zmm, " + t, peak(dpbf16_loop, iters, threads, runs),
                                          threads * iters * kFlopsPerIterBf16, 1e-9, "GFLOP/s").value;
    }
  }
  if (!only_dtype.empty()) peaks.note("skipped (--dtype)");
  else if (peak_bf16.empty()) peaks.note("no AVX512_BF16 on this CPU: no bf16 peak");
  peaks.print();

  // ---- the matmuls ----
  std::vector<Shape> shapes = {{"2048x2048x1024", 2048, 2048, 1024, {128, 128, 128}},
                               {"512x512x512", 512, 512, 512, {128, 128, 128}},
                               {"decode 16x4096x4096", 16, 4096, 4096, {16, 128, 128}}};
  if (large) shapes.push_back({"4096x4096x4096", 4096, 4096, 4096, {128, 128, 128}});
  if (const std::string only = bench::arg(argc, argv, "--shape", ""); !only.empty())
    std::erase_if(shapes, [&](const Shape& s) { return std::string_view(s.name).find(only) == std::string_view::npos; });
  std::vector<bench::Report> reports;
  reports.reserve(shapes.size());
  for (const Shape& s : shapes) {
    const double flops = 2.0 * s.m * s.k * s.n;
    bench::Report& r = reports.emplace_back(fmt::format("gemm {} (m x k x n), blocks {}x{}x{}, random data", s.name,
                                                        s.blocks.bm, s.blocks.bk, s.blocks.bn));
    pl::Array x32 = pl::Array::random_normal({s.m, s.k}, pl::f32, 0), y32 = pl::Array::random_normal({s.k, s.n}, pl::f32, 1);
    pl::Array x16 = x32.astype(pl::bf16), y16 = y32.astype(pl::bf16);
    pl::Array x8 = pl::Array::random_uniform({s.m, s.k}, pl::i8, 2, -100, 100);
    pl::Array y8 = pl::Array::random_uniform({s.k, s.n}, pl::i8, 3, -100, 100);
    std::vector<float> c(static_cast<size_t>(s.m * s.n));
    std::vector<int32_t> c32(static_cast<size_t>(s.m * s.n));
    // Without an int8 tile for this CPU (no AVX2) the int8 dot is the scalar-order loop nest: slow
    // at the big shapes.
    const bool run_int8 =
        int8 && (pl::jit::gemm_int8_tiles(native, pl::i8, pl::i8) || s.m * s.k * s.n <= 2048LL * 2048 * 1024);
    for (int threads : {1, 2}) {
      const std::string t = fmt::format("{} thread{}", threads, threads > 1 ? "s" : "");
      auto rate = [&](const std::string& name, const std::function<void()>& f, const std::string& baseline = {},
                      const char* unit = "GFLOP/s") {
        bench::settle();
        return r.add_rate(name + ", " + t, bench::measure(f, runs), flops, 1e-9, unit,
                          baseline.empty() ? "" : baseline + ", " + t)
            .value;
      };
      // A tessera row against its baseline: called in turn with the baseline's call, a pause before
      // each (the libraries' workers spin after a call), its ratio the median of the pairs' ratios.
      auto paired_rate = [&](const std::string& name, const std::function<void()>& f, const std::string& baseline,
                             const std::function<void()>& baseline_call, const char* unit = "GFLOP/s") {
        if (!baseline_call) return rate(name, f, {}, unit);
        const bench::Paired pr = bench::paired(f, baseline_call, runs, bench::settle);
        bench::Row& row = r.add_rate(name + ", " + t, pr.a, flops, 1e-9, unit, baseline + ", " + t);
        row.ratio = pr.ratio;
        return row.value;
      };
      auto versus_peak = [&](const std::string& name, double value, const std::map<int, double>& p, const char* what) {
        if (auto it = p.find(threads); it != p.end())
          r.note(fmt::format("{}, {}: {:.0f}% of the {} peak", name, t, 100 * value / it->second, what));
      };
      openblas_set_num_threads(threads);
      pl::set_num_threads(threads);
      // f32
      const std::function<void()> blas_f32 = [&] {
        bench::sgemm(x32.data_as<float>(), y32.data_as<float>(), c.data(), s.m, s.k, s.n);
      };
      if (wanted("f32") || wanted("bf16"))
        versus_peak("OpenBLAS sgemm f32", rate("OpenBLAS sgemm f32", blas_f32), peak_f32, "f32");
      std::string bf16_base = "OpenBLAS sgemm f32", int8_base;
      std::function<void()> bf16_base_call = blas_f32, int8_base_call;
#if TESSERA_BENCH_DNNL
      omp_set_num_threads(threads);
      using dt = dnnl::memory::data_type;
      // A matmul oneDNN has no implementation of on this CPU (bf16 or s8 on an AVX2-only one) is a
      // column skipped, its tessera row then compared with OpenBLAS (bf16) or nothing (int8).
      std::vector<std::string> impls;
      auto dnnl_matmul = [&](const char* what, dt in, dt out, const void* a, const void* b, void* cc) {
        std::optional<DnnlMatmul> mm;
        try {
          mm.emplace(s.m, s.k, s.n, in, out, a, b, cc);
          impls.push_back(fmt::format("{} {}", what, mm->impl()));
        } catch (const dnnl::error& e) {
          impls.push_back(fmt::format("{} none ({}): its column skipped", what, e.what()));
        }
        return mm;
      };
      if (auto f32 = dnnl_matmul("f32", dt::f32, dt::f32, x32.data(), y32.data(), c.data()); f32 && wanted("f32"))
        versus_peak("oneDNN matmul f32", rate("oneDNN matmul f32", *f32), peak_f32, "f32");
      if (auto bf16 = dnnl_matmul("bf16", dt::bf16, dt::f32, x16.data(), y16.data(), c.data())) {
        if (wanted("bf16"))
          versus_peak("oneDNN matmul bf16 in, f32 out", rate("oneDNN matmul bf16 in, f32 out", *bf16), peak_bf16,
                      "bf16");
        bf16_base = "oneDNN matmul bf16 in, f32 out";
        bf16_base_call = *bf16;
      }
      if (run_int8)
        if (auto s8 = dnnl_matmul("s8", dt::s8, dt::s32, x8.data(), y8.data(), c32.data())) {
          rate("oneDNN matmul s8 in, s32 out", *s8, {}, "GOP/s");
          int8_base = "oneDNN matmul s8 in, s32 out";
          int8_base_call = *s8;
        }
      if (threads == 1) r.note(fmt::format("oneDNN implementations: {}", fmt::join(impls, ", ")));
#endif
      if (wanted("f32")) {
        auto f32_call = seed::make_matmul(s.m, s.k, s.n, pl::f32, {}, s.blocks);
        const double f32 = paired_rate("tessera f32", [&] { f32_call(x32, y32); }, "OpenBLAS sgemm f32", blas_f32);
        versus_peak("tessera f32", f32, peak_f32, "f32");
      }
      if (wanted("bf16")) {
        auto bf16_call = seed::make_matmul(s.m, s.k, s.n, pl::f32, {}, s.blocks);
        const double bf16 =
            paired_rate("tessera bf16 in, f32 acc, f32 out", [&] { bf16_call(x16, y16); }, bf16_base, bf16_base_call);
        // Against the peak of the instruction its dots run on: the FMA's where the target widens
        // bf16 to f32 (no vdpbf16ps tile: CpuTarget::bf16_on_fma, or no AVX512_BF16).
        const bool on_fma = !pl::jit::gemm_bf16_pairs(pl::jit::select_target(""), pl::bf16, pl::bf16);
        versus_peak("tessera bf16 in, f32 acc, f32 out", bf16, on_fma ? peak_f32 : peak_bf16, on_fma ? "f32" : "bf16");
      }
      if (run_int8) {
        seed::Blocks b8 = s.blocks;
        b8.acc = pl::i32;
        auto i8_call = seed::make_matmul(s.m, s.k, s.n, pl::i32, {}, b8);
        paired_rate("tessera int8 in, i32 acc, i32 out", [&] { i8_call(x8, y8); }, int8_base, int8_base_call, "GOP/s");
      }
    }
    // Scaling from 1 to 2 threads, in pairs of neighbouring calls (see the top of the file).
    auto scaling = [&](const std::string& name, const std::function<void()>& call) {
      bench::settle();
      const bench::Paired pr = bench::paired(
          [&] {
            pl::set_num_threads(2);
            call();
          },
          [&] {
            pl::set_num_threads(1);
            call();
          },
          runs);
      r.note(fmt::format("{}: {:.2f}x from 1 to 2 threads (median of {} paired calls)", name, pr.ratio, runs));
    };
    if (wanted("f32")) {
      auto f32_call = seed::make_matmul(s.m, s.k, s.n, pl::f32, {}, s.blocks);
      scaling("tessera f32", [&] { f32_call(x32, y32); });
    }
    if (wanted("bf16")) {
      auto bf16_call = seed::make_matmul(s.m, s.k, s.n, pl::f32, {}, s.blocks);
      scaling("tessera bf16 in, f32 acc, f32 out", [&] { bf16_call(x16, y16); });
    }
    if (run_int8) {
      seed::Blocks b8 = s.blocks;
      b8.acc = pl::i32;
      auto i8_call = seed::make_matmul(s.m, s.k, s.n, pl::i32, {}, b8);
      scaling("tessera int8 in, i32 acc, i32 out", [&] { i8_call(x8, y8); });
    }
    if (!run_int8 && wanted("int8"))
      r.note(int8 ? "int8: skipped at this size (no int8 tile for this CPU: tessera's int8 dot is a loop nest)"
                  : "int8: skipped (--no-int8)");
    r.note("the machine was shared with other builds while measuring: compare medians");
    pl::set_num_threads(0);
    r.print();
  }
  std::vector<const bench::Report*> all = {&peaks};
  for (const bench::Report& r : reports) all.push_back(&r);
  bench::write_json(argc, argv, all);
  return 0;
}
