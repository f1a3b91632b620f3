#include "tests/fuzz/random_program.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include <fmt/format.h>

namespace tessera::fuzz {

namespace pl = tessera;

namespace {

// Every draw goes through one engine seeded with the program's seed, in a fixed order.
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  int64_t between(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(engine_); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(engine_) < p; }
  double real(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(engine_); }
  template <class T>
  const T& pick(const std::vector<T>& from) { return from[static_cast<size_t>(between(0, static_cast<int64_t>(from.size()) - 1))]; }

 private:
  std::mt19937_64 engine_;
};

// An op of `table` that applies to dtype t.
template <class Table>
int pick_op(Rng& rng, const Table& table, DType t) {
  for (;;) {
    int i = static_cast<int>(rng.between(0, static_cast<int64_t>(table.size()) - 1));
    if (is_float(t) ? table[static_cast<size_t>(i)].floats : table[static_cast<size_t>(i)].ints) return i;
  }
}

const std::vector<DType> kElementTypes = {pl::f32, pl::f32, pl::bf16, pl::f16, pl::f64, pl::i8,
                                          pl::i32, pl::i32, pl::i64, pl::u64};

class Generator {
 public:
  Generator(Program& p, Rng& rng) : p_(p), rng_(rng) {}

  int expr(int depth, DType t, bool in_loop) {
    if (depth == 0 || rng_.chance(0.25)) return leaf(t, in_loop);
    switch (rng_.between(0, 11)) {
      case 0:
      case 1: return add({Node::unary, t, pick_op(rng_, unary_ops(), t), 0, 0, 0, {expr(depth - 1, t, in_loop)}});
      case 2:
      case 3:
      case 4:
        return add({Node::binary, t, pick_op(rng_, binary_ops(), t), 0, 0, 0,
                    {expr(depth - 1, t, in_loop), expr(depth - 1, t, in_loop)}});
      case 5: {
        DType c = rng_.chance(0.6) ? p_.in_dtype : rng_.pick(kElementTypes);
        return add({Node::select, t, pick_op(rng_, compare_ops(), c), 0, 0, 0,
                    {expr(depth - 1, c, in_loop), expr(depth - 1, c, in_loop), expr(depth - 1, t, in_loop),
                     expr(depth - 1, t, in_loop)}});
      }
      case 6: return add({Node::cast, t, 0, 0, 0, 0, {expr(depth - 1, rng_.pick(kElementTypes), in_loop)}});
      case 7:
        return add({Node::reduce, t, pick_op(rng_, reduce_ops(), t), static_cast<int>(rng_.between(0, 1)), 0, 0,
                    {expr(depth - 1, t, in_loop)}});
      case 8:
        return add({Node::loop, t, pick_op(rng_, binary_ops(), t), 0, rng_.between(0, 3), 0,
                    {expr(depth - 1, t, in_loop), expr(depth - 1, t, true)}});
      case 9: {
        int axis = static_cast<int>(rng_.between(0, 1));
        return add({Node::cond, t, 0, axis, block_index(axis), 0, {expr(depth - 1, t, in_loop), expr(depth - 1, t, in_loop)}});
      }
      case 10:
        return add({Node::while_loop, t, pick_op(rng_, binary_ops(), t), 0, rng_.between(0, 3), 0,
                    {expr(depth - 1, t, in_loop), expr(depth - 1, t, in_loop)}});
      default: {
        Expr e{Node::switch_, t, 0, static_cast<int>(rng_.between(0, 1)), rng_.between(-1, 1), 0, {}};
        for (int64_t k = rng_.between(2, 3); k > 0; --k) e.args.push_back(expr(depth - 1, t, in_loop));
        return add(std::move(e));
      }
    }
  }

 private:
  int add(Expr e) {
    p_.nodes.push_back(std::move(e));
    return static_cast<int>(p_.nodes.size()) - 1;
  }

  // A block index along `axis` of this program's grid (0 when it has none).
  int64_t block_index(int axis) { return rng_.between(0, std::max<int64_t>(p_.blocks(axis) - 1, 0)); }

