// Seed 000's distributed matmul pieces, shared by example 8 and the distributed benchmark: out =
// inputs @ weights with inputs sharded P('x', 'y') and weights P('x', None) over a square mesh, by
// host collectives, by hand-written all-gather / all-reduce kernels of remote copies, and by a fused
// all-gather + GEMM kernel (emit_pipeline). Every function runs inside pl::shard_map on one device's
// shards. Example 8 explains them.
#pragma once

#include <tessera/tessera.hpp>

#include "examples/seed_matmul.h"

namespace seed {

namespace pl = tessera;

// ---- with host collectives -------------------------------------------------------------------------

inline pl::Array xla_matmul_1(const pl::Array& input_shard, const pl::Array& w_shard) {
  pl::Array input_full = pl::all_gather(input_shard, "y", 1, true);
  pl::Array w_full = pl::all_gather(w_shard, "x", 0, true);
  return pl::matmul(input_full, w_full);
}

inline pl::Array xla_matmul_2(const pl::Array& input_shard, const pl::Array& w_shard) {
  const int64_t k_local = input_shard.shape()[1], n = w_shard.shape()[1];
  pl::Array w_full = pl::all_gather(w_shard, "x", 0, true);
  pl::Array w_slice = pl::dynamic_slice(w_full, {pl::host_axis_index("y") * k_local, 0}, {k_local, n});
  return pl::psum(pl::matmul(input_shard, w_slice), "y");
}

// As 2, accumulating and reducing in f32.
inline pl::Array xla_matmul_3(const pl::Array& input_shard, const pl::Array& w_shard) {
  const int64_t k_local = input_shard.shape()[1], n = w_shard.shape()[1];
  pl::Array w_full = pl::all_gather(w_shard, "x", 0, true);
  pl::Array w_slice = pl::dynamic_slice(w_full, {pl::host_axis_index("y") * k_local, 0}, {k_local, n});
  return pl::psum(pl::matmul(input_shard, w_slice, pl::f32), "y");
}

// ---- the seed's tiled matmul (examples/seed_matmul.h) --------------------------------------------------

inline pl::Array make_matmul(const pl::Array& x, const pl::Array& y, const pl::CallOptions& options) {
  return make_matmul(x.shape()[0], x.shape()[1], y.shape()[1], x.dtype(), options)(x, y);
}

// ---- all-gather kernels over x -----------------------------------------------------------------------

// 1-D ring: at step s every device sends the block it got at step s - 1 to its right neighbour.
inline void all_gather_1d_kernel(pl::Ref input, pl::Ref output, pl::Ref local_sem, pl::Ref send_sem, pl::Ref recv_sem) {
  const int64_t ring = pl::axis_size("x"), h = input.shape()[0];
  pl::Value step = pl::program_id(0), me = pl::axis_index("x");
  pl::when(step == 0, [&] { pl::async_copy(input, output.at(pl::ds(me * h, h), pl::all), local_sem).wait(); });
  pl::Value slot = (me - step + ring) % ring;
  auto rows = output.at(pl::ds(slot * h, h), pl::all);
  auto right = pl::make_async_remote_copy(rows, rows, send_sem, recv_sem, pl::DeviceId({{"x", (me + 1) % ring}}));
  right.start();
  right.wait();
}

// Bidirectional ring: blocks travel both ways, so the gather takes half the steps.
inline void all_gather_bidi_kernel(pl::Ref input, pl::Ref output, pl::Ref local_sem, pl::Ref send_right, pl::Ref send_left,
                            pl::Ref recv_right, pl::Ref recv_left) {
  const int64_t ring = pl::axis_size("x"), h = input.shape()[0];
  const int64_t rightward = ring / 2, leftward = ring - 1 - rightward;  // blocks each direction brings
  pl::Value step = pl::program_id(0), me = pl::axis_index("x");
  pl::when(step == 0, [&] { pl::async_copy(input, output.at(pl::ds(me * h, h), pl::all), local_sem).wait(); });
  auto rows = [&](const pl::Value& slot) { return output.at(pl::ds(slot * h, h), pl::all); };
  auto right = pl::make_async_remote_copy(rows((me - step + ring) % ring), rows((me - step + ring) % ring), send_right,
                                          recv_right, pl::DeviceId({{"x", (me + 1) % ring}}));
  auto left = pl::make_async_remote_copy(rows((me + step) % ring), rows((me + step) % ring), send_left, recv_left,
                                         pl::DeviceId({{"x", (me + ring - 1) % ring}}));
  pl::when(step < rightward, [&] { right.start(); });
  pl::when(step < leftward, [&] { left.start(); });
  pl::when(step < rightward, [&] { right.wait(); });
  pl::when(step < leftward, [&] { left.wait(); });
}

inline pl::Array make_ag(const pl::Array& w, bool bidirectional, const pl::CallOptions& options) {
  const int64_t ring = pl::axis_size("x");
  const pl::ShapeDtype out({w.shape()[0] * ring, w.shape()[1]}, w.dtype());
  if (!bidirectional)
    return pl::pallas_call(all_gather_1d_kernel,
                           pl::GridSpec{.grid = {ring - 1},
                                        .in_specs = {pl::BlockSpec(pl::ANY)},
                                        .out_specs = {pl::BlockSpec(pl::ANY)},
                                        .scratch_shapes = {pl::SemaphoreType::DMA, pl::SemaphoreType::DMA,
                                                           pl::SemaphoreType::DMA}},
                           out, options)(w);
  return pl::pallas_call(all_gather_bidi_kernel,
                         pl::GridSpec{.grid = {std::max<int64_t>(1, ring / 2)},
                                      .in_specs = {pl::BlockSpec(pl::ANY)},
                                      .out_specs = {pl::BlockSpec(pl::ANY)},
                                      .scratch_shapes = {pl::SemaphoreType::DMA, pl::SemaphoreType::DMA, pl::SemaphoreType::DMA,
                                                         pl::SemaphoreType::DMA, pl::SemaphoreType::DMA}},
                         out, options)(w);
}

// ---- all-reduce kernel over y -----------------------------------------------------------------------

// Every device pushes its partial result into slot `me` of every device's `gathered` buffer (HBM),
// then adds the slots up in VMEM, in slot order (so every device gets the same bits).
inline void all_reduce_kernel(pl::Ref local, pl::Ref out, pl::Ref gathered, pl::Ref acc, pl::Ref part, pl::Ref copy_sem,
                       pl::Ref send_sem, pl::Ref recv_sem) {
  const int64_t ring = pl::axis_size("y");
  pl::Value me = pl::axis_index("y");
  pl::async_copy(local, gathered.at(me), copy_sem).wait();
  auto push = [&](const pl::Value& to) {
    return pl::make_async_remote_copy(local, gathered.at(me), send_sem, recv_sem, pl::DeviceId({{"y", to}}));
  };
  pl::loop(1, ring, [&](pl::Value j) { push((me + j) % ring).start(); });
  pl::loop(1, ring, [&](pl::Value) { push(me).wait(); });
  acc() = pl::zeros_like(acc);
  pl::loop(0, ring, [&](pl::Value slot) {
    pl::sync_copy(gathered.at(slot), part);
    acc() += part().astype(pl::f32);
  });
  part() = acc().astype(part.dtype());
  pl::sync_copy(part, out);
}

inline pl::Array make_ar(const pl::Array& partial, const pl::CallOptions& options) {
  const int64_t ring = pl::axis_size("y");
  pl::Shape stacked{ring};
  stacked.insert(stacked.end(), partial.shape().begin(), partial.shape().end());
  std::vector<pl::Array> out = pl::pallas_call(
      all_reduce_kernel,
      pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                   .out_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::ANY)},
                   .scratch_shapes = {pl::VMEM(partial.shape(), pl::f32), pl::VMEM(partial.shape(), partial.dtype()),
                                      pl::SemaphoreType::DMA, pl::SemaphoreType::DMA, pl::SemaphoreType::DMA}},
      {pl::ShapeDtype(partial.shape(), partial.dtype()), pl::ShapeDtype(stacked, partial.dtype())}, options)(partial);
  return out[0];
}

