// The OpenBLAS baseline of the benchmarks (a benchmark-only dependency: nothing in tessera links it).
#pragma once

#include <cblas.h>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" void openblas_set_num_threads(int);
extern "C" char* openblas_get_corename(void);

namespace bench {

// The core whose kernels this CPU deserves from OpenBLAS, by its features: AVX-512 with BF16 runs
// Cooperlake's, AVX-512 SkylakeX's, AVX2 Haswell's (or Zen's on AMD).
inline const char* openblas_core_for_this_cpu() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bf16")) return "Cooperlake";
  if (__builtin_cpu_supports("avx512f")) return "SkylakeX";
  if (__builtin_cpu_supports("avx2")) return __builtin_cpu_is("amd") ? "Zen" : "Haswell";
  return nullptr;
}

// Call first in main(): makes the OpenBLAS baseline its best kernel for this CPU. OpenBLAS picks its
// kernels when it loads, from OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE or else its own CPU detection.
// Some environments set those to a slower core than the CPU's: the benchmark runs itself again
// without them (nothing else in the process reads them). And OpenBLAS 0.3.21 does not recognise
// every CPU: on a newer Xeon it falls back to Prescott (SSE3), 6-7x slower than its AVX-512 kernel
// on the same machine; the benchmark then runs itself again with OPENBLAS_CORETYPE naming the core
// this CPU's features deserve. Either way it prints what it did; the caller prints the core used.
inline void use_openblas_best_core(char** argv) {
  static constexpr const char* chosen_marker = "BENCH_OPENBLAS_CORE_CHOSEN";
  if (std::getenv(chosen_marker)) return;  // this process is the run again: keep what was chosen
  bool set_outside = false;
  for (const char* v : {"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"})
    if (const char* value = std::getenv(v)) {
      std::printf("%s=%s was set: running again without it\n", v, value);
      set_outside = true;
    }
  const char* best = openblas_core_for_this_cpu();
  const bool fell_back = !set_outside && best && std::strcmp(openblas_get_corename(), "Prescott") == 0;
  if (!set_outside && !fell_back) return;
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv("OPENBLAS_L2_SIZE");
  if (fell_back) {
    std::printf("OpenBLAS did not recognise this CPU (it chose Prescott): running again with OPENBLAS_CORETYPE=%s\n",
                best);
    setenv("OPENBLAS_CORETYPE", best, 1);
  }
  setenv(chosen_marker, "1", 1);
  std::fflush(stdout);
  execv("/proc/self/exe", argv);
  std::perror("execv /proc/self/exe");
  std::exit(1);
}

// C = A B for row-major f32 matrices (m x k times k x n).
inline void sgemm(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f,
              a, static_cast<int>(k), b, static_cast<int>(n), 0.0f, c, static_cast<int>(n));
}

}  // namespace bench
