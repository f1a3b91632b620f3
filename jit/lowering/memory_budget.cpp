#include "jit/lowering/memory_budget.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "jit/lowering/expand_pipelines.h"

namespace tessera::passes {

using namespace ir;

namespace {
struct Allocation {
  std::string name;
  Type type;
  int64_t bytes;
  SourceLoc loc;
};

// The VMEM buffers, and the output blocks written in place: compiled code writes those where they lie
// in the output array, the interpreter copies them through a buffer, and both must accept the same
// kernels (docs/design.md §4.4, 7), so such a block counts as the buffer it stands for.
std::vector<Allocation> vmem_allocations(const Function& fn) {
  std::vector<Allocation> out;
  for (const Op& op : fn.ops) {
    if (writes_back_in_place(fn, op)) {
      const Type& t = fn.type(op.operands[0]);
      out.push_back({std::get<BlockCopyAttr>(op.attr).name + " block", t, t.num_elements() * dtype_size(t.dtype), op.loc});
      continue;
    }
    if (op.kind != OpKind::Alloc) continue;
    const Type& t = fn.type(op.results[0]);
    if (t.space != MemorySpace::VMEM) continue;
    // Saturated, not wrapped: a 2^62-element scratch must not come out as a few bytes.
    out.push_back({std::get<std::string>(op.attr), t, saturating_nbytes(t.shape, dtype_size(t.dtype)), op.loc});
  }
  return out;
}

std::string mib(int64_t bytes) {
  if (bytes == INT64_MAX) return "2^63 bytes or more";
  return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / (1 << 20));
}

int64_t total_bytes(const std::vector<Allocation>& allocs) {
  int64_t total = 0;
  for (const Allocation& a : allocs)
    if (__builtin_add_overflow(total, a.bytes, &total)) return INT64_MAX;
  return total;
}
}  // namespace

int64_t vmem_bytes(const Function& fn) { return total_bytes(vmem_allocations(fn)); }

void check_vmem_budget(const Function& fn, int64_t limit_bytes, SourceLoc call_site) {
  std::vector<Allocation> allocs = vmem_allocations(fn);
  const int64_t total = total_bytes(allocs);
  if (total <= limit_bytes) return;
  std::sort(allocs.begin(), allocs.end(), [](const Allocation& a, const Allocation& b) { return a.bytes > b.bytes; });
  std::string list;
  for (const Allocation& a : allocs)
    list += fmt::format("\n    {:>10}  {} ({}, {})", mib(a.bytes), a.name, type_str(a.type), a.loc.str());
  throw UserError(fmt::format("kernel `{}` needs more VMEM per core than it may use", fn.name),
                  fmt::format("{} of VMEM buffers against a limit of {}:{}", mib(total), mib(limit_bytes), list),
                  "use smaller blocks or scratch, or raise CompilerParams::vmem_limit_bytes", call_site);
}

}  // namespace tessera::passes
