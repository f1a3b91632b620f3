// Example 4: a block-sparse matmul driven by scalar prefetch.
//
// A (m, k) is stored dense but only some of its (bm, bk) blocks are non-zero. On the host we list,
// for every row of blocks, the column indices of its non-zero blocks. Those tables are passed first
// (num_scalar_prefetch = 2), live in SMEM, and steer the index maps: grid step (i, j, p) multiplies
// A's block (i, cols[i, p]) with B's block (cols[i, p], j). Rows with fewer non-zero blocks repeat
// their last column index, so the pipeline fetches nothing new, and the kernel skips those steps.
#include <tessera/tessera.hpp>

#include <cstdio>

#include "examples/example_util.h"

namespace pl = tessera;

void bsmm_kernel(pl::Ref counts, pl::Ref cols, pl::Ref a, pl::Ref b, pl::Ref o, pl::Ref acc) {
  (void)cols;
  const pl::Value i = pl::program_id(0), p = pl::program_id(2);
  pl::when(p == 0, [&] { acc() = pl::zeros_like(acc); });
  pl::when(p < counts[i], [&] { acc() += pl::dot(a(), b(), pl::f32); });
  pl::when(p == pl::num_programs(2) - 1, [&] { o() = acc().astype(o.dtype()); });
}

int main() {
  const int64_t bm = 32, bk = 32, bn = 64;
  const int64_t mb = 4, kb = 6, nb = 2;  // blocks per dim
  const int64_t m = mb * bm, k = kb * bk, n = nb * bn;

  // Which blocks of A are non-zero: a fixed pattern with an empty row and a full row.
  const bool pattern[4][6] = {{1, 0, 0, 1, 0, 0}, {0, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 1, 1}, {0, 0, 1, 0, 0, 0}};
  pl::Array a = pl::Array::random_normal({m, k}, pl::f32, 5);
  std::vector<float> av = a.to_vector<float>();
  std::vector<int32_t> counts(mb, 0), cols(mb * kb, 0);
  for (int64_t i = 0; i < mb; ++i) {
    for (int64_t c = 0; c < kb; ++c) {
      if (pattern[i][c]) {
        cols[i * kb + counts[i]++] = static_cast<int32_t>(c);
      } else {
        for (int64_t r = 0; r < bm; ++r)
          for (int64_t q = 0; q < bk; ++q) av[(i * bm + r) * k + c * bk + q] = 0;
      }
    }
    for (int64_t p = counts[i]; p < kb; ++p) cols[i * kb + p] = counts[i] ? cols[i * kb + counts[i] - 1] : 0;
  }
  a = pl::Array::from_vector(av, {m, k});
  pl::Array b = pl::Array::random_normal({k, n}, pl::f32, 6);
  pl::Array counts_arr = pl::Array::from_vector(counts, {mb});
  pl::Array cols_arr = pl::Array::from_vector(cols, {mb, kb});
  pl::Array reference = examples::host_matmul(a, b, pl::f32);
  std::printf("non-zero blocks per row: %s\n", counts_arr.to_string().c_str());

  return examples::run_in_every_backend("block_sparse_matmul", [&](const pl::CallOptions& options) {
    pl::CallOptions opts = options;
    opts.compiler_params.dimension_semantics = {pl::parallel, pl::parallel, pl::arbitrary};
    auto bsmm = pl::pallas_call(
        bsmm_kernel,
        pl::PrefetchScalarGridSpec{
            .num_scalar_prefetch = 2,
            .grid = {mb, nb, kb},
            .in_specs = {pl::BlockSpec({bm, bk},
                                       [](pl::Value i, pl::Value, pl::Value p, pl::Ref, pl::Ref cols) {
                                         return pl::idx(i, cols(i, p));
                                       }),
                         pl::BlockSpec({bk, bn},
                                       [](pl::Value i, pl::Value j, pl::Value p, pl::Ref, pl::Ref cols) {
                                         return pl::idx(cols(i, p), j);
                                       })},
            .out_specs = {pl::BlockSpec({bm, bn}, [](pl::Value i, pl::Value j, pl::Value, pl::Ref, pl::Ref) {
              return pl::idx(i, j);
            })},
            .scratch_shapes = {pl::VMEM({bm, bn}, pl::f32)}},
        pl::ShapeDtype({m, n}, pl::f32), opts);
    pl::Array out = bsmm(counts_arr, cols_arr, a, b);
    std::printf("  out = %s\n", out.to_string(2).c_str());
    return examples::Outcome{examples::check("out == a @ b", out, reference, 1e-4, 1e-4), out};
  },
  // The compiled GEMM uses FMA; the interpreter multiplies and adds: a dot tolerance.
  /*rtol=*/1e-4, /*atol=*/1e-4);
}
