// The OpenBLAS baseline of the benchmarks (a benchmark-only dependency: nothing in tessera links it).
#pragma once

#include <cblas.h>

#include <cstdint>

extern "C" void openblas_set_num_threads(int);

namespace bench {

// C = A B for row-major f32 matrices (m x k times k x n).
inline void sgemm(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f,
              a, static_cast<int>(k), b, static_cast<int>(n), 0.0f, c, static_cast<int>(n));
}

}  // namespace bench
