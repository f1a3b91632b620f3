// pl::run_scoped(f, types...): buffers and semaphores that live while f runs.
//
//   pl::run_scoped([&](pl::Ref acc, pl::Ref sem) { ... }, pl::VMEM({bm, bn}, pl::f32), pl::SemaphoreType::DMA);
//
// f takes one pl::Ref per type (VMEM, SMEM or semaphores; ANY/HBM only in the interpreter with
// InterpretParams::allow_hbm_allocation_in_run_scoped, as in Pallas) and may return
// nothing, a pl::Value or a std::vector<pl::Value>, which run_scoped returns. Buffers start
// uninitialised, semaphores at zero, and every semaphore must be back at zero when f returns.
//
// Front-end layer (dsl/).
#pragma once

#include <functional>
#include <type_traits>
#include <vector>

#include "dsl/control.h"
#include "dsl/signature.h"
#include "dsl/specs.h"

namespace tessera {

namespace detail {
// Checks that scratch or a run_scoped type `what` can be allocated (VMEM, SMEM or semaphores; ANY
// or HBM too when `dma_only_ok`).
void check_allocatable(const ScratchShape& type, const std::string& what, const std::string& api,
                       bool dma_only_ok = false);
std::vector<Value> run_scoped_impl(const std::vector<ScratchShape>& types,
                                   const std::function<std::vector<Value>(std::vector<Ref>&)>& body);

template <class F, size_t N>
auto run_scoped_n(F& f, const std::vector<ScratchShape>& types) {
  constexpr int arity = arity_of<F, Ref>();
  static_assert(arity == static_cast<int>(N),
                "tessera: pl::run_scoped(f, types...) calls f with one pl::Ref per type: give f exactly as many "
                "pl::Ref parameters as there are types");
  if constexpr (arity == static_cast<int>(N)) {
    using R = decltype(invoke_n<arity>(f, std::declval<std::vector<Ref>&>()));
    if constexpr (std::is_void_v<R>) {
      run_scoped_impl(types, [&](std::vector<Ref>& refs) {
        invoke_n<arity>(f, refs);
        return std::vector<Value>{};
      });
    } else {
      std::vector<Value> r = run_scoped_impl(types, [&](std::vector<Ref>& refs) { return as_values(invoke_n<arity>(f, refs)); });
      if constexpr (std::is_same_v<std::decay_t<R>, std::vector<Value>>) return r;
      else return r.at(0);
    }
  }
}
}  // namespace detail

// One overload per number of types, so that each type records the line of the call.
template <class F>
auto run_scoped(F&& f, ScratchShape t0) {
  return detail::run_scoped_n<F, 1>(f, {t0});
}
template <class F>
auto run_scoped(F&& f, ScratchShape t0, ScratchShape t1) {
  return detail::run_scoped_n<F, 2>(f, {t0, t1});
}
template <class F>
auto run_scoped(F&& f, ScratchShape t0, ScratchShape t1, ScratchShape t2) {
  return detail::run_scoped_n<F, 3>(f, {t0, t1, t2});
}
template <class F>
auto run_scoped(F&& f, ScratchShape t0, ScratchShape t1, ScratchShape t2, ScratchShape t3) {
  return detail::run_scoped_n<F, 4>(f, {t0, t1, t2, t3});
}
template <class F>
auto run_scoped(F&& f, ScratchShape t0, ScratchShape t1, ScratchShape t2, ScratchShape t3, ScratchShape t4) {
  return detail::run_scoped_n<F, 5>(f, {t0, t1, t2, t3, t4});
}
template <class F>
auto run_scoped(F&& f, ScratchShape t0, ScratchShape t1, ScratchShape t2, ScratchShape t3, ScratchShape t4,
                ScratchShape t5) {
  return detail::run_scoped_n<F, 6>(f, {t0, t1, t2, t3, t4, t5});
}

}  // namespace tessera
