#include "tests/fuzz/differential.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <optional>

#include <fmt/format.h>

#include "jit/ir/printer.h"

namespace tessera::fuzz {

namespace pl = tessera;

namespace {

// Traces an element-wise program's expression inside the kernel; mirrors to_text's Printer.
class Tracer {
 public:
  // `ids`: the scalar-prefetched table of a prefetched program, else null.
  Tracer(const Program& p, pl::Ref x, pl::Ref y, const pl::Ref* ids) : p_(p), x_(x), y_(y), ids_(ids) {}

  pl::Value expr(int n) {
    const Expr& e = p_.nodes[static_cast<size_t>(n)];
    auto arg = [&](size_t i) { return expr(e.args[i]); };
    const pl::Shape block = {p_.block_rows, p_.block_cols};
    switch (e.kind) {
      case Node::x: return x_();
      case Node::y: return p_.y_is_row ? pl::broadcast_to(y_(), block) : pl::Value(y_());
      case Node::constant: return pl::full(block, e.constant, e.dtype);
      case Node::iota: return pl::iota(block, e.axis, e.dtype);
      case Node::program_id: return pl::broadcast_to(block_index(e.axis).astype(e.dtype), block);
      case Node::loop_index: return pl::broadcast_to(loop_index_.back().astype(e.dtype), block);
      case Node::unary: return unary_ops()[static_cast<size_t>(e.op)].apply(arg(0));
      case Node::binary: return binary_ops()[static_cast<size_t>(e.op)].apply(arg(0), arg(1));
      case Node::select: {
        pl::Value c = compare_ops()[static_cast<size_t>(e.op)].apply(arg(0), arg(1));
        return pl::where(c, arg(2), arg(3));
      }
      case Node::cast: return arg(0).astype(e.dtype);
      case Node::reduce: {
        pl::Shape kept = e.axis == 0 ? pl::Shape{1, p_.block_cols} : pl::Shape{p_.block_rows, 1};
        return pl::broadcast_to(pl::reshape(reduce_ops()[static_cast<size_t>(e.op)].apply(in_array(arg(0), e.axis), e.axis), kept), block);
      }
      case Node::loop: {
        pl::Value init = arg(0);
        return pl::fori_loop(0, e.value, init, [&](pl::Value i, pl::Value c) {
          loop_index_.push_back(i);
          pl::Value next = binary_ops()[static_cast<size_t>(e.op)].apply(c, expr(e.args[1]));
          loop_index_.pop_back();
          return next;
        });
      }
      case Node::cond:
        return pl::cond(block_index(e.axis) == e.value, [&] { return expr(e.args[0]); }, [&] { return expr(e.args[1]); });
      case Node::prefetched: return pl::broadcast_to((*ids_)[block_index(0)].astype(e.dtype), block);
      case Node::while_loop: {
        const BinaryOp& op = binary_ops()[static_cast<size_t>(e.op)];
        return pl::while_loop([&](const std::vector<pl::Value>& c) { return c[0] < e.value; },
                              [&](const std::vector<pl::Value>& c) {
                                return std::vector<pl::Value>{c[0] + 1, op.apply(c[1], expr(e.args[1]))};
                              },
                              {pl::zeros({}, pl::i32), arg(0)})
            .at(1);
      }
      case Node::switch_: {
        std::vector<std::function<pl::Value()>> branches;
        for (int a : e.args) branches.push_back([this, a] { return expr(a); });
        return pl::switch_(block_index(e.axis) - e.value, branches);
      }
    }
    return {};
  }

  // The block index along array axis `axis` at this grid point.
  pl::Value block_index(int axis) const {
    pl::Value v = pl::program_id(p_.transposed_grid ? 1 - axis : axis);
    return p_.reversed ? (p_.blocks(axis) - 1) - v : v;
  }

  // `v` where its element lies inside the array along `axis`, else 0: a partial edge block's
  // padding must not reach a reduction.
  pl::Value in_array(const pl::Value& v, int axis) const {
    const int64_t n = axis == 0 ? p_.rows : p_.cols, b = axis == 0 ? p_.block_rows : p_.block_cols;
    pl::Value inside = pl::iota(v.shape(), axis) + block_index(axis) * b < n;
    return pl::where(inside, v, pl::zeros_like(v));
  }

