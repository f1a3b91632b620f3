// Whole-block math on Arrays: the numerics of every value op of the IR, in one place. The
// interpreter executes ops with these functions (one call per op over the whole block, never a
// per-element switch), host array operations reuse them, and compiled code must agree with them
// (docs/design.md §4; the ops are listed in jit/ir/ops.def, and what each computes on one element is
// runtime/element_rules.h, which these functions call).
//
// Runtime layer.
#pragma once

#include <vector>

#include "jit/ir/ir.h"
#include "runtime/array.h"

namespace tessera::rt {

// A block of `shape` whose elements all equal the literal, in `dtype`.
Array splat(const ir::Literal& value, DType dtype, const Shape& shape);
// neg, abs, not, exp, log, tanh, sqrt, rsqrt, logistic, sin, cos, erf, erfc, floor, ceil.
Array unary(ir::OpKind kind, const Array& a);
// add ... xor and the comparisons; both operands have one shape and dtype.
Array binary(ir::OpKind kind, const Array& a, const Array& b);
Array select(const Array& cond, const Array& on_true, const Array& on_false);
Array iota(DType dtype, const Shape& shape, int64_t axis);
Array broadcast_to(const Array& a, const Shape& shape);
Array transpose(const Array& a, const std::vector<int64_t>& perm);
// reduce_sum, reduce_max, reduce_min over `axes`.
Array reduce(ir::OpKind kind, const Array& a, const std::vector<int64_t>& axes);
Array dot_general(const Array& lhs, const Array& rhs, const ir::DotAttr& dims, DType result_dtype);
// base ** exp in `bits`-bit (8, 16, 32 or 64) signed wrap-around integers, as the pow op defines it;
// a negative `bits` (-8 .. -64) names the unsigned type of that width, whose operands come zero-extended.
int64_t int_pow_wrapped(int64_t base, int64_t exp, int bits);

}  // namespace tessera::rt
