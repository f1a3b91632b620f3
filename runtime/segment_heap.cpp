#include "runtime/segment_heap.h"

#include <iterator>

namespace tessera::rt {

SegmentHeap::SegmentHeap(std::byte* base, int64_t bytes) : base_(base), bytes_(bytes / kAlign * kAlign) {
  if (bytes_ > 0) free_.emplace(0, bytes_);
}

std::byte* SegmentHeap::take(int64_t bytes) {
  if (bytes <= 0) return nullptr;
  const int64_t size = (bytes + kAlign - 1) / kAlign * kAlign;
  std::lock_guard lock(mutex_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size) continue;
    const auto [at, room] = *it;
    free_.erase(it);
    if (room > size) free_.emplace(at + size, room - size);
    taken_.emplace(at, size);
    return base_ + at;
  }
  return nullptr;
}

void SegmentHeap::give(std::byte* p) {
  std::lock_guard lock(mutex_);
  const auto it = taken_.find(p - base_);
  if (it == taken_.end()) return;
  int64_t at = it->first, size = it->second;
  taken_.erase(it);
  // Merge with the free neighbours, so that freed buffers make room for larger ones.
  auto next = free_.lower_bound(at);
  if (next != free_.end() && next->first == at + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    const auto before = std::prev(next);
    if (before->first + before->second == at) {
      at = before->first;
      size += before->second;
      free_.erase(before);
    }
  }
  free_.emplace(at, size);
}

int64_t SegmentHeap::used() const {
  std::lock_guard lock(mutex_);
  int64_t total = 0;
  for (const auto& [at, size] : taken_) total += size;
  return total;
}

}  // namespace tessera::rt