 private:
  const Program& p_;
  pl::Ref x_, y_;
  const pl::Ref* ids_;
  std::vector<pl::Value> loop_index_;
};

pl::CompilerParams params_of(const Program& p) {
  pl::CompilerParams params;
  const size_t rank = p.grid().size();
  for (size_t a = 0; a < rank; ++a)
    params.dimension_semantics.push_back(static_cast<int>(a) < p.parallel_axes && a < 2 ? pl::parallel : pl::arbitrary);
  return params;
}

// The kernel body of an element-wise program.
void store(const Program& p, Tracer& t, pl::Ref o, pl::Ref scratch) {
  pl::Value value = t.expr(p.root);
  if (p.staged) {
    scratch() = value;
    value = scratch();
  }
  o() = value.astype(p.out_dtype);
  if (p.overwrite >= 0)
    pl::when(t.block_index(p.when_axis) == p.when_value, [&] { o() = t.expr(p.overwrite).astype(p.out_dtype); });
}

// The pallas_call of an element-wise program.
pl::PallasCall<pl::Array> elementwise_call(const Program& p, pl::CallOptions options) {
  // Grid indices (a, b) to the block indices (rows, cols) of x and o.
  auto rows_cols = [&p](pl::Value a, pl::Value b) {
    pl::Value r = p.transposed_grid ? b : a, c = p.transposed_grid ? a : b;
    if (p.reversed) {
      r = (p.blocks(0) - 1) - r;
      c = (p.blocks(1) - 1) - c;
    }
    return std::pair{r, c};
  };
  auto xo_map = [rows_cols](pl::Value a, pl::Value b) {
    auto [r, c] = rows_cols(a, b);
    return pl::idx(r, c);
  };
  auto y_map = [rows_cols, row = p.y_is_row](pl::Value a, pl::Value b) {
    auto [r, c] = rows_cols(a, b);
    return row ? pl::idx(0, c) : pl::idx(r, c);
  };
  const pl::Shape block = {p.block_rows, p.block_cols};
  const std::vector<pl::BlockDim> xo_block = {p.block_rows, p.block_cols}, y_block = {p.y_is_row ? 1 : p.block_rows, p.block_cols};
  options.compiler_params = params_of(p);
  const std::vector<pl::ScratchShape> scratch = {pl::VMEM(block, p.scratch_dtype())};
  const pl::ShapeDtype out({p.rows, p.cols}, p.out_dtype);
  if (p.prefetched) {
    // x's row block comes from the prefetched table; every index map takes the table last.
    auto kernel = [&p](pl::Ref ids, pl::Ref x, pl::Ref y, pl::Ref o, pl::Ref s) {
      Tracer t(p, x, y, &ids);
      store(p, t, o, s);
    };
    auto x_map = [rows_cols](pl::Value a, pl::Value b, pl::Ref ids) {
      auto [r, c] = rows_cols(a, b);
      return pl::idx(ids[r], c);
    };
    auto taking_ids = [](auto map) { return [map](pl::Value a, pl::Value b, pl::Ref) { return map(a, b); }; };
    return pl::pallas_call(kernel,
                           pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1,
                                                      .grid = p.grid(),
                                                      .in_specs = {pl::BlockSpec(xo_block, x_map, pl::Buffered(p.x_buffers)),
                                                                   pl::BlockSpec(y_block, taking_ids(y_map))},
                                                      .out_specs = {pl::BlockSpec(xo_block, taking_ids(xo_map))},
                                                      .scratch_shapes = scratch},
                           out, options);
  }
  auto kernel = [&p](pl::Ref x, pl::Ref y, pl::Ref o, pl::Ref s) {
    Tracer t(p, x, y, nullptr);
    store(p, t, o, s);
  };
  return pl::pallas_call(kernel,
                         pl::GridSpec{.grid = p.grid(),
                                      .in_specs = {pl::BlockSpec(xo_block, xo_map, pl::Buffered(p.x_buffers)),
                                                   pl::BlockSpec(y_block, y_map)},
                                      .out_specs = {pl::BlockSpec(xo_block, xo_map)},
                                      .scratch_shapes = scratch},
                         out, options);
}

// The pallas_call of a dot program: the seed's matmul, over one k block or tiled over k.
auto dot_call(const Program& p, pl::CallOptions options) {
  auto kernel = [&p](pl::Ref x, pl::Ref y, pl::Ref o, pl::Ref acc) {
    if (!p.tiled_k) {
      o() = pl::dot(x(), y(), p.out_dtype);
      return;
    }
    pl::when(pl::program_id(2) == 0, [&] { acc() = pl::zeros_like(acc); });
    acc() += pl::dot(x(), y(), p.out_dtype);
    pl::when(pl::program_id(2) == p.depth / p.block_depth - 1, [&] { o() = acc(); });
  };
  auto x_map = [](pl::Value i, pl::Value, pl::Value k) { return pl::idx(i, k); };
  auto y_map = [](pl::Value, pl::Value j, pl::Value k) { return pl::idx(k, j); };
  auto o_map = [](pl::Value i, pl::Value j, pl::Value) { return pl::idx(i, j); };
  auto x2 = [](pl::Value i, pl::Value) { return pl::idx(i, 0); };
  auto y2 = [](pl::Value, pl::Value j) { return pl::idx(0, j); };
  auto o2 = [](pl::Value i, pl::Value j) { return pl::idx(i, j); };
  const bool t = p.tiled_k;
  options.compiler_params = params_of(p);
  return pl::pallas_call(
      kernel,
      pl::GridSpec{.grid = p.grid(),
                   .in_specs = {t ? pl::BlockSpec({p.block_rows, p.block_depth}, x_map, pl::Buffered(p.x_buffers))
                                  : pl::BlockSpec({p.block_rows, p.depth}, x2, pl::Buffered(p.x_buffers)),
                                t ? pl::BlockSpec({p.block_depth, p.block_cols}, y_map) : pl::BlockSpec({p.depth, p.block_cols}, y2)},
                   .out_specs = {t ? pl::BlockSpec({p.block_rows, p.block_cols}, o_map) : pl::BlockSpec({p.block_rows, p.block_cols}, o2)},
                   .scratch_shapes = {pl::VMEM({p.block_rows, p.block_cols}, p.out_dtype)}},
      pl::ShapeDtype({p.rows, p.cols}, p.out_dtype), options);
}

// Runs `body(call)` on the program's pallas_call with these options.
template <class F>
auto with_call(const Program& p, const pl::CallOptions& options, F body) {
  if (p.is_dot) return body(dot_call(p, options));
  return body(elementwise_call(p, options));
}

pl::CallOptions interpreted(const Program& p) {
  pl::CallOptions o;
  o.interpret = pl::InterpretParams{.num_cores_or_threads = p.interpret_cores};
  return o;
}

struct Outcome {
  std::optional<pl::Array> out;
  std::string error;
};

Outcome run(const Program& p, const std::vector<pl::Array>& inputs, const pl::CallOptions& options) {
  try {
    return {with_call(p, options, [&](const auto& call) { return call(inputs); }), ""};
  } catch (const std::exception& e) {
    return {std::nullopt, e.what()};
  }
}

std::string element_text(const pl::Array& a, int64_t i) {
  if (is_float(a.dtype())) return fmt::format("{}", a.to_vector<double>()[static_cast<size_t>(i)]);
  return fmt::format("{}", a.to_vector<int64_t>()[static_cast<size_t>(i)]);
}

// The first element where compiled and interpreted differ, or nothing.
std::optional<std::string> first_difference(const Program& p, const pl::Array& compiled, const pl::Array& interp) {
  if (compiled.shape() != interp.shape() || compiled.dtype() != interp.dtype())
    return fmt::format("the outputs differ in shape or dtype: compiled {} {}, interpreted {} {}",
                       fmt::join(compiled.shape(), "x"), dtype_name(compiled.dtype()), fmt::join(interp.shape(), "x"),
                       dtype_name(interp.dtype()));
  const int64_t n = compiled.size(), es = static_cast<int64_t>(dtype_size(compiled.dtype()));
  const bool fp = is_float(compiled.dtype());
  std::vector<double> c = fp ? compiled.to_vector<double>() : std::vector<double>{};
  std::vector<double> r = fp ? interp.to_vector<double>() : std::vector<double>{};
  const double tolerance = 1e-6 * static_cast<double>(p.depth + 1);
  for (int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<size_t>(i);
    bool same;
    if (fp && p.is_dot) same = std::abs(c[k] - r[k]) <= tolerance + tolerance * std::abs(r[k]);
    else if (fp && std::isnan(c[k]) && std::isnan(r[k])) same = true;
    else same = std::memcmp(compiled.data() + i * es, interp.data() + i * es, static_cast<size_t>(es)) == 0;
    if (!same)
      return fmt::format("element ({}, {}): compiled {}, interpreted {}{}", i / p.cols, i % p.cols,
                         element_text(compiled, i), element_text(interp, i),
                         p.is_dot && fp ? fmt::format(" (tolerance {} relative and absolute)", tolerance) : "");
  }
  return std::nullopt;
}

}  // namespace

