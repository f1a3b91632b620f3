// The shared-memory segment's heap (runtime/segment_heap.h) and the storage source arrays take large
// storage from (runtime/array.h): what the MPI transport keeps kernel buffers in (docs/design.md §4c).
#include <doctest/doctest.h>

#include <vector>

#include "runtime/array.h"
#include "runtime/segment_heap.h"

using namespace tessera;

TEST_CASE("SegmentHeap: page-aligned blocks inside the segment, null when full, freed neighbours merged") {
  std::vector<std::byte> memory(size_t{64} << 10);
  rt::SegmentHeap heap(memory.data(), static_cast<int64_t>(memory.size()));
  std::byte* a = heap.take(1);
  std::byte* b = heap.take(rt::SegmentHeap::kAlign + 1);  // two pages
  std::byte* c = heap.take(rt::SegmentHeap::kAlign);
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(c);
  CHECK(heap.offset(a) % rt::SegmentHeap::kAlign == 0);
  CHECK(heap.offset(b) - heap.offset(a) == rt::SegmentHeap::kAlign);
  CHECK(heap.offset(c) - heap.offset(b) == 2 * rt::SegmentHeap::kAlign);
  CHECK(heap.contains(c, rt::SegmentHeap::kAlign));
  CHECK_FALSE(heap.contains(memory.data() + memory.size() - 8, 16));
  CHECK(heap.used() == 4 * rt::SegmentHeap::kAlign);
  // 12 pages left: 13 do not fit, 12 do.
  CHECK(heap.take(13 * rt::SegmentHeap::kAlign) == nullptr);
  std::byte* rest = heap.take(12 * rt::SegmentHeap::kAlign);
  REQUIRE(rest);
  CHECK(heap.take(1) == nullptr);
  // a and b freed: one free range of three pages (merged), which a block of three pages takes.
  heap.give(b);
  heap.give(a);
  std::byte* three = heap.take(3 * rt::SegmentHeap::kAlign);
  CHECK(three == a);
  heap.give(three);
  heap.give(c);
  heap.give(rest);
  CHECK(heap.used() == 0);
  CHECK(heap.take(16 * rt::SegmentHeap::kAlign) == memory.data());
}

namespace {
std::vector<std::byte> g_source_memory(size_t{256} << 10);
int g_asked = 0;
std::shared_ptr<std::byte[]> from_source(int64_t nbytes) {
  ++g_asked;
  if (nbytes > static_cast<int64_t>(g_source_memory.size())) return nullptr;  // declined: the heap
  return std::shared_ptr<std::byte[]>(g_source_memory.data(), [](std::byte*) {});
}
}  // namespace

TEST_CASE("set_storage_source: arrays of at least min_bytes take storage from the source, others and declined ones the heap") {
  rt::set_storage_source(from_source, 16 << 10);
  struct Reset {
    ~Reset() { rt::set_storage_source(nullptr, 0); }
  } reset;
  const Array small = Array::zeros({1024}, f32);  // 4 KiB: never asked
  CHECK(g_asked == 0);
  const Array large = Array::full({8192}, 3.0, f32);  // 32 KiB: from the source, filled
  CHECK(g_asked == 1);
  CHECK(large.data() == g_source_memory.data());
  CHECK(large.at<float>({8191}) == 3.0f);
  const Array zero = Array::zeros({8192}, f32);  // from the source (the same memory here), zeroed
  CHECK(zero.at<float>({100}) == 0.0f);
  const Array huge = Array::zeros({1 << 17}, f32);  // 512 KiB: declined, so the heap
  CHECK(g_asked == 3);
  CHECK(huge.data() != g_source_memory.data());
  CHECK(huge.at<float>({(1 << 17) - 1}) == 0.0f);
  CHECK(small.data() != g_source_memory.data());
}
