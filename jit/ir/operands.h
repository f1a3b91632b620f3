// Named operands of the ops whose operand lists have structure (ops.def documents each layout):
// loads and stores, dots, windows, block copies, DMAs and semaphores, loops and pipelines. Passes,
// the printer, the code generator and the interpreter read operands through these instead of by
// position, so each layout is decoded in one place.
//
// The accessors expect an op of the kinds named (they throw InternalError otherwise) with the
// operand counts the verifier checks; the verifier itself decodes by position, since it is what
// checks the counts. Spans point into the op's operand list.
//
// Part of the IR layer.
#pragma once

#include <span>

#include "jit/ir/ir.h"

namespace tessera::ir {

using OperandSpan = std::span<const ValueId>;

// load(ref [, mask [, other]]); mask and other are kNone when absent.
struct LoadOperands {
  ValueId ref, mask, other;
};
LoadOperands load_operands(const Op& op);

// store(ref, value [, mask]); mask is kNone when absent.
struct StoreOperands {
  ValueId ref, value, mask;
};
StoreOperands store_operands(const Op& op);

// dot_general(lhs, rhs) and dot_accumulate(acc, lhs, rhs) (acc is kNone for dot_general).
struct DotOperands {
  ValueId acc, lhs, rhs;
};
DotOperands dot_operands(const Op& op);

// select(cond, on_true, on_false).
struct SelectOperands {
  ValueId cond, on_true, on_false;
};
SelectOperands select_operands(const Op& op);

// view(ref, starts...), block_view(array, starts...) and slice(value, starts...): one start per dim
// of `ref` (for slice, of the value).
struct WindowOperands {
  ValueId ref;
  OperandSpan starts;
};
WindowOperands window_operands(const Op& op);

// fetch_block(array, block, starts... [, sem]) and writeback_block(block, array, starts... [, sem]):
// one start per dim; sem is kNone for a synchronous copy.
struct BlockCopyOperands {
  bool fetch;
  ValueId array, block;
  OperandSpan starts;
  OperandSpan sizes;  // one per BlockCopyAttr::bounded dim
  ValueId sem;
  ValueId src() const { return fetch ? array : block; }
  ValueId dst() const { return fetch ? block : array; }
};
BlockCopyOperands block_copy_operands(const Function& fn, const Op& op);

// dma_start(src, dst, sem) and remote_dma_start(src, dst, send_sem, recv_sem, device...): for a
// local copy recv_sem is kNone and device empty.
struct DmaOperands {
  ValueId src, dst, send_sem, recv_sem;
  OperandSpan device;
};
DmaOperands dma_operands(const Op& op);

// dma_wait(sem), semaphore_signal(sem, inc), semaphore_wait(sem, value), semaphore_read(sem) and
// remote_semaphore_signal(sem, inc, device...): amount is kNone where the op takes none.
struct SemaphoreOperands {
  ValueId sem, amount;
  OperandSpan device;
};
SemaphoreOperands semaphore_operands(const Op& op);

// for(lb, ub, step, inits...).
struct ForOperands {
  ValueId lb, ub, step;
  OperandSpan inits;
};
ForOperands for_operands(const Op& op);

// pipeline(lo, hi, sizes..., refs...): the step range, the sizes of the grid's dynamic dims (in
// order) and one ref per PipelineAttr operand.
struct PipelineOperands {
  ValueId lo, hi;
  OperandSpan sizes;
  OperandSpan refs;
};
PipelineOperands pipeline_operands(const Op& op);

}  // namespace tessera::ir
