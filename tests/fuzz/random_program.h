// A seeded random-program generator for differential testing: a Program is a small kernel
// described as data (an expression tree over the kernel's input blocks, its grid, block shapes,
// index maps and dtypes), made from a seed alone, so one number reproduces it. tests/fuzz/
// differential.h traces it with the public DSL, runs it compiled and interpreted and compares.
//
// Two families:
//  - element-wise: x and y blocks through element ops, casts, reductions (broadcast back), where,
//    fori_loop, while_loop, cond and switch_, stored with an optional pl::when overwrite; partial
//    edge blocks and zero-size arrays (a grid with a zero dim) included; x's row block optionally
//    read from a scalar-prefetched table;
//  - dot: the seed's matmul shape, one k block or tiled over k with an accumulator in scratch.
//
// Every program is valid by construction: a generated program the DSL rejects is a generator bug.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <tessera/tessera.hpp>

namespace tessera::fuzz {

enum class Node : uint8_t {
  x,           // the x block (always the kernel's block shape)
  y,           // the y block, broadcast to the block shape when y is one row
  constant,    // pl::full(block, value, dtype)
  iota,        // pl::iota(block, axis, dtype)
  program_id,  // the block index along array axis `axis`, broadcast
  loop_index,  // the innermost fori_loop's index, broadcast (only inside a loop body)
  unary,       // unary_ops()[op](a)
  binary,      // binary_ops()[op](a, b)
  select,      // pl::where(compare_ops()[op](a, b), c, d)
  cast,        // a.astype(dtype)
  reduce,      // reduce_ops()[op](a masked to the array, axis), broadcast back to the block
  loop,        // pl::fori_loop(0, trips, a, [](i, c) { return binary_ops()[op](c, b); })
  cond,        // pl::cond(block index along `axis` == value, a, b)
  prefetched,  // ids[the block index along rows], broadcast: the scalar-prefetched table (prefetched programs)
  while_loop,  // pl::while_loop over {an i32 count, a}: while count < trips, {count + 1, binary_ops()[op](c, b)}
  switch_,     // pl::switch_(block index along `axis` - value, {args...}): 2 or 3 branches, the index clamped
};

struct Expr {
  Node kind = Node::x;
  DType dtype = DType::f32;  // the result's
  int op = 0;                // index into the op table of its kind
  int axis = 0;              // iota, program_id, reduce, cond: an array axis (0 rows, 1 columns)
  int64_t value = 0;         // loop, while_loop: trips; cond: the block index compared with; switch_: subtracted
  double constant = 0;       // constant
  std::vector<int> args;     // indices of operand nodes in Program::nodes
};

struct Program {
  uint64_t seed = 0;
  bool is_dot = false;
  DType in_dtype = DType::f32;   // x's and y's
  DType out_dtype = DType::f32;  // o's
  int64_t rows = 1, cols = 1;    // x and o (element-wise); o (dot)
  int64_t block_rows = 1, block_cols = 1;
  // Element-wise: y is one row (1, cols) broadcast over the block; the grid walks blocks backwards;
  // grid axis 0 walks columns instead of rows.
  bool y_is_row = false, reversed = false, transposed_grid = false;
  // Dot: x (rows, depth) . y (depth, cols); tiled: a k grid axis of depth / block_depth steps.
  int64_t depth = 1, block_depth = 1;
  bool tiled_k = false;
  // x's BlockSpec pipeline mode: pl::Buffered(x_buffers) fetches the next blocks ahead (1: none).
  int x_buffers = 1;
  // Element-wise: a pl::PrefetchScalarGridSpec whose prefetched i32 table `ids` (one entry per row
  // block, make_inputs's first input) gives x's row block: x's index map is (ids[i], j). Each entry
  // names a full block (or block 0 when there is one block), so no padding reaches the array.
  bool prefetched = false;
  // How many leading grid axes are pl::parallel; the interpreter's simulated cores.
  int parallel_axes = 0;
  int interpret_cores = 1;
  // Element-wise: the expression stored into o, an optional pl::when(block index along
  // when_axis == when_value) overwrite with `overwrite`, and whether the result goes through scratch.
  std::vector<Expr> nodes;
  int root = -1;
  int overwrite = -1;
  int when_axis = 0;
  int64_t when_value = 0;
  bool staged = false;

  std::vector<int64_t> grid() const;
  // Blocks along array axis a (0: rows, 1: cols), partial edge blocks included.
  int64_t blocks(int axis) const;
  std::vector<int64_t> x_shape() const;
  std::vector<int64_t> y_shape() const;
  DType scratch_dtype() const;
};

// The ops a program draws from: the name as the DSL text writes it (an operator, or a pl:: function),
// which dtypes it applies to, and the DSL call itself.
template <class Apply>
struct Op {
  const char* name;
  bool ints, floats;
  Apply apply;
};
using UnaryOp = Op<Value (*)(const Value&)>;
using BinaryOp = Op<Value (*)(const Value&, const Value&)>;
using ReduceOp = Op<Value (*)(const Value&, int axis)>;
const std::vector<UnaryOp>& unary_ops();
const std::vector<BinaryOp>& binary_ops();
const std::vector<BinaryOp>& compare_ops();
const std::vector<ReduceOp>& reduce_ops();

// The program seed `seed` makes; the same on every machine.
Program generate(uint64_t seed);
// The inputs of a program, seeded too ({ids, x, y} when prefetched, else {x, y}): edge values (NaN, +-inf, -0, subnormals, INT_MIN, -1, 0) mixed
// with ordinary ones for element-wise programs, uniform values for dots.
std::vector<Array> make_inputs(const Program& p);
// The program as DSL-like text: the call's shapes, specs and grid, then the kernel body.
std::string to_text(const Program& p);

}  // namespace tessera::fuzz
