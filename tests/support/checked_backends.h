// The backends a dtype test runs in: compiled with the interpreter's check
// (CallOptions::check_against_interpreter, so every output is also compared with the interpreter's),
// then interpreted.
#pragma once

#include <vector>

#include "tests/support/kernels.h"

namespace tessera::testing {

inline std::vector<pl::CallOptions> checked_backends() {
  pl::CallOptions compiled;
  compiled.check_against_interpreter = true;
  return {compiled, interpret()};
}

}  // namespace tessera::testing
