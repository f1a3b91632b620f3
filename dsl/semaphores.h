// Semaphores in kernels (docs/design.md §4.9), spelled as in Pallas:
//
//   scratch_shapes = {pl::SemaphoreType::REGULAR, pl::SemaphoreType::DMA({2})}   allocate them
//   pl::semaphore_signal(sem, inc = 1)     add inc (a regular semaphore)
//   pl::semaphore_wait(sem, value = 1)     wait until it holds value, then subtract it
//   pl::semaphore_read(sem)                its current value (i32), of either kind
//
// `sem` is one semaphore: index an array of them with sems.at(i). Every semaphore must be back at
// zero when the kernel (or the run_scoped region that allocated it) ends; a wait that nothing can
// satisfy is reported as a deadlock.
//
// Front-end layer (dsl/).
#pragma once

#include <source_location>

#include "dsl/ref.h"
#include "dsl/value.h"

namespace tessera {

void semaphore_signal(const Ref& sem, std::source_location loc = std::source_location::current());
void semaphore_signal(const Ref& sem, const Operand& inc, std::source_location loc = std::source_location::current());
void semaphore_wait(const Ref& sem, std::source_location loc = std::source_location::current());
void semaphore_wait(const Ref& sem, const Operand& value, std::source_location loc = std::source_location::current());
Value semaphore_read(const Ref& sem, std::source_location loc = std::source_location::current());

}  // namespace tessera
