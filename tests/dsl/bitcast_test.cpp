// pl::bitcast (lax.bitcast_convert_type) between dtypes of different widths and between the 8- and
// 16-bit types, compiled (checked against the interpreter) and interpreted: the parts of a wider
// element in memory order, lowest address first, and the errors of shapes and dtypes that have no
// bitcast (jit/ir/bitcast.h).
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "tests/support/checked_backends.h"
#include "tests/support/user_error.h"

using namespace tessera;
namespace pl = tessera;

using testing::el;

TEST_SUITE("dsl") {
  TEST_CASE("bitcast: bitcast to a narrower dtype adds a trailing dim of the parts, lowest address first") {
    const pl::Array x = pl::Array::from_vector<float>({1.0f, -2.5f, 0.1f, NAN, -0.0f, 3.0e-39f}, {2, 3});
    const pl::Array d = pl::Array::from_vector<double>({1.0, -1e300}, {2});
    for (const pl::CallOptions& o : testing::checked_backends()) {
      pl::Array bytes = pl::pallas_call([](pl::Ref xr, pl::Ref out) { out() = pl::bitcast(xr(), pl::u8); }, pl::GridSpec{},
                                        pl::ShapeDtype({2, 3, 4}, pl::u8), o)(x);
      for (int64_t k = 0; k < x.size(); ++k) {
        const uint32_t bits = std::bit_cast<uint32_t>(el<float>(x, k));
        for (int64_t j = 0; j < 4; ++j) CHECK(el<uint8_t>(bytes, k * 4 + j) == ((bits >> (8 * j)) & 0xff));
      }
      // f64 -> two u32 halves, low half first; then used in arithmetic.
      pl::Array halves = pl::pallas_call([](pl::Ref xr, pl::Ref out) { out() = pl::bitcast(xr(), pl::u32) + 1u; },
                                         pl::GridSpec{}, pl::ShapeDtype({2, 2}, pl::u32), o)(d);
      for (int64_t k = 0; k < 2; ++k) {
        const uint64_t bits = std::bit_cast<uint64_t>(el<double>(d, k));
        CHECK(halves.at<uint32_t>({k, 0}) == static_cast<uint32_t>(bits) + 1u);
        CHECK(halves.at<uint32_t>({k, 1}) == static_cast<uint32_t>(bits >> 32) + 1u);
      }
      // A scalar gives a (ratio,) value.
      pl::Array scalar_parts = pl::pallas_call([](pl::Ref xr, pl::Ref out) { out() = pl::bitcast(xr()(0, 1), pl::i16); },
                                               pl::GridSpec{}, pl::ShapeDtype({2}, pl::i16), o)(x);
      const uint32_t b01 = std::bit_cast<uint32_t>(x.at<float>({0, 1}));
      CHECK(el<int16_t>(scalar_parts, 0) == static_cast<int16_t>(b01 & 0xffff));
      CHECK(el<int16_t>(scalar_parts, 1) == static_cast<int16_t>(b01 >> 16));
    }
  }

  TEST_CASE("bitcast: bitcast to a wider dtype consumes a trailing dim of the parts") {
    std::vector<uint8_t> raw(3 * 4);
    for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<uint8_t>(i * 37 + 5);
    const pl::Array bytes = pl::Array::from_vector<uint8_t>(raw, {3, 4});
    for (const pl::CallOptions& o : testing::checked_backends()) {
      pl::Array words = pl::pallas_call([](pl::Ref xr, pl::Ref out) { out() = pl::bitcast(xr(), pl::u32); }, pl::GridSpec{},
                                        pl::ShapeDtype({3}, pl::u32), o)(bytes);
      pl::Array floats = pl::pallas_call([](pl::Ref xr, pl::Ref out) { out() = pl::bitcast(xr(), pl::f32); }, pl::GridSpec{},
                                         pl::ShapeDtype({3}, pl::f32), o)(bytes);
      for (int64_t k = 0; k < 3; ++k) {
        uint32_t want = 0;
        std::memcpy(&want, raw.data() + 4 * k, 4);
        CHECK(el<uint32_t>(words, k) == want);
        CHECK(std::bit_cast<uint32_t>(el<float>(floats, k)) == want);
      }
      // The round trip f32 -> u16 pairs -> f32 is the identity, for every bit pattern given.
      const pl::Array x = pl::Array::from_vector<float>({1.5f, -0.0f, 1e-40f, -3e38f}, {4});
      pl::Array back = pl::pallas_call(
          [](pl::Ref xr, pl::Ref out) { out() = pl::bitcast(pl::bitcast(xr(), pl::u16) ^ uint16_t{0}, pl::f32); },
          pl::GridSpec{}, pl::ShapeDtype({4}, pl::f32), o)(x);
      for (int64_t k = 0; k < 4; ++k) CHECK(std::bit_cast<uint32_t>(el<float>(back, k)) == std::bit_cast<uint32_t>(el<float>(x, k)));
      // u8 (2, 2) -> one i16 per row, (2,) -> a scalar i16 from a (2,) row.
      pl::Array row = pl::pallas_call([](pl::Ref xr, pl::Ref out) { out() = pl::full({1}, pl::bitcast(xr()[1](pl::ds(0, 2)), pl::i16), pl::i16); },
                                      pl::GridSpec{}, pl::ShapeDtype({1}, pl::i16), o)(bytes);
      CHECK(el<int16_t>(row, 0) == static_cast<int16_t>(raw[4] | (raw[5] << 8)));
    }
  }

  TEST_CASE("bitcast: between the 16-bit and 8-bit types of one width keeps the bits") {
    const pl::Array h = pl::Array::from_vector<uint16_t>({0x3c00, 0x7c00, 0xfc00, 0x8000, 0x0001, 0x7bff}, {6});
    const pl::Array s = pl::Array::from_vector<int8_t>({-1, -128, 0, 127}, {4});
    for (const pl::CallOptions& o : testing::checked_backends()) {
      // u16 -> f16 (1, inf, -inf, -0, the smallest subnormal, the largest half) -> f32 -> back.
      pl::Array f = pl::pallas_call([](pl::Ref xr, pl::Ref out) { out() = pl::bitcast(xr(), pl::f16).astype(pl::f32); },
                                    pl::GridSpec{}, pl::ShapeDtype({6}, pl::f32), o)(h);
      const std::vector<float> want = {1.0f, INFINITY, -INFINITY, -0.0f, std::ldexp(1.0f, -24), 65504.0f};
      for (int64_t k = 0; k < 6; ++k) CHECK(std::bit_cast<uint32_t>(el<float>(f, k)) == std::bit_cast<uint32_t>(want[k]));
      pl::Array bf = pl::pallas_call([](pl::Ref xr, pl::Ref out) { out() = pl::bitcast(pl::bitcast(xr(), pl::bf16), pl::i16); },
                                     pl::GridSpec{}, pl::ShapeDtype({6}, pl::i16), o)(h);
      for (int64_t k = 0; k < 6; ++k) CHECK(el<int16_t>(bf, k) == static_cast<int16_t>(el<uint16_t>(h, k)));
      pl::Array u = pl::pallas_call([](pl::Ref xr, pl::Ref out) { out() = pl::bitcast(xr(), pl::u8); }, pl::GridSpec{},
                                    pl::ShapeDtype({4}, pl::u8), o)(s);
      CHECK(u.to_vector<uint8_t>() == std::vector<uint8_t>{255, 128, 0, 127});
    }
  }

  TEST_CASE("bitcast: a trailing dim of the wrong size, a scalar read as wider, and bools are user errors") {
    const pl::Array x = pl::Array::from_vector<uint8_t>(std::vector<uint8_t>(24, 1), {8, 3});
    auto trace = [&](const std::function<pl::Value(pl::Value)>& f, pl::DType out) {
      pl::pallas_call([&](pl::Ref xr, pl::Ref o) { o() = f(xr()); }, pl::GridSpec{}, pl::ShapeDtype({8}, out))(x);
    };
    testing::check_user_error([&] { trace([](pl::Value v) { return pl::bitcast(v, pl::f32); }, pl::f32); },
                              "pl::bitcast cannot read u8 as f32: the last dim is 3, not the 4 u8 parts of one f32",
                              "a (8, 3) block of u8",
                              "reshape so that the last dim is 4 (jax's bitcast_convert_type consumes it); convert values with .astype",
                              "bitcast_test.cpp");
    testing::check_user_error([&] { trace([](pl::Value v) { return pl::bitcast(v(0, 0), pl::u16); }, pl::u16); },
                              "pl::bitcast cannot read u8 as u16: a scalar u8 has fewer bytes than one u16", "a u8 scalar",
                              "bitcast a value whose last dim holds the 2 parts of each u16; convert values with .astype",
                              "bitcast_test.cpp");
    testing::check_user_error([&] { trace([](pl::Value v) { return pl::bitcast(v > 0, pl::u8); }, pl::u8); },
                              "pl::bitcast cannot read i1 as u8: i1 has no bits to read", "a (8, 3) block of i1",
                              "convert bools with .astype(pl::u8) first; convert values with .astype", "bitcast_test.cpp");
  }
}
