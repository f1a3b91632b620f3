// The ring reduce-scatter (collectives.h). With n devices along the axis, at send step s (0 .. n-2)
// device `me` adds its own chunk (me - s - 1) mod n to the partial sum that arrived from its left
// neighbour (none at step 0) and sends the result to its right neighbour; at the last step it adds
// its own chunk `me` to what arrived and has its result. Chunk p thus starts at device p + 1 and
// picks up every device's part on its way round to device p.
//
// Buffers (VMEM scratch, so the adds load and store them directly):
//   recv [2, outer, inner] f32   the partial sums arriving from the left, step s into slot s % 2
//   acc  [outer, inner] f32      this step's sums, sent from here block by block
// Semaphores: send (DMA, bytes left here), recv[2] (DMA, bytes arrived in each slot: a slot's wait
// must not count the other slot's bytes), capacity (regular: the right neighbour freed a slot).
//
// Flow control: the data sent at step s lands in the right neighbour's slot s % 2, which the copy
// of step s + 2 overwrites; the neighbour reads the slot during its step s + 1 and then signals our
// capacity, which step s + 2 waits for. Signals and waits pair up exactly (steps 2 .. n-2 wait,
// steps 1 .. n-3 signal), so every semaphore ends at zero.
#include <fmt/format.h>

#include "dsl/async_copy.h"
#include "dsl/control.h"
#include "dsl/devices.h"
#include "dsl/semaphores.h"
#include "ops/collectives/chunks.h"

