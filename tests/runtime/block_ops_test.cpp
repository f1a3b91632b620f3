#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "runtime/block_ops.h"

using namespace tessera;
using ir::OpKind;

namespace {

Array floats(std::vector<float> v) { return Array::from_vector(v, {static_cast<int64_t>(v.size())}); }
Array ints(std::vector<int32_t> v) { return Array::from_vector(v, {static_cast<int64_t>(v.size())}); }

// Each element of `got` equals f(input) computed in float (double for f64) and rounded to the dtype.
void check_unary(OpKind kind, DType dtype, const std::function<double(double)>& f) {
  std::vector<double> in{0.25, 0.5, 1.0, 1.7, 2.9, 5.3, 7.1};
  Array a = Array::from_vector(in, {static_cast<int64_t>(in.size())}, dtype);
  Array got = rt::unary(kind, a);
  REQUIRE(got.dtype() == dtype);
  for (size_t i = 0; i < in.size(); ++i) {
    double x = a.at<double>({static_cast<int64_t>(i)});
    double want = dtype == DType::f64 ? f(x) : static_cast<double>(static_cast<float>(f(static_cast<float>(x))));
    Array w = Array::from_vector<double>({want}, {1}, dtype);
    INFO(ir::mnemonic(kind) << " " << dtype_name(dtype) << " x=" << x);
    CHECK(got.at<double>({static_cast<int64_t>(i)}) == doctest::Approx(w.at<double>({0})).epsilon(1e-6));
  }
}

}  // namespace

