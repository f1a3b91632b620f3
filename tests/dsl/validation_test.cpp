// Shapes, grids and sizes at their limits: zero-size arrays (whole-array blocks of them included) and
// grids run (an empty result; a BlockSpec block dim of 0 is an error, errors_test "block specs");
// a shape no array can have, a grid whose step count overflows, a scratch past the VMEM budget's
// arithmetic, an allocation the machine refuses and a call made while a kernel is traced are clear
// errors naming what was given and where. After each error the next call works.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;
using doctest::Contains;

namespace {

constexpr int64_t kTwo32 = int64_t{1} << 32;

void add_one(pl::Ref x, pl::Ref o) { o() = x() + 1.0f; }

pl::BlockSpec rows(int64_t n) {
  return pl::BlockSpec({n}, [](pl::Value i) { return pl::idx(i); });
}

// A call after an error still works (docs/design.md §4.12).
void next_call_works(const pl::CallOptions& options = {}) {
  auto fine = pl::pallas_call(add_one, pl::GridSpec{}, pl::ShapeDtype({8}, pl::f32), options);
  CHECK(fine(pl::Array::arange(8, pl::f32)).at<float>({7}) == 8.0f);
}

// Runs `f`, which must throw E; returns its message and checks it names `line` of this file.
template <class E, class F>
std::string error_at(int line, F f) {
  try {
    f();
  } catch (const E& e) {
    const std::string what = e.what();
    CHECK(what.find(fmt::format("validation_test.cpp:{}", line)) != std::string::npos);
    return what;
  }
  FAIL("expected an error");
  return {};
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("validation: zero-size arrays, blocks and grids run and give empty results") {
    testing::for_each_backend([](const pl::CallOptions& options) {
      // Whole-array blocks of zero elements (these divided by zero while lowering).
      auto flat = pl::pallas_call(add_one, pl::GridSpec{}, pl::ShapeDtype({0}, pl::f32), options);
      CHECK(flat(pl::Array::zeros({0}, pl::f32)).shape() == pl::Shape{0});
      auto wide = pl::pallas_call(add_one, pl::GridSpec{}, pl::ShapeDtype({4, 0}, pl::f32), options);
      CHECK(wide(pl::Array::zeros({4, 0}, pl::f32)).shape() == pl::Shape{4, 0});
      // Blocks larger than an empty array: on an empty grid nothing runs; on a one-step grid the
      // block is all padding and its write-back is dropped.
      for (int64_t steps : {0, 1}) {
        auto blocked = pl::pallas_call(add_one, pl::GridSpec{.grid = {steps}, .in_specs = {rows(8)}, .out_specs = {rows(8)}},
                                       pl::ShapeDtype({0}, pl::f32), options);
        CHECK(blocked(pl::Array::zeros({0}, pl::f32)).shape() == pl::Shape{0});
        // A squeezed dim over an empty array dim is padding too (it was lowered as a view into the array).
        const pl::BlockSpec row({pl::squeezed, 5}, [](pl::Value i) { return pl::idx(i, 0); });
        auto squeezed = pl::pallas_call(add_one, pl::GridSpec{.grid = {steps}, .in_specs = {row}, .out_specs = {row}},
                                        pl::ShapeDtype({0, 5}, pl::f32), options);
        CHECK(squeezed(pl::Array::zeros({0, 5}, pl::f32)).shape() == pl::Shape{0, 5});
      }
      // A grid with a zero dim runs no step; the output keeps its shape.
      const pl::BlockSpec by_first({8}, [](pl::Value i, pl::Value) { return pl::idx(i); });
      auto none = pl::pallas_call(add_one, pl::GridSpec{.grid = {2, 0}, .in_specs = {by_first}, .out_specs = {by_first}},
                                  pl::ShapeDtype({16}, pl::f32), options);
      CHECK(none(pl::Array::zeros({16}, pl::f32)).shape() == pl::Shape{16});
      // Zero-size scratch and zero-size slices.
      auto scratch = pl::pallas_call([](pl::Ref x, pl::Ref o, pl::Ref) { o() = x(); },
                                     pl::GridSpec{.scratch_shapes = {pl::VMEM({0, 8}, pl::f32)}}, pl::ShapeDtype({4}, pl::f32),
                                     options);
      CHECK(scratch(pl::Array::arange(4, pl::f32)).at<float>({3}) == 3.0f);
      next_call_works(options);
    });
  }

  TEST_CASE("validation: a grid whose dims or step count do not fit is an error, not zero steps") {
    testing::for_each_backend([](const pl::CallOptions& options) {
      const int line = __LINE__ + 1;
      auto huge = pl::pallas_call(add_one, pl::GridSpec{.grid = {kTwo32, kTwo32}}, pl::ShapeDtype({8}, pl::f32), options);
      const std::string what = error_at<UserError>(line, [&] { huge(pl::Array::zeros({8}, pl::f32)); });
      CHECK(what.find("a grid dim does not fit pl::program_id, a 32-bit integer") != std::string::npos);
      CHECK(what.find("grid (4294967296, 4294967296) has 4294967296 in dim 0") != std::string::npos);
      const int64_t big = INT32_MAX;
      const int line2 = __LINE__ + 1;
      auto steps = pl::pallas_call(add_one, pl::GridSpec{.grid = {big, big, big}}, pl::ShapeDtype({8}, pl::f32), options);
      CHECK(error_at<UserError>(line2, [&] { steps(pl::Array::zeros({8}, pl::f32)); })
                .find("the grid has more steps than a 64-bit count holds") != std::string::npos);
      next_call_works(options);
    });
  }

  TEST_CASE("validation: an output shape no array can have is blamed on its ShapeDtype") {
    // A negative dim used to be reported by whatever op of the kernel met the shape first.
    int line = __LINE__ + 2;
    auto negative = pl::pallas_call([](pl::Ref x, pl::Ref o) { o() = pl::zeros_like(o) + x(0); }, pl::GridSpec{},
                                    pl::ShapeDtype({-4}, pl::f32));
    std::string what = error_at<UserError>(line, [&] { negative(pl::Array::zeros({4}, pl::f32)); });
    CHECK(what.find("pallas_call `kernel`: output 0 has a shape no array can have") != std::string::npos);
    CHECK(what.find("pl::ShapeDtype((-4,), f32): dim 0 is -4") != std::string::npos);
    CHECK(what.find("pl::full") == std::string::npos);
    line = __LINE__ + 1;
    auto overflow = pl::pallas_call(add_one, pl::GridSpec{}, pl::ShapeDtype({kTwo32, kTwo32}, pl::f32));
    what = error_at<UserError>(line, [&] { overflow(pl::Array::zeros({4}, pl::f32)); });
    CHECK(what.find("its element count, the product of its dims, exceeds") != std::string::npos);
    next_call_works();
  }

  TEST_CASE("validation: scratch past the size arithmetic and the VMEM budget") {
    // 2^62 f32 elements are 2^64 bytes: the size wrapped to zero and the scratch passed the budget.
    int line = __LINE__ + 2;
    auto wrapped = pl::pallas_call([](pl::Ref x, pl::Ref o, pl::Ref) { o() = x(); },
                                   pl::GridSpec{.scratch_shapes = {pl::VMEM({int64_t{1} << 62}, pl::f32)}},
                                   pl::ShapeDtype({4}, pl::f32));
    std::string what = error_at<UserError>(line, [&] { wrapped(pl::Array::zeros({4}, pl::f32)); });
    CHECK(what.find("scratch 0 has a size that overflows") != std::string::npos);
    CHECK(what.find("4611686018427387904 elements of 4 bytes") != std::string::npos);
    // Three scratch buffers of 2^62 bytes each: every one exists, their sum wrapped below the limit.
    const pl::ScratchShape quarter = pl::VMEM({int64_t{1} << 31, int64_t{1} << 31}, pl::i8);
    auto sum = pl::pallas_call([](pl::Ref x, pl::Ref o, pl::Ref, pl::Ref, pl::Ref) { o() = x(); },
                               pl::GridSpec{.scratch_shapes = {quarter, quarter, quarter}}, pl::ShapeDtype({4}, pl::f32));
    CHECK_THROWS_WITH_AS(sum(pl::Array::zeros({4}, pl::f32)), Contains("needs more VMEM per core than it may use"), UserError);
    CHECK_THROWS_WITH_AS(sum(pl::Array::zeros({4}, pl::f32)), Contains("2^63 bytes or more of VMEM buffers"), UserError);
    next_call_works();
  }

  TEST_CASE("validation: host arrays with impossible shapes, and allocations the machine refuses") {
    CHECK_THROWS_WITH_AS(pl::Array::zeros({-3}, pl::f32), Contains("pl::Array: no array can have shape (-3,)"), UserError);
    CHECK_THROWS_WITH_AS(pl::Array::empty({2, -1}, pl::f32), Contains("dim 1 is -1"), UserError);
    CHECK_THROWS_WITH_AS(pl::Array::zeros({kTwo32, kTwo32}, pl::f32), Contains("element count"), UserError);
    CHECK_THROWS_WITH_AS(pl::Array::zeros({int64_t{1} << 62}, pl::f32), Contains("4611686018427387904 elements of 4 bytes"), UserError);
    CHECK_THROWS_WITH_AS(pl::Array::arange(4, pl::f32).reshape({-2, -2}), Contains("no array can have shape (-2, -2)"),
                         UserError);
    CHECK(pl::Array::zeros({0, kTwo32}, pl::f32).size() == 0);  // no elements, however large the other dim
    if (!testing::kRefusedAllocationsThrow) return;
    // 128 TiB: the allocator refuses it at once (used to surface as a bare std::bad_alloc).
    CHECK_THROWS_WITH_AS(pl::Array::zeros({int64_t{1} << 45}, pl::f32),
                         Contains("out of memory: cannot allocate a (35184372088832,) f32 array"), UserError);
    CHECK_THROWS_WITH_AS(pl::Array::zeros({int64_t{1} << 45}, pl::f32), Contains("140737488355328 bytes"), UserError);
    // A kernel's buffer the machine refuses: the error names it, in both backends.
    testing::for_each_backend([](const pl::CallOptions& options) {
      auto big = pl::pallas_call([](pl::Ref x, pl::Ref o, pl::Ref) { o() = x(); },
                                 pl::GridSpec{.scratch_shapes = {pl::SMEM({int64_t{1} << 45}, pl::i32)}},
                                 pl::ShapeDtype({4}, pl::f32), options);
      CHECK_THROWS_WITH_AS(big(pl::Array::zeros({4}, pl::f32)), Contains("out of memory: cannot allocate"), RuntimeError);
      CHECK_THROWS_WITH_AS(big(pl::Array::zeros({4}, pl::f32)), Contains("for `scratch 0` in smem"), RuntimeError);
      next_call_works(options);
    });
  }

  TEST_CASE("validation: a kernel that makes a call while it is traced is an error, not a hang") {
    testing::for_each_backend([](const pl::CallOptions& options) {
      // The call made from its own kernel waited for itself on the call's lock.
      std::function<void()> again;
      auto self = pl::pallas_call(
          [&](pl::Ref x, pl::Ref o) {
            again();
            o() = x();
          },
          pl::GridSpec{}, pl::ShapeDtype({4}, pl::f32), pl::CallOptions{.interpret = options.interpret, .name = "outer"});
      // The error is at the call made while tracing.
      const int line = __LINE__ + 1;
      again = [&] { self(pl::Array::zeros({4}, pl::f32)); };
      std::string what;
      try {
        self(pl::Array::zeros({4}, pl::f32));
        FAIL("expected a UserError");
      } catch (const UserError& e) {
        what = e.what();
        CHECK(e.loc().line == static_cast<uint32_t>(line));  // the kernel's call, not the library's
      }
      CHECK(what.find(fmt::format("validation_test.cpp:{}", line)) != std::string::npos);
      CHECK(what.find("pallas_call `outer`: called while kernel `outer` is being traced") != std::string::npos);
      CHECK(what.find("a kernel cannot launch kernels") != std::string::npos);
      // Another call from inside a kernel is refused the same way.
      auto inner = pl::pallas_call(add_one, pl::GridSpec{}, pl::ShapeDtype({4}, pl::f32), options);
      int inner_line = 0;
      auto outer = pl::pallas_call(
          [&](pl::Ref x, pl::Ref o) {
            inner_line = __LINE__ + 1;
            inner(pl::Array::zeros({4}, pl::f32));
            o() = x();
          },
          pl::GridSpec{}, pl::ShapeDtype({4}, pl::f32), options);
      try {
        outer(pl::Array::zeros({4}, pl::f32));
        FAIL("expected a UserError");
      } catch (const UserError& e) {
        CHECK(std::string(e.what()).find("is being traced") != std::string::npos);
        CHECK(e.loc().line == static_cast<uint32_t>(inner_line));
      }
      CHECK(inner(pl::Array::arange(4, pl::f32)).at<float>({3}) == 4.0f);
      next_call_works(options);
    });
  }
}

namespace {

// A 1-D i8 array of 2^31 + 128 elements (2 GiB of address space, never written but for the 128
// elements past 2^31, so only their pages become memory): element 2^31 + k holds k.
const pl::Array& past_2_31() {
  static const pl::Array a = [] {
    pl::Array x = pl::Array::empty({(int64_t{1} << 31) + 128}, pl::i8);
    int8_t* p = x.mutable_data_as<int8_t>();
    for (int64_t k = 0; k < 128; ++k) p[(int64_t{1} << 31) + k] = static_cast<int8_t>(k);
    return x;
  }();
  return a;
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("validation: block offsets past 2^31 are 64-bit in both backends") {
    testing::for_each_backend([](const pl::CallOptions& options) {
      // Block 2^25 of 64 elements starts at element 2^31: its i32 offset wrapped to -2^31.
      const pl::BlockSpec far({64}, [](pl::Value) { return pl::idx(int64_t{1} << 25); });
      auto call = pl::pallas_call([](pl::Ref x, pl::Ref o) { o() = x(); },
                                  pl::GridSpec{.grid = {1}, .in_specs = {far}, .out_specs = {pl::BlockSpec({64}, [](pl::Value i) { return pl::idx(i); })}},
                                  pl::ShapeDtype({64}, pl::i8), options);
      const pl::Array out = call(past_2_31());
      CHECK(out.at<int8_t>({0}) == 0);
      CHECK(out.at<int8_t>({63}) == 63);
      // A DMA from a window past 2^31 of an array left in HBM, its start a literal beyond i32.
      auto dma = pl::pallas_call(
          [](pl::Ref x, pl::Ref o, pl::Ref buf, pl::Ref sem) {
            pl::async_copy(x.at(pl::ds((int64_t{1} << 31) + 64, 64)), buf, sem).wait();
            o() = buf();
          },
          pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)}, .scratch_shapes = {pl::VMEM({64}, pl::i8), pl::SemaphoreType::DMA}},
          pl::ShapeDtype({64}, pl::i8), options);
      const pl::Array copied = dma(past_2_31());
      CHECK(copied.at<int8_t>({0}) == 64);
      CHECK(copied.at<int8_t>({63}) == 127);
    });
  }

  TEST_CASE("validation: an index of 2^31 or more is checked as itself, not truncated into range") {
    // An i64 of 2^32 + 3 cast to i32 was 3, and the kernel silently read elements 3..6; a u32 of 3e9
    // cast to i32 was -1294967296, and the error named an index nobody gave.
    struct Case {
      pl::Array bad, fine;
      const char* reported;
    };
    const Case cases[] = {
        {pl::Array::from_vector<int64_t>({(int64_t{1} << 32) + 3}, {1}, pl::i64),
         pl::Array::from_vector<int64_t>({3}, {1}, pl::i64), "ds(4294967299, 4)"},
        {pl::Array::from_vector<uint32_t>({3000000000u}, {1}), pl::Array::from_vector<uint32_t>({3}, {1}),
         "ds(3000000000, 4)"},
    };
    testing::for_each_backend([&](const pl::CallOptions& options) {
      for (const Case& c : cases) {
        INFO(c.reported);
        int line = 0;
        auto call = pl::pallas_call(
            [&](pl::Ref ids, pl::Ref x, pl::Ref o) {
              line = __LINE__ + 1;
              o() = x(pl::ds(ids(0), 4));
            },
            pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1}, pl::ShapeDtype({4}, pl::f32), options);
        try {
          call(c.bad, pl::Array::arange(8, pl::f32));
          FAIL("expected a RuntimeError");
        } catch (const RuntimeError& e) {
          const std::string what = e.what();
          CHECK_MESSAGE(what.find(fmt::format("out-of-bounds slice of `input 0 block`: {}", c.reported)) != std::string::npos,
                        what);
          CHECK(e.loc().line == static_cast<uint32_t>(line));
        }
        CHECK(call(c.fine, pl::Array::arange(8, pl::f32)).at<float>({0}) == 3.0f);
      }
    });
  }
}

