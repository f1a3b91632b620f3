#include "dsl/trace.h"

#include <fmt/format.h>

#include <atomic>

namespace tessera::detail {

namespace {
thread_local TraceContext* t_active = nullptr;
std::atomic<uint64_t> g_next_serial{1};
}  // namespace

TraceContext::TraceContext(ir::Function& fn, std::string name)
    : builder_(fn, std::move(name)), serial_(g_next_serial.fetch_add(1)), previous_(t_active) {
  open_.push_back({builder_.function().body, "the kernel"});
  t_active = this;
}

TraceContext::~TraceContext() { t_active = previous_; }

TraceContext* TraceContext::active() { return t_active; }

TraceContext& TraceContext::current(std::string_view api, SourceLoc loc) {
  if (!t_active)
    throw UserError(fmt::format("{} was called while no kernel is being traced", api),
                    "a DSL call outside a kernel body or index map",
                    "call DSL functions only inside the kernel (or index map) that pallas_call traces; "
                    "host code works on pl::Array",
                    loc);
  return *t_active;
}

TraceContext::Scope::Scope(TraceContext& ctx, ir::RegionId region, std::string what)
    : ctx_(ctx), builder_scope_(ctx.builder_, region) {
  ctx_.open_.push_back({region, std::move(what)});
}

TraceContext::Scope::~Scope() {
  OpenRegion closed = std::move(ctx_.open_.back());
  ctx_.open_.pop_back();
  if (ctx_.closed_what_.size() <= closed.region) ctx_.closed_what_.resize(closed.region + 1);
  ctx_.closed_what_[closed.region] = std::move(closed.what);
}

void TraceContext::check_visible(ir::ValueId v, std::string_view api, SourceLoc loc) const {
  const ir::Function& fn = builder_.function();
  // Handles from other traces are rejected before they get here (check_live, Ref::view).
  if (v >= fn.values.size()) throw InternalError("tracing", fmt::format("{}: value id {} does not exist", api, v));
  const ir::ValueInfo& info = fn.values[v];
  ir::RegionId home = info.def == ir::kNone ? info.region : fn.ops[info.def].parent;
  for (const OpenRegion& r : open_)
    if (r.region == home) return;
  std::string where = home < closed_what_.size() && !closed_what_[home].empty() ? closed_what_[home] : "a closed region";
  SourceLoc def_loc = info.def == ir::kNone ? SourceLoc{} : fn.ops[info.def].loc;
  throw UserError(fmt::format("{}: a value defined inside {} is used outside of it", api, where),
                  fmt::format("a value created at {}", def_loc.str()),
                  "values made inside pl::when / pl::cond branches / loop bodies exist only there; return them "
                  "(pl::cond, pl::fori_loop carries) or write them to a ref",
                  loc);
}

ir::OpId TraceContext::emit(ir::OpKind kind, std::vector<ir::ValueId> operands, std::vector<Type> result_types,
                            ir::Attr attr, SourceLoc loc, std::vector<ir::RegionId> regions) {
  for (ir::ValueId v : operands) check_visible(v, ir::mnemonic(kind), loc);
  return builder_.create(kind, std::move(operands), std::move(result_types), std::move(attr), loc, std::move(regions));
}

ir::ValueId TraceContext::emit_value(ir::OpKind kind, std::vector<ir::ValueId> operands, Type result_type,
                                     ir::Attr attr, SourceLoc loc) {
  ir::OpId id = emit(kind, std::move(operands), {std::move(result_type)}, std::move(attr), loc);
  return builder_.function().ops[id].results.at(0);
}

}  // namespace tessera::detail
