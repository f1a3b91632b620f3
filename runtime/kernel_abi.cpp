#include "runtime/kernel_abi.h"

#include <fmt/format.h>

#include <cstring>
#include <span>

#include "runtime/block_ops.h"

namespace tessera::rt {

namespace {

int32_t fail(CoreContext* core, int32_t op, const std::string& message) {
  if (!core->fault) core->fault.emplace(message, core->point, op >= 0 ? core->fn->ops[op].loc : SourceLoc{});
  return 1;
}

// Runs an ABI function's body; no exception may cross into compiled code, so any is recorded as the
// core's failure (the kernel then stops at its next check).
template <class F, class R>
R guarded(CoreContext* core, int32_t op, R on_failure, F body) {
  try {
    return body();
  } catch (const Fault& f) {
    fail(core, op, f.what());
  } catch (const std::bad_alloc&) {
    fail(core, op, "out of memory while running the kernel");
  } catch (const std::exception& e) {
    fail(core, op, std::string("the runtime failed while running the kernel: ") + e.what());
  }
  return on_failure;
}

// A buffer over a compiled kernel's memory for one ref operand of `op`.
Buffer operand_buffer(const CoreContext* core, const ir::Op& op, size_t operand, const void* data, bool writable) {
  const ir::ValueId v = op.operands[operand];
  const Type& t = core->fn->type(v);
  return Buffer(root_buffer_name(*core->fn, v), t.dtype, t.shape, t.space,
                const_cast<std::byte*>(static_cast<const std::byte*>(data)), writable);
}

std::vector<int64_t> widen(const int32_t* starts, size_t n) { return std::vector<int64_t>(starts, starts + n); }

}  // namespace

std::vector<std::pair<std::string_view, void*>> kernel_abi_symbols() {
  return {
      {"tessera_rt_grid_point", reinterpret_cast<void*>(&tessera_rt_grid_point)},
      {"tessera_rt_failed", reinterpret_cast<void*>(&tessera_rt_failed)},
      {"tessera_rt_alloc", reinterpret_cast<void*>(&tessera_rt_alloc)},
      {"tessera_rt_temp", reinterpret_cast<void*>(&tessera_rt_temp)},
      {"tessera_rt_ipow", reinterpret_cast<void*>(&tessera_rt_ipow)},
      {"tessera_rt_fetch_block", reinterpret_cast<void*>(&tessera_rt_fetch_block)},
      {"tessera_rt_writeback_block", reinterpret_cast<void*>(&tessera_rt_writeback_block)},
      {"tessera_rt_view_fault", reinterpret_cast<void*>(&tessera_rt_view_fault)},
      {"tessera_rt_block_view_fault", reinterpret_cast<void*>(&tessera_rt_block_view_fault)},
      {"tessera_rt_debug_print", reinterpret_cast<void*>(&tessera_rt_debug_print)},
  };
}

}  // namespace tessera::rt

using tessera::rt::CoreContext;

extern "C" int32_t tessera_rt_grid_point(CoreContext* core, int32_t n, const int32_t* ids) {
  return tessera::rt::guarded(core, -1, int32_t{1}, [&] {
    core->point.grid_point.assign(ids, ids + n);
    return int32_t{core->launch.cancelled() || core->fault ? 1 : 0};
  });
}

extern "C" int32_t tessera_rt_failed(CoreContext* core) { return core->fault ? 1 : 0; }

namespace tessera::rt {
namespace {
// The next allocation of the kernel: the buffer an earlier launch made at this position if it has
// the same type, else a new one (made by `make`).
template <class Make>
Buffer& next_buffer(CoreContext* core, DType dtype, const Shape& shape, Make make) {
  auto& all = core->allocations;
  const size_t i = core->next_allocation++;
  if (i < all.size() && all[i]->dtype == dtype && all[i]->shape == shape) return *all[i];
  if (i < all.size()) all.resize(i);
  all.push_back(make());
  return *all.back();
}
}  // namespace
}  // namespace tessera::rt

extern "C" void* tessera_rt_alloc(CoreContext* core, int32_t op) {
  return tessera::rt::guarded(core, op, static_cast<void*>(nullptr), [&] {
    const tessera::ir::Op& o = core->fn->ops[op];
    const tessera::Type& t = core->fn->type(o.results[0]);
    bool made = false;
    tessera::rt::Buffer& b = tessera::rt::next_buffer(core, t.dtype, t.shape, [&] {
      made = true;
      return tessera::rt::make_buffer(std::get<std::string>(o.attr), t.dtype, t.shape, t.space, core->zero_uninitialized);
    });
    if (!made) tessera::rt::fill_poison(tessera::rt::RefView::whole(b), core->zero_uninitialized);
    return static_cast<void*>(b.writable_data());
  });
}

extern "C" void* tessera_rt_temp(CoreContext* core, int64_t nbytes) {
  return tessera::rt::guarded(core, -1, static_cast<void*>(nullptr), [&] {
    return static_cast<void*>(tessera::rt::next_buffer(core, tessera::DType::i8, {nbytes}, [&] {
                                return std::make_unique<tessera::rt::Buffer>(
                                    "temporary", tessera::Array::empty({nbytes}, tessera::DType::i8),
                                    tessera::MemorySpace::VMEM, true);
                              }).writable_data());
  });
}