// ---- AG -> GEMM -> AR, and fused ---------------------------------------------------------------------

inline pl::Array slow_ag_gemm_ar(const pl::Array& inputs, const pl::Array& weights, const pl::CallOptions& options) {
  const int64_t k_local = inputs.shape()[1], n = weights.shape()[1];
  pl::Array w_full = make_ag(weights, false, options);
  pl::Array w_slice = pl::dynamic_slice(w_full, {pl::host_axis_index("y") * k_local, 0}, {k_local, n});
  return make_ar(make_matmul(inputs, w_slice, options), options);
}

inline void fused_ag_gemm_kernel(pl::Ref input, pl::Ref weight, pl::Ref output, pl::Ref recv_weight, pl::Ref send_sem,
                          pl::Ref recv_sem) {
  pl::Value x = pl::axis_index("x"), y = pl::axis_index("y");
  // 1. Start sending this device's weight shard to the device that needs it (the transposed one).
  auto rdma = pl::make_async_remote_copy(weight, recv_weight, send_sem, recv_sem, pl::DeviceId({y, x}));
  rdma.start();
  // 2. The GEMM with the local weights, while the copy is on its way: right where x == y.
  emit_gemm(input, weight, output);
  // 3. Wait for the weights this device needs, and redo the GEMM where the local ones were wrong.
  rdma.wait();
  pl::when(x != y, [&] { emit_gemm(input, recv_weight, output); });
}

inline pl::Array fused_ag_gemm(const pl::Array& inputs, const pl::Array& weights, const pl::CallOptions& options) {
  const int64_t m = inputs.shape()[0], n = weights.shape()[1];
  std::vector<pl::Array> out = pl::pallas_call(
      fused_ag_gemm_kernel,
      pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::ANY)},
                   .out_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::ANY)},
                   .scratch_shapes = {pl::SemaphoreType::DMA, pl::SemaphoreType::DMA}},
      {pl::ShapeDtype({m, n}, inputs.dtype()), pl::ShapeDtype(weights.shape(), weights.dtype())}, options)(inputs, weights);
  return out[0];  // the workspace of received weights is dropped
}

}  // namespace seed