Verdict check(const Program& p) {
  const std::vector<pl::Array> inputs = make_inputs(p);
  Outcome compiled = run(p, inputs, pl::CallOptions{});
  Outcome interp = run(p, inputs, interpreted(p));
  if (!compiled.out && !interp.out)
    return {Verdict::both_threw, fmt::format("compiled threw: {}\ninterpreted threw: {}", compiled.error, interp.error)};
  if (!compiled.out) return {Verdict::one_threw, fmt::format("only compiled threw: {}", compiled.error)};
  if (!interp.out) return {Verdict::one_threw, fmt::format("only interpreted threw: {}", interp.error)};
  if (auto d = first_difference(p, *compiled.out, *interp.out)) return {Verdict::differ, *d};
  return {};
}

namespace {

// `p` with only the nodes its root and overwrite reach, operands before their users.
Program compacted(const Program& p) {
  if (p.is_dot) return p;
  Program c = p;
  c.nodes.clear();
  auto visit = [&](auto& self, int n) -> int {
    Expr e = p.nodes[static_cast<size_t>(n)];
    for (int& a : e.args) a = self(self, a);
    c.nodes.push_back(std::move(e));
    return static_cast<int>(c.nodes.size()) - 1;
  };
  c.root = visit(visit, p.root);
  if (p.overwrite >= 0) c.overwrite = visit(visit, p.overwrite);
  return c;
}

// Whether node n refers to the index of a loop around it (an inner loop's body refers to its own).
bool uses_loop_index(const Program& p, int n) {
  const Expr& e = p.nodes[static_cast<size_t>(n)];
  if (e.kind == Node::loop_index) return true;
  if (e.kind == Node::loop) return uses_loop_index(p, e.args[0]);
  return std::any_of(e.args.begin(), e.args.end(), [&](int a) { return uses_loop_index(p, a); });
}

// The programs one step smaller than `p`. Every candidate lowers a count that never grows back (the
// nodes, the non-constant nodes, a loop's trips, a dim or block dim, a flag set), so shrinking ends.
// A cond or pl::when comparing with a block index past a shrunk grid stays valid: it is never taken.
std::vector<Program> smaller(const Program& p) {
  std::vector<Program> candidates;
  auto add = [&](auto change) {
    candidates.push_back(p);
    change(candidates.back());
  };
  if (p.overwrite >= 0) add([](Program& c) { c.overwrite = -1; });
  if (p.staged) add([](Program& c) { c.staged = false; });
  // A node gives way to an operand of its type, or of several operands to one cast to its type (a
  // where to its compared value): control flow to one of its branches, its loop's initial value or
  // body. A loop's body that refers to the loop's index never replaces the loop.
  for (size_t n = 0; n < p.nodes.size(); ++n) {
    const Expr& e = p.nodes[n];
    for (size_t a = 0; a < e.args.size(); ++a) {
      if (e.kind == Node::loop && a == 1 && uses_loop_index(p, e.args[1])) continue;
      if (p.nodes[static_cast<size_t>(e.args[a])].dtype == e.dtype)
        add([&](Program& c) { c.nodes[n] = p.nodes[static_cast<size_t>(e.args[a])]; });
      else if (e.args.size() >= 2)
        add([&](Program& c) { c.nodes[n] = Expr{Node::cast, e.dtype, 0, 0, 0, 0, {e.args[a]}}; });
    }
    if ((e.kind == Node::loop || e.kind == Node::while_loop) && e.value > 1) add([&](Program& c) { c.nodes[n].value = 1; });
  }
  // Then a node gives way to a constant of its type: what it computed did not matter.
  for (size_t n = 0; n < p.nodes.size(); ++n)
    if (p.nodes[n].kind != Node::constant)
      add([&](Program& c) { c.nodes[n] = Expr{Node::constant, p.nodes[n].dtype, 0, 0, 0, 0, {}}; });
  // Fewer grid steps and smaller blocks, along each array axis: one block, one block fewer, half
  // the block, one element fewer. A block never outgrows its array dim (unless that is 0).
  for (int axis : {0, 1}) {
    auto dims = [axis](Program& c) { return axis == 0 ? std::pair<int64_t*, int64_t*>{&c.rows, &c.block_rows}
                                                       : std::pair<int64_t*, int64_t*>{&c.cols, &c.block_cols}; };
    const int64_t n = axis == 0 ? p.rows : p.cols, b = axis == 0 ? p.block_rows : p.block_cols;
    if (n > b) add([&](Program& c) { *dims(c).first = b; });
    if (n > 2 * b) add([&](Program& c) { *dims(c).first = n - b; });
    if (b > 1) add([&](Program& c) { *dims(c).second = b / 2; });
    if (n > 1)
      add([&](Program& c) {
        auto [cn, cb] = dims(c);
        *cn = n - 1;
        *cb = std::min(b, n - 1);
      });
  }
  // A dot's k: fewer k steps, a smaller k block, one k block instead of a tiled k.
  if (p.is_dot) {
    const int64_t steps = p.depth / p.block_depth;
    if (p.tiled_k && steps > 1) add([&](Program& c) { c.depth -= c.block_depth; });
    if (p.block_depth > 1)
      add([&](Program& c) {
        c.block_depth /= 2;
        c.depth = steps * c.block_depth;
      });
    if (p.tiled_k)
      add([](Program& c) {
        c.tiled_k = false;
        c.depth = c.block_depth;
      });
  }
  // The plainest index maps and schedule.
  if (p.reversed) add([](Program& c) { c.reversed = false; });
  if (p.transposed_grid) add([](Program& c) { c.transposed_grid = false; });
  if (p.y_is_row) add([](Program& c) { c.y_is_row = false; });
  if (p.parallel_axes > 0) add([](Program& c) { c.parallel_axes = 0; });
  if (p.interpret_cores > 1) add([](Program& c) { c.interpret_cores = 1; });
  if (p.x_buffers > 1) add([](Program& c) { c.x_buffers = 1; });
  if (p.prefetched && std::none_of(p.nodes.begin(), p.nodes.end(), [](const Expr& e) { return e.kind == Node::prefetched; }))
    add([](Program& c) { c.prefetched = false; });
  return candidates;
}

}  // namespace

