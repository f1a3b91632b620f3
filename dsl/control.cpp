#include "dsl/control.h"

#include <fmt/format.h>

#include <algorithm>

#include "dsl/pipeline_trace.h"
#include "runtime/debug_print_format.h"

namespace tessera {

using ir::OpKind;

namespace {

detail::TraceContext& grid_context(int axis, const char* api, SourceLoc loc) {
  auto& ctx = detail::TraceContext::current(api, loc);
  // pallas_call kernels and index maps are traced inside a grid; mpmd_map kernels have none.
  if (ctx.grids.empty())
    throw UserError(fmt::format("{} in a kernel without a grid", api),
                    "an mpmd_map kernel: it runs once at every point of its mesh",
                    "ask for the point with pl::axis_index(\"<axis name>\") (or run an emit_pipeline, whose body has a grid)",
                    loc);
  const auto& grid = ctx.grids.back().sizes;
  if (axis < 0 || axis >= static_cast<int>(grid.size()))
    throw UserError(fmt::format("{}: axis {} is out of range for the grid", api, axis),
                    fmt::format("a grid of {} dims ({})", grid.size(), detail::grid_tuple_str(grid)),
                    grid.empty() ? std::string("this grid has no axes: the kernel runs once")
                                 : fmt::format("use an axis in [0, {})", grid.size()),
                    loc);
  return ctx;
}

Value bool_condition(const Operand& cond, const char* api) {
  Value c = cond.materialize();
  if (!is_bool(c.dtype()) || !c.is_scalar())
    throw UserError(fmt::format("{} needs a bool scalar condition", api), detail::describe(c),
                    "compare to get a bool, e.g. pl::program_id(0) == 0", cond.loc());
  return c;
}

ir::RegionId traced_region(detail::TraceContext& ctx, const std::vector<Type>& args, const char* what,
                           const std::function<std::vector<Value>(const std::vector<Value>&)>& body,
                           std::vector<Value>* results, SourceLoc loc) {
  ir::RegionId r = ctx.builder().create_region(args);
  detail::TraceContext::Scope scope(ctx, r, what);
  std::vector<Value> arg_values;
  for (ir::ValueId a : ctx.builder().function().regions[r].args) arg_values.push_back(Value::wrap(ctx, a));
  std::vector<Value> out = body(arg_values);
  std::vector<ir::ValueId> ids;
  for (const Value& v : out) {
    ctx.check_visible(v.id(), what, loc);
    ids.push_back(v.id());
  }
  ctx.builder().create(OpKind::Yield, ids, {}, {}, loc);
  if (results) *results = std::move(out);
  return r;
}

std::string types_str(const std::vector<Value>& vs) {
  std::string s;
  for (const Value& v : vs) s += (s.empty() ? "" : ", ") + type_str(v.type());
  return "(" + s + ")";
}

bool same_types(const std::vector<Value>& a, const std::vector<Value>& b) {
  bool same = a.size() == b.size();
  for (size_t i = 0; same && i < a.size(); ++i) same = a[i].type() == b[i].type();
  return same;
}

// A loop body (for, while) hands back carries of the types it was given.
void check_carry(const std::vector<Value>& init, const std::vector<Value>& yielded, const char* api, SourceLoc loc) {
  if (!same_types(init, yielded))
    throw UserError(fmt::format("{}: the body returns a carry of another type than the initial one", api),
                    fmt::format("initial {}, returned {}", types_str(init), types_str(yielded)),
                    "return the carry with the initial value's shape and dtype (use .astype to match)", loc);
}

// pl::switch_: branch k returns what branch 0 does.
void check_branch(const std::vector<Value>& first, const std::vector<Value>& branch, size_t k, SourceLoc loc) {
  if (!same_types(first, branch))
    throw UserError("pl::switch_: the branches return different types",
                    fmt::format("branch 0 returns {}, branch {} returns {}", types_str(first), k, types_str(branch)),
                    "return values of the same shapes and dtypes from every branch (use .astype to match)", loc);
}

// if(c) {then_fn()} else {else_fn()}: traces both branches, lets `check` compare what they return,
// then emits the if; returns its results.
std::vector<Value> traced_if(detail::TraceContext& ctx, const Value& c, const char* what,
                             const std::function<std::vector<Value>()>& then_fn,
                             const std::function<std::vector<Value>()>& else_fn,
                             const std::function<void(const std::vector<Value>&, const std::vector<Value>&)>& check,
                             SourceLoc loc) {
  std::vector<Value> t, f;
  ir::RegionId then_r = traced_region(ctx, {}, what, [&](const std::vector<Value>&) { return then_fn(); }, &t, loc);
  ir::RegionId else_r = traced_region(ctx, {}, what, [&](const std::vector<Value>&) { return else_fn(); }, &f, loc);
  check(t, f);
  std::vector<Type> types;
  for (const Value& v : t) types.push_back(v.type());
  ir::OpId op = ctx.emit(OpKind::If, {c.id()}, types, {}, loc, {then_r, else_r});
  std::vector<Value> results;
  for (ir::ValueId v : ctx.builder().function().ops[op].results) results.push_back(Value::wrap(ctx, v));
  return results;
}

}  // namespace

Value program_id(int axis, std::source_location loc) {
  auto& ctx = grid_context(axis, "pl::program_id", loc);
  const Value id = Value::wrap(ctx, ctx.emit_value(OpKind::ProgramId, {}, Type::scalar(DType::i32), int64_t{axis}, loc));
  // In a pipeline split over cores the index is the whole grid's.
  return detail::whole_grid_index(ctx, ctx.grids.back().offsets, static_cast<size_t>(axis), id, loc);
}

Value num_programs(int axis, std::source_location loc) {
  auto& ctx = grid_context(axis, "pl::num_programs", loc);
  return Value::wrap(ctx, ctx.emit_value(OpKind::NumPrograms, {}, Type::scalar(DType::i32), int64_t{axis}, loc));
}

namespace detail {

void when_impl(const Operand& cond, const std::function<void()>& body) {
  if (cond.is_literal()) {
    if (cond.literal().as_double() != 0) body();
    return;
  }
  Value c = bool_condition(cond, "pl::when");
  auto& ctx = TraceContext::current("pl::when", cond.loc());
  auto run = [&](const std::vector<Value>&) {
    body();
    return std::vector<Value>{};
  };
  ir::RegionId then_r = traced_region(ctx, {}, "a pl::when body", run, nullptr, cond.loc());
  ir::RegionId else_r = traced_region(ctx, {}, "a pl::when body", [](const std::vector<Value>&) { return std::vector<Value>{}; },
                                      nullptr, cond.loc());
  ctx.emit(OpKind::If, {c.id()}, {}, {}, cond.loc(), {then_r, else_r});
}

std::vector<Value> cond_impl(const Operand& cond, const std::function<std::vector<Value>()>& on_true,
                             const std::function<std::vector<Value>()>& on_false) {
  if (cond.is_literal()) return cond.literal().as_double() != 0 ? on_true() : on_false();
  Value c = bool_condition(cond, "pl::cond");
  auto& ctx = TraceContext::current("pl::cond", cond.loc());
  auto check = [&](const std::vector<Value>& t, const std::vector<Value>& f) {
    if (!same_types(t, f))
      throw UserError("pl::cond: the branches return different types", fmt::format("{} and {}", types_str(t), types_str(f)),
                      "return values of the same shapes and dtypes from both branches (use .astype to match)", cond.loc());
  };
  return traced_if(ctx, c, "a pl::cond branch", on_true, on_false, check, cond.loc());
}

std::vector<Value> for_impl(const Operand& lo, const Operand& hi, int64_t step, const std::vector<Value>& init,
                            const std::function<std::vector<Value>(const Value&, const std::vector<Value>&)>& body,
                            SourceLoc loc, const char* api) {
  if (step <= 0)
    throw UserError(fmt::format("{}: the step must be positive", api), fmt::format("step {}", step),
                    "count upwards with a step >= 1", loc);
  auto [vlo, vhi] = unify(lo, hi, api);
  if (!is_int(vlo.dtype()) || !vlo.is_scalar())
    throw UserError(fmt::format("{}: bounds must be integer scalars", api),
                    fmt::format("{} and {}", describe(vlo), describe(vhi)), "use integers (cast with .astype(pl::i32))", loc);
  // A loop counts in signed arithmetic (its index may step past the bound).
  if (is_unsigned(vlo.dtype()))
    throw UserError(fmt::format("{}: bounds must be signed integers", api),
                    fmt::format("{} and {}", describe(vlo), describe(vhi)), "cast the bounds with .astype(pl::i32)", loc);
  auto& ctx = TraceContext::current(api, loc);
  Value vstep = constant(ctx, ir::Literal::of_int(step), vlo.type(), loc);
  std::vector<Type> arg_types{vlo.type()};
  for (const Value& v : init) arg_types.push_back(v.type());
  std::vector<Value> yielded;
  ir::RegionId r = traced_region(
      ctx, arg_types, "a loop body",
      [&](const std::vector<Value>& args) {
        std::vector<Value> carry(args.begin() + 1, args.end());
        return body(args[0], carry);
      },
      &yielded, loc);
  check_carry(init, yielded, api, loc);
  std::vector<ir::ValueId> operands{vlo.id(), vhi.id(), vstep.id()};
  for (const Value& v : init) operands.push_back(v.id());
  std::vector<Type> result_types(arg_types.begin() + 1, arg_types.end());
  ir::OpId op = ctx.emit(OpKind::For, operands, result_types, {}, loc, {r});
  std::vector<Value> results;
  for (ir::ValueId v : ctx.builder().function().ops[op].results) results.push_back(Value::wrap(ctx, v));
  return results;
}

std::vector<Value> while_impl(const std::vector<Value>& init, const std::function<Value(const std::vector<Value>&)>& cond,
                              const std::function<std::vector<Value>(const std::vector<Value>&)>& body, SourceLoc loc) {
  auto& ctx = TraceContext::current("pl::while_loop", loc);
  std::vector<Type> types;
  for (const Value& v : init) {
    ctx.check_visible(v.id(), "pl::while_loop", loc);
    types.push_back(v.type());
  }
  std::vector<Value> c;
  ir::RegionId cond_r = traced_region(
      ctx, types, "a pl::while_loop condition", [&](const std::vector<Value>& args) { return std::vector<Value>{cond(args)}; },
      &c, loc);
  if (!is_bool(c[0].dtype()) || !c[0].is_scalar())
    throw UserError("pl::while_loop: the condition must return a bool scalar", detail::describe(c[0]),
                    "compare to get one bool, e.g. [&](pl::Value x) { return x < 10; } (reduce a block with pl::max "
                    "or pl::sum first)",
                    loc);
  std::vector<Value> yielded;
  ir::RegionId body_r = traced_region(ctx, types, "a pl::while_loop body", body, &yielded, loc);
  check_carry(init, yielded, "pl::while_loop", loc);
  std::vector<ir::ValueId> operands;
  for (const Value& v : init) operands.push_back(v.id());
  ir::OpId op = ctx.emit(OpKind::While, operands, types, {}, loc, {cond_r, body_r});
  std::vector<Value> results;
  for (ir::ValueId v : ctx.builder().function().ops[op].results) results.push_back(Value::wrap(ctx, v));
  return results;
}

std::vector<Value> switch_impl(const Operand& index, size_t branches, const std::function<std::vector<Value>(size_t)>& branch,
                               SourceLoc loc) {
  if (branches == 0)
    throw UserError("pl::switch_ needs at least one branch", "an empty list of branches",
                    "pass the branches as {[&](...) { ... }, ...}", loc);
  // The index is clamped to [0, n) as in JAX: a C++ integer picks its branch while tracing.
  if (index.is_literal()) {
    const double k = std::clamp(index.literal().as_double(), 0.0, static_cast<double>(branches - 1));
    return branch(static_cast<size_t>(k));
  }
  Value i = index.materialize();
  if (!is_int(i.dtype()) || !i.is_scalar())
    throw UserError("pl::switch_ needs an integer scalar index", detail::describe(i),
                    "pass an integer, e.g. pl::program_id(0) (cast with .astype(pl::i32))", loc);
  auto& ctx = TraceContext::current("pl::switch_", loc);
  // Each branch is checked against branch 0 as soon as it is traced (branch 0 is traced first).
  std::vector<Value> first;
  auto checked = [&](size_t k) {
    std::vector<Value> r = branch(k);
    if (k == 0) first = r;
    else check_branch(first, r, k, loc);
    return r;
  };
  auto checked_already = [](const std::vector<Value>&, const std::vector<Value>&) {};
  // A chain of ifs: index <= 0 takes branch 0, else index <= 1 takes branch 1, ..., else the last.
  std::function<std::vector<Value>(size_t)> from = [&](size_t k) -> std::vector<Value> {
    if (k + 1 == branches) return checked(k);
    Value at_most_k = Operand(i, loc) <= static_cast<int64_t>(k);
    return traced_if(ctx, at_most_k, "a pl::switch_ branch", [&] { return checked(k); }, [&] { return from(k + 1); },
                     checked_already, loc);
  };
  return from(0);
}

void debug_print_impl(const std::string& format, const std::vector<Operand>& args, SourceLoc loc) {
  // Pallas's rules: positional `{}` fields only, one per value, or none and the values follow the text.
  const rt::DebugPrintFormat parsed = rt::parse_debug_print_format(format);
  if (!parsed.error.empty())
    throw UserError("pl::debug_print: the format has a field other than `{}`", fmt::format("\"{}\": {}", format, parsed.error),
                    "write each value's place as a bare {} (values print as Pallas prints them, with no format spec), "
                    "and a brace itself as {{ or }}",
                    loc);
  const size_t placeholders = parsed.literals.size() - 1;
  if (placeholders != 0 && placeholders != args.size())
    throw UserError("pl::debug_print: the number of {} placeholders differs from the number of values",
                    fmt::format("\"{}\" with {} placeholder(s) and {} value(s)", format, placeholders, args.size()),
                    "write one {} per value, or none to print the values after the text", loc);
  auto& ctx = TraceContext::current("pl::debug_print", loc);
  std::vector<ir::ValueId> ids;
  for (const Operand& a : args) {
    Value v = a.materialize();
    ctx.check_visible(v.id(), "pl::debug_print", loc);
    ids.push_back(v.id());
  }
  ctx.emit(OpKind::DebugPrint, ids, {}, format, loc);
}

}  // namespace detail
}  // namespace tessera
