// Differential mode (CallOptions::check_against_interpreter): how a compiled run's outputs are
// compared with the interpreter's, and what the comparison reports. The rule is here once; the front
// end turns a mismatch into tessera::MismatchError (docs/design.md §4.14).
//
// Runtime layer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/array.h"

namespace tessera::rt {

// Two finite values agree when |compiled - interpreted| <= atol + rtol * |interpreted|.
struct Tolerance {
  double rtol = 0;
  double atol = 0;
};

// The tolerance of a dtype when the caller gives none. Integers and bool compare exactly: the element
// rules make both backends agree bit for bit. Floats allow for a different order of summation in
// dots and reductions (the compiled GEMM's FMA tiles, its k blocking): rtol is a few units in the
// last place of the dtype for bf16/f16 (a one-ulp rounding flip of an f32 accumulator) and 1e-4 for
// f32 (1e-9 for f64); atol is that rtol times the largest finite magnitude in the interpreted output,
// so that cancellation in a long sum is not taken for a mismatch.
Tolerance default_tolerance(const Array& interpreted);

// Where two outputs first disagree, and how many elements do.
struct Mismatch {
  int64_t flat = 0;            // row-major index of the first differing element
  std::vector<int64_t> index;  // the same, per dim
  std::string compiled, interpreted;  // both values as text
  bool interpreted_is_poison = false;  // the interpreter's value is its poison for unwritten memory
  int64_t count = 0;                   // differing elements in all
  Tolerance tolerance;
};

// Compares element by element (same shape and dtype). NaN agrees with NaN whatever the payload; an
// infinity only with the same infinity; with `tolerance` unset, default_tolerance(interpreted).
// `skip_unwritten`: an element whose interpreted value is the poison of memory nobody wrote (any NaN
// for floats, the largest value for integers, true for bool) is not compared, for a caller that leaves
// such elements unspecified (CallOptions::check_unwritten = false).
std::optional<Mismatch> first_mismatch(const Array& compiled, const Array& interpreted,
                                       std::optional<Tolerance> tolerance = std::nullopt, bool skip_unwritten = false);

}  // namespace tessera::rt