namespace tessera::collectives {

namespace {

constexpr const char* kApi = "collectives::reduce_scatter";

// One reduce-scatter's static plan: the chunks, their blocks, the dtypes.
struct Plan {
  std::string axis;
  detail::Chunks chunks;
  detail::Blocks blocks;
  DType in = DType::f32, out = DType::f32;
  std::string key() const {
    return fmt::format("{} axis={} {} blocks=({},{}) {}->{}", kApi, axis, chunks.key(), blocks.br, blocks.bc,
                       dtype_name(in), dtype_name(out));
  }
};

void reduce_scatter_kernel(const Plan& p, Ref x, Ref out, Ref recv, Ref acc, Ref send_sem, Ref recv_sems, Ref capacity) {
  const auto n = static_cast<int32_t>(p.chunks.n);
  Value me = axis_index(p.axis);
  Value right = (me + 1) % n, left = (me + n - 1) % n;
  detail::barrier_with(p.axis, {left, right});
  // The copy of a block of acc into the same block of the right neighbour's slot.
  auto to_right = [&](const Indexer& slot, const Indexer& rows, const Indexer& cols) {
    return make_async_remote_copy(acc.at(rows, cols), recv.at(slot, rows, cols), send_sem, recv_sems.at(slot),
                                  DeviceId({{p.axis.c_str(), right}}));
  };
  // Waits until the whole partial sum for `slot` has arrived (its blocks in any order).
  auto arrived = [&](const Indexer& slot) {
    make_async_remote_copy(acc, recv.at(slot), send_sem, recv_sems.at(slot), DeviceId({{p.axis.c_str(), left}}))
        .wait_recv();
  };
  // x's part of chunk k, as f32.
  auto own = [&](const Value& k, const Indexer& rows, const Indexer& cols) { return x.at(rows, k, cols)().astype(DType::f32); };

  // Step 0: our own chunk me - 1 starts its way round.
  detail::for_each_block(p.blocks, [&](const Indexer& rows, const Indexer& cols) {
    acc.at(rows, cols)() = own((me + n - 1) % n, rows, cols);
    to_right(0, rows, cols).start();
  });
  to_right(0, all, all).wait_send();

  if (n > 2) loop(1, n - 1, [&](Value s) {
    Value slot = s % 2, prev = (s + 1) % 2;
    Value k = (me + n - 1 - s) % n;
    arrived(prev);
    when(s >= 2, [&] { semaphore_wait(capacity); });  // the right neighbour has read slot `slot`
    detail::for_each_block(p.blocks, [&](const Indexer& rows, const Indexer& cols) {
      acc.at(rows, cols)() = recv.at(prev, rows, cols)() + own(k, rows, cols);
      to_right(slot, rows, cols).start();  // on its way while the next block is added
    });
    // Slot `prev` is read: the left neighbour may fill it again, if it has a step left that does.
    when(s <= n - 3, [&] { semaphore_signal(capacity, 1, DeviceId({{p.axis.c_str(), left}})); });
    to_right(slot, all, all).wait_send();  // acc is ours again
  });

  // The last step: the partial sum of our own chunk has come round.
  const int32_t last = (n - 2) % 2;
  arrived(last);
  detail::for_each_block(p.blocks, [&](const Indexer& rows, const Indexer& cols) {
    out.at(rows, cols)() = (recv.at(last, rows, cols)() + own(me, rows, cols)).astype(p.out);
  });
}

// One phase: the sum over `axis` of x (dtype p.in), device i keeping chunk i of `dim`, in `out`.
Array reduce_scatter_phase(const Array& x, const std::string& axis, int64_t dim, DType out, const Options& o,
                           std::source_location loc) {
  Plan p;
  p.axis = axis;
  p.chunks = detail::chunks_of(kApi, x, axis, detail::axis_size_for(kApi, axis, loc), dim, loc);
  p.blocks = detail::blocks_of(kApi, p.chunks.outer, p.chunks.inner, o.block_elements, loc);
  p.in = x.dtype();
  p.out = out;
  if (p.chunks.n == 1) return x.astype(out);
  const Shape slot{p.chunks.outer, p.chunks.inner};
  CallOptions opts = detail::call_options(o, "reduce_scatter", /*collective_id=*/1);
  // The whole input, both slots, acc and the output live in VMEM.
  const int64_t f32_bytes = 3 * p.chunks.outer * p.chunks.inner * 4;
  opts.compiler_params.vmem_limit_bytes =
      std::max<int64_t>(int64_t{64} << 20, x.nbytes() + f32_bytes + p.chunks.outer * p.chunks.inner * dtype_size(out) + (1 << 20));
  PallasCall<std::vector<Array>> call = detail::memoised_on_mesh(p.key(), o, loc, [&] {
    return pallas_call(
        [p](Ref x_ref, Ref out_ref, Ref recv, Ref acc, Ref send, Ref recv_sems, Ref capacity) {
          reduce_scatter_kernel(p, x_ref, out_ref, recv, acc, send, recv_sems, capacity);
        },
        GridSpec{.in_specs = {BlockSpec(VMEM)},
                 .out_specs = {BlockSpec(VMEM)},
                 .scratch_shapes = {VMEM({2, p.chunks.outer, p.chunks.inner}, DType::f32), VMEM(slot, DType::f32),
                                    SemaphoreType::DMA, SemaphoreType::DMA({2}), SemaphoreType::REGULAR}},
        std::vector<ShapeDtype>{ShapeDtype(slot, out)}, opts, loc);
  });
  return call({x.reshape({p.chunks.outer, p.chunks.n, p.chunks.inner})}, loc).at(0).reshape(p.chunks.shape);
}

}  // namespace

Array reduce_scatter(const Array& x, const std::string& axis_name, int64_t scatter_dimension, const Options& options,
                     std::source_location loc) {
  detail::check_float(kApi, x, loc);
  return reduce_scatter_phase(x, axis_name, scatter_dimension, x.dtype(), options, loc);
}

Array reduce_scatter(const Array& x, const std::vector<std::string>& axis_names, int64_t scatter_dimension,
                     const Options& options, std::source_location loc) {
  detail::check_float(kApi, x, loc);
  if (axis_names.empty())
    throw UserError(fmt::format("{}: no axis to reduce over", kApi), "axis_names = {}",
                    "name one or more axes of the mesh", loc);
  // Every phase but the last keeps the sums in f32, so bf16 input is rounded once.
  Array y = x;
  for (size_t a = 0; a < axis_names.size(); ++a)
    y = reduce_scatter_phase(y, axis_names[a], scatter_dimension, a + 1 == axis_names.size() ? x.dtype() : DType::f32,
                             options, loc);
  return y;
}

}  // namespace tessera::collectives
