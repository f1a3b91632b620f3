#include "dsl/semaphores.h"

#include <fmt/format.h>

namespace tessera {

using ir::OpKind;

namespace {

void update(OpKind kind, const Ref& sem, const Operand& v, const char* api, SourceLoc loc) {
  detail::check_semaphore(sem, DType::sem, api, loc);
  auto& ctx = detail::TraceContext::current(api, loc);
  Value a = detail::i32_scalar(v, api, "the amount", "a count of signals", loc);
  ctx.check_visible(a.id(), api, loc);
  ctx.emit(kind, {sem.id(), a.id()}, {}, {}, loc);
}

}  // namespace

void semaphore_signal(const Ref& sem, std::source_location loc) { semaphore_signal(sem, Operand(1, loc), loc); }
void semaphore_signal(const Ref& sem, const Operand& inc, std::source_location loc) {
  update(OpKind::SemaphoreSignal, sem, inc, "pl::semaphore_signal", loc);
}
void semaphore_wait(const Ref& sem, std::source_location loc) { semaphore_wait(sem, Operand(1, loc), loc); }
void semaphore_wait(const Ref& sem, const Operand& value, std::source_location loc) {
  update(OpKind::SemaphoreWait, sem, value, "pl::semaphore_wait", loc);
}

Value semaphore_read(const Ref& sem, std::source_location loc) {
  detail::check_semaphore(sem, std::nullopt, "pl::semaphore_read", loc);
  auto& ctx = detail::TraceContext::current("pl::semaphore_read", loc);
  return Value::wrap(ctx, ctx.emit_value(OpKind::SemaphoreRead, {sem.id()}, Type::scalar(DType::i32), {}, loc));
}

}  // namespace tessera
