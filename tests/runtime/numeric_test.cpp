#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "runtime/numeric.h"

using namespace tessera;

TEST_SUITE("runtime") {
  TEST_CASE("bfloat16: rounds to nearest even and keeps specials") {
    CHECK(static_cast<float>(bfloat16(1.0f)) == 1.0f);
    // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
    CHECK(static_cast<float>(bfloat16(1.0f + std::ldexp(1.0f, -8))) == 1.0f);
    // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties to even (1 + 2^-6).
    CHECK(static_cast<float>(bfloat16(1.0f + 3 * std::ldexp(1.0f, -8))) == 1.0f + std::ldexp(1.0f, -6));
    // Just above halfway rounds up.
    CHECK(static_cast<float>(bfloat16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20))) == 1.0f + std::ldexp(1.0f, -7));
    CHECK(std::isnan(static_cast<float>(bfloat16(std::numeric_limits<float>::quiet_NaN()))));
    CHECK(std::isinf(static_cast<float>(bfloat16(std::numeric_limits<float>::infinity()))));
    CHECK(std::isinf(static_cast<float>(bfloat16(3.4e38f))));  // rounds up past the largest bf16
    CHECK(static_cast<float>(bfloat16(-2.5f)) == -2.5f);
  }

  TEST_CASE("float16: rounding, overflow and subnormals") {
    CHECK(static_cast<float>(float16(1.0f)) == 1.0f);
    CHECK(static_cast<float>(float16(65504.0f)) == 65504.0f);
    CHECK(std::isinf(static_cast<float>(float16(65520.0f))));
    CHECK(static_cast<float>(float16(65519.0f)) == 65504.0f);
    const float smallest = std::ldexp(1.0f, -24);
    CHECK(static_cast<float>(float16(smallest)) == smallest);
    CHECK(static_cast<float>(float16(smallest * 0.5f)) == 0.0f);     // tie to even: 0
    CHECK(static_cast<float>(float16(smallest * 0.75f)) == smallest);
    CHECK(static_cast<float>(float16(std::ldexp(1.0f, -14))) == std::ldexp(1.0f, -14));  // smallest normal
    // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: to even.
    CHECK(static_cast<float>(float16(1.0f + std::ldexp(1.0f, -11))) == 1.0f);
    CHECK(std::isnan(static_cast<float>(float16(std::nanf("")))));
    CHECK(static_cast<float>(float16(-0.0f)) == 0.0f);
    // Every half value converts to float and back unchanged.
    for (uint32_t bits = 0; bits < 0x10000; ++bits) {
      float16 h;
      h.bits = static_cast<uint16_t>(bits);
      float f = static_cast<float>(h);
      if (std::isnan(f)) continue;
      REQUIRE(float16(f).bits == h.bits);
    }
  }

  TEST_CASE("numeric: poison values and saturating conversions") {
    CHECK(std::isnan(poison_value<float>(false)));
    CHECK(std::isnan(static_cast<float>(poison_value<bfloat16>(false))));
    CHECK(poison_value<int32_t>(false) == std::numeric_limits<int32_t>::max());
    CHECK(poison_value<bool>(false) == true);
    CHECK(poison_value<float>(true) == 0.0f);
    CHECK(poison_value<int8_t>(true) == 0);
    CHECK(from_double<int8_t>(1000.0) == 127);
    CHECK(from_double<int8_t>(-1000.0) == -128);
    CHECK(from_double<int32_t>(std::nan("")) == 0);
    CHECK(from_double<int32_t>(-2.7) == -2);
    CHECK(from_double<bool>(0.5) == true);
  }
}