namespace {

// One grid step reading one block of `x`, its index the scalar-prefetch value ids[0] (whatever its
// dtype), returned by the index map as it is.
pl::PallasCall<pl::Array> block_at_prefetched(int64_t block, int& map_line, const pl::CallOptions& options) {
  map_line = __LINE__ + 1;
  const pl::BlockSpec at_id({block}, [](pl::Value, pl::Ref ids) { return pl::idx(ids[0]); });
  return pl::pallas_call([](pl::Ref, pl::Ref x, pl::Ref o) { o() = x(); },
                         pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1, .grid = {1}, .in_specs = {at_id},
                                                    .out_specs = {pl::BlockSpec({block}, [](pl::Value, pl::Ref) {
                                                      return pl::idx(0);
                                                    })}},
                         pl::ShapeDtype({block}, pl::i8), options);
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("validation: an index map's block index is its value, past i32 too, on both backends") {
    // Blocks of one element of the array past 2^31: u32 2^31 + 5 and i64 2^31 + 7 read those
    // elements. Both were cast to i32 and wrapped negative (an error naming another index).
    testing::for_each_backend([](const pl::CallOptions& options) {
      int line = 0;
      auto call = block_at_prefetched(1, line, options);
      const uint32_t u = (uint32_t{1} << 31) + 5;
      CHECK(call(pl::Array::from_vector<uint32_t>({u}, {1}), past_2_31()).at<int8_t>({0}) == 5);
      CHECK(call(pl::Array::from_vector<int64_t>({(int64_t{1} << 31) + 7}, {1}), past_2_31()).at<int8_t>({0}) == 7);
      CHECK(call(pl::Array::from_vector<uint64_t>({(uint64_t{1} << 31) + 9}, {1}), past_2_31()).at<int8_t>({0}) == 9);
    });
  }

