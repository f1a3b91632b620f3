// A failed call followed by a good one, on every path a launch takes: a pallas_call compiled and
// interpreted, a shard_map over a mesh (its kernels and a host collective), and an mpmd_map. The
// same call object fails and then works, so nothing a failure leaves behind (a half-run launch
// group, arenas, semaphores, the compile cache) may reach the next call (docs/design.md §4.12).
#include <doctest/doctest.h>

#include <numeric>

#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;
using doctest::Contains;

namespace {

// Reads the 4 elements of its block starting at the block's first element: data decides whether
// the slice is in bounds, so one call object both fails and works.
void window_kernel(pl::Ref x, pl::Ref o) { o() = x(pl::ds(x[0], 4)); }

auto window_call(const pl::CallOptions& backend) {
  return pl::pallas_call(window_kernel, pl::GridSpec{}, pl::ShapeDtype({4}, pl::i32), backend);
}

// 8 elements: the start, then 1..7.
pl::Array block_starting_at(int32_t start) {
  std::vector<int32_t> v(8);
  std::iota(v.begin(), v.end(), 0);
  v[0] = start;
  return pl::Array::from_vector(v, {8});
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("recovery: a pallas_call that failed runs again, compiled and interpreted") {
    testing::for_each_backend([](const pl::CallOptions& backend) {
      auto call = window_call(backend);
      for (int round = 0; round < 3; ++round) {
        CHECK_THROWS_WITH_AS(call(block_starting_at(6)), Contains("out-of-bounds slice of `input 0 block`: ds(6, 4)"),
                             RuntimeError);
        CHECK(call(block_starting_at(2)).to_vector<int32_t>() == std::vector<int32_t>{2, 3, 4, 5});
      }
    });
  }

  TEST_CASE("recovery: a shard_map whose kernel failed on one device runs again, host collective included") {
    testing::for_each_backend([](const pl::CallOptions& backend) {
      pl::Mesh mesh({2}, {"x"});
      auto call = window_call(backend);
      // Each device reads its window, then the devices sum their windows (psum is a collective kernel).
      auto f = pl::shard_map([&](const pl::Array& block) { return pl::psum(call(block), "x"); }, mesh, {pl::P("x")},
                             {pl::P()});
      pl::Array bad = pl::concatenate({block_starting_at(1), block_starting_at(5)}, 0);
      pl::Array good = pl::concatenate({block_starting_at(1), block_starting_at(3)}, 0);
      for (int round = 0; round < 3; ++round) {
        // Device 1 fails; device 0, left alone in the psum, fails too, and the caller sees the cause.
        CHECK_THROWS_WITH_AS(f(bad), Contains("out-of-bounds slice of `input 0 block`: ds(5, 4)"), RuntimeError);
        // Windows [1, 2, 3, 4] and [3, 4, 5, 6].
        CHECK(pl::Array(f(good)).to_vector<int32_t>() == std::vector<int32_t>{4, 6, 8, 10});
      }
    });
  }

  TEST_CASE("recovery: an mpmd_map whose participant failed runs again") {
    testing::for_each_backend([](const pl::CallOptions& backend) {
      // Core p of "copy" copies row block p of x into o; core 0 of "signal" waits until both are done.
      auto copy = [](pl::Ref x, pl::Ref o, pl::Ref done, pl::Ref buf) {
        const pl::Value p = pl::axis_index("copy");
        pl::sync_copy(x.at(pl::ds(p * 4, 4)), buf);
        pl::sync_copy(buf, o.at(pl::ds(p * 4, 4)));
        pl::semaphore_signal(done);
      };
      auto wait = [](pl::Ref, pl::Ref, pl::Ref done, pl::Ref) { pl::semaphore_wait(done, 2); };
      auto call = pl::mpmd_map({{pl::CoreMesh("copy", 2), copy}, {pl::CoreMesh("signal", 1), wait}},
                               pl::ShapeDtype({8}, pl::f32), {pl::SemaphoreType::REGULAR, pl::VMEM({4}, pl::f32)},
                               backend);
      pl::Array x = pl::Array::arange(8, pl::f32);
      for (int round = 0; round < 3; ++round) {
        // Too short an input: core 1's copy is out of bounds, and the waiting core can never finish.
        CHECK_THROWS_WITH_AS(call(pl::Array::arange(6, pl::f32)), Contains("out-of-bounds slice of `input 0`: ds(4, 4)"),
                             RuntimeError);
        CHECK(call(x).to_vector<float>() == x.to_vector<float>());
      }
    });
  }
}
