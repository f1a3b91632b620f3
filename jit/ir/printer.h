// The IR printer: deterministic, MLIR-like text. It is the golden-test format, what
// TESSERA_DUMP_IR prints, and part of the compile-cache key. Values are renumbered in the order they
// are defined, so the text does not depend on how the IR was built.
//
// Part of the IR layer.
#pragma once

#include <string>

#include "jit/ir/ir.h"

namespace tessera::ir {

struct PrintOptions {
  bool locations = false;  // append "// file:line" to every op
};

std::string print(const Function& fn, PrintOptions options = {});
// One op (and its regions) with the function's numbering; for error messages.
std::string print_op(const Function& fn, OpId op);
// The attribute as it appears in the printed IR (also the hash-consing key).
std::string attr_str(const Attr& attr);
std::string literal_str(const Literal& lit, DType dtype);

}  // namespace tessera::ir