Program shrink(const Program& p, const StillFails& still_fails) {
  Program best = compacted(p);
  for (bool progress = true; progress;) {
    progress = false;
    for (const Program& c : smaller(best))
      // The predicate sees only what the candidate uses.
      if (Program used = compacted(c); still_fails(used)) {
        best = std::move(used);
        progress = true;
        break;
      }
  }
  return best;
}

Program shrink(const Program& p, const Verdict& failure, const Checker& checker) {
  if (failure.kind == Verdict::agree || failure.kind == Verdict::both_threw) return p;
  return shrink(p, [&](const Program& candidate) { return checker(candidate).kind == failure.kind; });
}

std::string reproducer(const Program& p, const Verdict& failure, const Checker& checker) {
  Program small = shrink(p, failure, checker);
  Verdict v = checker(small);
  if (v.kind == Verdict::agree) v = failure;  // a failure that does not come back: report the original
  std::string ir;
  try {
    ir = with_call(small, pl::CallOptions{}, [&](const auto& call) { return ir::print(call.traced(make_inputs(small))); });
  } catch (const std::exception& e) {
    ir = fmt::format("(tracing failed: {})\n", e.what());
  }
  return fmt::format(
      "fuzz: the backends disagree on the program of seed {} (rerun: tessera_fuzz --seed {} --count 1)\n"
      "{}\nthe program, shrunk:\n{}\nits traced IR:\n{}",
      p.seed, p.seed, v.detail, to_text(small), ir);
}

int run_seeds(uint64_t first, int64_t count, const std::function<void(const std::string&)>& on_failure,
              const Checker& checker) {
  int failures = 0;
  for (int64_t i = 0; i < count; ++i) {
    Program p = generate(first + static_cast<uint64_t>(i));
    Verdict v = checker(p);
    if (v.kind == Verdict::agree) continue;
    ++failures;
    on_failure(reproducer(p, v, checker));
  }
  return failures;
}

}  // namespace tessera::fuzz
