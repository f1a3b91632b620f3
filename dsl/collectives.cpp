#include "dsl/collectives.h"

#include <fmt/format.h>

#include <numeric>

#include "dsl/async_copy.h"
#include "dsl/control.h"
#include "dsl/devices.h"
#include "dsl/host_ops.h"
#include "dsl/kept_call.h"
#include "dsl/pallas_call.h"
#include "runtime/block_ops.h"
#include "runtime/mesh.h"

namespace tessera {

namespace {

// The mesh and this device, for a collective called `api`; a UserError outside shard_map.
const rt::DeviceContext& device_for(const char* api, SourceLoc loc) {
  const rt::DeviceContext* d = rt::current_device();
  if (!d)
    throw UserError(fmt::format("{} is a collective of pl::shard_map", api), "a call outside pl::shard_map",
                    "call it inside the function pl::shard_map runs on every device", loc);
  return *d;
}

// Every device along `axis` sends a chunk of x to every other one (itself included, by a local copy):
// to device p it sends chunk p of dim `dim` when scattering, else all of x. Returns the chunks this
// device received, stacked in the order of the senders' positions: [n, chunk...].
Array exchange(const Array& x, const std::string& axis, std::optional<int64_t> dim, const char* api,
               std::source_location loc) {
  const int64_t n = device_for(api, loc).mesh->axis_size(axis, loc);
  Shape chunk = x.shape();
  if (dim) chunk[*dim] /= n;
  Shape stacked{n};
  stacked.insert(stacked.end(), chunk.begin(), chunk.end());
  // The call object is kept for later calls (detail::kept_call: the collective, its axis and size,
  // the cut, x's shape and dtype), so the kernel holds nothing of this call's but values of that key.
  // (A fresh call object every time traced the kernel on each device and, the kernel's last user gone,
  // loaded it from the disk cache: about 4 ms a psum on 2 devices.)
  auto kernel = [=](Ref in, Ref out, Ref local, Ref send, Ref recv) {
    Value me = axis_index(axis);
    auto part = [&](const Value& p) {
      if (!dim) return in;
      std::vector<Indexer> window(in.shape().size(), Indexer(all));
      window[*dim] = ds(p * static_cast<int32_t>(chunk[*dim]), chunk[*dim]);
      return in.view(window, std::source_location::current());  // x's shape was checked: never fails
    };
    async_copy(part(me), out.at(me), local).wait();
    auto to = [&](const Value& p) {
      return make_async_remote_copy(part(p), out.at(me), send, recv, DeviceId({{axis.c_str(), p}}));
    };
    loop(1, n, [&](Value j) { to((me + j) % static_cast<int32_t>(n)).start(); });
    loop(1, n, [&](Value) {
      auto copy = to(me);  // every chunk has the same size
      copy.wait_send();
      copy.wait_recv();
    });
  };
  const std::string key = fmt::format("{} {} {} {} {} {}", api, axis, n, dim ? *dim : -1, shape_tuple_str(x.shape()),
                                      dtype_name(x.dtype()));
  PallasCall<Array> call = detail::kept_call<PallasCall<Array>>(key, loc, [&] {
    CallOptions options;
    options.name = std::string(api).substr(4);  // "pl::all_gather" -> "all_gather"
    return pallas_call(kernel,
                       GridSpec{.in_specs = {BlockSpec(ANY)},
                                .out_specs = {BlockSpec(ANY)},
                                .scratch_shapes = {SemaphoreType::DMA, SemaphoreType::DMA, SemaphoreType::DMA}},
                       ShapeDtype(stacked, x.dtype()), options, std::source_location::current());
  });
  // The kernel is tessera's, its call the user's: what the call reports (an invalid TESSERA_CHAOS_US
  // its launch reads) points at the collective's line.
  return call(ArrayArg(x, loc));
}

// How a collective names the dim it cuts in its errors: "dim 1 ... does not scatter ... make the dim".
struct CutWords {
  const char* label;
  const char* verb;
  const char* noun;
};

// A UserError unless x's dim `dim` cuts into the n devices along `axis`: a multiple of n (tiled),
// or exactly n.
void check_cut(const Array& x, int64_t dim, int64_t n, const std::string& axis, bool tiled, const char* api, CutWords w,
               SourceLoc loc) {
  if (x.shape()[dim] % n == 0 && (tiled || x.shape()[dim] == n)) return;
  throw UserError(fmt::format("{}: {} {} of size {} does not {} over the {} devices along `{}`", api, w.label, dim,
                              x.shape()[dim], w.verb, n, axis),
                  shape_tuple_str(x.shape()),
                  tiled ? fmt::format("make {} a multiple of the axis size", w.noun)
                        : fmt::format("make {} equal the axis size, or pass tiled = true", w.noun),
                  loc);
}

// Moves dim 0 of `a` to position `to`.
Array move_leading_dim(const Array& a, int64_t to) {
  std::vector<int64_t> perm;
  for (int64_t d = 1; d <= to; ++d) perm.push_back(d);
  perm.push_back(0);
  for (int64_t d = to + 1; d < a.rank(); ++d) perm.push_back(d);
  return rt::transpose(a, perm);
}

}  // namespace

Array all_gather(const Array& x, const std::string& axis_name, int64_t axis, bool tiled, std::source_location loc) {
  const char* api = "pl::all_gather";
  axis = detail::checked_axis(axis, x.rank() + (tiled ? 0 : 1), api, loc);
  Array stacked = exchange(x, axis_name, std::nullopt, api, loc);  // [n, x...]
  Array moved = move_leading_dim(stacked, axis);                   // [.., n, x[axis], ..]
  if (!tiled) return moved;
  Shape shape = x.shape();
  shape[axis] *= stacked.shape()[0];
  return moved.reshape(shape);
}

Array psum(const Array& x, const std::string& axis_name, std::source_location loc) {
  return rt::reduce(ir::OpKind::ReduceSum, exchange(x, axis_name, std::nullopt, "pl::psum", loc), {0});
}

Array psum_scatter(const Array& x, const std::string& axis_name, int64_t scatter_dimension, bool tiled,
                   std::source_location loc) {
  const char* api = "pl::psum_scatter";
  const int64_t dim = detail::checked_axis(scatter_dimension, x.rank(), api, loc);
  const int64_t n = device_for(api, loc).mesh->axis_size(axis_name, loc);
  check_cut(x, dim, n, axis_name, tiled, api, {"dim", "scatter", "the dim"}, loc);
  Array sum = rt::reduce(ir::OpKind::ReduceSum, exchange(x, axis_name, dim, api, loc), {0});
  if (tiled) return sum;
  Shape shape = x.shape();
  shape.erase(shape.begin() + dim);
  return sum.reshape(shape);
}

Array all_to_all(const Array& x, const std::string& axis_name, int64_t split_axis, int64_t concat_axis, bool tiled,
                 std::source_location loc) {
  const char* api = "pl::all_to_all";
  const int64_t split = detail::checked_axis(split_axis, x.rank(), api, loc);
  const int64_t concat = detail::checked_axis(concat_axis, x.rank(), api, loc);
  const int64_t n = device_for(api, loc).mesh->axis_size(axis_name, loc);
  check_cut(x, split, n, axis_name, tiled, api, {"split_axis", "split", "split_axis"}, loc);
  Array stacked = exchange(x, axis_name, split, api, loc);  // [n, chunk...], chunk from device i at i
  if (!tiled) {
    // The chunks' split axis is 1 long: drop it, then the senders' axis goes to concat_axis.
    Shape squeezed = stacked.shape();
    squeezed.erase(squeezed.begin() + 1 + split);
    return move_leading_dim(stacked.reshape(squeezed), concat);
  }
  Shape shape = x.shape();
  shape[split] /= n;
  shape[concat] *= n;
  return move_leading_dim(stacked, concat).reshape(shape);
}

Array ppermute(const Array& x, const std::string& axis_name, const std::vector<std::pair<int64_t, int64_t>>& perm,
               std::source_location loc) {
  const char* api = "pl::ppermute";
  const rt::DeviceContext& device = device_for(api, loc);
  const int64_t n = device.mesh->axis_size(axis_name, loc);
  // Who sends to whom, by position along the axis (-1: nobody).
  std::vector<int32_t> send_to(static_cast<size_t>(n), -1), recv_from(static_cast<size_t>(n), -1);
  for (auto [a, b] : perm) {
    if (a < 0 || a >= n || b < 0 || b >= n || send_to[a] >= 0 || recv_from[b] >= 0)
      throw UserError(fmt::format("{}: the permutation is not one along axis `{}` of size {}", api, axis_name, n),
                      fmt::format("pair ({}, {})", a, b),
                      "give pairs (source, destination) of positions in [0, n), each source and destination once", loc);
    send_to[a] = static_cast<int32_t>(b);
    recv_from[b] = static_cast<int32_t>(a);
  }
  auto kernel = [=](Ref to, Ref from, Ref in, Ref out, Ref send, Ref recv) {
    Value me = axis_index(axis_name);
    auto copy = [&](const Value& target) {
      return make_async_remote_copy(in, out, send, recv, DeviceId({{axis_name.c_str(), target}}));
    };
    when(to[me] >= 0, [&] {
      auto c = copy(to[me]);
      c.start();
      c.wait_send();
    });
    when(from[me] >= 0, [&] { copy(me).wait_recv(); });
  };
  // The pairs are the kernel's operands, not part of it: one call object serves every permutation.
  const std::string key = fmt::format("pl::ppermute {} {} {} {}", axis_name, n, shape_tuple_str(x.shape()),
                                      dtype_name(x.dtype()));
  PallasCall<Array> call = detail::kept_call<PallasCall<Array>>(key, loc, [&] {
    CallOptions options;
    options.name = "ppermute";
    return pallas_call(kernel,
                       PrefetchScalarGridSpec{.num_scalar_prefetch = 2,
                                              .in_specs = {BlockSpec(ANY)},
                                              .out_specs = {BlockSpec(ANY)},
                                              .scratch_shapes = {SemaphoreType::DMA, SemaphoreType::DMA}},
                       ShapeDtype(x.shape(), x.dtype()), options, std::source_location::current());
  });
  Array out = call({Array::from_vector(send_to, {n}), Array::from_vector(recv_from, {n}), x},
                   loc);  // the user's call, as exchange's
  const int64_t me = device.coords[device.mesh->axis(axis_name)];
  return recv_from[me] >= 0 ? out : Array::zeros(x.shape(), x.dtype());
}

}  // namespace tessera
