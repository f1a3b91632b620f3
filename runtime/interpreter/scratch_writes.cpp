#include "runtime/interpreter/scratch_writes.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>

#include "jit/ir/operands.h"

namespace tessera::rt {

namespace {

// The alloc op a ref value of `fn` points into, through views; none when it comes from elsewhere
// (an operand, a block view of one).
std::optional<ir::OpId> root_alloc(const ir::Function& fn, ir::ValueId ref) {
  for (;;) {
    const ir::Op* def = fn.def(ref);
    if (!def) return std::nullopt;
    if (def->kind == ir::OpKind::Alloc) return static_cast<ir::OpId>(def - fn.ops.data());
    if (def->kind != ir::OpKind::View) return std::nullopt;
    ref = def->operands[0];
  }
}

}  // namespace

std::vector<bool> ScratchWrites::tracked_allocs(const ir::Function& fn) {
  std::vector<bool> tracked(fn.ops.size(), false);
  for (ir::OpId id = 0; id < fn.ops.size(); ++id)
    if (fn.ops[id].kind == ir::OpKind::Alloc) tracked[id] = !is_semaphore(fn.type(fn.ops[id].results[0]).dtype);
  // Excluded: memory whose writes this core's interpreter does not run (a remote copy's destination,
  // written by another device) or that is no scratch (a pipeline's block buffer). When such a ref's
  // allocation cannot be told, nothing is tracked: a missed report is better than a false one.
  auto exclude = [&](ir::ValueId ref) {
    if (const std::optional<ir::OpId> alloc = root_alloc(fn, ref)) {
      tracked[*alloc] = false;
      return true;
    }
    return fn.def(ref) != nullptr && fn.def(ref)->kind == ir::OpKind::BlockView;  // an operand's block: no alloc
  };
  for (const ir::Op& op : fn.ops) {
    bool known = true;
    if (op.kind == ir::OpKind::RemoteDmaStart) known = exclude(ir::dma_operands(op).dst);
    if (op.kind == ir::OpKind::FetchBlock || op.kind == ir::OpKind::WritebackBlock)
      known = exclude(ir::block_copy_operands(fn, op).block);
    if (!known) return std::vector<bool>(fn.ops.size(), false);
  }
  return tracked;
}

void ScratchWrites::begin(const Buffer& buffer) {
  const int64_t n = num_elements(buffer.shape);
  if (Tracked* t = find(&buffer)) {
    std::fill(t->written.begin(), t->written.end(), uint8_t{0});
    t->unwritten = n;
    return;
  }
  buffers_.push_back({&buffer, std::vector<uint8_t>(static_cast<size_t>(n), 0), n});
}

ScratchWrites::Tracked* ScratchWrites::find(const Buffer* buffer) {
  for (Tracked& t : buffers_)
    if (t.buffer == buffer) return &t;
  return nullptr;
}

const ScratchWrites::Tracked* ScratchWrites::find(const Buffer* buffer) const {
  return const_cast<ScratchWrites*>(this)->find(buffer);
}

void ScratchWrites::write(const RefView& r, const Array* mask) {
  Tracked* t = find(r.buffer);
  if (!t || t->unwritten == 0) return;
  const bool* m = mask ? mask->data_as<bool>() : nullptr;
  const int64_t n = static_cast<int64_t>(t->written.size());
  for_each_element(r.shape, r.strides, [&](int64_t i, int64_t at) {
    const int64_t offset = r.offset + at;
    if ((!m || m[i]) && offset >= 0 && offset < n && !t->written[static_cast<size_t>(offset)]) {
      t->written[static_cast<size_t>(offset)] = 1;
      --t->unwritten;
    }
    return false;
  });
}

void ScratchWrites::check_read(const RefView& r, const Array* mask) const {
  const Tracked* t = find(r.buffer);
  if (!t || t->unwritten == 0) return;
  const bool* m = mask ? mask->data_as<bool>() : nullptr;
  const int64_t n = static_cast<int64_t>(t->written.size());
  std::optional<int64_t> never;
  for_each_element(r.shape, r.strides, [&](int64_t i, int64_t at) {
    const int64_t offset = r.offset + at;
    if ((m && !m[i]) || offset < 0 || offset >= n || t->written[static_cast<size_t>(offset)]) return false;
    never = offset;
    return true;
  });
  if (!never) return;
  const Buffer& b = *t->buffer;
  throw Fault(fmt::format(
      "read of never-written scratch: `{}` (a {} {} ref in {}) is read at element ({}), which nothing wrote since its "
      "allocation began (each core's scratch starts uninitialised when the kernel, or its pl::run_scoped region, "
      "starts). Write it before reading it, e.g. initialise it under pl::when(pl::program_id(k) == 0)",
      b.name, shape_tuple_str(b.shape), dtype_name(b.dtype), memory_space_name(b.space),
      fmt::join(row_major_index(b.shape, *never), ", ")));
}

}  // namespace tessera::rt