  int leaf(DType t, bool in_loop) {
    if (p_.prefetched && rng_.chance(0.1)) return add({Node::prefetched, t});
    switch (rng_.between(0, in_loop ? 7 : 6)) {
      case 0:
      case 1:
      case 2: return as(add({rng_.chance(0.5) ? Node::x : Node::y, p_.in_dtype}), t);
      case 3: {
        double v = is_float(t) ? rng_.pick(std::vector<double>{0.5, -2.0, 3.25, 1e-3, 0.0, -0.0, 100.0, 7.0})
                               : static_cast<double>(rng_.between(is_unsigned(t) ? 0 : -100, 100));
        return add({Node::constant, t, 0, 0, 0, v});
      }
      case 4: return add({Node::iota, t, 0, static_cast<int>(rng_.between(0, 1))});
      case 5:
      case 6: return add({Node::program_id, t, 0, static_cast<int>(rng_.between(0, 1))});
      default: return add({Node::loop_index, t});
    }
  }

  int as(int node, DType t) {
    if (p_.nodes[static_cast<size_t>(node)].dtype == t) return node;
    return add({Node::cast, t, 0, 0, 0, 0, {node}});
  }

  Program& p_;
  Rng& rng_;
};

void generate_elementwise(Program& p, Rng& rng) {
  p.in_dtype = rng.pick(kElementTypes);
  p.rows = rng.between(1, 40);
  p.cols = rng.between(1, 40);
  // Now and then a zero-size array: the grid has a zero dim and runs no step.
  if (rng.chance(0.08)) (rng.chance(0.5) ? p.rows : p.cols) = 0;
  // Half the time the blocks tile the array exactly, otherwise the last block is partial.
  auto block = [&](int64_t n) {
    if (n == 0) return rng.between(1, 4);  // a block over an empty dim is all padding
    if (rng.chance(0.5)) {
      std::vector<int64_t> divisors;
      for (int64_t d = 1; d <= n; ++d)
        if (n % d == 0) divisors.push_back(d);
      return rng.pick(divisors);
    }
    return rng.between(1, n);
  };
  p.block_rows = block(p.rows);
  p.block_cols = block(p.cols);
  p.y_is_row = rng.chance(0.3);
  p.reversed = rng.chance(0.3);
  p.transposed_grid = rng.chance(0.3);
  p.parallel_axes = static_cast<int>(rng.between(0, 2));
  p.interpret_cores = static_cast<int>(rng.between(1, 3));
  p.prefetched = rng.chance(0.25);
  Generator g(p, rng);
  DType t = rng.chance(0.5) ? p.in_dtype : rng.pick(kElementTypes);
  p.root = g.expr(static_cast<int>(rng.between(1, 4)), t, false);
  p.out_dtype = rng.chance(0.7) ? t : rng.pick(kElementTypes);
  if (rng.chance(0.3)) {
    p.overwrite = g.expr(2, t, false);
    p.when_axis = static_cast<int>(rng.between(0, 1));
    p.when_value = rng.between(0, std::max<int64_t>(p.blocks(p.when_axis) - 1, 0));
  }
  p.staged = rng.chance(0.3);
  p.x_buffers = static_cast<int>(rng.between(1, 3));
}

void generate_dot(Program& p, Rng& rng) {
  p.is_dot = true;
  p.in_dtype = rng.pick(std::vector<DType>{pl::f32, pl::f32, pl::bf16, pl::i8, pl::i32});
  p.out_dtype = is_float(p.in_dtype) ? pl::f32 : pl::i32;
  p.rows = rng.between(1, 48);
  p.cols = rng.between(1, 48);
  p.block_rows = rng.between(1, p.rows);
  p.block_cols = rng.between(1, p.cols);
  // k is never partial: padding past k would be summed into in-bounds outputs.
  p.tiled_k = rng.chance(0.5);
  p.block_depth = rng.between(1, 32);
  p.depth = p.tiled_k ? p.block_depth * rng.between(1, 4) : p.block_depth;
  p.parallel_axes = static_cast<int>(rng.between(0, 2));
  p.interpret_cores = static_cast<int>(rng.between(1, 3));
  p.x_buffers = static_cast<int>(rng.between(1, 3));
}

}  // namespace

using V = const Value&;

