// The 16-bit and unsigned integer dtypes (i16, u8, u16, u32) in kernels, compiled (checked against
// the interpreter) and interpreted: blocks loaded and stored on a grid, promotion with the other
// integers, the rules where signedness matters (division, comparisons, max/min, widening, float
// conversions), argmax, bool outputs, and the errors of what is not supported.
// tests/dsl/element_rules_test.cpp runs every op and cast on their edge values, and
// tests/dsl/bitcast_test.cpp reads their bits.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "tests/support/checked_backends.h"
#include "tests/support/user_error.h"

using namespace tessera;
namespace pl = tessera;

using testing::el;

TEST_SUITE("dsl") {
  TEST_CASE("dtypes: host arrays of the new integer types keep their element types") {
    const pl::Array u8 = pl::Array::from_vector<uint8_t>({0, 1, 255}, {3});
    const pl::Array i16 = pl::Array::from_vector<int16_t>({-32768, 0, 32767}, {3});
    const pl::Array u16 = pl::Array::from_vector<uint16_t>({0, 65535}, {2});
    const pl::Array u32 = pl::Array::from_vector<uint32_t>({0, 4294967295u}, {2});
    CHECK(u8.dtype() == pl::uint8);
    CHECK(i16.dtype() == pl::int16);
    CHECK(u16.dtype() == pl::uint16);
    CHECK(u32.dtype() == pl::uint32);
    CHECK(u8.to_vector<uint8_t>() == std::vector<uint8_t>{0, 1, 255});
    CHECK(u32.to_vector<uint32_t>() == std::vector<uint32_t>{0, 4294967295u});
    // Host casts follow the element rules: wrap between integers, saturate from floats, NaN -> 0.
    const pl::Array ints = pl::Array::from_vector<int32_t>({-1, 255, 256, -129, 65536}, {5});
    CHECK(ints.astype(pl::u8).to_vector<uint8_t>() == std::vector<uint8_t>{255, 255, 0, 127, 0});
    CHECK(ints.astype(pl::u16).to_vector<uint16_t>() == std::vector<uint16_t>{65535, 255, 256, 65407, 0});
    CHECK(ints.astype(pl::i16).to_vector<int16_t>() == std::vector<int16_t>{-1, 255, 256, -129, 0});
    CHECK(u8.astype(pl::i8).to_vector<int8_t>() == std::vector<int8_t>{0, 1, -1});
    CHECK(u32.astype(pl::i64).to_vector<int64_t>() == std::vector<int64_t>{0, 4294967295});
    const double inf = std::numeric_limits<double>::infinity();
    const pl::Array floats = pl::Array::from_vector<float>({-1.5f, 300.7f, NAN, static_cast<float>(inf), 70000.0f}, {5});
    CHECK(floats.astype(pl::u8).to_vector<uint8_t>() == std::vector<uint8_t>{0, 255, 0, 255, 255});
    CHECK(floats.astype(pl::u16).to_vector<uint16_t>() == std::vector<uint16_t>{0, 300, 0, 65535, 65535});
    CHECK(floats.astype(pl::i16).to_vector<int16_t>() == std::vector<int16_t>{-1, 300, 0, 32767, 32767});
    // u32 -> f32 rounds the unsigned value once: 2^32 - 1 is 2^32.
    CHECK(u32.astype(pl::f32).to_vector<float>() == std::vector<float>{0.0f, 4294967296.0f});
  }

  TEST_CASE("dtypes: blocks of each new dtype load, compute and store on a grid") {
    // o = x * 3 + 1 over (4, 8) blocks of an (8, 32) array, wrapping in the dtype, and the same in
    // the host's arithmetic.
    for (pl::DType d : {pl::i16, pl::u8, pl::u16, pl::u32}) {
      INFO("dtype " << pl::dtype_name(d));
      std::vector<int64_t> v(8 * 32);
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(i * 977 + 12345) % 70001 - 20000;
      pl::Array x(d, {8, 32});
      dispatch_dtype(d, [&]<class T>() {
        if constexpr (std::is_integral_v<T>)
          for (size_t i = 0; i < v.size(); ++i) x.mutable_data_as<T>()[i] = static_cast<T>(v[i]);
      });
      auto spec = pl::BlockSpec({4, 8}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); });
      for (const pl::CallOptions& o : testing::checked_backends()) {
        pl::Array got = pl::pallas_call([](pl::Ref xr, pl::Ref out) { out() = xr() * 3 + 1; },
                                        pl::GridSpec{.grid = {2, 4}, .in_specs = {spec}, .out_specs = {spec}},
                                        pl::ShapeDtype({8, 32}, d), o)(x);
        REQUIRE(got.dtype() == d);
        dispatch_dtype(d, [&]<class T>() {
          if constexpr (std::is_integral_v<T>)
            for (int64_t i = 0; i < x.size(); ++i) {
              const T want = static_cast<T>(static_cast<uint64_t>(el<T>(x, i)) * 3u + 1u);
              CHECK(el<T>(got, i) == want);
            }
        });
      }
    }
  }

  TEST_CASE("dtypes: a kernel's pl::full converts its fill as the host's pl::Array::full does") {
    // A double fill into an integer dtype truncates and saturates (NaN -> 0) in both places: -1.0
    // into u8 is 0, not the wrapped 255; 1e30 is the dtype's largest value.
    for (pl::DType d : {pl::i8, pl::i16, pl::u8, pl::u16, pl::u32, pl::i32, pl::bool_})
      for (double fill : {-1.0, -1.5, 300.7, 1e30, -1e30, static_cast<double>(NAN)}) {
        INFO("dtype " << pl::dtype_name(d) << " fill " << fill);
        const pl::Array want = pl::Array::full({8}, fill, d);
        for (const pl::CallOptions& o : testing::checked_backends()) {
          pl::Array got = pl::pallas_call([&](pl::Ref out) { out() = pl::full({8}, fill, d); }, pl::GridSpec{},
                                          pl::ShapeDtype({8}, d), o)();
          dispatch_dtype(d, [&]<class T>() {
            if constexpr (std::is_integral_v<T>)
              for (int64_t i = 0; i < 8; ++i) CHECK(el<T>(got, i) == el<T>(want, i));
          });
        }
      }
  }

  TEST_CASE("dtypes: unsigned operands compare, divide and widen as unsigned values") {
    const pl::Array a = pl::Array::from_vector<uint8_t>({200, 7, 255, 0, 128, 9}, {6});
    const pl::Array b = pl::Array::from_vector<uint8_t>({3, 200, 0, 255, 127, 0}, {6});
    for (const pl::CallOptions& o : testing::checked_backends()) {
      // Quotient, remainder, floor_divide and mod (= div and rem for unsigned), max, min.
      pl::Array got = pl::pallas_call(
          [](pl::Ref x, pl::Ref y, pl::Ref out) {
            out(0, pl::all) = x() / y();
            out(1, pl::all) = x() % y();
            out(2, pl::all) = pl::floor_divide(x(), y());
            out(3, pl::all) = pl::mod(x(), y());
            out(4, pl::all) = pl::maximum(x(), y());
            out(5, pl::all) = pl::minimum(x(), y());
          },
          pl::GridSpec{}, pl::ShapeDtype({6, 6}, pl::u8), o)(a, b);
      for (int64_t i = 0; i < 6; ++i) {
        const uint8_t x = el<uint8_t>(a, i), y = el<uint8_t>(b, i);
        INFO("x " << int(x) << " y " << int(y));
        // x / 0 is all bits set (255) and x % 0 is x, as for the signed types.
        CHECK(got.at<uint8_t>({0, i}) == (y == 0 ? 255 : x / y));
        CHECK(got.at<uint8_t>({1, i}) == (y == 0 ? x : x % y));
        CHECK(got.at<uint8_t>({2, i}) == got.at<uint8_t>({0, i}));
        CHECK(got.at<uint8_t>({3, i}) == got.at<uint8_t>({1, i}));
        CHECK(got.at<uint8_t>({4, i}) == std::max(x, y));
        CHECK(got.at<uint8_t>({5, i}) == std::min(x, y));
      }
      // Bool outputs of comparisons: 200 > 3 and 128 > 127 as unsigned bytes (both negative as i8).
      pl::Array gt = pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref out) { out() = x() > y(); }, pl::GridSpec{},
                                     pl::ShapeDtype({6}, pl::bool_), o)(a, b);
      for (int64_t i = 0; i < 6; ++i) CHECK(el<bool>(gt, i) == (el<uint8_t>(a, i) > el<uint8_t>(b, i)));
      // Widening zero-extends, and int -> float reads the unsigned value.
      pl::Array wide = pl::pallas_call(
          [](pl::Ref x, pl::Ref out, pl::Ref f) {
            out() = x().astype(pl::i32);
            f() = x().astype(pl::f32);
          },
          pl::GridSpec{}, {pl::ShapeDtype({6}, pl::i32), pl::ShapeDtype({6}, pl::f32)}, o)(a)[0];
      for (int64_t i = 0; i < 6; ++i) CHECK(el<int32_t>(wide, i) == el<uint8_t>(a, i));
    }
  }

  TEST_CASE("dtypes: mixed signedness promotes to the narrowest signed type that holds both") {
    const pl::Array u = pl::Array::from_vector<uint8_t>({255, 0, 128}, {3});
    const pl::Array s = pl::Array::from_vector<int8_t>({-1, -128, 127}, {3});
    const pl::Array w = pl::Array::from_vector<uint32_t>({4294967295u, 1, 2147483648u}, {3});
    const pl::Array i = pl::Array::from_vector<int32_t>({1, -1, -2147483647 - 1}, {3});
    for (const pl::CallOptions& o : testing::checked_backends()) {
      // u8 + i8 -> i16: 255 + (-1) = 254, not a wrapped byte.
      pl::Array got = pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref out) { out() = x() + y(); }, pl::GridSpec{},
                                      pl::ShapeDtype({3}, pl::i16), o)(u, s);
      for (int64_t k = 0; k < 3; ++k) CHECK(el<int16_t>(got, k) == el<uint8_t>(u, k) + el<int8_t>(s, k));
      // u32 - i32 -> i64.
      pl::Array got64 = pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref out) { out() = x() - y(); }, pl::GridSpec{},
                                        pl::ShapeDtype({3}, pl::i64), o)(w, i);
      for (int64_t k = 0; k < 3; ++k)
        CHECK(el<int64_t>(got64, k) == static_cast<int64_t>(el<uint32_t>(w, k)) - el<int32_t>(i, k));
    }
    // The traced result's dtype is the promoted one: storing it into an output of another dtype is
    // the usual error.
    CHECK_THROWS_AS(pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref out) { out() = x() + y(); }, pl::GridSpec{},
                                    pl::ShapeDtype({3}, pl::u8))(u, s),
                    UserError);
  }

  TEST_CASE("dtypes: argmax and sums of unsigned values") {
    // As signed bytes, 200 and 255 would be the smallest; as u8 they are the largest.
    const pl::Array x = pl::Array::from_vector<uint8_t>({1, 200, 3, 255, 255, 0, 7, 128}, {2, 4});
    for (const pl::CallOptions& o : testing::checked_backends()) {
      pl::Array got = pl::pallas_call([](pl::Ref xr, pl::Ref out) { out() = pl::argmax(xr(), 1); }, pl::GridSpec{},
                                      pl::ShapeDtype({2}, pl::i32), o)(x);
      CHECK(got.to_vector<int32_t>() == std::vector<int32_t>{3, 0});
      pl::Array mx = pl::pallas_call([](pl::Ref xr, pl::Ref out) { out() = pl::max(xr(), 1); }, pl::GridSpec{},
                                     pl::ShapeDtype({2}, pl::u8), o)(x);
      CHECK(mx.to_vector<uint8_t>() == std::vector<uint8_t>{255, 255});
      // A u8 sum wraps in u8: 1 + 200 + 3 + 255 = 459 = 203 (mod 256).
      pl::Array sum = pl::pallas_call([](pl::Ref xr, pl::Ref out) { out() = pl::sum(xr(), 1); }, pl::GridSpec{},
                                      pl::ShapeDtype({2}, pl::u8), o)(x);
      CHECK(sum.to_vector<uint8_t>() == std::vector<uint8_t>{static_cast<uint8_t>(1 + 200 + 3 + 255),
                                                             static_cast<uint8_t>(255 + 0 + 7 + 128)});
    }
  }

  TEST_CASE("dtypes: unsigned loop bounds and dots of the new dtypes are user errors") {
    const pl::Array x = pl::Array::from_vector<uint8_t>(std::vector<uint8_t>(24, 1), {8, 3});
    auto trace = [&](const std::function<pl::Value(pl::Value)>& f, pl::DType out) {
      pl::pallas_call([&](pl::Ref xr, pl::Ref o) { o() = f(xr()); }, pl::GridSpec{}, pl::ShapeDtype({8}, out))(x);
    };
    testing::check_user_error(
        [&] {
          trace([](pl::Value v) { return pl::fori_loop(v(0, 0), v(1, 1), v[0], [](pl::Value, pl::Value c) { return c; }); },
                pl::u8);
        },
        "pl::fori_loop: bounds must be signed integers", "a u8 scalar and a u8 scalar", "cast the bounds with .astype(pl::i32)",
        "dtypes_test.cpp");
    const pl::Array m = pl::Array::from_vector<uint16_t>(std::vector<uint16_t>(16, 2), {4, 4});
    auto dot_call = [&] {
      pl::pallas_call([](pl::Ref a, pl::Ref o) { o() = pl::dot(a(), a()); }, pl::GridSpec{}, pl::ShapeDtype({4, 4}, pl::u16))(m);
    };
    testing::check_user_error(dot_call, "pl::dot_general: u16 operands and results are not supported",
                              "lhs a (4, 4) block of u16, rhs a (4, 4) block of u16, contracting (1) x (0), batch () x ()",
                              "cast to i32 (or f32) first, e.g. pl::dot(a.astype(pl::i32), b.astype(pl::i32))", "dtypes_test.cpp");
  }
}
