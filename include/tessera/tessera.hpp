// tessera: a C++20 embedded DSL for Pallas-style block kernels.
//
//   #include <tessera/tessera.hpp>
//   namespace pl = tessera;
//
// Kernels are C++ callables over pl::Ref; pl::pallas_call traces them into tessera's IR and runs them
// over a grid of blocks. See README.md for the tour and docs/design.md for the design and the semantics.
#pragma once

#include "dsl/async_copy.h"
#include "dsl/benchmark.h"
#include "dsl/collectives.h"
#include "dsl/control.h"
#include "dsl/devices.h"
#include "dsl/distributed.h"
#include "dsl/emit_pipeline.h"
#include "dsl/host_ops.h"
#include "dsl/layout.h"
#include "dsl/mpmd_map.h"
#include "dsl/numerics.h"
#include "dsl/pallas_call.h"
#include "dsl/profile.h"
#include "dsl/races.h"
#include "dsl/ref.h"
#include "dsl/run_scoped.h"
#include "dsl/scans.h"
#include "dsl/semaphores.h"
#include "dsl/shard_map.h"
#include "dsl/specs.h"
#include "dsl/value.h"
#include "runtime/array.h"
#include "runtime/mesh.h"
#include "runtime/settings.h"
#include "runtime/sharding.h"
