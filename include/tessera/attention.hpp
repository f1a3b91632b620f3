// tessera's flash attention (forward and backward): link tessera::ops.
//
//   #include <tessera/attention.hpp>
//   namespace fa = tessera::attention;
#pragma once

#include "tessera/tessera.hpp"
#include "ops/attention/flash_attention.h"
