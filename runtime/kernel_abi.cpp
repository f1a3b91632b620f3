#include "runtime/kernel_abi.h"

#include <fmt/format.h>

#include <cstring>
#include <span>

#include "jit/ir/operands.h"
#include "runtime/block_ops.h"
#include "runtime/grid_check.h"
#include "runtime/launch.h"

namespace tessera::rt {

namespace {

int32_t fail(CoreContext* core, int32_t op, const Fault& fault) {
  if (!core->fault) core->fault.emplace(fault.at(core->point, op >= 0 ? core->fn->ops[op].loc : SourceLoc{}));
  return 1;
}

int32_t fail(CoreContext* core, int32_t op, const std::string& message) { return fail(core, op, Fault(message)); }

// Runs an ABI function's body; no exception may cross into compiled code, so any is recorded as the
// core's failure (the kernel then stops at its next check).
template <class F, class R>
R guarded(CoreContext* core, int32_t op, R on_failure, F body) {
  try {
    return body();
  } catch (const Fault& f) {  // a deadlock report stays one (Fault::at)
    fail(core, op, f);
  } catch (const std::bad_alloc&) {
    fail(core, op, "out of memory while running the kernel");
  } catch (const UserError& e) {  // make_buffer: out of memory, naming the buffer and its bytes
    fail(core, op, e.problem() + ": " + e.given());
  } catch (const std::exception& e) {
    fail(core, op, std::string("the runtime failed while running the kernel: ") + e.what());
  }
  return on_failure;
}

}  // namespace

std::vector<std::pair<std::string_view, void*>> kernel_abi_symbols() {
  std::vector<std::pair<std::string_view, void*>> symbols;
#define TESSERA_RT_FUNCTION(name, ret, params) \
  symbols.emplace_back(abi::name.symbol, reinterpret_cast<void*>(abi::name.address));
#include "runtime/kernel_abi.def"
#undef TESSERA_RT_FUNCTION
  return symbols;
}

}  // namespace tessera::rt

using tessera::rt::CoreContext;

extern "C" int32_t tessera_rt_grid_point(CoreContext* core, int32_t op, const int32_t* ids) {
  return tessera::rt::guarded(core, -1, int32_t{1}, [&] {
    const tessera::ir::Op& o = core->fn->ops[op];
    const size_t n = o.operands.size();
    if (std::get<int64_t>(o.attr) > 0) {
      core->point.inner_point.assign(ids, ids + n);
    } else {
      core->point.grid_point.assign(ids, ids + n);
      core->point.inner_point.clear();
      tessera::rt::enter_grid_step(*core);
    }
    return int32_t{core->launch.cancelled() || core->fault ? 1 : 0};
  });
}

extern "C" int32_t tessera_rt_check_grid(CoreContext* core, int32_t op, const int64_t* sizes) {
  return tessera::rt::guarded(core, op, int32_t{1}, [&] {
    const tessera::ir::Op& o = core->fn->ops[op];
    const auto error = tessera::rt::grid_sizes_error(std::span(sizes, o.operands.size()), std::get<std::string>(o.attr));
    return error ? tessera::rt::fail(core, op, *error) : int32_t{0};
  });
}

extern "C" int32_t tessera_rt_failed(CoreContext* core) { return core->fault ? 1 : 0; }

extern "C" void tessera_rt_trace_scope(CoreContext* core, int32_t op, int32_t start) {
  // Recording only: a failure here is not the kernel's, so it is dropped rather than faulting.
  try {
    tessera::rt::kernel_scope(*core, std::get<std::string>(core->fn->ops[op].attr), start != 0);
  } catch (...) {
  }
}

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
    const bool semaphores = tessera::is_semaphore(t.dtype);
    if (!made) tessera::rt::fill_poison(tessera::rt::RefView::whole(b), core->zero_uninitialized || semaphores);
    core->add_region(op, b.data(), t.num_elements() * tessera::dtype_size(t.dtype));
    if (semaphores)
      core->dma.add_semaphores(reinterpret_cast<const int64_t*>(b.data()), t.num_elements(), t.dtype, b.name,
                               tessera::rt::semaphore_lifetime(*core->fn, o));
    return static_cast<void*>(b.writable_data());
  });
}

