// Timelines of kernels and host code, as Chrome trace JSON (open the file in https://ui.perfetto.dev).
//
//   pl::profile("trace.json", [&] { out = fused_fn(inputs, weights); });   // record, then write
//   pl::start_trace("trace.json"); ...; pl::stop_trace();                   // jax.profiler style
//   TESSERA_TRACE=trace.json ./my_program                                   // the whole run, written at exit
//
//   pl::named_scope("dot", [&] { acc() += pl::dot(x(), y(), pl::f32); });   // in a kernel
//   auto y = pl::named_scope("all_gather", [&] { return pl::all_gather(x, "x"); });   // in host code
//
// Each device is a process in the viewer, with a track per core (the kernel, its grid steps,
// semaphore and DMA waits with the time blocked, named scopes), one per core's copies (each copy
// from its start to its completion, remote copies too) and one for host code on that device. Both
// backends record the same kinds of events. named_scope costs nothing when no timeline is recorded
// (in a kernel: one call per scope boundary, which returns at once).
//
// Front-end layer (dsl/).
#pragma once

#include <source_location>
#include <string>
#include <type_traits>
#include <utility>

#include "runtime/timeline.h"

namespace tessera {

namespace detail {
// In a kernel being traced: emits trace_start / trace_stop and returns true. Outside: false.
bool kernel_scope_boundary(const std::string& name, bool start, std::source_location loc);
}  // namespace detail

// Runs body() (returning what it returns) as a scope named `name`: in a kernel being traced, the
// ops it emits are marked; in host code, the call is timed on the host track.
template <class F>
decltype(auto) named_scope(const std::string& name, F&& body, std::source_location loc = std::source_location::current()) {
  static_assert(std::is_invocable_v<F&>, "tessera: pl::named_scope(name, body) takes a body with no parameters: [&] { ... }");
  if (detail::kernel_scope_boundary(name, true, loc)) {
    struct Stop {
      const std::string& name;
      std::source_location loc;
      ~Stop() noexcept(false) {
        if (!std::uncaught_exceptions()) detail::kernel_scope_boundary(name, false, loc);
      }
    } stop{name, loc};
    return body();
  }
  rt::timeline::Scope span(rt::timeline::Track::host(), name, "scope");
  return body();
}

// Starts recording a timeline to be written to `path`. A UserError when one is being recorded.
void start_trace(const std::string& path, std::source_location loc = std::source_location::current());
// Stops recording and writes the file; returns its path.
std::string stop_trace(std::source_location loc = std::source_location::current());

// Records a timeline of body() into `path` (written when body returns or throws).
template <class F>
decltype(auto) profile(const std::string& path, F&& body, std::source_location loc = std::source_location::current()) {
  start_trace(path, loc);
  struct Stop {
    std::source_location loc;
    ~Stop() noexcept(false) {
      if (std::uncaught_exceptions()) rt::timeline::stop();  // write what there is, keep the first error
      else stop_trace(loc);
    }
  } stop{loc};
  return body();
}

}  // namespace tessera
