// The all-to-all (collectives.h): chunk j of x's split_axis goes to device j, where it lands at
// position `me` of concat_axis. Every copy is one remote DMA from a strided window of the sender's
// input straight into a strided window of the receiver's output, both in ANY (HBM): no staging, no
// transposes. The receiver counts each source's bytes on a semaphore of its own (recv[i] for the
// chunk from device i), so it knows which chunks have arrived, not just how many bytes.
#include <fmt/format.h>

#include "dsl/async_copy.h"
#include "dsl/control.h"
#include "dsl/devices.h"
#include "dsl/host_ops.h"
#include "ops/collectives/chunks.h"

namespace tessera::collectives {

namespace {

constexpr const char* kApi = "collectives::all_to_all";

struct Plan {
  std::string axis;
  int64_t n = 1, split = 0, concat = 0;
  Shape in, out;
  DType dtype = DType::f32;
  std::string key() const {
    return fmt::format("{} axis={} n={} split={} concat={} in=({}) {}", kApi, axis, n, split, concat, fmt::join(in, ","),
                       dtype_name(dtype));
  }
};

// The window of `ref` that is part `i` of `size` along `dim`, whole along the other dims.
Ref part(const Ref& ref, int64_t dim, const Value& i, int64_t size) {
  std::vector<Indexer> window(ref.shape().size(), Indexer(all));
  window[dim] = ds(i * static_cast<int32_t>(size), size);
  return ref.view(window, SourceLoc{});
}

void all_to_all_kernel(const Plan& p, Ref x, Ref out, Ref local_sem, Ref send_sem, Ref recv_sems) {
  const auto n = static_cast<int32_t>(p.n);
  const int64_t chunk = p.in[p.split] / p.n, slot = p.out[p.concat] / p.n;
  Value me = axis_index(p.axis);
  std::vector<Value> others;
  for (int32_t j = 1; j < n; ++j) others.push_back((me + j) % n);
  detail::barrier_with(p.axis, others);
  // Our chunk for device `to`, into slot `me` of its output.
  auto send = [&](const Value& to) {
    return make_async_remote_copy(part(x, p.split, to, chunk), part(out, p.concat, me, slot), send_sem, recv_sems.at(me),
                                  DeviceId({{p.axis.c_str(), to}}));
  };
  auto local = async_copy(part(x, p.split, me, chunk), part(out, p.concat, me, slot), local_sem);
  // Staggered, so that no device is everybody's first target.
  loop(1, n, [&](Value j) { send((me + j) % n).start(); });
  local.wait();
  loop(1, n, [&](Value j) {
    Value from = (me + n - j) % n;
    make_async_remote_copy(part(x, p.split, from, chunk), part(out, p.concat, from, slot), send_sem, recv_sems.at(from),
                           DeviceId({{p.axis.c_str(), from}}))
        .wait_recv();
    send(me).wait_send();  // every chunk has the same size
  });
}

// The tiled all-to-all of x along `axis`.
Array tiled_all_to_all(const Array& x, const std::string& axis, int64_t n, int64_t split, int64_t concat, const Options& o,
                       std::source_location loc) {
  Plan p;
  p.axis = axis;
  p.n = n;
  p.split = split;
  p.concat = concat;
  p.in = x.shape();
  p.dtype = x.dtype();
  p.out = detail::chunks_of(kApi, x, axis, n, split, loc).shape;
  p.out[concat] *= n;
  if (n == 1) return x;
  PallasCall<std::vector<Array>> call = detail::memoised_on_mesh(p.key(), o, loc, [&] {
    return pallas_call(
        [p](Ref x_ref, Ref out_ref, Ref local, Ref send, Ref recv) { all_to_all_kernel(p, x_ref, out_ref, local, send, recv); },
        GridSpec{.in_specs = {BlockSpec(ANY)},
                 .out_specs = {BlockSpec(ANY)},
                 .scratch_shapes = {SemaphoreType::DMA, SemaphoreType::DMA, SemaphoreType::DMA({n})}},
        std::vector<ShapeDtype>{ShapeDtype(p.out, x.dtype())}, detail::call_options(o, "all_to_all", /*collective_id=*/2), loc);
  });
  return call({x}, loc).at(0);
}

}  // namespace

Array all_to_all(const Array& x, const std::string& axis_name, int64_t split_axis, int64_t concat_axis, bool tiled,
                 const Options& options, std::source_location loc) {
  const int64_t n = detail::axis_size_for(kApi, axis_name, loc);
  split_axis = tessera::detail::checked_axis(split_axis, x.rank(), kApi, loc);
  concat_axis = tessera::detail::checked_axis(concat_axis, x.rank(), kApi, loc);
  if (tiled) return tiled_all_to_all(x, axis_name, n, split_axis, concat_axis, options, loc);
  if (x.shape()[split_axis] != n)
    throw UserError(fmt::format("{}: split_axis {} of size {} is not the size of axis `{}` ({})", kApi, split_axis,
                                x.shape()[split_axis], axis_name, n),
                    fmt::format("x of shape ({})", fmt::join(x.shape(), ", ")),
                    "make split_axis the axis' size, or pass tiled = true", loc);
  // Untiled is tiled with a unit axis where the new axis goes: it becomes n long and split_axis 1.
  const int64_t unit = concat_axis <= split_axis ? concat_axis : concat_axis + 1;
  const int64_t split = concat_axis <= split_axis ? split_axis + 1 : split_axis;
  Shape with_unit = x.shape();
  with_unit.insert(with_unit.begin() + unit, 1);
  Shape result = x.shape();
  result.erase(result.begin() + split_axis);
  result.insert(result.begin() + concat_axis, n);
  return tiled_all_to_all(x.reshape(with_unit), axis_name, n, split, unit, options, loc).reshape(result);
}

}  // namespace tessera::collectives