extern "C" int32_t tessera_rt_release(CoreContext* core, int32_t op, void* data) {
  return tessera::rt::guarded(core, op, int32_t{1}, [&] {
    const tessera::Type& t = core->fn->type(core->fn->ops[op].results[0]);
    const auto* lo = static_cast<const std::byte*>(data);
    core->dma.release(lo, lo + t.num_elements() * tessera::dtype_size(t.dtype), /*forget=*/false);
    return int32_t{0};
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

// Moves one pipeline block between an array (strided) and a contiguous block buffer, by the rules
// of fetch_block / writeback_block. A block wholly inside the array (every block of a grid whose
// dims divide the array) is a plain strided copy with no allocation; edge blocks take the general
// path with poison and clipping.
void move_block(bool fetch, std::byte* array, std::span<const int64_t> array_shape, std::span<const int64_t> strides,
                std::byte* block, std::span<const int64_t> block_shape, std::span<const int64_t> starts, DType dtype,
                bool zero, const std::string& name, const BlockWindow& window) {
  const size_t rank = array_shape.size();
  const int64_t es = dtype_size(dtype);
  bool whole = rank <= 16 && window.sizes.empty();
  int64_t offset = 0;
  for (size_t d = 0; whole && d < rank; ++d) {
    whole = starts[d] >= 0 && starts[d] + block_shape[d] <= array_shape[d];
    offset += starts[d] * strides[d];
  }
  if (whole) {
    int64_t block_strides[16];
    for (size_t d = rank, s = 1; d-- > 0; s *= static_cast<size_t>(block_shape[d])) block_strides[d] = static_cast<int64_t>(s);
    const std::span<const int64_t> bs(block_strides, rank);
    if (fetch) copy_box(block, bs, array + offset * es, strides, block_shape, es);
    else copy_box(array + offset * es, strides, block, bs, block_shape, es);
    return;
  }
  Buffer array_buffer(name, dtype, {1}, MemorySpace::ANY, array, true);
  Buffer block_buffer(name + " block", dtype, Shape(block_shape.begin(), block_shape.end()), MemorySpace::VMEM, block, true);
  const RefView a{&array_buffer, 0, Shape(array_shape.begin(), array_shape.end()),
                  std::vector<int64_t>(strides.begin(), strides.end())};
  const RefView b = RefView::whole(block_buffer);
  if (fetch) fetch_block(a, b, starts, zero, name, window);
  else writeback_block(b, a, starts, name, window);
}

int32_t block_copy(CoreContext* core, int32_t op, bool fetch, std::byte* array, const int64_t* array_strides,
                   std::byte* block, const int64_t* starts, int64_t* sem) {
  const ir::Op& o = core->fn->ops[op];
  const auto& attr = std::get<ir::BlockCopyAttr>(o.attr);
  const ir::BlockCopyOperands operands = ir::block_copy_operands(*core->fn, o);
  const Type& array_type = core->fn->type(operands.array);
  const Type& block_type = core->fn->type(operands.block);
  const size_t rank = array_type.shape.size();
  const std::span<const int64_t> at(starts, rank), strides(array_strides, rank);
  const BlockWindow window(attr, std::span<const int64_t>(starts + rank, ir::bounded_dims(attr.kinds)));
  // A BoundedSlice of size 0 writes nothing back, so it is no revisit of the block at its start.
  if (!fetch && std::find(window.sizes.begin(), window.sizes.end(), 0) == window.sizes.end()) check_revisit(*core, attr, at);
  if (!block) return 0;  // an output block written in place: recorded for the revisit check, nothing to move
  if (!sem) {
    move_block(fetch, array, array_type.shape, strides, block, block_type.shape, at, array_type.dtype,
               core->zero_uninitialized, attr.name, window);
    return 0;
  }
  // Asynchronous: a DMA of the block's bytes toward the semaphore; it owns copies of what it needs.
  const int64_t es = dtype_size(array_type.dtype);
  DmaEngine::Copy copy;
  copy.sem = sem;
  copy.bytes = block_type.num_elements() * es;
  const std::byte* array_hi = array + window_extent(array_type.shape, strides, es);
  const std::byte* block_hi = block + copy.bytes;
  copy.src_lo = fetch ? array : block;
  copy.src_hi = fetch ? array_hi : block_hi;
  copy.dst_lo = fetch ? block : array;
  copy.dst_hi = fetch ? block_hi : array_hi;
  copy.move = [fetch, array, block, dtype = array_type.dtype, zero = core->zero_uninitialized, name = &attr.name,
               array_shape = array_type.shape, block_shape = block_type.shape,
               strides = std::vector<int64_t>(strides.begin(), strides.end()),
               starts = std::vector<int64_t>(at.begin(), at.end()), window] {
    move_block(fetch, array, array_shape, strides, block, block_shape, starts, dtype, zero, *name, window);
  };
  core->dma.start(std::move(copy));
  return 0;
}

}  // namespace
}  // namespace tessera::rt

extern "C" int32_t tessera_rt_fetch_block(CoreContext* core, int32_t op, const void* array, const int64_t* array_strides,
                                          void* block, const int64_t* starts, int64_t* sem) {
  return tessera::rt::guarded(core, op, int32_t{1}, [&] {
    return tessera::rt::block_copy(core, op, true, const_cast<std::byte*>(static_cast<const std::byte*>(array)),
                                   array_strides, static_cast<std::byte*>(block), starts, sem);
  });
}

extern "C" int32_t tessera_rt_writeback_block(CoreContext* core, int32_t op, const void* block, void* array,
                                              const int64_t* array_strides, const int64_t* starts, int64_t* sem) {
  return tessera::rt::guarded(core, op, int32_t{1}, [&] {
    return tessera::rt::block_copy(core, op, false, static_cast<std::byte*>(array), array_strides,
                                   const_cast<std::byte*>(static_cast<const std::byte*>(block)), starts, sem);
  });
}

extern "C" int32_t tessera_rt_dma_start(CoreContext* core, int32_t op, const void* src, void* dst, int64_t* sem,
                                        const int64_t* strides) {
  return tessera::rt::guarded(core, op, int32_t{1}, [&] {
    const tessera::Type& t = core->fn->type(tessera::ir::dma_operands(core->fn->ops[op]).src);
    const size_t rank = t.shape.size();
    core->dma.start(tessera::rt::window_copy(static_cast<std::byte*>(dst), std::vector<int64_t>(strides + rank, strides + 2 * rank),
                                             static_cast<const std::byte*>(src), std::vector<int64_t>(strides, strides + rank),
                                             t.shape, tessera::dtype_size(t.dtype), sem));
    return int32_t{0};
  });
}

extern "C" int32_t tessera_rt_dma_wait(CoreContext* core, int32_t op, int64_t* sem) {
  return tessera::rt::guarded(core, op, int32_t{1}, [&] {
    const tessera::ir::Op& o = core->fn->ops[op];
    core->dma.wait(sem, std::get<int64_t>(o.attr), /*dma=*/true, o.loc);
    return int32_t{0};
  });
}

extern "C" int32_t tessera_rt_semaphore_signal(CoreContext* core, int32_t op, int64_t* sem, int32_t inc) {
  return tessera::rt::guarded(core, op, int32_t{1}, [&] {
    core->dma.signal(sem, inc);
    return int32_t{0};
  });
}

extern "C" int32_t tessera_rt_semaphore_wait(CoreContext* core, int32_t op, int64_t* sem, int32_t value) {
  return tessera::rt::guarded(core, op, int32_t{1}, [&] {
    core->dma.wait(sem, value, /*dma=*/false, core->fn->ops[op].loc);
    return int32_t{0};
  });
}

extern "C" int32_t tessera_rt_semaphore_read(CoreContext* core, int64_t* sem) {
  return static_cast<int32_t>(core->dma.read(sem));
}

extern "C" int32_t tessera_rt_ready(CoreContext* core) {
  return tessera::rt::guarded(core, -1, int32_t{1}, [&] {
    tessera::rt::collective_ready(*core);
    return int32_t{0};
  });
}

namespace tessera::rt {
namespace {
// The target device of a remote op; device: its device operands' values (i32 each).
int64_t target_of(CoreContext* core, const ir::Op& op, ir::OperandSpan device_operands, const int32_t* device) {
  if (!core->device) throw Fault("a remote copy or signal outside a mesh: run the kernel inside pl::shard_map");
  const std::vector<int64_t> ids(device, device + device_operands.size());
  return target_device(*core->device->mesh, ids, std::get<ir::DeviceAttr>(op.attr).logical);
}
}  // namespace
}  // namespace tessera::rt

extern "C" int32_t tessera_rt_remote_dma_start(CoreContext* core, int32_t op, const void* src, const void* dst,
                                               int64_t* send_sem, int64_t* recv_sem, const int64_t* strides,
                                               const int32_t* device) {
  return tessera::rt::guarded(core, op, int32_t{1}, [&] {
    const tessera::ir::Op& o = core->fn->ops[op];
    const tessera::Type& t = core->fn->type(tessera::ir::dma_operands(o).src);
    const size_t rank = t.shape.size();
    tessera::rt::remote_copy(*core, static_cast<const std::byte*>(src), std::span<const int64_t>(strides, rank),
                             static_cast<const std::byte*>(dst), std::span<const int64_t>(strides + rank, rank), t.shape,
                             tessera::dtype_size(t.dtype), send_sem, recv_sem,
                             tessera::rt::target_of(core, o, tessera::ir::dma_operands(o).device, device), o.loc);
    return int32_t{0};
  });
}

extern "C" int32_t tessera_rt_remote_signal(CoreContext* core, int32_t op, int64_t* sem, int32_t inc, const int32_t* device) {
  return tessera::rt::guarded(core, op, int32_t{1}, [&] {
    const tessera::ir::Op& o = core->fn->ops[op];
    tessera::rt::remote_signal(*core, sem, inc,
                               tessera::rt::target_of(core, o, tessera::ir::semaphore_operands(o).device, device), o.loc);
    return int32_t{0};
  });
}

extern "C" int32_t tessera_rt_axis_index(CoreContext* core, int32_t axis) {
  return core->device ? static_cast<int32_t>(core->device->coords.at(static_cast<size_t>(axis))) : 0;
}

extern "C" void tessera_rt_pipeline_begin(CoreContext* core, int32_t op) {
  tessera::rt::guarded(core, op, 0, [&] {
    tessera::rt::begin_pipeline(*core, std::get<int64_t>(core->fn->ops[op].attr));
    return 0;
  });
}

extern "C" void tessera_rt_block_view_fault(CoreContext* core, int32_t op, const int64_t* starts) {
  tessera::rt::guarded(core, op, 0, [&] {
    const tessera::ir::Op& o = core->fn->ops[op];
    const tessera::Type& array = core->fn->type(tessera::ir::window_operands(o).ref);
    const std::span<const int64_t> s(starts, array.shape.size());
    const tessera::Shape& block = core->fn->type(o.results.at(0)).shape;
    auto error =
        tessera::rt::block_start_error(array.shape, block, s, std::get<tessera::ir::BlockCopyAttr>(o.attr).name);
    return tessera::rt::fail(core, op, error.value_or("block view out of bounds"));
  });
}

extern "C" void tessera_rt_view_fault(CoreContext* core, int32_t op, int32_t dim, int64_t start) {
  tessera::rt::guarded(core, op, 0, [&] {
    const tessera::ir::Op& o = core->fn->ops[op];
    const auto& attr = std::get<tessera::ir::ViewAttr>(o.attr);
    const tessera::ir::ValueId viewed = tessera::ir::window_operands(o).ref;
    const tessera::Type& src = core->fn->type(viewed);
    return tessera::rt::fail(core, op,
                             tessera::rt::view_fault_message(tessera::rt::root_buffer_name(*core->fn, viewed),
                                                             src.shape, static_cast<size_t>(dim), attr.dims[dim], start));
  });
}

extern "C" void tessera_rt_masked_lane_fault(CoreContext* core, int32_t op, int32_t dim, int64_t element) {
  tessera::rt::guarded(core, op, 0, [&] {
    const tessera::ir::Op& o = core->fn->ops[op];
    // Operand 0 of a load or store is its ref, here a view of the ref whose bounds count.
    const tessera::ir::ValueId viewed = tessera::ir::window_operands(*core->fn->def(o.operands[0])).ref;
    return tessera::rt::fail(core, op,
                             tessera::rt::masked_lane_fault_message(tessera::rt::root_buffer_name(*core->fn, viewed),
                                                                    core->fn->type(viewed).shape, static_cast<size_t>(dim),
                                                                    element, o.kind == tessera::ir::OpKind::Store));
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
