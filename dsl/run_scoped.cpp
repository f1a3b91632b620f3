#include "dsl/run_scoped.h"

#include <fmt/format.h>

#include <algorithm>

namespace tessera::detail {

using ir::OpKind;

void check_allocatable(const ScratchShape& type, const std::string& what, const std::string& api, bool dma_only_ok) {
  const MemoryRef& m = type.memory();
  if (is_dma_only(m.space) && !dma_only_ok)
    throw UserError(fmt::format("{}: {} is in {}, which cannot be allocated in a kernel", api, what,
                                m.space == MemorySpace::ANY ? "ANY" : "HBM"),
                    fmt::format("{} of shape {} {}", what, shape_tuple_str(m.shape), dtype_name(m.dtype)),
                    "allocate VMEM or SMEM buffers, or semaphores (pl::SemaphoreType::DMA / ::REGULAR); HBM arrays "
                    "come in as operands or outputs",
                    type.loc());
  if (is_semaphore(m.dtype) != (m.space == MemorySpace::SEMAPHORE))
    throw UserError(fmt::format("{}: {} mixes semaphores and memory", api, what),
                    fmt::format("dtype {} in {}", dtype_name(m.dtype), memory_space_name(m.space)),
                    "make semaphores with pl::SemaphoreType::DMA / ::REGULAR, and buffers of value dtypes in VMEM or SMEM",
                    type.loc());
  if (std::string why = shape_error(m.shape, dtype_size(m.dtype)); !why.empty()) {
    const bool negative = std::any_of(m.shape.begin(), m.shape.end(), [](int64_t d) { return d < 0; });
    throw UserError(fmt::format("{}: {} has {}", api, what, negative ? "a negative dim" : "a size that overflows"),
                    fmt::format("{} of shape {} {}: {}", what, shape_tuple_str(m.shape), dtype_name(m.dtype), why),
                    "use dims >= 0, small enough for the buffer to fit in VMEM or SMEM", type.loc());
  }
}

std::vector<Value> run_scoped_impl(const std::vector<ScratchShape>& types,
                                   const std::function<std::vector<Value>(std::vector<Ref>&)>& body) {
  const SourceLoc loc = types.front().loc();
  auto& ctx = TraceContext::current("pl::run_scoped", loc);
  ir::RegionId region = ctx.builder().create_region({});
  std::vector<Value> results;
  {
    TraceContext::Scope scope(ctx, region, "a pl::run_scoped body");
    std::vector<Ref> refs;
    for (size_t i = 0; i < types.size(); ++i) {
      const std::string name = fmt::format("run_scoped {}", i);
      // ANY/HBM only where the call allows it, which the trace does not know: build_executable checks.
      check_allocatable(types[i], name, "pl::run_scoped", /*dma_only_ok=*/true);
      const MemoryRef& m = types[i].memory();
      ir::ValueId v = ctx.emit_value(OpKind::Alloc, {}, Type::ref(m.dtype, m.shape, m.space), name, types[i].loc());
      ctx.builder().set_name(v, name);
      refs.push_back(Ref::wrap(ctx, v));
    }
    results = body(refs);
    std::vector<ir::ValueId> ids;
    for (const Value& v : results) {
      ctx.check_visible(v.id(), "pl::run_scoped's result", loc);
      ids.push_back(v.id());
    }
    ctx.builder().create(OpKind::Yield, ids, {}, {}, loc);
  }
  std::vector<Type> types_out;
  for (const Value& v : results) types_out.push_back(v.type());
  ir::OpId op = ctx.emit(OpKind::Scope, {}, types_out, {}, loc, {region});
  std::vector<Value> out;
  for (ir::ValueId v : ctx.builder().function().ops[op].results) out.push_back(Value::wrap(ctx, v));
  return out;
}

}  // namespace tessera::detail