const std::vector<UnaryOp>& unary_ops() {
  static const std::vector<UnaryOp> ops = {
      {"-", true, true, [](V a) { return -a; }},
      {"pl::abs", true, true, [](V a) { return pl::abs(a); }},
      {"~", true, false, [](V a) { return ~a; }},
      {"pl::exp", false, true, [](V a) { return pl::exp(a); }},
      {"pl::log", false, true, [](V a) { return pl::log(a); }},
      {"pl::tanh", false, true, [](V a) { return pl::tanh(a); }},
      {"pl::sqrt", false, true, [](V a) { return pl::sqrt(a); }},
      {"pl::rsqrt", false, true, [](V a) { return pl::rsqrt(a); }},
      {"pl::sigmoid", false, true, [](V a) { return pl::sigmoid(a); }},
      {"pl::sin", false, true, [](V a) { return pl::sin(a); }},
      {"pl::cos", false, true, [](V a) { return pl::cos(a); }},
      {"pl::floor", false, true, [](V a) { return pl::floor(a); }},
      {"pl::ceil", false, true, [](V a) { return pl::ceil(a); }}};
  return ops;
}
const std::vector<BinaryOp>& binary_ops() {
  static const std::vector<BinaryOp> ops = {
      {"+", true, true, [](V a, V b) { return a + b; }},
      {"-", true, true, [](V a, V b) { return a - b; }},
      {"*", true, true, [](V a, V b) { return a * b; }},
      {"/", true, true, [](V a, V b) { return a / b; }},
      {"%", true, true, [](V a, V b) { return a % b; }},
      {"pl::maximum", true, true, [](V a, V b) { return pl::maximum(a, b); }},
      {"pl::minimum", true, true, [](V a, V b) { return pl::minimum(a, b); }},
      {"pl::pow", true, true, [](V a, V b) { return pl::pow(a, b); }},
      {"pl::floor_divide", true, true, [](V a, V b) { return pl::floor_divide(a, b); }},
      {"pl::mod", true, true, [](V a, V b) { return pl::mod(a, b); }},
      {"&", true, false, [](V a, V b) { return a & b; }},
      {"|", true, false, [](V a, V b) { return a | b; }},
      {"^", true, false, [](V a, V b) { return a ^ b; }}};
  return ops;
}
const std::vector<BinaryOp>& compare_ops() {
  static const std::vector<BinaryOp> ops = {
      {"==", true, true, [](V a, V b) { return a == b; }}, {"!=", true, true, [](V a, V b) { return a != b; }},
      {"<", true, true, [](V a, V b) { return a < b; }},   {"<=", true, true, [](V a, V b) { return a <= b; }},
      {">", true, true, [](V a, V b) { return a > b; }},   {">=", true, true, [](V a, V b) { return a >= b; }}};
  return ops;
}
const std::vector<ReduceOp>& reduce_ops() {
  // Float sums are left out: compiled code reassociates them (docs/design.md, rule 13's note on
  // reductions), so their bits differ from the interpreter's by design. Float max and min are exact.
  static const std::vector<ReduceOp> ops = {{"pl::sum", true, false, [](V a, int axis) { return pl::sum(a, axis); }},
                                            {"pl::max", true, true, [](V a, int axis) { return pl::max(a, axis); }},
                                            {"pl::min", true, true, [](V a, int axis) { return pl::min(a, axis); }}};
  return ops;
}

int64_t Program::blocks(int axis) const {
  int64_t n = axis == 0 ? rows : cols, b = axis == 0 ? block_rows : block_cols;
  return (n + b - 1) / b;
}

std::vector<int64_t> Program::grid() const {
  if (is_dot) {
    std::vector<int64_t> g = {blocks(0), blocks(1)};
    if (tiled_k) g.push_back(depth / block_depth);
    return g;
  }
  if (transposed_grid) return {blocks(1), blocks(0)};
  return {blocks(0), blocks(1)};
}

std::vector<int64_t> Program::x_shape() const { return {rows, is_dot ? depth : cols}; }
std::vector<int64_t> Program::y_shape() const {
  if (is_dot) return {depth, cols};
  return {y_is_row ? 1 : rows, cols};
}
DType Program::scratch_dtype() const { return is_dot ? out_dtype : nodes[static_cast<size_t>(root)].dtype; }

Program generate(uint64_t seed) {
  Rng rng(seed);
  Program p;
  p.seed = seed;
  if (rng.chance(0.2)) generate_dot(p, rng);
  else generate_elementwise(p, rng);
  return p;
}

