// Differential testing of the two backends on random programs (tests/fuzz/random_program.h): a
// program is traced with the public DSL, run compiled and interpreted on its seeded inputs, and the
// outputs compared — bit for bit where the element rules say so (docs/design.md §4.13: element ops,
// casts, reductions, control flow; NaNs compare equal whatever their payload, which is unspecified),
// and a float dot within the documented tolerance 1e-6 (k + 1), relative and absolute (§8).
// Out-of-array elements of partial blocks are poison in the interpreter and garbage in compiled
// code: generated programs never let them reach an element inside the array (reductions mask them).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "tests/fuzz/random_program.h"

namespace tessera::fuzz {

struct Verdict {
  enum Kind { agree, differ, one_threw, both_threw };
  Kind kind = agree;
  std::string detail;  // the first differing element, or the exceptions
};

// Runs `p` in both backends and compares.
Verdict check(const Program& p);

// What decides a program's verdict: `check` in a fuzz run; the tests of the shrinker and the
// reproducer pass one that plants a failure, since a real disagreement is never at hand.
using Checker = std::function<Verdict(const Program&)>;
// Whether a candidate still fails as the original did.
using StillFails = std::function<bool(const Program&)>;

// The smallest program found that still fails, tried greedily: nodes replaced by an operand of the
// same type (control flow by a branch, a loop by its initial value) or by a constant, loops
// shortened, the overwrite and the scratch staging dropped; fewer grid steps and smaller blocks (a
// dot's k too), plain index maps, no parallel axes, one core, one buffer. Its nodes are only those
// the program uses.
Program shrink(const Program& p, const StillFails& still_fails);
// Still failing is failing the same way as `failure` under `checker`.
Program shrink(const Program& p, const Verdict& failure, const Checker& checker = check);

// What to print for a failing program: its seed, the shrunk program as DSL-like text, its traced IR
// and the difference.
std::string reproducer(const Program& p, const Verdict& failure, const Checker& checker = check);

// Checks the programs of seeds [first, first + count); the reproducer of each failure goes to
// `on_failure`. Returns how many failed.
int run_seeds(uint64_t first, int64_t count, const std::function<void(const std::string&)>& on_failure,
              const Checker& checker = check);

}  // namespace tessera::fuzz