  TEST_CASE("validation: an index map's index that no block has is an error naming it, never wrapped into range") {
    // Blocks of 4 of an 8-element array. Each index wrapped (as i32, or in index * 4 on i64) to a block
    // that exists, and the kernel silently read it: u64 2^32 + 1 was block 1, i64 2^62 + 1 started at
    // element 4 ((2^62 + 1) * 4 = 2^64 + 4), u64 2^64 - 1 was block -1 (an error naming -4). Now
    // the start is the index times 4, saturated at INT64_MAX.
    struct Case {
      pl::Array id;
      const char* start;
    };
    const Case cases[] = {
        {pl::Array::from_vector<uint64_t>({(uint64_t{1} << 32) + 1}, {1}), "17179869188"},
        {pl::Array::from_vector<uint32_t>({(uint32_t{1} << 31) + 1}, {1}), "8589934596"},
        {pl::Array::from_vector<int64_t>({(int64_t{1} << 62) + 1}, {1}), "9223372036854775807"},
        {pl::Array::from_vector<int64_t>({-(int64_t{1} << 62) - 1}, {1}), "-9223372036854775808"},
        {pl::Array::from_vector<uint64_t>({~uint64_t{0}}, {1}), "9223372036854775807"},
    };
    testing::for_each_backend([&](const pl::CallOptions& options) {
      int line = 0;
      auto call = block_at_prefetched(4, line, options);
      for (const Case& c : cases) {
        INFO(c.start);
        try {
          call(c.id, pl::Array::arange(8, pl::i8));
          FAIL("expected a RuntimeError");
        } catch (const RuntimeError& e) {
          const std::string what = e.what();
          CHECK_MESSAGE(what.find(fmt::format("block of input 0 out of bounds: the window starts at element ({})",
                                              c.start)) != std::string::npos,
                        what);
          CHECK_MESSAGE(what.find("Check the index map") != std::string::npos, what);
          // At the index map's line.
          CHECK_MESSAGE(e.loc().line == static_cast<uint32_t>(line), what);
          CHECK_MESSAGE(what.find(fmt::format("validation_test.cpp:{}", line)) != std::string::npos, what);
          const bool saturated = std::string_view(c.start).size() == 19 || std::string_view(c.start).size() == 20;
          CHECK_MESSAGE((what.find("is shown saturated at INT64_") != std::string::npos) == saturated, what);
        }
      }
      CHECK(call(pl::Array::from_vector<uint64_t>({1}, {1}), pl::Array::arange(8, pl::i8)).at<int8_t>({3}) == 7);
    });
  }
}
