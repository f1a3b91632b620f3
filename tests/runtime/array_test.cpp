#include <doctest/doctest.h>

#include "runtime/array.h"

using namespace tessera;

TEST_SUITE("runtime") {
  TEST_CASE("array: creation, element access and conversion") {
    Array a = Array::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
    CHECK(a.dtype() == DType::f32);
    CHECK(a.shape() == Shape{2, 3});
    CHECK(a.size() == 6);
    CHECK(a.nbytes() == 24);
    CHECK(a.at<float>({1, 2}) == 6.0f);
    CHECK(a.at<int32_t>({0, 1}) == 2);
    auto [m, n] = a.shape2();
    CHECK(m == 2);
    CHECK(n == 3);
    CHECK(a.astype(DType::i32).to_vector<int32_t>() == std::vector<int32_t>{1, 2, 3, 4, 5, 6});
    CHECK(Array::zeros({3}, DType::i8).to_vector<int8_t>() == std::vector<int8_t>{0, 0, 0});
    CHECK(Array::arange(4, DType::i32).to_vector<int32_t>() == std::vector<int32_t>{0, 1, 2, 3});
    CHECK(Array::full({2}, 2.5, DType::bf16).to_vector<float>() == std::vector<float>{2.5f, 2.5f});
    CHECK(Array::from_vector<bool>({true, false}, {2}).to_vector<bool>() == std::vector<bool>{true, false});
    CHECK(Array::from_vector<double>({1.5, -2}, {2}, DType::i32).to_vector<int32_t>() == std::vector<int32_t>{1, -2});
    CHECK(Array::scalar(3, DType::i64).item_int() == 3);
    CHECK(a.reshape({3, 2}).at<float>({2, 1}) == 6.0f);
  }

  TEST_CASE("array: every dtype converts to every dtype") {
    std::vector<double> values{0, 1, -2, 3.5};
    for (DType from : kAllDTypes) {
      Array a = Array::from_vector(values, {4}, from);
      for (DType to : kAllDTypes) {
        Array b = a.astype(to);
        CHECK(b.dtype() == to);
        CHECK(b.shape() == Shape{4});
        // Small integers survive every round trip through any type except bool.
        if (from != DType::i1 && to != DType::i1) CHECK(b.at<double>({1}) == 1.0);
      }
    }
  }

  // An empty vector's data() may be null: a zero-size array is made and converted without handing that
  // pointer to memcpy (which UBSan reports, even for 0 bytes).
  TEST_CASE("array: zero-size arrays from empty vectors, in every dtype") {
    for (DType from : kAllDTypes) {
      Array a = Array::from_vector(std::vector<int64_t>{}, {0, 3}, from);
      CHECK(a.shape() == Shape{0, 3});
      CHECK(a.size() == 0);
      for (DType to : kAllDTypes) CHECK(a.astype(to).size() == 0);
    }
  }

  TEST_CASE("array: copies share storage until written") {
    Array a = Array::from_vector<int32_t>({1, 2, 3}, {3});
    Array b = a;
    CHECK(b.shares_storage_with(a));
    b.mutable_data_as<int32_t>()[0] = 9;
    CHECK(a.at<int32_t>({0}) == 1);
    CHECK(b.at<int32_t>({0}) == 9);
    CHECK_FALSE(b.shares_storage_with(a));
  }

  TEST_CASE("array: seeded random values are reproducible and well distributed") {
    Array a = Array::random_normal({1000}, DType::f32, 42);
    Array b = Array::random_normal({1000}, DType::f32, 42);
    Array c = Array::random_normal({1000}, DType::f32, 43);
    CHECK(allclose(a, b, 0, 0));
    CHECK_FALSE(allclose(a, c, 0, 0));
    std::vector<double> v = a.to_vector<double>();
    double mean = 0, var = 0;
    for (double x : v) mean += x;
    mean /= static_cast<double>(v.size());
    for (double x : v) var += (x - mean) * (x - mean);
    var /= static_cast<double>(v.size());
    CHECK(std::abs(mean) < 0.1);
    CHECK(std::abs(var - 1.0) < 0.15);
    Array u = Array::random_uniform({1000}, DType::f32, 7, -2, 3);
    for (double x : u.to_vector<double>()) {
      CHECK(x >= -2);
      CHECK(x < 3);
    }
  }

  TEST_CASE("array: allclose and printing") {
    Array a = Array::from_vector<float>({1, 2, 3}, {3});
    Array b = Array::from_vector<float>({1, 2, 3.001f}, {3});
    CHECK(allclose(a, b, 1e-3, 0));
    CHECK_FALSE(allclose(a, b, 1e-5, 0));
    CHECK_FALSE(allclose(a, Array::from_vector<float>({1, 2}, {2})));
    CHECK_FALSE(allclose(Array::full({1}, std::nan(""), DType::f32), Array::full({1}, std::nan(""), DType::f32)));
    CHECK(max_abs_diff(a, b) == doctest::Approx(0.001).epsilon(1e-3));
    CHECK(a.to_string() == "f32[3] [1, 2, 3]");
    CHECK(Array::arange(10).to_string(2) == "i32[10] [0, 1, ..., 8, 9]");
    CHECK(Array::from_vector<bool>({true}, {}).to_string() == "i1[] True");
  }

  TEST_CASE("array: misuse is a UserError naming the problem") {
    CHECK_THROWS_WITH_AS(Array::from_vector<float>({1, 2, 3}, {2, 2}),
                         doctest::Contains("the number of elements does not match the shape"), UserError);
    CHECK_THROWS_WITH_AS(Array::from_vector<float>({1, 2, 3}, {2, 2}), doctest::Contains("3 elements for shape (2, 2)"),
                         UserError);
    Array a = Array::zeros({2, 3}, DType::f32);
    CHECK_THROWS_WITH_AS(a.at<float>({2, 0}), doctest::Contains("index 2 in dimension 0 of shape (2, 3)"), UserError);
    CHECK_THROWS_WITH_AS(a.at<float>({0}), doctest::Contains("one entry per dimension"), UserError);
    CHECK_THROWS_WITH_AS(a.reshape({4}), doctest::Contains("different number of elements"), UserError);
    CHECK_THROWS_WITH_AS(Array::zeros({2}, DType::f32).shape2(), doctest::Contains("not 2-D"), UserError);
    // The error points at this file.
    CHECK_THROWS_WITH_AS(a.reshape({4}), doctest::Contains("array_test.cpp"), UserError);
  }
}
