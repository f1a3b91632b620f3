// Which elements of a core's scratch the kernel has written: the interpreter's check that a load
// never reads scratch nobody wrote (docs/design.md §4.6). Scratch is every allocation of the kernel
// that is not a semaphore or a pipeline's block buffer: pallas_call's scratch_shapes and
// pl::run_scoped's buffers, VMEM and SMEM alike. Each core runs the kernel in a frame of its own, so
// each core's scratch has its own record.
//
// What counts as a write: a store (a masked store's masked-in lanes only), a dot-accumulate, a local
// DMA into the scratch (when it starts: the race detector, not this check, orders it with its wait)
// and a pipeline write-back into it. What is checked: loads (a masked load's masked-in lanes only)
// and a dot-accumulate's read of its accumulator. Copies *from* scratch are not checked: a staging
// buffer is often copied out whole while only part of it holds data, and only a load makes a value
// of the poison (docs/design.md §4.6 says why).
//
// A scratch buffer another device writes into by remote copy is not tracked at all: the write lands
// through the transport (possibly in another process), which this core does not see.
//
// Runtime layer: part of the interpreter backend.
#pragma once

#include <cstdint>
#include <vector>

#include "jit/ir/ir.h"
#include "runtime/array.h"
#include "runtime/memory.h"

namespace tessera::rt {

class ScratchWrites {
 public:
  // Which alloc ops of `fn` (by op id) are tracked scratch: not semaphores, not the block buffers of
  // a pipeline (its copies fill and drain them), and not the destination of a remote copy.
  static std::vector<bool> tracked_allocs(const ir::Function& fn);

  // Tracks `buffer` from now on, with nothing written (an allocation beginning). Again for a buffer
  // already tracked: its allocation began again (a run_scoped region that runs once more).
  void begin(const Buffer& buffer);
  bool empty() const { return buffers_.empty(); }

  // The elements of `r` (those `mask` selects, when given) now hold written values.
  void write(const RefView& r, const Array* mask = nullptr);
  // Faults when an element of `r` (that `mask` selects, when given) was never written, naming the
  // scratch, the element and how to fix the kernel.
  void check_read(const RefView& r, const Array* mask = nullptr) const;

 private:
  struct Tracked {
    const Buffer* buffer;
    std::vector<uint8_t> written;  // one flag per element of the buffer
    int64_t unwritten;             // 0: every element written, nothing left to record or check
  };
  Tracked* find(const Buffer* buffer);
  const Tracked* find(const Buffer* buffer) const;
  std::vector<Tracked> buffers_;  // a kernel has few scratch buffers: a search is cheap
};

}  // namespace tessera::rt