TEST_SUITE("runtime") {
  TEST_CASE("block ops: float unary ops, rounded to each float dtype") {
    const std::vector<std::pair<OpKind, std::function<double(double)>>> ops = {
        {OpKind::Neg, [](double x) { return -x; }},
        {OpKind::Abs, [](double x) { return std::abs(x); }},
        {OpKind::Exp, [](double x) { return std::exp(x); }},
        {OpKind::Log, [](double x) { return std::log(x); }},
        {OpKind::Tanh, [](double x) { return std::tanh(x); }},
        {OpKind::Sqrt, [](double x) { return std::sqrt(x); }},
        {OpKind::Rsqrt, [](double x) { return 1 / std::sqrt(x); }},
        {OpKind::Logistic, [](double x) { return 1 / (1 + std::exp(-x)); }},
        {OpKind::Sin, [](double x) { return std::sin(x); }},
        {OpKind::Cos, [](double x) { return std::cos(x); }},
        {OpKind::Erf, [](double x) { return std::erf(x); }},
        {OpKind::Erfc, [](double x) { return std::erfc(x); }},
        {OpKind::Floor, [](double x) { return std::floor(x); }},
        {OpKind::Ceil, [](double x) { return std::ceil(x); }},
    };
    for (DType t : {DType::f32, DType::bf16, DType::f16, DType::f64})
      for (auto& [kind, f] : ops) check_unary(kind, t, f);
  }

  TEST_CASE("block ops: bf16 arithmetic rounds every result to nearest even") {
    // 1 + 2^-8 is not representable in bf16: 1 + (2^-8) rounds back to 1 (tie to even).
    Array one = Array::full({4}, 1.0, DType::bf16);
    Array tiny = Array::full({4}, std::ldexp(1.0, -8), DType::bf16);
    CHECK(rt::binary(OpKind::Add, one, tiny).at<float>({0}) == 1.0f);
    Array three = Array::full({4}, 3 * std::ldexp(1.0, -8), DType::bf16);
    CHECK(rt::binary(OpKind::Add, one, three).at<float>({0}) == 1.0f + std::ldexp(1.0f, -6));
    CHECK(rt::binary(OpKind::Add, one, tiny).dtype() == DType::bf16);
  }

  TEST_CASE("block ops: integer arithmetic wraps and defines division by zero") {
    const int32_t mn = std::numeric_limits<int32_t>::min(), mx = std::numeric_limits<int32_t>::max();
    CHECK(rt::binary(OpKind::Add, ints({mx}), ints({1})).at<int32_t>({0}) == mn);
    CHECK(rt::binary(OpKind::Mul, ints({mx}), ints({2})).at<int32_t>({0}) == -2);
    CHECK(rt::binary(OpKind::Div, ints({7, -7, 7, mn}), ints({2, 2, 0, -1})).to_vector<int32_t>() ==
          std::vector<int32_t>{3, -3, -1, mn});
    CHECK(rt::binary(OpKind::Rem, ints({7, -7, 7, mn}), ints({2, 2, 0, -1})).to_vector<int32_t>() ==
          std::vector<int32_t>{1, -1, 7, 0});
    CHECK(rt::binary(OpKind::Pow, ints({2, 3, -1, 2}), ints({10, 0, 3, -1})).to_vector<int32_t>() ==
          std::vector<int32_t>{1024, 1, -1, 0});
    CHECK(rt::binary(OpKind::Max, ints({1, 5}), ints({3, 2})).to_vector<int32_t>() == std::vector<int32_t>{3, 5});
    CHECK(rt::binary(OpKind::Min, ints({1, 5}), ints({3, 2})).to_vector<int32_t>() == std::vector<int32_t>{1, 2});
    CHECK(rt::binary(OpKind::And, ints({12}), ints({10})).at<int32_t>({0}) == 8);
    CHECK(rt::binary(OpKind::Or, ints({12}), ints({10})).at<int32_t>({0}) == 14);
    CHECK(rt::binary(OpKind::Xor, ints({12}), ints({10})).at<int32_t>({0}) == 6);
    CHECK(rt::unary(OpKind::Not, ints({0})).at<int32_t>({0}) == -1);
    CHECK(rt::unary(OpKind::Neg, ints({mn})).at<int32_t>({0}) == mn);
    CHECK(rt::unary(OpKind::Abs, ints({-4, mn})).to_vector<int32_t>() == std::vector<int32_t>{4, mn});
  }

  TEST_CASE("block ops: float arithmetic, max/min propagate NaN") {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    CHECK(rt::binary(OpKind::Sub, floats({5}), floats({1.5f})).at<float>({0}) == 3.5f);
    CHECK(rt::binary(OpKind::Div, floats({1}), floats({4})).at<float>({0}) == 0.25f);
    CHECK(rt::binary(OpKind::Rem, floats({-7}), floats({2})).at<float>({0}) == -1.0f);
    CHECK(rt::binary(OpKind::Pow, floats({2}), floats({0.5f})).at<float>({0}) == doctest::Approx(std::sqrt(2.0)));
    CHECK(std::isnan(rt::binary(OpKind::Max, floats({nan}), floats({1})).at<float>({0})));
    CHECK(std::isnan(rt::binary(OpKind::Min, floats({1}), floats({nan})).at<float>({0})));
    CHECK(rt::binary(OpKind::Max, floats({-1}), floats({2})).at<float>({0}) == 2.0f);
  }

  TEST_CASE("block ops: comparisons give bool, NaN compares unequal") {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    Array a = floats({1, 2, nan}), b = floats({2, 2, nan});
    CHECK(rt::binary(OpKind::Eq, a, b).to_vector<bool>() == std::vector<bool>{false, true, false});
    CHECK(rt::binary(OpKind::Ne, a, b).to_vector<bool>() == std::vector<bool>{true, false, true});
    CHECK(rt::binary(OpKind::Lt, a, b).to_vector<bool>() == std::vector<bool>{true, false, false});
    CHECK(rt::binary(OpKind::Le, a, b).to_vector<bool>() == std::vector<bool>{true, true, false});
    CHECK(rt::binary(OpKind::Gt, a, b).to_vector<bool>() == std::vector<bool>{false, false, false});
    CHECK(rt::binary(OpKind::Ge, a, b).to_vector<bool>() == std::vector<bool>{false, true, false});
    CHECK(rt::binary(OpKind::Eq, a, b).dtype() == DType::i1);
    Array t = Array::from_vector<bool>({true, true, false}, {3}), f = Array::from_vector<bool>({true, false, false}, {3});
    CHECK(rt::binary(OpKind::And, t, f).to_vector<bool>() == std::vector<bool>{true, false, false});
    CHECK(rt::binary(OpKind::Or, t, f).to_vector<bool>() == std::vector<bool>{true, true, false});
    CHECK(rt::binary(OpKind::Xor, t, f).to_vector<bool>() == std::vector<bool>{false, true, false});
    CHECK(rt::unary(OpKind::Not, f).to_vector<bool>() == std::vector<bool>{false, true, true});
  }

  TEST_CASE("block ops: select, iota, splat") {
    Array c = Array::from_vector<bool>({true, false}, {2});
    CHECK(rt::select(c, floats({1, 2}), floats({3, 4})).to_vector<float>() == std::vector<float>{1, 4});
    Array io = rt::iota(DType::i32, {2, 3}, 1);
    CHECK(io.to_vector<int32_t>() == std::vector<int32_t>{0, 1, 2, 0, 1, 2});
    CHECK(rt::iota(DType::f32, {2, 3}, 0).to_vector<float>() == std::vector<float>{0, 0, 0, 1, 1, 1});
    CHECK(rt::splat(ir::Literal::of_float(0.1), DType::bf16, {2}).at<float>({1}) == static_cast<float>(bfloat16(0.1f)));
    CHECK(rt::splat(ir::Literal::of_int(-3), DType::i8, {}).at<int8_t>({}) == -3);
  }

  TEST_CASE("block ops: broadcast_to and transpose") {
    Array row = Array::from_vector<int32_t>({1, 2, 3}, {1, 3});
    CHECK(rt::broadcast_to(row, {2, 3}).to_vector<int32_t>() == std::vector<int32_t>{1, 2, 3, 1, 2, 3});
    Array col = Array::from_vector<int32_t>({1, 2}, {2, 1});
    CHECK(rt::broadcast_to(col, {2, 3}).to_vector<int32_t>() == std::vector<int32_t>{1, 1, 1, 2, 2, 2});
    CHECK(rt::broadcast_to(Array::scalar(7, DType::i32), {2, 2}).to_vector<int32_t>() == std::vector<int32_t>{7, 7, 7, 7});
    CHECK(rt::broadcast_to(Array::from_vector<int32_t>({4, 5}, {2}), {3, 2}).to_vector<int32_t>() ==
          std::vector<int32_t>{4, 5, 4, 5, 4, 5});
    Array m = Array::from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
    Array t = rt::transpose(m, {1, 0});
    CHECK(t.shape() == Shape{3, 2});
    CHECK(t.to_vector<int32_t>() == std::vector<int32_t>{1, 4, 2, 5, 3, 6});
    Array cube = Array::arange(24, DType::i32).reshape({2, 3, 4});
    Array p = rt::transpose(cube, {2, 0, 1});
    CHECK(p.shape() == Shape{4, 2, 3});
    CHECK(p.at<int32_t>({3, 1, 2}) == cube.at<int32_t>({1, 2, 3}));
  }

  TEST_CASE("block ops: reductions over any axes") {
    Array m = Array::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
    CHECK(rt::reduce(OpKind::ReduceSum, m, {1}).to_vector<float>() == std::vector<float>{6, 15});
    CHECK(rt::reduce(OpKind::ReduceSum, m, {0}).to_vector<float>() == std::vector<float>{5, 7, 9});
    CHECK(rt::reduce(OpKind::ReduceSum, m, {0, 1}).item() == 21);
    CHECK(rt::reduce(OpKind::ReduceMax, m, {1}).to_vector<float>() == std::vector<float>{3, 6});
    CHECK(rt::reduce(OpKind::ReduceMin, m, {0}).to_vector<float>() == std::vector<float>{1, 2, 3});
    Array cube = Array::arange(24, DType::i32).reshape({2, 3, 4});
    Array r = rt::reduce(OpKind::ReduceSum, cube, {0, 2});
    CHECK(r.to_vector<int32_t>() == std::vector<int32_t>{60, 92, 124});
    // bf16 sums accumulate in f32 and round once.
    Array b = Array::full({256}, 1.0, DType::bf16);
    CHECK(rt::reduce(OpKind::ReduceSum, b, {0}).at<float>({}) == 256.0f);
    CHECK(std::isnan(rt::reduce(OpKind::ReduceMax, floats({1, std::nanf(""), 3}), {0}).item()));
  }

  TEST_CASE("block ops: dot_general matches a naive contraction, with batch dims and mixed dtypes") {
    Array a = Array::random_normal({2, 3, 4}, DType::f32, 1);
    Array b = Array::random_normal({2, 4, 5}, DType::f32, 2);
    Array c = rt::dot_general(a, b, ir::DotAttr{{2}, {1}, {0}, {0}}, DType::f32);
    REQUIRE(c.shape() == Shape{2, 3, 5});
    for (int64_t bt = 0; bt < 2; ++bt)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 5; ++j) {
          double s = 0;
          for (int64_t k = 0; k < 4; ++k) s += a.at<double>({bt, i, k}) * b.at<double>({bt, k, j});
          CHECK(c.at<double>({bt, i, j}) == doctest::Approx(s).epsilon(1e-5));
        }
    // Contracting dim 1 of a with dim 1 of b (x^T y).
    Array x = Array::random_normal({4, 3}, DType::bf16, 3);
    Array y = Array::random_normal({4, 2}, DType::bf16, 4);
    Array z = rt::dot_general(x, y, ir::DotAttr{{0}, {0}, {}, {}}, DType::f32);
    REQUIRE(z.shape() == Shape{3, 2});
    double s = 0;
    for (int64_t k = 0; k < 4; ++k) s += x.at<double>({k, 1}) * y.at<double>({k, 0});
    CHECK(z.at<double>({1, 0}) == doctest::Approx(s).epsilon(1e-5));
    // Integer dot accumulates in i32.
    Array ia = Array::from_vector<int8_t>({100, 100}, {1, 2}), ib = Array::from_vector<int8_t>({100, 100}, {2, 1});
    CHECK(rt::dot_general(ia, ib, ir::DotAttr{{1}, {0}, {}, {}}, DType::i32).at<int32_t>({0, 0}) == 20000);
  }
}
