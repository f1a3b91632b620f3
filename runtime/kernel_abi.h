// The C ABI between compiled kernels and the runtime.
//
// A compiled kernel has the uniform signature
//     void kernel(void* const* operands, int64_t first_step, int64_t end_step, CoreContext* core)
// (operands: the data pointers of the kernel's ref parameters, in order). It calls the functions
// below by symbol, never by address, so a cached object file stays valid in another process. Ops
// are named by their index in the lowered IR (`op`), from which the runtime learns shapes, dtypes,
// names and source lines; the rules themselves (block copies, poison, revisits, messages) are the
// same code the interpreter runs.
//
// A function returning int32_t returns non-zero after recording a failure in the core context:
// the kernel then returns at once, and the host throws the failure after the launch. No exception
// ever crosses into compiled code: the functions record it as the core's failure instead (an
// allocation that fails returns null, which the kernel notices at its first check).
//
// Runtime layer.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/launch.h"

extern "C" {
// The start of a grid step of grid_point op `op` (ids: one i32 per grid dim). Non-zero when the
// launch was cancelled.
int32_t tessera_rt_grid_point(tessera::rt::CoreContext* core, int32_t op, const int32_t* ids);
// A trace_start (start != 0) or trace_stop op `op`: a named scope on the timeline.
void tessera_rt_trace_scope(tessera::rt::CoreContext* core, int32_t op, int32_t start);
// Non-zero when a failure was recorded (checked once after the kernel's allocations).
int32_t tessera_rt_failed(tessera::rt::CoreContext* core);
// The storage of an alloc op: fresh, poisoned (or zeroed; semaphores: zero), owned by the core until
// the kernel ends.
void* tessera_rt_alloc(tessera::rt::CoreContext* core, int32_t op);
// The end of the region of alloc op `op` (storage at `data`): the copies touching it complete, its
// semaphores must be zero.
int32_t tessera_rt_release(tessera::rt::CoreContext* core, int32_t op, void* data);
// Scratch for the code generator's own temporaries (uninitialised, 64-byte aligned), owned likewise.
void* tessera_rt_temp(tessera::rt::CoreContext* core, int64_t nbytes);
// base ** exp with `bits`-bit wrap-around integers (the runtime's integer pow).
int64_t tessera_rt_ipow(int64_t base, int64_t exp, int32_t bits);
// fetch_block / writeback_block ops between an array (strides in elements, one per dim) and a
// contiguous block buffer; starts: one i32 element offset per dim; sem: the DMA semaphore of an
// asynchronous copy, or null.
int32_t tessera_rt_fetch_block(tessera::rt::CoreContext* core, int32_t op, const void* array,
                               const int64_t* array_strides, void* block, const int32_t* starts, int64_t* sem);
int32_t tessera_rt_writeback_block(tessera::rt::CoreContext* core, int32_t op, const void* block, void* array,
                                   const int64_t* array_strides, const int32_t* starts, int64_t* sem);
// A dma_start op: strides holds the source's strides, then the destination's (elements, one per dim).
int32_t tessera_rt_dma_start(tessera::rt::CoreContext* core, int32_t op, const void* src, void* dst, int64_t* sem,
                             const int64_t* strides);
// dma_wait / semaphore_signal / semaphore_wait / semaphore_read ops on the semaphore at `sem`.
int32_t tessera_rt_dma_wait(tessera::rt::CoreContext* core, int32_t op, int64_t* sem);
int32_t tessera_rt_semaphore_signal(tessera::rt::CoreContext* core, int32_t op, int64_t* sem, int32_t inc);
int32_t tessera_rt_semaphore_wait(tessera::rt::CoreContext* core, int32_t op, int64_t* sem, int32_t value);
int32_t tessera_rt_semaphore_read(tessera::rt::CoreContext* core, int64_t* sem);
// A pipeline_begin op.
void tessera_rt_pipeline_begin(tessera::rt::CoreContext* core, int32_t op);
// The kernel's allocations are made (called once, after them, by kernels that communicate).
int32_t tessera_rt_ready(tessera::rt::CoreContext* core);
// remote_dma_start / remote_semaphore_signal ops; device: the op's device operands (i32 each);
// strides: the source's, then the destination's.
int32_t tessera_rt_remote_dma_start(tessera::rt::CoreContext* core, int32_t op, const void* src, const void* dst,
                                    int64_t* send_sem, int64_t* recv_sem, const int64_t* strides, const int32_t* device);
int32_t tessera_rt_remote_signal(tessera::rt::CoreContext* core, int32_t op, int64_t* sem, int32_t inc,
                                 const int32_t* device);
// This device's coordinate along mesh axis `axis`.
int32_t tessera_rt_axis_index(tessera::rt::CoreContext* core, int32_t axis);
// Records that block_view op `op` starts outside its array (starts: one i32 per dim).
void tessera_rt_block_view_fault(tessera::rt::CoreContext* core, int32_t op, const int32_t* starts);
// Records that view op `op` is out of bounds in dimension `dim` at `start`.
void tessera_rt_view_fault(tessera::rt::CoreContext* core, int32_t op, int32_t dim, int64_t start);
// A debug_print op; values[i] points at operand i's elements (contiguous, storage dtype).
void tessera_rt_debug_print(tessera::rt::CoreContext* core, int32_t op, const void* const* values);
}

namespace tessera::rt {

// A compiled kernel's entry point (the uniform signature above).
using KernelEntry = void (*)(void* const* operands, int64_t first_step, int64_t end_step, CoreContext* core);

// The ABI functions by name, for the JIT to bind.
std::vector<std::pair<std::string_view, void*>> kernel_abi_symbols();

}  // namespace tessera::rt
