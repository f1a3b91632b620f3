// Rearranging loaded values (dsl/layout.h) and reading their bits (pl::bitcast, pl::multiple_of):
// indexing with static and traced starts, concatenate, repeat, tile, broadcast_in_dim, run compiled
// and interpreted, each compared with a plain host computation, and the errors of bad arguments.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>

#include "tests/support/kernels.h"
#include "tests/support/user_error.h"

using namespace tessera;
namespace pl = tessera;

namespace {

// x[r, c] of a row-major host array.
float at(const pl::Array& x, int64_t r, int64_t c) { return x.at<float>({r, c}); }

// Runs a one-input kernel in each backend and checks `expect` on the output.
void each_backend(const std::function<void(pl::Ref, pl::Ref)>& kernel, const pl::Array& x, pl::ShapeDtype out,
                  const std::function<void(const pl::Array&)>& expect) {
  testing::for_each_backend([&](const pl::CallOptions& o) { expect(pl::pallas_call(kernel, pl::GridSpec{}, out, o)(x)); });
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("layout: static indexing of a loaded value squeezes integer indices as jax does") {
    const pl::Array x = testing::ramp(4, 8);
    // v[2]: row 2, the dim dropped.
    each_backend([](pl::Ref xr, pl::Ref o) { o() = xr()[2]; }, x, pl::ShapeDtype({8}, pl::f32), [&](const pl::Array& got) {
      for (int64_t c = 0; c < 8; ++c) CHECK(got.at<float>({c}) == at(x, 2, c));
    });
    // v[:, pl.ds(3, 4)]: columns 3..6 of every row.
    each_backend([](pl::Ref xr, pl::Ref o) { o() = xr()(pl::all, pl::ds(3, 4)); }, x, pl::ShapeDtype({4, 4}, pl::f32),
                 [&](const pl::Array& got) {
                   for (int64_t r = 0; r < 4; ++r)
                     for (int64_t c = 0; c < 4; ++c) CHECK(got.at<float>({r, c}) == at(x, r, 3 + c));
                 });
    // v[pl.ds(1, 2, 2), 5]: rows 1 and 3 of column 5 (strided, the column dropped).
    each_backend([](pl::Ref xr, pl::Ref o) { o() = (xr() * 2.0f)(pl::ds(1, 2, 2), 5); }, x, pl::ShapeDtype({2}, pl::f32),
                 [&](const pl::Array& got) {
                   CHECK(got.at<float>({0}) == 2 * at(x, 1, 5));
                   CHECK(got.at<float>({1}) == 2 * at(x, 3, 5));
                 });
    // v[3, 7]: one element, a scalar that broadcasts into the output.
    each_backend([](pl::Ref xr, pl::Ref o) { o() = pl::full({2}, xr()(3, 7), pl::f32); }, x, pl::ShapeDtype({2}, pl::f32),
                 [&](const pl::Array& got) { CHECK(got.at<float>({1}) == at(x, 3, 7)); });
    // v[1][2]: indexing an indexed value.
    each_backend([](pl::Ref xr, pl::Ref o) { o() = xr()[1](pl::ds(2, 3)); }, x, pl::ShapeDtype({3}, pl::f32),
                 [&](const pl::Array& got) {
                   for (int64_t c = 0; c < 3; ++c) CHECK(got.at<float>({c}) == at(x, 1, 2 + c));
                 });
  }

  TEST_CASE("layout: a traced start is clamped so that the window fits, as lax.dynamic_slice does") {
    const pl::Array x = testing::ramp(4, 8);
    for (int32_t start : {-5, 0, 2, 4, 5, 100}) {
      INFO("start " << start);
      const pl::Array s = pl::Array::from_vector<int32_t>({start}, {1});
      // The reference: the start clamped into [0, 8 - 4] by hand.
      const int64_t first = std::clamp<int64_t>(start, 0, 4);
      const int64_t row = std::clamp<int64_t>(start, 0, 3);
      auto kernel = [](pl::Ref xr, pl::Ref sr, pl::Ref o, pl::Ref r) {
        const pl::Value i = sr(0);
        o() = xr()(pl::all, pl::ds(i, 4));
        r() = pl::dynamic_slice(xr(), {i, 1}, {1, 6}).reshape({6});
      };
      testing::for_each_backend([&](const pl::CallOptions& opts) {
        const std::vector<pl::Array> outs =
            pl::pallas_call(kernel, pl::GridSpec{},
                            std::vector<pl::ShapeDtype>{pl::ShapeDtype({4, 4}, pl::f32), pl::ShapeDtype({6}, pl::f32)}, opts)(x, s);
        const pl::Array& got = outs[0];
        const pl::Array& rows = outs[1];
        for (int64_t r = 0; r < 4; ++r)
          for (int64_t c = 0; c < 4; ++c) CHECK(got.at<float>({r, c}) == at(x, r, first + c));
        for (int64_t c = 0; c < 6; ++c) CHECK(rows.at<float>({c}) == at(x, row, 1 + c));
      });
    }
  }

  TEST_CASE("layout: a traced integer index squeezes its dim and is clamped too") {
    const pl::Array x = testing::ramp(4, 8);
    for (int32_t index : {-1, 2, 9}) {
      INFO("index " << index);
      const int64_t row = std::clamp<int64_t>(index, 0, 3);
      const pl::Array s = pl::Array::from_vector<int32_t>({index}, {1});
      testing::for_each_backend([&](const pl::CallOptions& opts) {
        const pl::Array got = pl::pallas_call([](pl::Ref xr, pl::Ref sr, pl::Ref o) { o() = xr()[sr(0)]; }, pl::GridSpec{},
                                              pl::ShapeDtype({8}, pl::f32), opts)(x, s);
        for (int64_t c = 0; c < 8; ++c) CHECK(got.at<float>({c}) == at(x, row, c));
      });
    }
  }

  TEST_CASE("layout: bad indices of a value are reported at the user's line") {
    const pl::Array x = testing::ramp(4, 8);
    auto trace = [&](const std::function<pl::Value(pl::Value)>& f, pl::ShapeDtype out) {
      pl::pallas_call([&](pl::Ref xr, pl::Ref o) { o() = f(xr()); }, pl::GridSpec{}, out)(x);
    };
    testing::check_user_error([&] { trace([](pl::Value v) { return v[4]; }, pl::ShapeDtype({8}, pl::f32)); },
                              "a static index or slice is out of bounds",
                              "index 4 reaches element 4 of dim 0, which has 4 elements (a (4, 8) block of f32)",
                              "keep the window inside [0, 4)", "layout_test.cpp");
    testing::check_user_error(
        [&] { trace([](pl::Value v) { return v(pl::all, pl::ds(6, 3)); }, pl::ShapeDtype({4, 3}, pl::f32)); },
        "a static index or slice is out of bounds",
        "ds(6, 3) reaches element 8 of dim 1, which has 8 elements (a (4, 8) block of f32)", "keep the window inside [0, 8)",
        "layout_test.cpp");
    testing::check_user_error([&] { trace([](pl::Value v) { return v(0, 1, 2); }, pl::ShapeDtype({}, pl::f32)); },
                              "too many indices for the value", "3 indices for a (4, 8) block of f32", "index at most 2 dims",
                              "layout_test.cpp");
    testing::check_user_error([&] { trace([](pl::Value v) { return v[v]; }, pl::ShapeDtype({8}, pl::f32)); },
                              "a value index must be an integer scalar", "a (4, 8) block of f32 in dim 0 of a (4, 8) block of f32",
                              "index with an i32 or i64 scalar (cast with .astype(pl::i32))", "layout_test.cpp");
    testing::check_user_error(
        [&] { trace([](pl::Value v) { return pl::dynamic_slice(v, {0}, {4}); }, pl::ShapeDtype({4}, pl::f32)); },
        "pl::dynamic_slice needs one start and one size per dim", "1 starts and 1 sizes for a (4, 8) block of f32",
        "pass 2 starts and 2 sizes", "layout_test.cpp");
    testing::check_user_error(
        [&] { trace([](pl::Value v) { return pl::dynamic_slice(v, {0, 0}, {5, 8}); }, pl::ShapeDtype({5, 8}, pl::f32)); },
        "pl::dynamic_slice: a size is larger than its dim", "size 5 for dim 0 of a (4, 8) block of f32",
        "use a size of at most 4", "layout_test.cpp");
  }

  TEST_CASE("layout: concatenate joins values along an axis, promoting their dtypes") {
    const pl::Array x = testing::ramp(4, 8);
    // Along dim 1: columns 0..2 of x, x * 2 whole, then row-constant i32 columns (promoted to f32).
    auto kernel = [](pl::Ref xr, pl::Ref o) {
      const pl::Value v = xr();
      o() = pl::concatenate({v(pl::all, pl::ds(0, 3)), v * 2.0f, pl::iota({4, 2}, 0)}, -1);
    };
    each_backend(kernel, x, pl::ShapeDtype({4, 13}, pl::f32), [&](const pl::Array& got) {
      for (int64_t r = 0; r < 4; ++r)
        for (int64_t c = 0; c < 13; ++c) {
          const float want = c < 3 ? at(x, r, c) : c < 11 ? 2 * at(x, r, c - 3) : static_cast<float>(r);
          INFO(r << ", " << c);
          CHECK(got.at<float>({r, c}) == want);
        }
    });
    // Along dim 0, rows reversed by two single-row windows.
    each_backend([](pl::Ref xr, pl::Ref o) { o() = pl::concatenate({xr()(pl::ds(3, 1)), xr()(pl::ds(0, 1))}); }, x,
                 pl::ShapeDtype({2, 8}, pl::f32), [&](const pl::Array& got) {
                   for (int64_t c = 0; c < 8; ++c) {
                     CHECK(got.at<float>({0, c}) == at(x, 3, c));
                     CHECK(got.at<float>({1, c}) == at(x, 0, c));
                   }
                 });
  }

  TEST_CASE("layout: repeat, tile and broadcast_in_dim follow jnp and lax") {
    const pl::Array x = testing::ramp(2, 4);
    // jnp.repeat(x, 3, axis=1): each element three times in a row.
    each_backend([](pl::Ref xr, pl::Ref o) { o() = pl::repeat(xr(), 3, 1); }, x, pl::ShapeDtype({2, 12}, pl::f32),
                 [&](const pl::Array& got) {
                   for (int64_t r = 0; r < 2; ++r)
                     for (int64_t c = 0; c < 12; ++c) CHECK(got.at<float>({r, c}) == at(x, r, c / 3));
                 });
    // jnp.repeat(x, 2) flattens first; jnp.repeat(x, 2, axis=0) repeats rows.
    each_backend([](pl::Ref xr, pl::Ref o) { o() = pl::repeat(xr(), 2); }, x, pl::ShapeDtype({16}, pl::f32),
                 [&](const pl::Array& got) {
                   for (int64_t i = 0; i < 16; ++i) CHECK(got.at<float>({i}) == at(x, i / 2 / 4, i / 2 % 4));
                 });
    each_backend([](pl::Ref xr, pl::Ref o) { o() = pl::repeat(xr(), 2, 0) + 1.0f; }, x, pl::ShapeDtype({4, 4}, pl::f32),
                 [&](const pl::Array& got) {
                   for (int64_t r = 0; r < 4; ++r)
                     for (int64_t c = 0; c < 4; ++c) CHECK(got.at<float>({r, c}) == at(x, r / 2, c) + 1);
                 });
    // jnp.tile(x, (2, 3)): the whole block twice down and three times across.
    each_backend([](pl::Ref xr, pl::Ref o) { o() = pl::tile(xr(), {2, 3}); }, x, pl::ShapeDtype({4, 12}, pl::f32),
                 [&](const pl::Array& got) {
                   for (int64_t r = 0; r < 4; ++r)
                     for (int64_t c = 0; c < 12; ++c) CHECK(got.at<float>({r, c}) == at(x, r % 2, c % 4));
                 });
    // More reps than dims: a leading dim; fewer: the reps apply to the last dims.
    each_backend([](pl::Ref xr, pl::Ref o) { o() = pl::tile(xr(), {3, 1, 1}); }, x, pl::ShapeDtype({3, 2, 4}, pl::f32),
                 [&](const pl::Array& got) { CHECK(got.at<float>({2, 1, 3}) == at(x, 1, 3)); });
    each_backend([](pl::Ref xr, pl::Ref o) { o() = pl::tile(xr(), {2}); }, x, pl::ShapeDtype({2, 8}, pl::f32),
                 [&](const pl::Array& got) {
                   for (int64_t c = 0; c < 8; ++c) CHECK(got.at<float>({1, c}) == at(x, 1, c % 4));
                 });
    // lax.broadcast_in_dim(row, (3, 4, 5), (1,)): row r of x along the middle dim.
    each_backend([](pl::Ref xr, pl::Ref o) { o() = pl::broadcast_in_dim(xr()[1], {3, 4, 5}, {1}); }, x,
                 pl::ShapeDtype({3, 4, 5}, pl::f32), [&](const pl::Array& got) {
                   for (int64_t i = 0; i < 3; ++i)
                     for (int64_t j = 0; j < 4; ++j)
                       for (int64_t k = 0; k < 5; ++k) CHECK(got.at<float>({i, j, k}) == at(x, 1, j));
                 });
    // A (2, 1) column stretched along a new middle dim and its own size-1 dim: (2, 3, 6).
    each_backend([](pl::Ref xr, pl::Ref o) { o() = pl::broadcast_in_dim(xr()(pl::all, pl::ds(2, 1)), {2, 3, 6}, {0, 2}); },
                 x, pl::ShapeDtype({2, 3, 6}, pl::f32), [&](const pl::Array& got) {
                   for (int64_t i = 0; i < 2; ++i) CHECK(got.at<float>({i, 2, 5}) == at(x, i, 2));
                 });
  }

  TEST_CASE("layout: bad concatenate, repeat, tile and broadcast_in_dim arguments are reported at the user's line") {
    const pl::Array x = testing::ramp(4, 8);
    auto trace = [&](const std::function<pl::Value(pl::Value)>& f) {
      pl::pallas_call([&](pl::Ref xr, pl::Ref o) { o() = f(xr()); }, pl::GridSpec{}, pl::ShapeDtype({4, 8}, pl::f32))(x);
    };
    testing::check_user_error([&] { trace([](pl::Value v) { return pl::concatenate({v, v[0]}, 0); }); },
                              "pl::concatenate: the values differ in a dim other than the axis",
                              "value 1 is a (8,) block of f32 and value 0 is a (4, 8) block of f32, joined along axis 0",
                              "make every dim but the axis equal (reshape or broadcast first)", "layout_test.cpp");
    testing::check_user_error([&] { trace([](pl::Value v) { return pl::concatenate({v, v}, 2); }); },
                              "pl::concatenate: the axis is out of range", "axis 2 for a (4, 8) block of f32",
                              "pass an axis in [-2, 2)", "layout_test.cpp");
    testing::check_user_error([&] { trace([](pl::Value v) { return pl::concatenate({v(0, 0), v(0, 1)}); }); },
                              "pl::concatenate cannot join scalars", "an f32 scalar",
                              "join blocks, or make scalars blocks first with .reshape({1})", "layout_test.cpp");
    testing::check_user_error([&] { trace([](pl::Value v) { return pl::repeat(v, -1, 0); }); },
                              "pl::repeat needs a count >= 0", "repeats = -1", "pass a non-negative count", "layout_test.cpp");
    testing::check_user_error([&] { trace([](pl::Value v) { return pl::repeat(v, 2, 3); }); },
                              "pl::repeat: the axis is out of range", "axis 3 for a (4, 8) block of f32",
                              "pass an axis in [-2, 2)", "layout_test.cpp");
    testing::check_user_error([&] { trace([](pl::Value v) { return pl::tile(v, {1, -2}); }); },
                              "pl::tile needs counts >= 0", "reps (1, -2)", "pass non-negative counts", "layout_test.cpp");
    testing::check_user_error([&] { trace([](pl::Value v) { return pl::broadcast_in_dim(v, {8, 4}, {1, 0}); }); },
                              "pl::broadcast_in_dim: broadcast_dimensions must be strictly increasing result dims",
                              "a (4, 8) block of f32 to shape (8, 4) with broadcast_dimensions (1, 0)",
                              "list distinct dims in [0, 2) in increasing order", "layout_test.cpp");
    testing::check_user_error([&] { trace([](pl::Value v) { return pl::broadcast_in_dim(v, {4, 3, 9}, {0, 2}); }); },
                              "pl::broadcast_in_dim: an operand dim is neither 1 nor its result dim",
                              "a (4, 8) block of f32 to shape (4, 3, 9) with broadcast_dimensions (0, 2)",
                              "make operand dim 1 (8) equal to result dim 2 (9), or 1",
                              "layout_test.cpp");
    testing::check_user_error([&] { trace([](pl::Value v) { return pl::broadcast_in_dim(v, {4, 8}, {0}); }); },
                              "pl::broadcast_in_dim needs one broadcast dimension per operand dim",
                              "a (4, 8) block of f32 to shape (4, 8) with broadcast_dimensions (0)",
                              "list 2 result dims, one for each operand dim", "layout_test.cpp");
  }

  TEST_CASE("values: bitcast reads the bits as another dtype of the same width") {
    const pl::Array x = pl::Array::from_vector<float>({1.0f, -2.5f, 0.0f, -0.0f, 3.0e-39f, 1.0e30f, -7.0f, 0.1f}, {8});
    // f32 -> i32 -> + 1 -> f32: the next float up (for positive x), computed from the bits.
    each_backend([](pl::Ref xr, pl::Ref o) { o() = pl::bitcast(pl::bitcast(xr(), pl::i32) + 1, pl::f32); }, x,
                 pl::ShapeDtype({8}, pl::f32), [&](const pl::Array& got) {
                   for (int64_t i = 0; i < 8; ++i) {
                     const float f = x.at<float>({i});
                     CHECK(std::bit_cast<uint32_t>(got.at<float>({i})) == std::bit_cast<uint32_t>(f) + 1u);
                   }
                 });
    each_backend([](pl::Ref xr, pl::Ref o) { o() = pl::bitcast(xr(), pl::i32); }, x, pl::ShapeDtype({8}, pl::i32),
                 [&](const pl::Array& got) {
                   for (int64_t i = 0; i < 8; ++i)
                     CHECK(got.at<int32_t>({i}) == std::bit_cast<int32_t>(x.at<float>({i})));
                 });
    const pl::Array d = pl::Array::from_vector<double>({1.0, -0.0, 1e300, -3.25}, {4});
    each_backend([](pl::Ref xr, pl::Ref o) { o() = pl::bitcast(pl::bitcast(xr(), pl::i64) ^ int64_t{1} << 63, pl::f64); }, d,
                 pl::ShapeDtype({4}, pl::f64), [&](const pl::Array& got) {
                   for (int64_t i = 0; i < 4; ++i) CHECK(got.at<double>({i}) == -d.at<double>({i}));
                 });
    auto trace = [&](const std::function<pl::Value(pl::Value)>& f) {
      pl::pallas_call([&](pl::Ref xr, pl::Ref o) { o() = f(xr()); }, pl::GridSpec{}, pl::ShapeDtype({8}, pl::f32))(x);
    };
    // Reading bits as bools is no bitcast (tests/dsl/dtypes_test.cpp has those between widths).
    testing::check_user_error([&] { trace([](pl::Value v) { return pl::bitcast(v, pl::bool_); }); },
                              "pl::bitcast cannot read f32 as i1: i1 has no bits to read", "a (8,) block of f32",
                              "compare instead, e.g. x != 0; convert values with .astype", "layout_test.cpp");
  }

  TEST_CASE("values: multiple_of passes a traced index through, and the interpreter checks the promise") {
    const pl::Array x = testing::ramp(4, 8);
    auto kernel = [](pl::Ref xr, pl::Ref sr, pl::Ref o) { o() = xr()(pl::all, pl::ds(pl::multiple_of(sr(0), 4), 4)); };
    auto call = [&](int32_t start, const pl::CallOptions& opts) {
      return pl::pallas_call(kernel, pl::GridSpec{}, pl::ShapeDtype({4, 4}, pl::f32), opts)(
          x, pl::Array::from_vector<int32_t>({start}, {1}));
    };
    testing::for_each_backend([&](const pl::CallOptions& opts) {
      const pl::Array got = call(4, opts);
      for (int64_t r = 0; r < 4; ++r)
        for (int64_t c = 0; c < 4; ++c) CHECK(got.at<float>({r, c}) == at(x, r, 4 + c));
    });
    // A broken promise: the interpreter names the value; compiled code takes it as it is.
    CHECK_THROWS_WITH_AS(call(2, testing::interpret()),
                         doctest::Contains("pl::multiple_of: the value is 2, which is not a multiple of 4 as the kernel promised"),
                         pl::RuntimeError);
    CHECK(call(2, pl::CallOptions{}).at<float>({0, 0}) == at(x, 0, 2));
    auto trace = [&](const std::function<pl::Value(pl::Value)>& f) {
      pl::pallas_call([&](pl::Ref xr, pl::Ref o) { o() = f(xr()); }, pl::GridSpec{}, pl::ShapeDtype({4, 8}, pl::f32))(x);
    };
    testing::check_user_error([&] { trace([](pl::Value v) { return v + pl::multiple_of(v, 8); }); },
                              "pl::multiple_of takes an integer scalar", "a (4, 8) block of f32",
                              "pass a traced index, e.g. pl::program_id(0) * 8", "layout_test.cpp");
    testing::check_user_error([&] { trace([](pl::Value v) { return v + pl::multiple_of(1, 0).astype(pl::f32); }); },
                              "pl::multiple_of needs a positive n", "n = 0", "pass the positive number x is a multiple of",
                              "layout_test.cpp");
  }
}