extern "C" int64_t tessera_rt_ipow(int64_t base, int64_t exp, int32_t bits) {
  return tessera::rt::int_pow_wrapped(base, exp, bits);
}

namespace tessera::rt {
namespace {

// fetch_block / writeback_block between contiguous buffers. The whole-block case (every block of a
// grid whose dims divide the array) is a row copy with no allocation; edge blocks take the general
// path with poison and clipping.
int32_t block_copy(CoreContext* core, int32_t op, bool fetch, const void* from, void* to, const int32_t* starts32) {
  const ir::Op& o = core->fn->ops[op];
  const auto& attr = std::get<ir::BlockCopyAttr>(o.attr);
  const Type& array_type = core->fn->type(o.operands[fetch ? 0 : 1]);
  const Type& block_type = core->fn->type(o.operands[fetch ? 1 : 0]);
  const size_t rank = array_type.shape.size();
  int64_t small[16];
  std::vector<int64_t> large(rank > 16 ? rank : 0);
  int64_t* starts = rank > 16 ? large.data() : small;
  for (size_t d = 0; d < rank; ++d) starts[d] = starts32[d];
  const std::span<const int64_t> starts_v(starts, rank);
  bool whole = rank <= 16;
  for (size_t d = 0; whole && d < rank; ++d)
    whole = starts[d] >= 0 && starts[d] + block_type.shape[d] <= array_type.shape[d];
  try {
    if (whole) {
      const int64_t zeros[16] = {};
      const std::span<const int64_t> at(starts, rank), origin(zeros, rank);
      const int64_t es = dtype_size(array_type.dtype);
      if (fetch)
        copy_window(static_cast<std::byte*>(to), block_type.shape, origin, static_cast<const std::byte*>(from),
                    array_type.shape, at, block_type.shape, es);
      else
        copy_window(static_cast<std::byte*>(to), array_type.shape, at, static_cast<const std::byte*>(from),
                    block_type.shape, origin, block_type.shape, es);
    } else {
      Buffer array = operand_buffer(core, o, fetch ? 0 : 1, fetch ? from : to, !fetch);
      Buffer block = operand_buffer(core, o, fetch ? 1 : 0, fetch ? to : from, fetch);
      if (fetch) fetch_block(RefView::whole(array), RefView::whole(block), starts_v, core->zero_uninitialized, attr.name);
      else writeback_block(RefView::whole(block), RefView::whole(array), starts_v, attr.name);
    }
    if (!fetch) check_revisit(core->launch, attr, std::span<const int64_t>(starts, rank));
  } catch (const Fault& f) {
    return fail(core, op, f.what());
  }
  return 0;
}

}  // namespace
}  // namespace tessera::rt

extern "C" int32_t tessera_rt_fetch_block(CoreContext* core, int32_t op, const void* array, void* block,
                                          const int32_t* starts) {
  return tessera::rt::guarded(core, op, int32_t{1}, [&] { return tessera::rt::block_copy(core, op, true, array, block, starts); });
}

extern "C" int32_t tessera_rt_writeback_block(CoreContext* core, int32_t op, const void* block, void* array,
                                              const int32_t* starts) {
  return tessera::rt::guarded(core, op, int32_t{1}, [&] { return tessera::rt::block_copy(core, op, false, block, array, starts); });
}

extern "C" void tessera_rt_block_view_fault(CoreContext* core, int32_t op, const int32_t* starts) {
  tessera::rt::guarded(core, op, 0, [&] {
    const tessera::ir::Op& o = core->fn->ops[op];
    const tessera::Type& array = core->fn->type(o.operands[0]);
    const std::vector<int64_t> s = tessera::rt::widen(starts, array.shape.size());
    auto error = tessera::rt::block_start_error(array.shape, s, std::get<tessera::ir::BlockCopyAttr>(o.attr).name);
    return tessera::rt::fail(core, op, error.value_or("block view out of bounds"));
  });
}

extern "C" void tessera_rt_view_fault(CoreContext* core, int32_t op, int32_t dim, int64_t start) {
  tessera::rt::guarded(core, op, 0, [&] {
    const tessera::ir::Op& o = core->fn->ops[op];
    const auto& attr = std::get<tessera::ir::ViewAttr>(o.attr);
    const tessera::Type& src = core->fn->type(o.operands[0]);
    return tessera::rt::fail(core, op,
                             tessera::rt::view_fault_message(tessera::rt::root_buffer_name(*core->fn, o.operands[0]),
                                                             src.shape, static_cast<size_t>(dim), attr.dims[dim], start));
  });
}

extern "C" void tessera_rt_debug_print(CoreContext* core, int32_t op, const void* const* values) {
  tessera::rt::guarded(core, op, 0, [&] {
    const tessera::ir::Op& o = core->fn->ops[op];
    std::vector<tessera::Array> arrays;
    for (size_t i = 0; i < o.operands.size(); ++i) {
      const tessera::Type& t = core->fn->type(o.operands[i]);
      tessera::Array a = tessera::Array::empty(t.shape, t.dtype);
      std::memcpy(a.mutable_data(), values[i], static_cast<size_t>(a.nbytes()));
      arrays.push_back(std::move(a));
    }
    std::vector<const tessera::Array*> ptrs;
    for (const auto& a : arrays) ptrs.push_back(&a);
    tessera::rt::debug_print(core->point, std::get<std::string>(o.attr), ptrs);
    return 0;
  });
}
