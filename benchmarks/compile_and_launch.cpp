// Compile and launch costs: the cold compile of the seed matmul kernel (tracing and lowering, then
// LLVM), the first launch in a second process whose disk cache already holds the kernel (against a
// second process that must compile), and the per-call overhead of launching a tiny kernel (grid
// (1,), 8 x 128 f32) against calling a plain C++ function that does the same work, and of an
// mpmd_map of one and of two participants; and what race detection costs the interpreter on the
// seed matmul (512^3 f32, 128-blocks), as the ratio of its time with detection to without.
//
//   compile_and_launch [--json results.json] [--runs N] [--races-only]
#include <tessera/tessera.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "benchmarks/bench_util.h"
#include "examples/seed_matmul.h"
#include "jit/llvm/compiler.h"

namespace pl = tessera;

namespace {

pl::PallasCall<pl::Array> make_matmul(int64_t m, int64_t k, int64_t n) { return seed::make_matmul(m, k, n, pl::bf16); }

// The child process: the first launch of the matmul, timed from the start of main, then a second
// launch; their difference is what the first launch costs beyond running the kernel.
int child(double start) {
  pl::Array x = pl::Array::zeros({2048, 2048}, pl::bf16), y = pl::Array::zeros({2048, 1024}, pl::bf16);
  auto call = make_matmul(2048, 2048, 1024);
  call(x, y);
  const double first = bench::now() - start;
  const double t0 = bench::now();
  call(x, y);
  std::printf("%.6f %.6f\n", first, bench::now() - t0);
  return 0;
}

// Runs this program as a child with `env` set; returns (first launch, its cost beyond a second
// launch) and its stderr.
std::pair<std::pair<double, double>, std::string> spawn(const std::string& env) {
  const std::string out = "/tmp/tessera_bench_child.out", err = "/tmp/tessera_bench_child.err";
  const std::string cmd = env + " TESSERA_LOG=cache /proc/" + std::to_string(getpid()) + "/exe --child > " + out + " 2> " + err;
  double first = -1, second = 0;
  if (std::system(cmd.c_str()) == 0)
    if (FILE* f = std::fopen(out.c_str(), "r")) {
      if (std::fscanf(f, "%lf %lf", &first, &second) != 2) first = -1;
      std::fclose(f);
    }
  std::string log;
  if (FILE* f = std::fopen(err.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) log.append(buf, n);
    std::fclose(f);
  }
  return {{first, first - second}, log};
}

void add_kernel(pl::Ref x, pl::Ref y, pl::Ref o) { o() = x() + y(); }

// The same work as the tiny kernel, as plain C++.
__attribute__((noinline)) void host_add(const float* x, const float* y, float* o, int n) {
  for (int i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

// The interpreter with and without InterpretParams::detect_races on the seed matmul, 512^3 f32.
bench::Report race_detection(int runs) {
  bench::Report r("interpreter: race detection on the seed matmul 512x512x512 f32, 128-blocks, 1 core");
  const pl::Array x = pl::Array::random_normal({512, 512}, pl::f32, 1), y = pl::Array::random_normal({512, 512}, pl::f32, 2);
  auto interpreted = [](bool detect) {
    pl::CallOptions o;
    o.interpret = pl::InterpretParams{.detect_races = detect};
    return seed::make_matmul(512, 512, 512, pl::f32, o);
  };
  auto plain = interpreted(false), detecting = interpreted(true);
  const bench::Stats without = bench::measure([&] { plain(x, y); }, runs);
  const bench::Stats with = bench::measure([&] { detecting(x, y); }, runs);
  r.add_time("interpreted", without, "ms");
  r.add_time("interpreted, detect_races", with, "ms", "interpreted");
  r.note(fmt::format("race detection costs {:.2f}x the interpreter's time (medians; the target is at most 3x)",
                     with.median() / without.median()));
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const double start = bench::now();
  if (bench::has_flag(argc, argv, "--child")) return child(start);
  const int runs = std::atoi(bench::arg(argc, argv, "--runs", "7").c_str());
  if (bench::has_flag(argc, argv, "--races-only")) {
    bench::Report races = race_detection(runs);
    races.print();
    bench::write_json(argc, argv, {&races});
    return 0;
  }

  // Cold compile: no disk cache, and each kernel handle dropped before the next compile, so the
  // memory cache misses too. Tracing and lowering are timed on an interpreted call (which stops
  // there), LLVM on compiling its lowered IR.
  bench::Report compile("compile: the seed matmul kernel (2048x2048x1024, 128-blocks)");
  setenv("TESSERA_CACHE", "0", 1);
  {
    pl::Array x = pl::Array::zeros({2048, 2048}, pl::bf16), y = pl::Array::zeros({2048, 1024}, pl::bf16);
    bench::Stats trace, llvm_total;
    for (int r = 0; r < runs + 1; ++r) {
      setenv("TESSERA_INTERPRET", "1", 1);
      auto call = make_matmul(2048, 2048, 1024);
      unsetenv("TESSERA_INTERPRET");
      double t0 = bench::now();
      const pl::ir::Function& lowered = call.lowered({x, y});
      double t1 = bench::now();
      auto kernel = pl::jit::compile(lowered);
      double t2 = bench::now();
      if (r == 0) continue;  // the first compile in a process also sets LLVM up
      trace.seconds.push_back(t1 - t0);
      llvm_total.seconds.push_back(t2 - t1);
    }
    bench::Stats total;
    for (size_t i = 0; i < trace.seconds.size(); ++i) total.seconds.push_back(trace.seconds[i] + llvm_total.seconds[i]);
    compile.add_time("trace and lower (tessera passes)", trace, "ms");
    compile.add_time("LLVM: IR, O2, object, load", llvm_total, "ms");
    compile.add_time("cold compile, total", total, "ms");
  }
  unsetenv("TESSERA_CACHE");

  // First launch in a second process: with the kernel on disk, against an empty cache.
  bench::Report second("first launch of the matmul in a new process");
  {
    const std::string dir = "/tmp/tessera_bench_cache";
    std::filesystem::remove_all(dir);
    bench::Stats cold, warm, cold_extra, warm_extra;
    bool disk_hit = true;
    for (int r = 0; r < runs; ++r) {
      std::filesystem::remove_all(dir);
      auto [c, c_log] = spawn("TESSERA_CACHE_DIR=" + dir);   // compiles and stores
      auto [w, w_log] = spawn("TESSERA_CACHE_DIR=" + dir);   // loads from disk
      if (c.first > 0) {
        cold.seconds.push_back(c.first);
        cold_extra.seconds.push_back(c.second);
      }
      if (w.first > 0) {
        warm.seconds.push_back(w.first);
        warm_extra.seconds.push_back(w.second);
      }
      disk_hit = disk_hit && w_log.find("hit (disk)") != std::string::npos;
    }
    second.add_time("empty cache: first launch from main()", cold, "ms");
    second.add_time("kernel on disk: first launch from main()", warm, "ms", "empty cache: first launch from main()");
    second.add_time("empty cache: first launch minus a second launch", cold_extra, "ms");
    second.add_time("kernel on disk: first launch minus a second launch", warm_extra, "ms",
                    "empty cache: first launch minus a second launch");
    second.note(disk_hit ? "every second process found the kernel on disk (TESSERA_LOG=cache: hit (disk))"
                         : "WARNING: a second process did not hit the disk cache");
  }

  // Per-call launch overhead.
  bench::Report launch("launch: tiny kernel, grid (1,), 8x128 f32 add");
  {
    pl::Array x = pl::Array::random_normal({8, 128}, pl::f32, 1), y = pl::Array::random_normal({8, 128}, pl::f32, 2);
    auto call = pl::pallas_call(add_kernel, pl::GridSpec{.grid = {1}}, pl::ShapeDtype({8, 128}, pl::f32));
    call(x, y);
    std::vector<float> o(1024);
    launch.add_time("plain C++ function (the same add)",
                    bench::measure([&] { host_add(x.data_as<float>(), y.data_as<float>(), o.data(), 1024); }, runs, 1, 100000),
                    "us");
    launch.add_time("tessera call (compiled)", bench::measure([&] { call(x, y); }, runs, 1, 20000), "us",
                    "plain C++ function (the same add)");
    pl::CallOptions io;
    io.interpret = pl::InterpretParams{};
    auto interpreted = pl::pallas_call(add_kernel, pl::GridSpec{.grid = {1}}, pl::ShapeDtype({8, 128}, pl::f32), io);
    interpreted(x, y);
    launch.add_time("tessera call (interpreted)", bench::measure([&] { interpreted(x, y); }, runs, 1, 2000), "us",
                    "plain C++ function (the same add)");
    // mpmd_map: every participant runs on a thread of its own, started by the call; its operands
    // are whole arrays in ANY, so the add goes through VMEM copies.
    auto add_any = [](pl::Ref a, pl::Ref b, pl::Ref out, pl::Ref av, pl::Ref bv, pl::Ref) {
      pl::sync_copy(a, av);
      pl::sync_copy(b, bv);
      av() = av() + bv();
      pl::sync_copy(av, out);
    };
    const std::vector<pl::ScratchShape> scratch{pl::VMEM({8, 128}, pl::f32), pl::VMEM({8, 128}, pl::f32),
                                                pl::SemaphoreType::REGULAR};
    auto one_core = pl::mpmd_map({{pl::CoreMesh("core", 1), add_any}}, pl::ShapeDtype({8, 128}, pl::f32), scratch);
    one_core(x, y);
    launch.add_time("mpmd_map, one core (compiled)", bench::measure([&] { one_core(x, y); }, runs, 1, 2000), "us",
                    "tessera call (compiled)");
    auto then_signal = [&](pl::Ref a, pl::Ref b, pl::Ref out, pl::Ref av, pl::Ref bv, pl::Ref done) {
      add_any(a, b, out, av, bv, done);
      pl::semaphore_signal(done);
    };
    auto wait_for_it = [](pl::Ref, pl::Ref, pl::Ref, pl::Ref, pl::Ref, pl::Ref done) { pl::semaphore_wait(done); };
    auto two_cores = pl::mpmd_map({{pl::CoreMesh("a", 1), then_signal}, {pl::CoreMesh("b", 1), wait_for_it}},
                                  pl::ShapeDtype({8, 128}, pl::f32), scratch);
    two_cores(x, y);
    launch.add_time("mpmd_map, two cores, one waits for the other's signal (compiled)",
                    bench::measure([&] { two_cores(x, y); }, runs, 1, 2000), "us", "tessera call (compiled)");
  }
  bench::Report races = race_detection(runs);
  compile.print();
  second.print();
  launch.print();
  races.print();
  bench::write_json(argc, argv, {&compile, &second, &launch, &races});
  return 0;
}
