// tessera's collectives as kernels (ring reduce-scatter, all-to-all, ring all-gather and
// all-reduce, inside pl::shard_map): link tessera::ops.
//
//   #include <tessera/collectives.hpp>
//   namespace cl = tessera::collectives;
#pragma once

#include "tessera/tessera.hpp"
#include "ops/collectives/collectives.h"
