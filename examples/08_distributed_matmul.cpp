// Example 8: seed 000's distributed matmul, on 2x2 and 4x4 meshes.
//
// out = inputs @ weights with inputs sharded P('x', 'y') and weights P('x', None): the contracting
// dim is split over y in the inputs and over x in the weights, so data has to move. The seed builds
// the same product several ways, and every one is checked against a plain matmul:
//   xla_matmul_1/2/3      host collectives (all_gather, psum) around a local matmul
//   AG kernels            hand-written all-gathers of the weights over x with remote copies: a 1-D
//                         ring and a bidirectional ring
//   AR kernel             a hand-written all-reduce over y with remote copies, summed in VMEM
//   AG -> GEMM -> AR      the AG kernel, a tiled Pallas matmul, the AR kernel
//   fused AG + GEMM       one kernel: start sending the weights, run an emit_pipeline GEMM on what is
//                         local meanwhile, wait, and redo the GEMM where the local weights were wrong
//   fused AG + GEMM + AR  that, then the AR kernel
// (The seed's fused kernel shifts weights one step along x, which on a 2x2 mesh is the same as
// sending them to the transposed device; on any square mesh the transposed device is the one that
// needs them, so that is what this kernel does.)
//
//   08_distributed_matmul [m k n]     (default 512 512 256)
#include <tessera/tessera.hpp>

#include <cstdio>
#include <cstdlib>

#include "examples/example_util.h"
#include "examples/seed_matmul.h"

namespace pl = tessera;

