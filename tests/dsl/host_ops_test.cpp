// Host array operations against naive references.
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;
using doctest::Contains;

namespace {

// A naive einsum over explicit loops (two operands, explicit output), in double.
pl::Array naive_einsum(const std::string& spec, const pl::Array& a, const pl::Array& b) {
  const auto comma = spec.find(','), arrow = spec.find("->");
  const std::string la = spec.substr(0, comma), lb = spec.substr(comma + 1, arrow - comma - 1), lo = spec.substr(arrow + 2);
  std::map<char, int64_t> size;
  for (size_t i = 0; i < la.size(); ++i) size[la[i]] = a.shape()[i];
  for (size_t i = 0; i < lb.size(); ++i) size[lb[i]] = b.shape()[i];
  std::string letters;
  for (auto& [c, n] : size) letters += c;
  pl::Shape out_shape;
  for (char c : lo) out_shape.push_back(size[c]);
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>(), out(static_cast<size_t>(num_elements(out_shape)), 0);
  std::map<char, int64_t> at;
  auto flat = [&](const std::string& ls, const pl::Shape& shape) {
    int64_t f = 0;
    for (size_t i = 0; i < ls.size(); ++i) f = f * shape[i] + at[ls[i]];
    return f;
  };
  std::function<void(size_t)> rec = [&](size_t k) {
    if (k == letters.size()) {
      out[flat(lo, out_shape)] += av[flat(la, a.shape())] * bv[flat(lb, b.shape())];
      return;
    }
    for (at[letters[k]] = 0; at[letters[k]] < size[letters[k]]; ++at[letters[k]]) rec(k + 1);
  };
  rec(0);
  return pl::Array::from_vector(out, out_shape, pl::f32);
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("host ops: matmul and dot run as kernels, for any shapes and bf16") {
    pl::Array a = pl::Array::random_normal({40, 24}, pl::f32, 1), b = pl::Array::random_normal({24, 56}, pl::f32, 2);
    CHECK(pl::allclose(pl::matmul(a, b), naive_einsum("ik,kj->ij", a, b), 1e-5, 1e-4));
    pl::Array odd_a = pl::Array::random_normal({5, 7}, pl::f32, 3), odd_b = pl::Array::random_normal({7, 3}, pl::f32, 4);
    CHECK(pl::allclose(pl::dot(odd_a, odd_b), naive_einsum("ik,kj->ij", odd_a, odd_b), 1e-5, 1e-5));
    pl::Array h = pl::matmul(a.astype(pl::bf16), b.astype(pl::bf16));
    CHECK(h.dtype() == pl::bf16);
    CHECK(pl::matmul(a.astype(pl::bf16), b.astype(pl::bf16), pl::f32).dtype() == pl::f32);
    pl::Array x = pl::Array::random_normal({3, 8, 16}, pl::f32, 5), y = pl::Array::random_normal({3, 16, 8}, pl::f32, 6);
    CHECK(pl::allclose(pl::matmul(x, y), naive_einsum("bik,bkj->bij", x, y), 1e-5, 1e-4));
    CHECK_THROWS_WITH_AS(pl::matmul(a, a), Contains("pl::matmul: the operands do not multiply"), UserError);
  }

  TEST_CASE("host ops: einsum in the forms the seeds use") {
    for (const char* spec : {"mn,kn->mk", "ib,io->bo", "bi,oi->bo", "ni,okbi->nokb", "ij,jk->ki", "bij,bjk->bik", "ij,j->i",
                             "ijx,jk->ik"}) {
      INFO(spec);
      const std::string s = spec;
      const auto comma = s.find(','), arrow = s.find("->");
      std::map<char, int64_t> dims{{'m', 6}, {'n', 8}, {'k', 4}, {'i', 8}, {'b', 4}, {'o', 6}, {'j', 5}, {'x', 3}};
      auto shape = [&](const std::string& ls) {
        pl::Shape sh;
        for (char c : ls) sh.push_back(dims[c]);
        return sh;
      };
      pl::Array a = pl::Array::random_normal(shape(s.substr(0, comma)), pl::f32, 7);
      pl::Array b = pl::Array::random_normal(shape(s.substr(comma + 1, arrow - comma - 1)), pl::f32, 8);
      CHECK(pl::allclose(pl::einsum(s, a, b), naive_einsum(s, a, b), 1e-5, 1e-4));
    }
    pl::Array a = pl::Array::zeros({2, 3}, pl::f32);
    CHECK_THROWS_WITH_AS(pl::einsum("ij->i", a, a), Contains("pl::einsum needs two operands and an explicit output"), UserError);
    CHECK_THROWS_WITH_AS(pl::einsum("ijk,jk->i", a, a), Contains("the subscripts do not match the operands' ranks"), UserError);
    CHECK_THROWS_WITH_AS(pl::einsum("ij,ij->iz", a, a), Contains("output letter `z` is in no operand"), UserError);
  }

  TEST_CASE("host ops: slices clamp, updates, concatenation, splits, transposes and element-wise arithmetic") {
    pl::Array a = pl::Array::arange(24, pl::f32).reshape({4, 6});
    pl::Array s = pl::dynamic_slice(a, {1, 2}, {2, 3});
    CHECK(s.to_vector<float>() == std::vector<float>{8, 9, 10, 14, 15, 16});
    CHECK(pl::dynamic_slice(a, {3, 5}, {2, 2}).at<float>({0, 0}) == 16.0f);  // clamped to (2, 4)
    CHECK(pl::dynamic_slice_in_dim(a, 2, 1, 1).shape() == pl::Shape{4, 1});
    pl::Array u = pl::dynamic_update_slice(a, pl::Array::full({1, 2}, -1, pl::f32), {3, 0});
    CHECK(u.at<float>({3, 1}) == -1.0f);
    CHECK(u.at<float>({2, 1}) == 13.0f);
    CHECK(pl::dynamic_update_slice_in_dim(a, pl::Array::zeros({4, 1}, pl::f32), 5, 1).at<float>({3, 5}) == 0.0f);
    std::vector<pl::Array> parts = pl::split(a, 3, 1);
    CHECK(parts.size() == 3);
    CHECK(parts[2].at<float>({1, 0}) == 10.0f);
    CHECK(pl::allclose(pl::concatenate(parts, 1), a, 0, 0));
    CHECK(pl::transpose(a).shape() == pl::Shape{6, 4});
    CHECK(pl::transpose(a).at<float>({5, 3}) == 23.0f);
    CHECK((a + a).at<float>({1, 1}) == 14.0f);
    CHECK((a * a - a).at<float>({0, 2}) == 2.0f);
    pl::Array acc = a;
    acc += a;
    CHECK(acc.at<float>({3, 5}) == 46.0f);
    CHECK_THROWS_WITH_AS(pl::split(a, 4, 1), Contains("does not split into 4 equal parts"), UserError);
    CHECK_THROWS_WITH_AS(pl::concatenate({a, pl::transpose(a)}, 0), Contains("the arrays differ"), UserError);
    CHECK_THROWS_WITH_AS(pl::transpose(a, {0, 0}), Contains("perm must be a permutation"), UserError);
    CHECK_THROWS_WITH_AS(pl::dynamic_slice(a, {0}, {1, 1}), Contains("one start and one size per dim"), UserError);
    CHECK_THROWS_WITH_AS(a + pl::transpose(a), Contains("the shapes differ"), UserError);
  }
}
