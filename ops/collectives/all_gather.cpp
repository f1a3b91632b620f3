// The ring all-gather (collectives.h), the seed's 1-D ring over any mesh axis and dim: out is
// [outer, n, inner] (x [outer, inner] is slot `me`), and at step s every device forwards slot
// me - s, which it has (its own at step 0, else the one that arrived at step s - 1), to the same
// slot of its right neighbour. Every slot is written once, so the ring needs no flow control: a step
// waits for its send to leave and for the next slot to arrive.
#include <fmt/format.h>

#include "dsl/async_copy.h"
#include "dsl/control.h"
#include "dsl/devices.h"
#include "dsl/host_ops.h"
#include "ops/collectives/chunks.h"

namespace tessera::collectives {

namespace {

constexpr const char* kApi = "collectives::all_gather";

struct Plan {
  std::string axis;
  int64_t n = 1, outer = 1, inner = 1;
  std::string key() const { return fmt::format("{} axis={} n={} outer={} inner={}", kApi, axis, n, outer, inner); }
};

void all_gather_kernel(const Plan& p, Ref x, Ref out, Ref local_sem, Ref send_sem, Ref recv_sem) {
  const auto n = static_cast<int32_t>(p.n);
  Value me = axis_index(p.axis);
  Value right = (me + 1) % n;
  detail::barrier_with(p.axis, {(me + n - 1) % n, right});
  async_copy(x, out.at(all, me, all), local_sem).wait();
  loop(0, n - 1, [&](Value s) {
    Value slot = (me + n - s) % n;
    auto forward = make_async_remote_copy(out.at(all, slot, all), out.at(all, slot, all), send_sem, recv_sem,
                                          DeviceId({{p.axis.c_str(), right}}));
    forward.start();
    forward.wait();  // sent, and slot me - s - 1 arrived from the left (every slot has the same size)
  });
}

}  // namespace

Array all_gather(const Array& x, const std::string& axis_name, int64_t axis, const Options& o, std::source_location loc) {
  Plan p;
  p.axis = axis_name;
  p.n = detail::axis_size_for(kApi, axis_name, loc);
  axis = tessera::detail::checked_axis(axis, x.rank(), kApi, loc);
  for (int64_t d = 0; d < axis; ++d) p.outer *= x.shape()[d];
  p.inner = x.size() / std::max<int64_t>(1, p.outer);
  Shape shape = x.shape();
  shape[axis] *= p.n;
  if (p.n == 1) return x;
  const std::string key = p.key() + " " + std::string(dtype_name(x.dtype()));
  PallasCall<std::vector<Array>> call = detail::memoised_on_mesh(key, o, loc, [&] {
    return pallas_call(
        [p](Ref x_ref, Ref out_ref, Ref local, Ref send, Ref recv) { all_gather_kernel(p, x_ref, out_ref, local, send, recv); },
        GridSpec{.in_specs = {BlockSpec(ANY)},
                 .out_specs = {BlockSpec(ANY)},
                 .scratch_shapes = {SemaphoreType::DMA, SemaphoreType::DMA, SemaphoreType::DMA}},
        std::vector<ShapeDtype>{ShapeDtype({p.outer, p.n, p.inner}, x.dtype())},
        detail::call_options(o, "all_gather", /*collective_id=*/3), loc);
  });
  return call({x.reshape({p.outer, p.inner})}, loc).at(0).reshape(shape);
}

Array all_reduce(const Array& x, const std::string& axis_name, const Options& o, std::source_location loc) {
  const char* api = "collectives::all_reduce";
  detail::check_float(api, x, loc);
  const int64_t n = detail::axis_size_for(api, axis_name, loc);
  if (x.size() % n != 0)
    throw UserError(fmt::format("{}: x has {} elements, not a multiple of the {} devices along `{}`", api, x.size(), n,
                                axis_name),
                    fmt::format("x of shape ({})", fmt::join(x.shape(), ", ")),
                    "pad x to a multiple of the axis size, or use pl::psum", loc);
  const Array flat = x.reshape({x.size()});
  return all_gather(reduce_scatter(flat, axis_name, 0, o, loc), axis_name, 0, o, loc).reshape(x.shape());
}

}  // namespace tessera::collectives
