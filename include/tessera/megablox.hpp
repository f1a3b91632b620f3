// tessera's megablox grouped matmuls (gmm, tgmm): link tessera::ops.
//
//   #include <tessera/megablox.hpp>
//   namespace mb = tessera::megablox;
#pragma once

#include "tessera/tessera.hpp"
#include "ops/megablox/gmm.h"
#include "ops/megablox/group_metadata.h"
