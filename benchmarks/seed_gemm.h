// The seed's GEMM problem as the matmul and pipelines benchmarks measure it: 2048 x 2048 x 1024
// (m x k x n) with random f32 operands and their bf16 copies, and the OpenBLAS sgemm baseline on the
// f32 ones.
#pragma once

#include <tessera/tessera.hpp>

#include <cstdint>
#include <vector>

#include "benchmarks/openblas.h"

namespace bench {

struct SeedGemm {
  static constexpr int64_t m = 2048, k = 2048, n = 1024;
  static constexpr double flops = 2.0 * m * k * n;
  tessera::Array x32 = tessera::Array::random_normal({m, k}, tessera::f32, 0);
  tessera::Array y32 = tessera::Array::random_normal({k, n}, tessera::f32, 1);
  tessera::Array x16 = x32.astype(tessera::bf16), y16 = y32.astype(tessera::bf16);
  std::vector<float> c = std::vector<float>(static_cast<size_t>(m * n));

  // c = x32 y32 by OpenBLAS.
  void sgemm() { bench::sgemm(x32.data_as<float>(), y32.data_as<float>(), c.data(), m, k, n); }
};

}  // namespace bench
