// The manual double-buffered copy loop, shared by the example that introduces it (example 6), the
// pipelines benchmark and the DMA tests: two VMEM slots and two DMA semaphores let chunk c + 1
// travel while chunk c is used. emit_pipeline (example 7) does the same for you.
#pragma once

#include <tessera/tessera.hpp>

namespace examples {

namespace pl = tessera;

// o = the sum of the row chunks of `x` (an HBM ref of shape (chunks * rows, cols)), chunk by chunk.
// `slots` is VMEM of shape (2, rows, cols), `sems` two DMA semaphores; o has shape (rows, cols).
inline void double_buffered_sum(pl::Ref x, pl::Ref o, pl::Ref slots, pl::Ref sems) {
  const int64_t rows = slots.shape()[1];
  const int64_t chunks = x.shape()[0] / rows;
  auto chunk = [&](auto c, auto slot) {
    return pl::make_async_copy(x.at(pl::ds(c * rows, rows), pl::all), slots.at(slot), sems.at(slot));
  };
  chunk(0, 0).start();
  o() = pl::zeros_like(o);
  pl::loop(0, chunks, [&](pl::Value c) {
    pl::Value slot = c % 2;
    pl::when(c + 1 < chunks, [&] { chunk(c + 1, 1 - slot).start(); });  // prefetch the next chunk
    chunk(c, slot).wait();                                              // then use the current one
    o() += slots(slot);
  });
}

}  // namespace examples