namespace {

// Values that exercise the element rules: NaN, infinities, signed zeros, subnormals, huge values.
double float_value(Rng& rng) {
  if (rng.chance(0.8)) return rng.real(-4, 4);
  return rng.pick(std::vector<double>{std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                                      -std::numeric_limits<double>::infinity(), 0.0, -0.0, 1e-40, -1e-7, 65504.0,
                                      1e30, -1.0, 0.5});
}

// INT_MIN, INT_MAX, -1 and 0 of the dtype, small values (so divisions say something), any value.
int64_t int_value(Rng& rng, DType t) {
  const int64_t lo = t == pl::i8 ? INT8_MIN : t == pl::i32 ? INT32_MIN : INT64_MIN;
  const int64_t hi = t == pl::i8 ? INT8_MAX : t == pl::i32 ? INT32_MAX : INT64_MAX;
  double r = rng.real(0, 1);
  if (r < 0.6) return rng.between(-20, 20);
  if (r < 0.8) return rng.between(lo, hi);
  return rng.pick(std::vector<int64_t>{lo, hi, -1, 0});
}

Array random_array(Rng& rng, const Program& p, const std::vector<int64_t>& shape) {
  int64_t n = shape[0] * shape[1];
  if (is_float(p.in_dtype)) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double& e : v) e = p.is_dot ? rng.real(-1, 1) : float_value(rng);
    return Array::from_vector(v, shape, p.in_dtype);
  }
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t& e : v) e = int_value(rng, p.in_dtype);
  return Array::from_vector(v, shape, p.in_dtype);
}

}  // namespace

std::vector<Array> make_inputs(const Program& p) {
  Rng rng(p.seed ^ 0x9e3779b97f4a7c15ull);
  Array x = random_array(rng, p, p.x_shape());
  Array y = random_array(rng, p, p.y_shape());
  if (!p.prefetched) return {x, y};
  // A full row block for each row block of o (block 0 when there is only one, partial or not).
  const int64_t full = std::max<int64_t>(p.rows / p.block_rows, 1);
  std::vector<int32_t> ids(static_cast<size_t>(p.blocks(0)));
  for (int32_t& id : ids) id = static_cast<int32_t>(rng.between(0, full - 1));
  return {Array::from_vector(ids, {p.blocks(0)}), x, y};
}

namespace {

std::string dtype_text(DType t) { return fmt::format("pl::{}", t == pl::bool_ ? "bool_" : std::string(dtype_name(t))); }

class Printer {
 public:
  explicit Printer(const Program& p) : p_(p) {}

  std::string expr(int n) const {
    const Expr& e = p_.nodes[static_cast<size_t>(n)];
    auto arg = [&](size_t i) { return expr(e.args[i]); };
    switch (e.kind) {
      case Node::x: return "x()";
      case Node::y: return p_.y_is_row ? fmt::format("pl::broadcast_to(y(), {})", block()) : "y()";
      case Node::constant: return fmt::format("pl::full({}, {}, {})", block(), e.constant, dtype_text(e.dtype));
      case Node::iota: return fmt::format("pl::iota({}, {}, {})", block(), e.axis, dtype_text(e.dtype));
      case Node::program_id:
        return fmt::format("pl::broadcast_to(block_index({}).astype({}), {})", e.axis, dtype_text(e.dtype), block());
      case Node::loop_index: return fmt::format("pl::broadcast_to(i.astype({}), {})", dtype_text(e.dtype), block());
      case Node::unary: return call(unary_ops()[static_cast<size_t>(e.op)].name, {arg(0)});
      case Node::binary: return call(binary_ops()[static_cast<size_t>(e.op)].name, {arg(0), arg(1)});
      case Node::select:
        return fmt::format("pl::where({}, {}, {})", call(compare_ops()[static_cast<size_t>(e.op)].name, {arg(0), arg(1)}),
                           arg(2), arg(3));
      case Node::cast: return fmt::format("({}).astype({})", arg(0), dtype_text(e.dtype));
      case Node::reduce:
        return fmt::format("pl::broadcast_to(pl::reshape({}(in_array({}, {}), {}), {}), {})",
                           reduce_ops()[static_cast<size_t>(e.op)].name, arg(0), e.axis, e.axis,
                           e.axis == 0 ? fmt::format("{{1, {}}}", p_.block_cols) : fmt::format("{{{}, 1}}", p_.block_rows),
                           block());
      case Node::loop:
        return fmt::format("pl::fori_loop(0, {}, {}, [&](pl::Value i, pl::Value c) {{ return {}; }})", e.value, arg(0),
                           call(binary_ops()[static_cast<size_t>(e.op)].name, {"c", arg(1)}));
      case Node::cond:
        return fmt::format("pl::cond(block_index({}) == {}, [&] {{ return {}; }}, [&] {{ return {}; }})", e.axis, e.value,
                           arg(0), arg(1));
      case Node::prefetched: return fmt::format("pl::broadcast_to(ids[block_index(0)].astype({}), {})", dtype_text(e.dtype), block());
      case Node::while_loop:
        return fmt::format(
            "pl::while_loop([&](const std::vector<pl::Value>& c) {{ return c[0] < {}; }}, [&](const std::vector<pl::Value>& c) "
            "{{ return std::vector<pl::Value>{{c[0] + 1, {}}}; }}, {{pl::zeros({{}}, pl::i32), {}}})[1]",
            e.value, call(binary_ops()[static_cast<size_t>(e.op)].name, {"c[1]", arg(1)}), arg(0));
      case Node::switch_: {
        std::vector<std::string> branches;
        for (size_t k = 0; k < e.args.size(); ++k) branches.push_back(fmt::format("[&] {{ return {}; }}", arg(k)));
        return fmt::format("pl::switch_(block_index({}) - {}, {{{}}})", e.axis, e.value, fmt::join(branches, ", "));
      }
    }
    return "?";
  }

