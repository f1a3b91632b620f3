// What the dtype tests share: the backends they run in, compiled with the interpreter's check
// (CallOptions::check_against_interpreter, so every output is also compared with the
// interpreter's) and then interpreted, and element access by flat index.
#pragma once

#include <vector>

#include "tests/support/kernels.h"

namespace tessera::testing {

inline std::vector<pl::CallOptions> checked_backends() {
  pl::CallOptions compiled;
  compiled.check_against_interpreter = true;
  return {compiled, interpret()};
}

// Host element i of an array in row-major order, as T (its storage type).
template <class T> T el(const pl::Array& a, int64_t i) { return a.reshape({a.size()}).data_as<T>()[i]; }

}  // namespace tessera::testing
