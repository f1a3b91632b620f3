// Example 6: a manual double-buffered copy loop, and the three ways it can go wrong.
//
// One program sums the rows of a tall HBM array, chunk by chunk. Two VMEM slots and two DMA
// semaphores let chunk c + 1 travel while chunk c is added: start the next copy, wait for the
// current one, use it. This is what emit_pipeline (example 7) does for you.
//
// Then three broken variants and what tessera says about them:
//   - the wait comes after the read: eager copies hide it, the interpreter's on_wait mode (copies
//     land only when waited on) shows the poisoned data;
//   - a copy is never waited for: its semaphore still holds the bytes when the kernel ends;
//   - a copy waited for twice: a deadlock report instead of a hang.
#include <tessera/tessera.hpp>

#include <cmath>
#include <cstdio>

#include "examples/double_buffering.h"
#include "examples/example_util.h"

namespace pl = tessera;

constexpr int64_t kChunk = 8, kChunks = 32, kCols = 128;

// The loop itself lives in double_buffering.h, which the benchmarks and tests share.
void chunked_sum_kernel(pl::Ref x_hbm, pl::Ref o, pl::Ref slots, pl::Ref sems) {
  examples::double_buffered_sum(x_hbm, o, slots, sems);
}

// Broken: reads the slot before waiting for it.
void read_before_wait_kernel(pl::Ref x_hbm, pl::Ref o, pl::Ref slots, pl::Ref sems) {
  auto copy = pl::make_async_copy(x_hbm.at(pl::ds(0, kChunk), pl::all), slots.at(0), sems.at(0));
  copy.start();
  o() = slots(0);
  copy.wait();
}

// Broken: starts a copy and never waits for it.
void never_waited_kernel(pl::Ref x_hbm, pl::Ref o, pl::Ref slots, pl::Ref sems) {
  pl::make_async_copy(x_hbm.at(pl::ds(0, kChunk), pl::all), slots.at(0), sems.at(0)).start();
  o() = pl::zeros_like(o);
}

// Broken: waits twice for one copy; the second wait can never be satisfied.
void waited_twice_kernel(pl::Ref x_hbm, pl::Ref o, pl::Ref slots, pl::Ref sems) {
  auto copy = pl::make_async_copy(x_hbm.at(pl::ds(0, kChunk), pl::all), slots.at(0), sems.at(0));
  copy.start();
  copy.wait();
  copy.wait();
  o() = pl::zeros_like(o);
}

int main() {
  pl::Array x = pl::Array::random_normal({kChunk * kChunks, kCols}, pl::f32, /*seed=*/6);
  std::vector<double> v = x.to_vector<double>(), sums(static_cast<size_t>(kChunk * kCols), 0.0);
  for (int64_t r = 0; r < kChunk * kChunks; ++r)
    for (int64_t j = 0; j < kCols; ++j) sums[(r % kChunk) * kCols + j] += v[r * kCols + j];
  pl::Array reference = pl::Array::from_vector(sums, {kChunk, kCols}, pl::f32);

  auto make = [&](void (*kernel)(pl::Ref, pl::Ref, pl::Ref, pl::Ref), const pl::CallOptions& options) {
    return pl::pallas_call(kernel,
                           pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                                        .scratch_shapes = {pl::VMEM({2, kChunk, kCols}, pl::f32), pl::SemaphoreType::DMA({2})}},
                           pl::ShapeDtype({kChunk, kCols}, pl::f32), options);
  };
  pl::CallOptions on_wait;
  on_wait.interpret = pl::InterpretParams{.dma_execution_mode = pl::DmaExecutionMode::on_wait, .random_seed = 1};

  int status = examples::run_in_every_backend("double_buffering", [&](const pl::CallOptions& options) {
    pl::Array out = make(chunked_sum_kernel, options)(x);
    bool ok = examples::check("chunk sums", out, reference, 1e-4, 1e-4);
    ok = examples::check("chunk sums, copies landing only when waited on (on_wait)", make(chunked_sum_kernel, on_wait)(x),
                         reference, 1e-4, 1e-4) && ok;

    pl::Array early = make(read_before_wait_kernel, on_wait)(x);
    const bool poisoned = std::isnan(early.to_vector<float>()[0]);
    std::printf("  read before wait, on_wait mode: %s\n", poisoned ? "the read saw poison (NaN), as expected" : "NOT caught");
    ok = ok && poisoned;
    struct Broken {
      const char* what;
      void (*kernel)(pl::Ref, pl::Ref, pl::Ref, pl::Ref);
    };
    for (const Broken& b : {Broken{"never waited", never_waited_kernel}, Broken{"waited twice", waited_twice_kernel}}) {
      const char* what = b.what;
      auto kernel = b.kernel;
      try {
        make(kernel, options)(x);
        std::printf("  %s: no error (unexpected)\n", what);
        ok = false;
      } catch (const pl::RuntimeError& e) {
        std::printf("  %s, as expected:\n    %s\n", what, e.what());
      }
    }
    return examples::Outcome{ok, out};
  }, 1e-5, 1e-5);
  return status;
}