  std::string block() const { return fmt::format("{{{}, {}}}", p_.block_rows, p_.block_cols); }

 private:
  static std::string call(const std::string& name, const std::vector<std::string>& args) {
    if (name.rfind("pl::", 0) == 0) return fmt::format("{}({})", name, fmt::join(args, ", "));
    if (args.size() == 1) return fmt::format("{}({})", name, args[0]);
    return fmt::format("({} {} {})", args[0], name, args[1]);
  }

  const Program& p_;
};

std::string shape_text(const std::vector<int64_t>& s) { return fmt::format("({})", fmt::join(s, ", ")); }

}  // namespace

std::string to_text(const Program& p) {
  std::string s = fmt::format("// fuzz program, seed {}\n", p.seed);
  s += fmt::format("// x {} {}, y {} {} -> o ({}, {}) {}\n", shape_text(p.x_shape()), dtype_name(p.in_dtype),
                   shape_text(p.y_shape()), dtype_name(p.in_dtype), p.rows, p.cols, dtype_name(p.out_dtype));
  s += fmt::format("// grid {}, {} leading axes parallel, interpreter on {} core(s), x's spec pl::Buffered({})\n",
                   shape_text(p.grid()), p.parallel_axes, p.interpret_cores, p.x_buffers);
  if (p.is_dot) {
    s += fmt::format("// blocks: x ({}, {}), y ({}, {}), o ({}, {}); scratch acc ({}, {}) {}\n", p.block_rows,
                     p.block_depth, p.block_depth, p.block_cols, p.block_rows, p.block_cols, p.block_rows,
                     p.block_cols, dtype_name(p.out_dtype));
    if (p.tiled_k)
      s += fmt::format(
          "pl::when(pl::program_id(2) == 0, [&] {{ acc() = pl::zeros_like(acc); }});\n"
          "acc() += pl::dot(x(), y(), {0});\n"
          "pl::when(pl::program_id(2) == {1}, [&] {{ o() = acc(); }});\n",
          dtype_text(p.out_dtype), p.depth / p.block_depth - 1);
    else s += fmt::format("o() = pl::dot(x(), y(), {});\n", dtype_text(p.out_dtype));
    return s;
  }
  Printer pr(p);
  s += fmt::format("// blocks {} of x and o, y {}; index maps {}{}\n", pr.block(),
                   p.y_is_row ? fmt::format("(1, {})", p.block_cols) : pr.block(),
                   p.transposed_grid ? "(j, i) (grid axis 0 walks columns)" : "(i, j)",
                   p.reversed ? ", each index reversed (blocks - 1 - index)" : "");
  if (p.prefetched)
    s += fmt::format("// pl::PrefetchScalarGridSpec: ids ({}) i32 prefetched, x's index map (ids[i], j)\n", p.blocks(0));
  s += "// block_index(a): the block index along array axis a; in_array(v, a): v where the element is inside the "
       "array along a, else 0\n";
  std::string value = pr.expr(p.root);
  if (p.staged) {
    s += fmt::format("scratch() = {};\n", value);
    value = "scratch()";
  }
  s += fmt::format("o() = ({}).astype({});\n", value, dtype_text(p.out_dtype));
  if (p.overwrite >= 0)
    s += fmt::format("pl::when(block_index({}) == {}, [&] {{ o() = ({}).astype({}); }});\n", p.when_axis, p.when_value,
                     pr.expr(p.overwrite), dtype_text(p.out_dtype));
  return s;
}

}  // namespace tessera::fuzz
