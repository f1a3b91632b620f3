// tessera: a C++20 embedded DSL for Pallas-style block kernels.
//
//   #include <tessera/tessera.hpp>
//   namespace pl = tessera;
//
// Kernels are C++ callables over pl::Ref; pl::pallas_call traces them into tessera's IR and runs them
// over a grid of blocks. See README.md for the tour and DESIGN.md for the semantics.
#pragma once

#include "dsl/async_copy.h"
#include "dsl/benchmark.h"
#include "dsl/collectives.h"
#include "dsl/control.h"
#include "dsl/devices.h"
#include "dsl/emit_pipeline.h"
#include "dsl/host_ops.h"
#include "dsl/mpmd_map.h"
#include "dsl/numerics.h"
#include "dsl/pallas_call.h"
#include "dsl/profile.h"
#include "dsl/ref.h"
#include "dsl/run_scoped.h"
#include "dsl/semaphores.h"
#include "dsl/shard_map.h"
#include "dsl/specs.h"
#include "dsl/value.h"
#include "runtime/array.h"
#include "runtime/dma_engine.h"
#include "runtime/mesh.h"
#include "runtime/sharding.h"
#include "runtime/launch.h"
#include "runtime/thread_pool.h"

namespace tessera {
// Where pl::debug_print output goes (stdout by default).
using rt::set_debug_print_sink;
// How compiled kernels run their copies: pl::DmaExecution::automatic (the default: on a DMA worker
// thread when the launch leaves a core idle), ::eager or ::worker.
using rt::DmaExecution;
using rt::set_dma_execution;
// Testing aid: sleep a random time (up to the given microseconds) before every collective launch and
// remote operation, to show that results do not depend on the devices' timing.
using rt::set_random_delays;
}  // namespace tessera
