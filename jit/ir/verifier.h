// The IR verifier: checks that a Function is well formed — every operand defined before use and
// visible from its use, operand and result types as each op requires, regions terminated as their
// op expects. A failure is an InternalError naming the op, its source line and the checker
// (`who`, usually a pass name), with the IR text.
//
// Part of the IR layer. The tracer checks user input itself and reports UserErrors first; the
// verifier is the safety net that runs after tracing and after every pass in tests.
#pragma once

#include <string_view>

#include "jit/ir/ir.h"

namespace tessera::ir {

void verify(const Function& fn, std::string_view who = "verifier");

}  // namespace tessera::ir
