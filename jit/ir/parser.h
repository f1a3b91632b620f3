// The IR text parser: reads what the printer (printer.h) writes back into a Function, so tests of
// a pass can start from golden IR text instead of tracing a kernel through the front end, and IR
// dumps can be replayed.
//
// parse(print(fn)) prints as print(fn) does. Ops are found by their mnemonic (ops.def); an op the
// printer writes in its generic form ("%r = name %a, %b attr : types" followed by its regions) needs
// nothing here. What the text does not carry is rebuilt as the front end would have made it:
//   - a region's trailing yield without values, which the printer leaves out (every region of an op
//     ends with a yield, except a pipeline's body);
//   - PipelineOperand::is_output, from the operand's name ("output 0", "emit_pipeline output 1");
//     PipelineOperand::loc is unknown;
//   - BlockCopyAttr::operand, numbered per pipeline by first appearance of each operand name, which
//     keeps distinct operands distinct (all the runtime uses it for);
//   - constants of float dtypes hold float literals, of other dtypes integer ones;
//   - source locations ("// file:line", PrintOptions::locations) keep the line, not the column.
// The result is not verified: call ir::verify on it.
//
// Malformed text is a UserError naming the line and column and what was expected there.
//
// Part of the IR layer; used by tests (lowering and code generator tests parse golden IR).
#pragma once

#include <string_view>

#include "jit/ir/ir.h"

namespace tessera::ir {

Function parse(std::string_view text);

}  // namespace tessera::ir
