#include "dsl/async_copy.h"

#include <fmt/format.h>

#include "dsl/run_scoped.h"

namespace tessera {

using ir::OpKind;

void detail::check_copy(const Ref& src, const Ref& dst, const char* api, SourceLoc loc) {
  trace_of(src, api, loc);
  trace_of(dst, api, loc);
  for (const Ref* r : {&src, &dst})
    if (r->memory_space() == MemorySpace::SEMAPHORE)
      throw UserError(fmt::format("{}: semaphores cannot be copied", api), r->describe(),
                      "copy data refs; the semaphores are separate arguments", loc);
  if (src.shape() != dst.shape() || src.dtype() != dst.dtype())
    throw UserError(fmt::format("{}: the source and destination differ in {}", api,
                                src.shape() != dst.shape() ? "shape" : "dtype"),
                    fmt::format("from {} to {}", src.describe(), dst.describe()),
                    "copy between windows of one shape and dtype: slice them with .at(pl::ds(...)) (convert dtypes "
                    "after the copy, in VMEM)",
                    loc);
  check_writable(dst, api, loc);
}

AsyncCopyDescriptor make_async_copy(const Ref& src, const Ref& dst, const Ref& sem, std::source_location loc) {
  const char* api = "pl::make_async_copy";
  detail::check_copy(src, dst, api, loc);
  detail::check_semaphore(sem, DType::dma_sem, api, loc);
  return AsyncCopyDescriptor(src, dst, sem, loc);
}

void AsyncCopyDescriptor::start(std::source_location loc) const {
  auto& ctx = detail::TraceContext::current("AsyncCopyDescriptor::start", loc);
  for (const Ref* r : {&src_, &dst_, &sem_}) ctx.check_visible(r->id(), "a copy's start()", loc);
  ctx.emit(OpKind::DmaStart, {src_.id(), dst_.id(), sem_.id()}, {}, {}, loc);
}

void AsyncCopyDescriptor::wait(std::source_location loc) const {
  auto& ctx = detail::TraceContext::current("AsyncCopyDescriptor::wait", loc);
  ctx.check_visible(sem_.id(), "a copy's wait()", loc);
  const int64_t bytes = num_elements(dst_.shape()) * dtype_size(dst_.dtype());
  ctx.emit(OpKind::DmaWait, {sem_.id()}, {}, bytes, loc);
}

AsyncCopyDescriptor async_copy(const Ref& src, const Ref& dst, const Ref& sem, std::source_location loc) {
  AsyncCopyDescriptor copy = make_async_copy(src, dst, sem, loc);
  copy.start(loc);
  return copy;
}

void sync_copy(const Ref& src, const Ref& dst, std::source_location loc) {
  run_scoped(
      [&](Ref sem) {
        AsyncCopyDescriptor copy = make_async_copy(src, dst, sem, loc);
        copy.start(loc);
        copy.wait(loc);
      },
      ScratchShape(SemaphoreType::DMA, loc));
}

}  // namespace tessera
