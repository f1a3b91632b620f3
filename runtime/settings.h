// Process-wide settings a user may change from code: the threads compiled kernels use, how they run
// their copies, random delays for testing collectives, and where debug_print writes. Each one can
// also come from a TESSERA_* variable (runtime/config.h); a call here overrides it.
//
// Public API (re-exported by <tessera/tessera.hpp>); implemented in the runtime.
#pragma once

#include <cstdint>
#include <functional>
#include <source_location>
#include <string_view>

namespace tessera {

// The number of threads compiled kernels use (including the caller's).
int num_threads(std::source_location loc = std::source_location::current());
// Sets it; n < 1 restores the default (TESSERA_NUM_THREADS, else the number of hardware threads).
// The default is read on first use; an invalid TESSERA_NUM_THREADS makes either throw UserError at
// the caller's line (a launch's first read reports its pallas_call's line).
void set_num_threads(int n, std::source_location loc = std::source_location::current());

namespace rt {

// How compiled kernels run their copies (the interpreter has modes of its own).
enum class DmaExecution : uint8_t {
  // On the worker when the launch leaves a core idle, else eagerly: the worker overlaps copies with
  // compute only where it gets a core of its own (benchmarks/pipelines.cpp measures both cases).
  automatic,
  eager,
  worker,
};
// Sets it for the process; otherwise TESSERA_DMA=auto|eager|worker (default auto), read by the first
// dma_execution(), which throws UserError on an invalid value.
void set_dma_execution(DmaExecution mode);
DmaExecution dma_execution();

// Test support: before every collective launch and remote operation, sleep a random time of up to
// `max_microseconds` (0 turns it off), from a generator seeded with `seed`. Shows that results do not
// depend on the devices' relative timing. Without a call, TESSERA_CHAOS_US=n sets it (read on first
// use; an invalid value throws UserError from there).
void set_random_delays(int64_t max_microseconds, uint64_t seed = 0);

// Where debug_print output goes: stdout unless a sink is set (tests capture it). Thread-safe.
void set_debug_print_sink(std::function<void(std::string_view)> sink);

}  // namespace rt

// The same settings under the user's namespace (pl::set_dma_execution(pl::DmaExecution::eager), ...).
using rt::DmaExecution;
using rt::set_debug_print_sink;
using rt::set_dma_execution;
using rt::set_random_delays;

}  // namespace tessera
