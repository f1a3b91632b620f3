// A heap over one fixed piece of memory: first fit, freed neighbours merged. The MPI transport keeps
// kernel buffers in its shared-memory segment with it (docs/design.md §4c), so that a process on the
// same host writes them with a memcpy; it has nothing MPI in it, so that it is tested on its own.
//
// Runtime layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace tessera::rt {

class SegmentHeap {
 public:
  // Blocks are whole pages: buffers start page-aligned, as the heap's large blocks do.
  static constexpr int64_t kAlign = 4096;

  SegmentHeap(std::byte* base, int64_t bytes);
  SegmentHeap(const SegmentHeap&) = delete;
  SegmentHeap& operator=(const SegmentHeap&) = delete;

  // A block of at least `bytes`, or null when no free range is large enough (the caller then uses the
  // ordinary heap). Thread-safe.
  std::byte* take(int64_t bytes);
  // Gives back a block `take` returned.
  void give(std::byte* p);

  // Whether [p, p + bytes) lies in the segment, and where from its start.
  bool contains(const std::byte* p, int64_t bytes) const { return p >= base_ && p + bytes <= base_ + bytes_; }
  int64_t offset(const std::byte* p) const { return p - base_; }
  // Bytes handed out and not given back.
  int64_t used() const;

 private:
  std::byte* const base_;
  const int64_t bytes_;
  mutable std::mutex mutex_;
  std::map<int64_t, int64_t> free_;  // offset -> bytes, no two adjacent
  std::map<int64_t, int64_t> taken_;  // offset -> bytes
};

}  // namespace tessera::rt
