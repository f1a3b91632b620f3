// pl::argmax, pl::argmin and pl::cumsum inside kernels, compiled and interpreted: the two agree
// exactly and both equal the same computation done on the host (jnp's rules: the first index on
// ties, a NaN counts as the extreme; running sums in index order).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;
using doctest::Contains;

namespace {

// Runs a one-input kernel on x compiled and interpreted, checks they agree, returns the compiled result.
pl::Array both(const std::function<void(pl::Ref, pl::Ref)>& kernel, const pl::Array& x, pl::ShapeDtype out) {
  pl::Array compiled = pl::pallas_call(kernel, pl::GridSpec{}, out)(x);
  pl::Array interpreted = pl::pallas_call(kernel, pl::GridSpec{}, out, testing::interpret())(x);
  INFO("compiled:    " << compiled.to_string());
  INFO("interpreted: " << interpreted.to_string());
  CHECK(compiled.to_vector<double>() == interpreted.to_vector<double>());
  return compiled;
}

// The host's argmax/argmin of x (rows x cols, row-major) along `axis`: the first extreme, NaN first.
std::vector<int32_t> host_arg(const std::vector<double>& x, int rows, int cols, int axis, bool largest) {
  const int n = axis == 1 ? cols : rows, m = axis == 1 ? rows : cols;
  std::vector<int32_t> out(static_cast<size_t>(m));
  for (int r = 0; r < m; ++r) {
    auto at = [&](int k) { return x[static_cast<size_t>(axis == 1 ? r * cols + k : k * cols + r)]; };
    int best = 0;
    for (int k = 1; k < n; ++k) {
      if (std::isnan(at(best))) break;
      if (std::isnan(at(k)) || (largest ? at(k) > at(best) : at(k) < at(best))) best = k;
    }
    out[static_cast<size_t>(r)] = best;
  }
  return out;
}

}  // namespace

TEST_SUITE("scans") {
  TEST_CASE("scans: argmax and argmin take the first extreme, a NaN counting as the extreme") {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    // Ties (3 twice in row 0), a NaN late in row 1 and two in row 2, negative numbers in row 3.
    std::vector<double> v = {1, 3, 0, 3, -2, 2, 3, 1,    //
                             5, 4, 5, 1, 2, nan, 0, 9,   //
                             nan, 1, 7, nan, 2, 2, 2, 2,  //
                             -1, -7, -3, -7, -1, -5, -2, -6};
    for (pl::DType dtype : {pl::f32, pl::bf16}) {
      INFO("dtype " << std::string(pl::dtype_name(dtype)));
      pl::Array x = pl::Array::from_vector<double>(v, {4, 8}, dtype);
      for (int axis : {0, 1, -1}) {
        const int a = axis < 0 ? axis + 2 : axis;
        INFO("axis " << axis);
        pl::ShapeDtype out({a == 1 ? 4 : 8}, pl::i32);
        pl::Array mx = both([&](pl::Ref xr, pl::Ref o) { o() = pl::argmax(xr(), axis); }, x, out);
        pl::Array mn = both([&](pl::Ref xr, pl::Ref o) { o() = pl::argmin(xr(), axis); }, x, out);
        CHECK(mx.to_vector<int32_t>() == host_arg(v, 4, 8, a, true));
        CHECK(mn.to_vector<int32_t>() == host_arg(v, 4, 8, a, false));
      }
    }
    std::vector<double> ints = {4, 9, 9, -3, 0, -3, 9, 4};
    pl::Array xi = pl::Array::from_vector<double>(ints, {2, 4}, pl::i32);
    pl::ShapeDtype out({2}, pl::i32);
    CHECK(both([](pl::Ref xr, pl::Ref o) { o() = pl::argmax(xr(), 1); }, xi, out).to_vector<int32_t>() ==
          host_arg(ints, 2, 4, 1, true));
    CHECK(both([](pl::Ref xr, pl::Ref o) { o() = pl::argmin(xr(), 1); }, xi, out).to_vector<int32_t>() ==
          host_arg(ints, 2, 4, 1, false));
  }

  TEST_CASE("scans: cumsum adds in index order along either axis, keeping the dtype") {
    std::vector<double> v(24);
    for (size_t k = 0; k < v.size(); ++k) v[k] = (k % 5 == 0 ? -1.0 : 1.0) * (0.1 * static_cast<double>(k) + 1e-3);
    for (int axis : {0, 1}) {
      INFO("axis " << axis);
      pl::Array x = pl::Array::from_vector<double>(v, {4, 6}, pl::f32);
      pl::Array got = both([&](pl::Ref xr, pl::Ref o) { o() = pl::cumsum(xr(), axis); }, x, pl::ShapeDtype({4, 6}, pl::f32));
      std::vector<float> xs = x.to_vector<float>();
      for (int r = 0; r < 4; ++r)
        for (int c = 0; c < 6; ++c) {
          float want = 0;
          for (int k = 0; k <= (axis == 1 ? c : r); ++k) want += xs[static_cast<size_t>(axis == 1 ? r * 6 + k : k * 6 + c)];
          CHECK(got.at<float>({r, c}) == want);
        }
    }
    pl::Array xi = pl::Array::arange(8, pl::i32);
    pl::Array gi = both([](pl::Ref xr, pl::Ref o) { o() = pl::cumsum(xr(), 0); }, xi, pl::ShapeDtype({8}, pl::i32));
    for (int k = 0; k < 8; ++k) CHECK(gi.at<int32_t>({k}) == k * (k + 1) / 2);
  }

  TEST_CASE("scans: bad axes and operands are named") {
    auto run = [](const std::function<void(pl::Ref, pl::Ref)>& kernel) {
      pl::pallas_call(kernel, pl::GridSpec{}, pl::ShapeDtype({8}, pl::i32), testing::interpret())(pl::Array::zeros({8}, pl::f32));
    };
    CHECK_THROWS_WITH_AS(run([](pl::Ref x, pl::Ref o) { o() = pl::cumsum(x(), 1).astype(pl::i32); }),
                         Contains("pl::cumsum: axis 1 is out of range"), UserError);
    CHECK_THROWS_WITH_AS(run([](pl::Ref x, pl::Ref o) { o() = pl::full({8}, pl::argmax(x().sum(), 0), pl::i32); }),
                         Contains("pl::argmax needs a numeric block"), UserError);
    CHECK_THROWS_WITH_AS(run([](pl::Ref x, pl::Ref o) { o() = pl::full({8}, pl::argmin(x() > 0.0f, 0), pl::i32); }),
                         Contains("pl::argmin needs a numeric block"), UserError);
    CHECK_THROWS_WITH_AS(run([](pl::Ref, pl::Ref o) { o() = pl::full({8}, pl::argmax(pl::zeros({0}, pl::f32), 0), pl::i32); }),
                         Contains("pl::argmax of an empty axis"), UserError);
  }
}
