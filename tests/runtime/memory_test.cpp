#include <doctest/doctest.h>

#include <cmath>

#include "runtime/memory.h"

using namespace tessera;
using namespace tessera::rt;

TEST_SUITE("runtime") {
  TEST_CASE("memory: new buffers hold poison, or zeros on request") {
    auto b = make_buffer("scratch 0", DType::f32, {2, 2}, MemorySpace::VMEM, false);
    for (float v : load(RefView::whole(*b)).to_vector<float>()) CHECK(std::isnan(v));
    auto i = make_buffer("scratch 1", DType::i32, {3}, MemorySpace::VMEM, false);
    CHECK(load(RefView::whole(*i)).at<int32_t>({0}) == std::numeric_limits<int32_t>::max());
    auto z = make_buffer("scratch 2", DType::i32, {3}, MemorySpace::VMEM, true);
    CHECK(load(RefView::whole(*z)).at<int32_t>({2}) == 0);
  }

  TEST_CASE("memory: a TPU pads the last dim to 128 lanes and the one before to 32-bit rows of 8") {
    CHECK(tpu_padded_shape({5, 100}, DType::f32, MemorySpace::VMEM) == Shape{8, 128});
    CHECK(tpu_padded_shape({5, 100}, DType::bf16, MemorySpace::VMEM) == Shape{16, 128});
    CHECK(tpu_padded_shape({5, 100}, DType::i8, MemorySpace::ANY) == Shape{32, 128});
    CHECK(tpu_padded_shape({5, 100}, DType::f64, MemorySpace::VMEM) == Shape{8, 128});
    CHECK(tpu_padded_shape({3, 16, 256}, DType::i32, MemorySpace::HBM) == Shape{3, 16, 256});
    CHECK(tpu_padded_shape({100}, DType::f32, MemorySpace::VMEM) == Shape{128});
    CHECK(tpu_padded_shape({}, DType::f32, MemorySpace::VMEM) == Shape{});
    // Scalar memory and semaphores are not tiled.
    CHECK(tpu_padded_shape({5, 100}, DType::i32, MemorySpace::SMEM) == Shape{5, 100});
    CHECK(tpu_padded_shape({3}, DType::sem, MemorySpace::SEMAPHORE) == Shape{3});
  }

  TEST_CASE("memory: views slice, stride and squeeze, and loads and stores go through them") {
    Buffer b("x", Array::arange(12, DType::i32).reshape({3, 4}), MemorySpace::VMEM, true);
    RefView whole = RefView::whole(b);
    // Row 1, columns 0 and 2.
    ir::ViewAttr attr{{ir::ViewDim{true, 1, 1}, ir::ViewDim{false, 2, 2}}};
    std::vector<int64_t> starts{1, 0};
    RefView v = view(whole, starts, attr, "x");
    CHECK(v.shape == Shape{2});
    CHECK(load(v).to_vector<int32_t>() == std::vector<int32_t>{4, 6});
    store(v, Array::from_vector<int32_t>({-1, -2}, {2}));
    CHECK(load(whole).to_vector<int32_t>() == std::vector<int32_t>{0, 1, 2, 3, -1, 5, -2, 7, 8, 9, 10, 11});
    // Masked store and load.
    Array mask = Array::from_vector<bool>({false, true}, {2});
    store_masked(v, Array::from_vector<int32_t>({100, 200}, {2}), mask);
    CHECK(load(v).to_vector<int32_t>() == std::vector<int32_t>{-1, 200});
    Array other = Array::from_vector<int32_t>({7, 7}, {2});
    CHECK(load_masked(v, mask, &other, false).to_vector<int32_t>() == std::vector<int32_t>{7, 200});
  }

  TEST_CASE("memory: out-of-range views fault with the buffer, index and valid range") {
    Buffer b("input 0 block", Array::zeros({8, 8}, DType::f32), MemorySpace::VMEM, true);
    RefView whole = RefView::whole(b);
    ir::ViewAttr slice{{ir::ViewDim{false, 4, 1}, ir::ViewDim{false, 8, 1}}};
    std::vector<int64_t> bad{6, 0};
    CHECK_THROWS_WITH_AS(view(whole, bad, slice, "input 0 block"), doctest::Contains("out-of-bounds slice of `input 0 block`"), Fault);
    CHECK_THROWS_WITH_AS(view(whole, bad, slice, "input 0 block"), doctest::Contains("reaches element 9; valid elements are [0, 8)"), Fault);
    ir::ViewAttr index{{ir::ViewDim{true, 1, 1}, ir::ViewDim{false, 8, 1}}};
    std::vector<int64_t> neg{-1, 0};
    CHECK_THROWS_WITH_AS(view(whole, neg, index, "input 0 block"), doctest::Contains("index -1 in dimension 0"), Fault);
  }

  TEST_CASE("memory: read-only buffers fault on writes and never change the array") {
    Array a = Array::arange(4, DType::i32);
    Buffer b("input 0", a, MemorySpace::ANY, false);
    CHECK(b.data() == a.data());  // read in place, no copy
    CHECK_THROWS_WITH_AS(store(RefView::whole(b), Array::zeros({4}, DType::i32)), doctest::Contains("read-only"), Fault);
    Buffer w("output 0", a, MemorySpace::ANY, true);
    store(RefView::whole(w), Array::zeros({4}, DType::i32));
    CHECK(a.at<int32_t>({3}) == 3);
  }

  TEST_CASE("memory: block fetch poisons past the edge, write-back drops past the edge") {
    Buffer arr("input 0", Array::arange(10, DType::f32).reshape({10}), MemorySpace::ANY, true);
    auto blk = make_buffer("input 0 block", DType::f32, {4}, MemorySpace::VMEM, true);
    std::vector<int64_t> start{8};
    fetch_block(RefView::whole(arr), RefView::whole(*blk), start, false, "input 0");
    std::vector<float> got = load(RefView::whole(*blk)).to_vector<float>();
    CHECK(got[0] == 8);
    CHECK(got[1] == 9);
    CHECK(std::isnan(got[2]));
    CHECK(std::isnan(got[3]));
    store(RefView::whole(*blk), Array::full({4}, -1, DType::f32));
    writeback_block(RefView::whole(*blk), RefView::whole(arr), start, "output 0");
    CHECK(load(RefView::whole(arr)).to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, -1, -1});
    std::vector<int64_t> outside{12};
    CHECK_THROWS_WITH_AS(fetch_block(RefView::whole(arr), RefView::whole(*blk), outside, false, "input 0"),
                         doctest::Contains("block of input 0 out of bounds"), Fault);
  }
}
