// The 16-bit and unsigned integer dtypes (i16, u8, u16, u32, u64) in kernels, compiled (checked
// against the interpreter) and interpreted: blocks loaded and stored on a grid, promotion with the
// other integers (u64 with a signed one gives f64), the rules where signedness matters (division,
// comparisons, max/min, widening, float conversions), argmax, bool outputs, u64 ref indices past
// 2^63, and the errors of what is not supported.
// tests/dsl/element_rules_test.cpp runs every op and cast on their edge values, and
// tests/dsl/bitcast_test.cpp reads their bits.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tests/support/checked_backends.h"
#include "tests/support/user_error.h"

using namespace tessera;
namespace pl = tessera;

using testing::el;

namespace {

// Rows of `out`: x / y, x % y, floor_divide, mod, maximum, minimum, x * y - x and pow(x, y), over
// unsigned operands of one dtype, compiled (checked against the interpreter) and interpreted; each
// row checked against the unsigned rules in T's own arithmetic.
template <class T>
void check_unsigned_arithmetic(const pl::Array& a, const pl::Array& b) {
  const int64_t n = a.size();
  for (const pl::CallOptions& o : testing::checked_backends()) {
    pl::Array got = pl::pallas_call(
        [](pl::Ref x, pl::Ref y, pl::Ref out) {
          out(0, pl::all) = x() / y();
          out(1, pl::all) = x() % y();
          out(2, pl::all) = pl::floor_divide(x(), y());
          out(3, pl::all) = pl::mod(x(), y());
          out(4, pl::all) = pl::maximum(x(), y());
          out(5, pl::all) = pl::minimum(x(), y());
          out(6, pl::all) = x() * y() - x();
          out(7, pl::all) = pl::pow(x(), y());
        },
        pl::GridSpec{}, pl::ShapeDtype({8, n}, a.dtype()), o)(a, b);
    for (int64_t i = 0; i < n; ++i) {
      const T x = el<T>(a, i), y = el<T>(b, i);
      INFO("x " << uint64_t{x} << " y " << uint64_t{y});
      // x / 0 is all bits set and x % 0 is x, as for the signed types; floor_divide and mod are / and %.
      CHECK(got.at<T>({0, i}) == (y == 0 ? std::numeric_limits<T>::max() : T(x / y)));
      CHECK(got.at<T>({1, i}) == (y == 0 ? x : T(x % y)));
      CHECK(got.at<T>({2, i}) == got.at<T>({0, i}));
      CHECK(got.at<T>({3, i}) == got.at<T>({1, i}));
      CHECK(got.at<T>({4, i}) == std::max(x, y));
      CHECK(got.at<T>({5, i}) == std::min(x, y));
      CHECK(got.at<T>({6, i}) == static_cast<T>(uint64_t{x} * y - x));
      // Squaring in 64 bits keeps T's low bits; a u64 exponent of 2^63 or more is a large exponent,
      // not a negative one.
      uint64_t p = 1, base = x;
      for (uint64_t e = y; e > 0; e >>= 1, base *= base)
        if (e & 1) p *= base;
      CHECK(got.at<T>({7, i}) == static_cast<T>(p));
    }
    // Bool outputs of comparisons, by the unsigned values.
    pl::Array gt = pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref out) { out() = x() > y(); }, pl::GridSpec{},
                                   pl::ShapeDtype({n}, pl::bool_), o)(a, b);
    for (int64_t i = 0; i < n; ++i) CHECK(el<bool>(gt, i) == (el<T>(a, i) > el<T>(b, i)));
  }
}

}  // namespace

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
    for (pl::DType d : {pl::i16, pl::u8, pl::u16, pl::u32, pl::u64}) {
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
    for (pl::DType d : {pl::i8, pl::i16, pl::u8, pl::u16, pl::u32, pl::u64, pl::i32, pl::bool_})
      for (double fill : {-1.0, -1.5, 300.7, 1e30, -1e30, static_cast<double>(NAN), 1.8e19}) {
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
    // 200 > 3 and 128 > 127 as unsigned bytes (both negative as i8).
    check_unsigned_arithmetic<uint8_t>(a, b);
    for (const pl::CallOptions& o : testing::checked_backends()) {
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

  TEST_CASE("dtypes: u64 host arrays hold, print and convert 64-bit unsigned values") {
    const uint64_t top = std::numeric_limits<uint64_t>::max(), half = uint64_t{1} << 63;
    const pl::Array u = pl::Array::from_vector<uint64_t>({0, 1, half, top}, {4});
    CHECK(u.dtype() == pl::uint64);
    CHECK(u.to_vector<uint64_t>() == std::vector<uint64_t>{0, 1, half, top});
    // Printed as unsigned values, not as the i64 their bits would be.
    CHECK(u.to_string() == "u64[4] [0, 1, 9223372036854775808, 18446744073709551615]");
    // Integer casts keep the low bits; i64 -1 is the largest u64 and back.
    CHECK(u.astype(pl::i64).to_vector<int64_t>() == std::vector<int64_t>{0, 1, std::numeric_limits<int64_t>::min(), -1});
    CHECK(pl::Array::from_vector<int64_t>({-1, -2}, {2}).astype(pl::u64).to_vector<uint64_t>() ==
          std::vector<uint64_t>{top, top - 1});
    CHECK(u.astype(pl::u8).to_vector<uint8_t>() == std::vector<uint8_t>{0, 1, 0, 255});
    // To floats by the unsigned value with one rounding: 2^64 - 1 is 2^64.
    CHECK(u.astype(pl::f64).to_vector<double>() == std::vector<double>{0, 1, std::ldexp(1.0, 63), std::ldexp(1.0, 64)});
    CHECK(u.astype(pl::f32).to_vector<float>() == std::vector<float>{0, 1, std::ldexp(1.0f, 63), std::ldexp(1.0f, 64)});
    // From floats: truncated, saturated at 0 and 2^64 - 1 (from 2^64 on), NaN -> 0.
    const double inf = std::numeric_limits<double>::infinity();
    const pl::Array f = pl::Array::from_vector<double>(
        {-1.5, 2.9, std::nan(""), inf, -inf, std::ldexp(1.0, 64), std::ldexp(1.0, 64) - std::ldexp(1.0, 11), 1e30}, {8});
    CHECK(f.astype(pl::u64).to_vector<uint64_t>() ==
          std::vector<uint64_t>{0, 2, 0, top, 0, top, 0xfffffffffffff800ull, top});
    // Host creation: full and arange convert as the casts do; random values depend only on the seed.
    CHECK(pl::Array::full({2}, 1e19, pl::u64).to_vector<uint64_t>() ==
          std::vector<uint64_t>{10000000000000000000ull, 10000000000000000000ull});
    CHECK(pl::Array::arange(3, pl::u64).to_vector<uint64_t>() == std::vector<uint64_t>{0, 1, 2});
    const std::vector<uint64_t> r = pl::Array::random_uniform({64}, pl::u64, 7, 0.0, 1e19).to_vector<uint64_t>();
    CHECK(r == pl::Array::random_uniform({64}, pl::u64, 7, 0.0, 1e19).to_vector<uint64_t>());
    CHECK(std::ranges::all_of(r, [](uint64_t v) { return v < 10000000000000000000ull; }));
    CHECK(std::ranges::any_of(r, [&](uint64_t v) { return v >= half; }));  // past i64's range
  }

  TEST_CASE("dtypes: u64 divides, compares, raises and reduces as unsigned 64-bit values") {
    const uint64_t top = std::numeric_limits<uint64_t>::max(), half = uint64_t{1} << 63;
    const pl::Array a = pl::Array::from_vector<uint64_t>({top, half, 7, 0, half + 3, 12345678901234567890ull, 5, 2}, {8});
    const pl::Array b = pl::Array::from_vector<uint64_t>({3, 2, 0, top, half, 7, top, half + 1}, {8});
    check_unsigned_arithmetic<uint64_t>(a, b);
    for (const pl::CallOptions& o : testing::checked_backends()) {
      // Reductions and argmax order by the unsigned value: 2^64 - 1 is the largest, not -1.
      const pl::Array m = a.reshape({2, 4});
      const pl::ShapeDtype row({2}, pl::u64);
      std::vector<pl::Array> r = pl::pallas_call(
          [](pl::Ref x, pl::Ref mx, pl::Ref mn, pl::Ref sum, pl::Ref arg) {
            mx() = pl::max(x(), 1);
            mn() = pl::min(x(), 1);
            sum() = pl::sum(x(), 1);
            arg() = pl::argmax(x(), 1);
          },
          pl::GridSpec{}, {row, row, row, pl::ShapeDtype({2}, pl::i32)}, o)(m);
      CHECK(r[0].to_vector<uint64_t>() == std::vector<uint64_t>{top, 12345678901234567890ull});
      CHECK(r[1].to_vector<uint64_t>() == std::vector<uint64_t>{0, 2});
      CHECK(r[2].to_vector<uint64_t>() ==
            std::vector<uint64_t>{top + half + 7 + 0, half + 3 + 12345678901234567890ull + 5 + 2});  // wraps
      CHECK(r[3].to_vector<int32_t>() == std::vector<int32_t>{0, 1});
    }
  }

  TEST_CASE("dtypes: u64 promotes as jnp.promote_types does with x64") {
    // Unsigned and bool stay u64; a signed integer has no integer type in common with u64, and JAX's
    // lattice joins the two at the weak float, f64; a float wins as with every integer.
    for (pl::DType d : {pl::bool_, pl::u8, pl::u16, pl::u32, pl::u64}) {
      CHECK(pl::promote(pl::u64, d) == pl::u64);
      CHECK(pl::promote(d, pl::u64) == pl::u64);
    }
    for (pl::DType d : {pl::i8, pl::i16, pl::i32, pl::i64}) {
      CHECK(pl::promote(pl::u64, d) == pl::f64);
      CHECK(pl::promote(d, pl::u64) == pl::f64);
    }
    for (pl::DType d : {pl::bf16, pl::f16, pl::f32, pl::f64}) CHECK(pl::promote(pl::u64, d) == d);
    // u32 with i64 still has an integer home.
    CHECK(pl::promote(pl::u32, pl::i64) == pl::i64);

    const uint64_t top = std::numeric_limits<uint64_t>::max();
    const pl::Array u = pl::Array::from_vector<uint64_t>({top, 3, 1}, {3});
    const pl::Array s = pl::Array::from_vector<int64_t>({-1, -5, 4}, {3});
    const pl::Array w = pl::Array::from_vector<uint32_t>({4294967295u, 7, 0}, {3});
    for (const pl::CallOptions& o : testing::checked_backends()) {
      // u64 + i64 is f64, each operand converted by its own value: (2^64 - 1) + (-1) is 2^64 in f64
      // (read as an i64, the u64's bits would have given -2).
      pl::Array mixed = pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref out) { out() = x() + y(); }, pl::GridSpec{},
                                        pl::ShapeDtype({3}, pl::f64), o)(u, s);
      CHECK(mixed.to_vector<double>() == std::vector<double>{std::ldexp(1.0, 64), -2.0, 5.0});
      // u64 with u32 and with an int literal stays u64 and wraps.
      pl::Array same = pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref out) { out() = x() + y() + 1; }, pl::GridSpec{},
                                       pl::ShapeDtype({3}, pl::u64), o)(u, w);
      CHECK(same.to_vector<uint64_t>() == std::vector<uint64_t>{4294967295u, 11, 2});
    }
    // The traced result's dtype is the promoted one: u64 + i32 into a u64 output is the usual error.
    CHECK_THROWS_AS(pl::pallas_call([](pl::Ref x, pl::Ref out) { out() = x() + x().astype(pl::i32); }, pl::GridSpec{},
                                    pl::ShapeDtype({3}, pl::u64))(u),
                    UserError);
  }

  TEST_CASE("dtypes: u64 literals must be non-negative and fit an int64_t") {
    const pl::Array u = pl::Array::from_vector<uint64_t>({1, 2}, {2});
    auto run = [&](const std::function<pl::Value(pl::Value)>& f) {
      pl::pallas_call([&](pl::Ref x, pl::Ref o) { o() = f(x()); }, pl::GridSpec{}, pl::ShapeDtype({2}, pl::u64))(u);
    };
    testing::check_user_error([&] { run([](pl::Value v) { return v + -1; }); },
                              "the integer literal -1 is out of range of u64",
                              "-1 as u64, whose values are [0, 18446744073709551615]",
                              "use a value >= 0 (x - 1 rather than x + -1), or compute in i64 (.astype(pl::i64)) and "
                              "cast back with .astype(pl::u64)",
                              "dtypes_test.cpp");
    testing::check_user_error([&] { run([](pl::Value v) { return pl::full_like(v, -3); }); },
                              "the integer literal -3 is out of range of u64",
                              "-3 as u64, whose values are [0, 18446744073709551615]",
                              "use a value >= 0 (x - 1 rather than x + -1), or compute in i64 (.astype(pl::i64)) and "
                              "cast back with .astype(pl::u64)",
                              "dtypes_test.cpp");
    // A C++ unsigned literal past INT64_MAX would arrive as a negative int64_t.
    testing::check_user_error([&] { run([](pl::Value v) { return v + 18446744073709551615ull; }); },
                              "the integer literal 18446744073709551615 is beyond the largest integer literal, "
                              "9223372036854775807",
                              "18446744073709551615 (a C++ unsigned literal; tessera's integer literals are int64_t)",
                              "build the u64 from its i64 bits: pl::full({}, int64_t(-1), pl::i64).astype(pl::u64)",
                              "dtypes_test.cpp");
    // The suggested spelling gives the value, and the largest literal that fits is taken as it is.
    for (const pl::CallOptions& o : testing::checked_backends()) {
      pl::Array got = pl::pallas_call(
          [](pl::Ref x, pl::Ref out) {
            out(0, pl::all) = x() + pl::full({}, int64_t(-1), pl::i64).astype(pl::u64);
            out(1, pl::all) = x() + 9223372036854775807ull;
          },
          pl::GridSpec{}, pl::ShapeDtype({2, 2}, pl::u64), o)(u);
      CHECK(got.to_vector<uint64_t>() == std::vector<uint64_t>{0, 1, 9223372036854775808ull, 9223372036854775809ull});
    }
  }

  TEST_CASE("dtypes: u64 bitcasts to and from i64 and f64, and to narrower dtypes") {
    const pl::Array u = pl::Array::from_vector<uint64_t>({0x3ff0000000000000ull, 0xffffffffffffffffull}, {2});
    for (const pl::CallOptions& o : testing::checked_backends()) {
      std::vector<pl::Array> got = pl::pallas_call(
          [](pl::Ref x, pl::Ref i, pl::Ref f, pl::Ref back, pl::Ref halves) {
            i() = pl::bitcast(x(), pl::i64);
            f() = pl::bitcast(x(), pl::f64);
            back() = pl::bitcast(pl::bitcast(x(), pl::f64), pl::u64);
            halves() = pl::bitcast(x(), pl::u32);
          },
          pl::GridSpec{},
          {pl::ShapeDtype({2}, pl::i64), pl::ShapeDtype({2}, pl::f64), pl::ShapeDtype({2}, pl::u64),
           pl::ShapeDtype({2, 2}, pl::u32)},
          o)(u);
      CHECK(got[0].to_vector<int64_t>() == std::vector<int64_t>{0x3ff0000000000000ll, -1});
      CHECK(got[1].at<double>({0}) == 1.0);
      CHECK(std::isnan(got[1].at<double>({1})));
      CHECK(got[2].to_vector<uint64_t>() == u.to_vector<uint64_t>());
      CHECK(got[3].to_vector<uint32_t>() == std::vector<uint32_t>{0, 0x3ff00000u, 0xffffffffu, 0xffffffffu});
    }
  }

  TEST_CASE("dtypes: a u64 ref index is checked as its value, and one of 2^63 or more never wraps negative") {
    // Indices from the kernel's own values: program_id and iota as u64 pick the elements they name.
    const pl::Array x = pl::Array::arange(16, pl::f32);
    for (const pl::CallOptions& o : testing::checked_backends()) {
      // Step i reads x[4 i + 1] (1 from a u64 iota) into output block i.
      pl::Array got = pl::pallas_call(
          [](pl::Ref xr, pl::Ref out) {
            const pl::Value i = pl::program_id(0).astype(pl::u64);
            out() = xr(pl::ds(i * 4 + pl::iota({2}, 0, pl::u64)[1], 1));
          },
          pl::GridSpec{.grid = {4}, .out_specs = {pl::BlockSpec({1}, [](pl::Value i) { return pl::idx(i); })}},
          pl::ShapeDtype({4}, pl::f32), o)(x);
      CHECK(got.to_vector<float>() == std::vector<float>{1, 5, 9, 13});
    }
    // As an i64, 2^63 + 3 would be negative and 2^64 - 4 would be -4: both are out of bounds.
    testing::for_each_backend([&](const pl::CallOptions& options) {
      for (uint64_t bad : {(uint64_t{1} << 63) + 3, std::numeric_limits<uint64_t>::max() - 3}) {
        INFO(bad);
        auto call = pl::pallas_call([](pl::Ref ids, pl::Ref xr, pl::Ref o) { o() = xr(pl::ds(ids(0), 4)); },
                                    pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1}, pl::ShapeDtype({4}, pl::f32),
                                    options);
        try {
          call(pl::Array::from_vector<uint64_t>({bad}, {1}), x);
          FAIL("expected a RuntimeError");
        } catch (const RuntimeError& e) {
          const std::string what = e.what();
          CHECK_MESSAGE(what.find("out-of-bounds slice of `input 0 block`: ds(9223372036854775807, 4)") != std::string::npos,
                        what);
        }
        CHECK(call(pl::Array::from_vector<uint64_t>({12}, {1}), x).to_vector<float>() ==
              std::vector<float>{12, 13, 14, 15});
      }
    });
  }

  TEST_CASE("dtypes: u64 loop bounds and dots are user errors, as for the other unsigned types") {
    const pl::Array x = pl::Array::from_vector<uint64_t>(std::vector<uint64_t>(16, 1), {4, 4});
    testing::check_user_error(
        [&] {
          pl::pallas_call(
              [](pl::Ref xr, pl::Ref o) {
                const pl::Value v = xr();
                o() = pl::fori_loop(v(0, 0), v(1, 1), v, [](pl::Value, pl::Value c) { return c; });
              },
              pl::GridSpec{}, pl::ShapeDtype({4, 4}, pl::u64))(x);
        },
        "pl::fori_loop: bounds must be signed integers", "a u64 scalar and a u64 scalar",
        "cast the bounds with .astype(pl::i32)", "dtypes_test.cpp");
    testing::check_user_error(
        [&] {
          pl::pallas_call([](pl::Ref a, pl::Ref o) { o() = pl::dot(a(), a()); }, pl::GridSpec{},
                          pl::ShapeDtype({4, 4}, pl::u64))(x);
        },
        "pl::dot_general: u64 operands and results are not supported",
        "lhs a (4, 4) block of u64, rhs a (4, 4) block of u64, contracting (1) x (0), batch () x ()",
        "cast to i32 (or f32) first, e.g. pl::dot(a.astype(pl::i32), b.astype(pl::i32))", "dtypes_test.cpp");
  }
}
