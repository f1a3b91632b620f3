// The comparison behind differential mode (runtime/differential.h): default tolerances per dtype,
// NaN and infinities, the first differing element's index, the count, and the interpreter's poison.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "runtime/differential.h"

using namespace tessera;
using rt::first_mismatch;

TEST_SUITE("runtime") {
  TEST_CASE("differential: integers and bool compare exactly") {
    const Array a = Array::from_vector(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, {2, 3});
    CHECK_FALSE(first_mismatch(a, a).has_value());
    const Array b = Array::from_vector(std::vector<int32_t>{1, 2, 3, 4, 7, 6}, {2, 3});
    const auto m = first_mismatch(b, a);
    REQUIRE(m.has_value());
    CHECK(m->flat == 4);
    CHECK(m->index == std::vector<int64_t>{1, 1});
    CHECK(m->compiled == "7");
    CHECK(m->interpreted == "5");
    CHECK(m->count == 1);
    CHECK_FALSE(m->interpreted_is_poison);
    CHECK(m->tolerance.rtol == 0);
    CHECK(m->tolerance.atol == 0);
    // The interpreter's poison for an integer is its largest value.
    const Array poisoned = Array::from_vector(std::vector<int32_t>{1, 2, 3, 4, std::numeric_limits<int32_t>::max(), 6}, {2, 3});
    CHECK(first_mismatch(a, poisoned)->interpreted_is_poison);
  }

  TEST_CASE("differential: floats agree within rtol * |interpreted| plus rtol times the output's largest magnitude") {
    const Array ref = Array::from_vector(std::vector<float>{1000.0f, 1.0f, -2.0f, 0.0f}, {4});
    const rt::Tolerance t = rt::default_tolerance(ref);
    CHECK(t.rtol == doctest::Approx(1e-4));
    CHECK(t.atol == doctest::Approx(0.1));  // 1e-4 x 1000
    // 0.05 off an element of magnitude 1 passes (the scale is the output's), 0.2 does not.
    CHECK_FALSE(first_mismatch(Array::from_vector(std::vector<float>{1000.0f, 1.05f, -2.0f, 0.0f}, {4}), ref).has_value());
    const auto m = first_mismatch(Array::from_vector(std::vector<float>{1000.0f, 1.0f, -2.0f, 0.2f}, {4}), ref);
    REQUIRE(m.has_value());
    CHECK(m->index == std::vector<int64_t>{3});
    CHECK(m->compiled == "0.200000003");
    CHECK(m->interpreted == "0");
    // An explicit tolerance replaces the default.
    CHECK(first_mismatch(Array::from_vector(std::vector<float>{1000.0f, 1.0f, -2.0f, 0.2f}, {4}), ref,
                         rt::Tolerance{0, 0.25}) == std::nullopt);
  }

  TEST_CASE("differential: NaN matches NaN, an infinity only itself, and NaN is the float poison") {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    const Array ref = Array::from_vector(std::vector<float>{nan, inf, -inf, 1.0f}, {4});
    CHECK_FALSE(first_mismatch(Array::from_vector(std::vector<float>{-nan, inf, -inf, 1.0f}, {4}), ref).has_value());
    CHECK(first_mismatch(Array::from_vector(std::vector<float>{nan, -inf, -inf, 1.0f}, {4}), ref)->flat == 1);
    CHECK(first_mismatch(Array::from_vector(std::vector<float>{nan, inf, 3e38f, 1.0f}, {4}), ref)->flat == 2);
    const auto m = first_mismatch(Array::from_vector(std::vector<float>{0.0f, inf, -inf, nan}, {4}), ref);
    REQUIRE(m.has_value());
    CHECK(m->flat == 0);
    CHECK(m->count == 2);
    CHECK(m->interpreted_is_poison);
  }

  TEST_CASE("differential: bf16 allows two units in the last place") {
    const Array ref = Array::from_vector(std::vector<float>{1.0f, 2.0f}, {2}).astype(DType::bf16);
    CHECK(rt::default_tolerance(ref).rtol == 0x1p-6);
    CHECK_FALSE(first_mismatch(Array::from_vector(std::vector<float>{1.0f + 0x1p-7f, 2.0f}, {2}).astype(DType::bf16), ref));
    CHECK(first_mismatch(Array::from_vector(std::vector<float>{1.0f, 2.0f + 0x1p-3f}, {2}).astype(DType::bf16), ref));
  }
}