namespace {

// ---- with host collectives -------------------------------------------------------------------------

pl::Array xla_matmul_1(const pl::Array& input_shard, const pl::Array& w_shard) {
  pl::Array input_full = pl::all_gather(input_shard, "y", 1, true);
  pl::Array w_full = pl::all_gather(w_shard, "x", 0, true);
  return pl::matmul(input_full, w_full);
}

pl::Array xla_matmul_2(const pl::Array& input_shard, const pl::Array& w_shard) {
  const int64_t k_local = input_shard.shape()[1], n = w_shard.shape()[1];
  pl::Array w_full = pl::all_gather(w_shard, "x", 0, true);
  pl::Array w_slice = pl::dynamic_slice(w_full, {pl::host_axis_index("y") * k_local, 0}, {k_local, n});
  return pl::psum(pl::matmul(input_shard, w_slice), "y");
}

// As 2, accumulating and reducing in f32.
pl::Array xla_matmul_3(const pl::Array& input_shard, const pl::Array& w_shard) {
  const int64_t k_local = input_shard.shape()[1], n = w_shard.shape()[1];
  pl::Array w_full = pl::all_gather(w_shard, "x", 0, true);
  pl::Array w_slice = pl::dynamic_slice(w_full, {pl::host_axis_index("y") * k_local, 0}, {k_local, n});
  return pl::psum(pl::matmul(input_shard, w_slice, pl::f32), "y");
}

// ---- the seed's tiled matmul (examples/seed_matmul.h) --------------------------------------------------

pl::Array make_matmul(const pl::Array& x, const pl::Array& y, const pl::CallOptions& options) {
  return seed::make_matmul(x.shape()[0], x.shape()[1], y.shape()[1], x.dtype(), options)(x, y);
}

// ---- all-gather kernels over x -----------------------------------------------------------------------

// 1-D ring: at step s every device sends the block it got at step s - 1 to its right neighbour.
void all_gather_1d_kernel(pl::Ref input, pl::Ref output, pl::Ref local_sem, pl::Ref send_sem, pl::Ref recv_sem) {
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
void all_gather_bidi_kernel(pl::Ref input, pl::Ref output, pl::Ref local_sem, pl::Ref send_right, pl::Ref send_left,
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

pl::Array make_ag(const pl::Array& w, bool bidirectional, const pl::CallOptions& options) {
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
void all_reduce_kernel(pl::Ref local, pl::Ref out, pl::Ref gathered, pl::Ref acc, pl::Ref part, pl::Ref copy_sem,
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

pl::Array make_ar(const pl::Array& partial, const pl::CallOptions& options) {
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

pl::Array slow_ag_gemm_ar(const pl::Array& inputs, const pl::Array& weights, const pl::CallOptions& options) {
  const int64_t k_local = inputs.shape()[1], n = weights.shape()[1];
  pl::Array w_full = make_ag(weights, false, options);
  pl::Array w_slice = pl::dynamic_slice(w_full, {pl::host_axis_index("y") * k_local, 0}, {k_local, n});
  return make_ar(make_matmul(inputs, w_slice, options), options);
}

void fused_ag_gemm_kernel(pl::Ref input, pl::Ref weight, pl::Ref output, pl::Ref recv_weight, pl::Ref send_sem,
                          pl::Ref recv_sem) {
  pl::Value x = pl::axis_index("x"), y = pl::axis_index("y");
  // 1. Start sending this device's weight shard to the device that needs it (the transposed one).
  auto rdma = pl::make_async_remote_copy(weight, recv_weight, send_sem, recv_sem, pl::DeviceId({y, x}));
  rdma.start();
  // 2. The GEMM with the local weights, while the copy is on its way: right where x == y.
  seed::emit_gemm(input, weight, output);
  // 3. Wait for the weights this device needs, and redo the GEMM where the local ones were wrong.
  rdma.wait();
  pl::when(x != y, [&] { seed::emit_gemm(input, recv_weight, output); });
}

pl::Array fused_ag_gemm(const pl::Array& inputs, const pl::Array& weights, const pl::CallOptions& options) {
  const int64_t m = inputs.shape()[0], n = weights.shape()[1];
  std::vector<pl::Array> out = pl::pallas_call(
      fused_ag_gemm_kernel,
      pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::ANY)},
                   .out_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::ANY)},
                   .scratch_shapes = {pl::SemaphoreType::DMA, pl::SemaphoreType::DMA}},
      {pl::ShapeDtype({m, n}, inputs.dtype()), pl::ShapeDtype(weights.shape(), weights.dtype())}, options)(inputs, weights);
  return out[0];  // the workspace of received weights is dropped
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t m = argc > 3 ? std::atoll(argv[1]) : 512, k = argc > 3 ? std::atoll(argv[2]) : 512,
                n = argc > 3 ? std::atoll(argv[3]) : 256;
  const pl::Array inputs = pl::Array::random_normal({m, k}, pl::bf16, /*seed=*/0);
  const pl::Array weights = pl::Array::random_normal({k, n}, pl::bf16, /*seed=*/1);
  const pl::Array reference = pl::matmul(inputs, weights, pl::f32);

  int status = 0;
  for (int64_t side : {2, 4}) {
    const pl::Mesh mesh({side, side}, {"x", "y"});
    if (side == 2) {
      std::printf("inputs, sharded P('x', 'y'):\n");
      pl::visualize_array_sharding(pl::device_put(inputs, pl::NamedSharding(mesh, pl::P("x", "y"))));
      std::printf("weights, sharded P('x', None):\n");
      pl::visualize_array_sharding(pl::device_put(weights, pl::NamedSharding(mesh, pl::P("x", pl::None))));
    }
    const std::string name = "distributed_matmul " + std::to_string(side) + "x" + std::to_string(side);
    status |= examples::run_in_every_backend(name.c_str(), [&](const pl::CallOptions& options) {
      using F = std::function<pl::Array(const pl::Array&, const pl::Array&)>;
      const std::vector<std::pair<const char*, F>> variants = {
          {"xla_matmul_1 (all_gather x2, matmul)", xla_matmul_1},
          {"xla_matmul_2 (all_gather, matmul, psum)", xla_matmul_2},
          {"xla_matmul_3 (the same in f32)", xla_matmul_3},
          {"AG kernel (1-D ring) -> GEMM -> AR kernel",
           [&](const pl::Array& in, const pl::Array& w) { return slow_ag_gemm_ar(in, w, options); }},
          {"AG kernel (bidirectional) -> matmul -> psum",
           [&](const pl::Array& in, const pl::Array& w) {
             const int64_t k_local = in.shape()[1];
             pl::Array w_slice = pl::dynamic_slice(make_ag(w, true, options), {pl::host_axis_index("y") * k_local, 0},
                                                   {k_local, w.shape()[1]});
             return pl::psum(pl::matmul(in, w_slice), "y");
           }},
          {"fused AG + GEMM -> psum",
           [&](const pl::Array& in, const pl::Array& w) { return pl::psum(fused_ag_gemm(in, w, options), "y"); }},
          {"fused AG + GEMM + AR kernel",
           [&](const pl::Array& in, const pl::Array& w) { return make_ar(fused_ag_gemm(in, w, options), options); }},
      };
      bool ok = true;
      pl::Array last;
      for (const auto& [what, f] : variants) {
        last = pl::shard_map(f, mesh, {pl::P("x", "y"), pl::P("x", pl::None)}, {pl::P("x", pl::None)})(inputs, weights);
        // bf16 partial products are rounded before they are summed: about two bf16 roundings of values
        // up to ~100 (an ulp of 0.5) from the exact f32 reference.
        ok = examples::check(what, last.astype(pl::f32), reference, 1e-2, 1.0) && ok;
      }
      return examples::Outcome{ok, last.astype(pl::f32)};
    }, 1e-2, 1.0);
  }
  return status;
}
