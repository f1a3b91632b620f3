// Compile-time plumbing for user callables (kernels, index maps): find how many parameters of a given
// kind a callable takes, and call it with that many arguments taken from a runtime sequence.
// Boost.Hana does the heterogeneous work; nothing of it leaks past this header.
//
// Front-end layer (dsl/), internal.
#pragma once

#include <boost/hana/integral_constant.hpp>
#include <boost/hana/range.hpp>
#include <boost/hana/replicate.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>
#include <boost/hana/unpack.hpp>
#include <type_traits>
#include <utility>

namespace tessera::detail {

namespace hana = boost::hana;

inline constexpr int kMaxArity = 24;

// Whether f can be called with N arguments of type Arg.
template <class F, class Arg, int N>
constexpr bool invocable_with_n() {
  return hana::unpack(hana::replicate<hana::tuple_tag>(hana::type_c<Arg>, hana::size_c<N>), [](auto... t) {
    return std::is_invocable_v<F, typename decltype(t)::type...>;
  });
}

template <class F, class Arg, int N = 0>
constexpr int arity_from() {
  if constexpr (N > kMaxArity) return -1;
  else if constexpr (invocable_with_n<F, Arg, N>()) return N;
  else return arity_from<F, Arg, N + 1>();
}

// The number of Arg parameters f takes (the smallest that works), or -1 if none in 0..kMaxArity.
template <class F, class Arg>
constexpr int arity_of() {
  return arity_from<std::decay_t<F>, Arg>();
}

// Calls f(args[0], ..., args[N-1]); `args` is any indexable sequence of N elements.
template <int N, class F, class Seq>
decltype(auto) invoke_n(F& f, Seq& args) {
  return hana::unpack(hana::make_range(hana::size_c<0>, hana::size_c<N>),
                      [&](auto... i) -> decltype(auto) { return f(args[decltype(i)::value]...); });
}

// The type f returns when called with N arguments of type Arg.
template <class F, class Arg, int N>
using result_with_n = decltype(hana::unpack(hana::replicate<hana::tuple_tag>(hana::type_c<Arg>, hana::size_c<N>),
                                            [](auto... t) {
                                              return hana::type_c<std::invoke_result_t<F, typename decltype(t)::type...>>;
                                            }));

}  // namespace tessera::detail
