// Copies between memory spaces (DMAs, docs/design.md §4.8), spelled as in Pallas:
//
//   auto copy = pl::make_async_copy(x_hbm.at(pl::ds(i * 8, 8)), x_vmem, sem);   describe it
//   copy.start();   ... other work ...   copy.wait();                           then use x_vmem
//   pl::async_copy(src, dst, sem)      make and start
//   pl::sync_copy(src, dst)            start and wait, with a DMA semaphore of its own
//
// Source and destination are refs of one shape and dtype in any memory spaces (ANY/HBM included:
// that is how kernels reach them), windows with .at(...) included. `sem` is one DMA semaphore: the
// copy adds its byte count when done, and wait() waits for the byte count of the destination. The
// destination holds the data only after wait() (the interpreter's on_wait mode makes an early read
// visible by completing copies only when they are waited on).
//
// Front-end layer (dsl/).
#pragma once

#include <source_location>

#include "dsl/ref.h"

namespace tessera {

class AsyncCopyDescriptor {
 public:
  AsyncCopyDescriptor(Ref src, Ref dst, Ref sem, SourceLoc loc) : src_(src), dst_(dst), sem_(sem), loc_(loc) {}

  void start(std::source_location loc = std::source_location::current()) const;
  void wait(std::source_location loc = std::source_location::current()) const;

  const Ref& src() const { return src_; }
  const Ref& dst() const { return dst_; }
  const Ref& sem() const { return sem_; }

 private:
  Ref src_, dst_, sem_;
  SourceLoc loc_;  // where it was made
};

namespace detail {
// Checks a copy's source and destination for `api`: data refs of one shape and dtype, the
// destination writable.
void check_copy(const Ref& src, const Ref& dst, const char* api, SourceLoc loc);
}  // namespace detail

AsyncCopyDescriptor make_async_copy(const Ref& src, const Ref& dst, const Ref& sem,
                                    std::source_location loc = std::source_location::current());
// make_async_copy(...) and start().
AsyncCopyDescriptor async_copy(const Ref& src, const Ref& dst, const Ref& sem,
                               std::source_location loc = std::source_location::current());
// A copy that has finished when it returns.
void sync_copy(const Ref& src, const Ref& dst, std::source_location loc = std::source_location::current());

}  // namespace tessera
