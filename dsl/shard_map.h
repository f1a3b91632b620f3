// pl::shard_map(f, mesh, in_specs, out_specs): SPMD over the devices of a mesh (jax.shard_map).
//
//   auto f = pl::shard_map([](const pl::Array& x, const pl::Array& w) { return ...; },
//                          mesh, {pl::P("x", "y"), pl::P("x")}, {pl::P("x")});
//   pl::Array out = f(x, w);
//
// f runs once per device, each on a thread of its own with that device current, on the device's
// blocks of the arguments (split by in_specs); its results, one block per device, are assembled by
// out_specs (a block that several devices hold, because out_specs does not name an axis, is taken
// from one of them). Inside f, pallas_call launches on the current device; kernels may use
// pl::axis_index and talk to other devices (their launches on all devices form one collective
// launch); host code may use pl::host_axis_index, pl::axis_size and the host collectives
// (pl::all_gather, pl::psum, ...). f takes one const pl::Array& per in_spec and returns a pl::Array
// or a std::vector<pl::Array>. Arguments may be pl::Arrays or pl::ShardedArrays (used as they are
// when already sharded as in_specs says).
//
// Front-end layer (dsl/).
#pragma once

#include <functional>
#include <memory>
#include <source_location>
#include <type_traits>
#include <variant>
#include <vector>

#include "dsl/signature.h"
#include "runtime/sharding.h"

namespace tessera {

// An argument of a shard_map'ed function: a whole array, or one already spread over the mesh.
class ShardArg {
 public:
  ShardArg(const Array& a) : arg_(a) {}
  ShardArg(const ShardedArray& a) : arg_(a) {}
  const std::variant<Array, ShardedArray>& get() const { return arg_; }

 private:
  std::variant<Array, ShardedArray> arg_;
};

namespace detail {
struct ShardMapSpec {
  std::shared_ptr<const Mesh> mesh;
  std::vector<P> in_specs, out_specs;
  SourceLoc loc;
};
std::vector<ShardedArray> run_shard_map(const ShardMapSpec& spec, int arity,
                                        const std::function<std::vector<Array>(std::vector<Array>&)>& f,
                                        const std::vector<ShardArg>& args);
}  // namespace detail

template <class Result>
class ShardMapped {
 public:
  ShardMapped(detail::ShardMapSpec spec, int arity, std::function<std::vector<Array>(std::vector<Array>&)> f)
      : spec_(std::move(spec)), arity_(arity), f_(std::move(f)) {}

  Result operator()(const std::vector<ShardArg>& args) const {
    std::vector<ShardedArray> out = detail::run_shard_map(spec_, arity_, f_, args);
    if constexpr (std::is_same_v<Result, ShardedArray>) return out.at(0);
    else return out;
  }
  template <class... A>
    requires(std::is_convertible_v<const A&, ShardArg> && ...)
  Result operator()(const A&... args) const {
    return (*this)(std::vector<ShardArg>{ShardArg(args)...});
  }

 private:
  detail::ShardMapSpec spec_;
  int arity_;
  std::function<std::vector<Array>(std::vector<Array>&)> f_;
};

template <class F>
auto shard_map(F f, const Mesh& mesh, std::vector<P> in_specs, std::vector<P> out_specs,
               std::source_location loc = std::source_location::current()) {
  constexpr int n = detail::arity_of<F, const Array&>();
  static_assert(n >= 0, "tessera: pl::shard_map's function takes one const pl::Array& per in_spec");
  using R = decltype(detail::invoke_n<n>(std::declval<F&>(), std::declval<std::vector<Array>&>()));
  static_assert(std::is_same_v<std::decay_t<R>, Array> || std::is_same_v<std::decay_t<R>, std::vector<Array>>,
                "tessera: pl::shard_map's function returns a pl::Array or a std::vector<pl::Array>");
  using Result = std::conditional_t<std::is_same_v<std::decay_t<R>, Array>, ShardedArray, std::vector<ShardedArray>>;
  detail::ShardMapSpec spec{std::make_shared<Mesh>(mesh), std::move(in_specs), std::move(out_specs), loc};
  return ShardMapped<Result>(std::move(spec), n, [f = std::move(f)](std::vector<Array>& args) mutable {
    if constexpr (std::is_same_v<std::decay_t<R>, Array>) return std::vector<Array>{detail::invoke_n<n>(f, args)};
    else return detail::invoke_n<n>(f, args);
  });
}

}  // namespace tessera
