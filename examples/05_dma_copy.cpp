// Example 5: copying from HBM into VMEM with an async copy and a DMA semaphore.
//
// An operand with pl::BlockSpec(pl::ANY) is not blocked by the pipeline: the kernel gets the whole
// array, which lives in HBM and is reachable only by copies. Here every program copies its rows of
// x into a VMEM scratch buffer, waits for the copy (the DMA semaphore counts the bytes that
// arrived), and then computes on VMEM like any block. Loading x directly would be a trace-time
// error that says to use a copy.
#include <tessera/tessera.hpp>

#include <cstdio>

#include "examples/example_util.h"

namespace pl = tessera;

constexpr int64_t kRows = 16;  // rows per program

// x_hbm: the whole (m, n) array in HBM. o: this program's (kRows, n) output block in VMEM.
void scale_rows_kernel(pl::Ref x_hbm, pl::Ref o, pl::Ref rows, pl::Ref sem) {
  pl::Value first = pl::program_id(0) * kRows;
  auto copy = pl::make_async_copy(x_hbm.at(pl::ds(first, kRows), pl::all), rows, sem);
  copy.start();
  copy.wait();  // from here on `rows` holds the data
  o() = rows() * 3.0f + 1.0f;
}

int main() {
  const int64_t m = 128, n = 256;
  pl::Array x = pl::Array::random_normal({m, n}, pl::f32, /*seed=*/5);
  pl::Array reference = examples::host_map2(x, x, [](double a, double) { return a * 3.0 + 1.0; });

  return examples::run_in_every_backend("dma_copy", [&](const pl::CallOptions& options) {
    auto scale_rows = pl::pallas_call(
        scale_rows_kernel,
        pl::GridSpec{.grid = {m / kRows},
                     .in_specs = {pl::BlockSpec(pl::ANY)},
                     .out_specs = {pl::BlockSpec({kRows, n}, [](pl::Value i) { return pl::idx(i, 0); })},
                     .scratch_shapes = {pl::VMEM({kRows, n}, pl::f32), pl::SemaphoreType::DMA}},
        pl::ShapeDtype({m, n}, pl::f32), options);
    pl::Array out = scale_rows(x);
    std::printf("  out[0, :4] = %.4f %.4f %.4f %.4f\n", out.at<float>({0, 0}), out.at<float>({0, 1}), out.at<float>({0, 2}),
                out.at<float>({0, 3}));
    return examples::Outcome{examples::check("out == 3 x + 1", out, reference, 1e-6, 1e-6), out};
  });
}
