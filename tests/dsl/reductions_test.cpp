// Reductions over any axis: sum, max and min over a leading, middle or last axis, or several, with
// or without keepdims, in every numeric dtype, on both backends. Compiled code folds a reduction
// whose innermost axis is kept slice into slice (a buffer of accumulators, element-wise loops over
// the contiguous axis), and one whose innermost axis is reduced as one chain per result element;
// both must give the rule's result (runtime/element_rules.h), folded here in the source's row-major
// order. The inputs hold small integers, whose sums are exact in any order (§4.14 lets compiled
// sums regroup), and NaN, infinities and signed zeros at positions that move across the vector
// lanes, the unrolled copies and the loop remainders.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <regex>
#include <string>

#include <fmt/format.h>

#include "runtime/element_rules.h"
#include "runtime/numeric.h"
#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;

namespace {

enum class Fold { sum, max, min };
const char* name_of(Fold f) { return f == Fold::sum ? "sum" : f == Fold::max ? "max" : "min"; }

pl::Axes axes_of(const std::vector<int64_t>& a) {
  if (a.size() == 1) return pl::Axes(static_cast<int>(a[0]));
  if (a.size() == 2) return pl::Axes{a[0], a[1]};
  return pl::Axes{a[0], a[1], a[2]};
}

pl::Value apply(Fold f, const pl::Value& x, const pl::Axes& axes, bool keepdims) {
  return f == Fold::sum ? pl::sum(x, axes, keepdims) : f == Fold::max ? pl::max(x, axes, keepdims) : pl::min(x, axes, keepdims);
}

// The result's shape: the kept dims, and 1 for each reduced one with keepdims.
pl::Shape result_shape(const pl::Shape& s, const std::vector<int64_t>& axes, bool keepdims) {
  pl::Shape r;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    const bool reduced = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!reduced) r.push_back(s[d]);
    else if (keepdims) r.push_back(1);
  }
  return r;
}

// The rule's fold of `in` over `axes`: every result element folds its terms in the source's
// row-major order (the reduced dims in increasing order, innermost last), in the compute type,
// rounded into the dtype once.
pl::Array reference(const pl::Array& in, Fold f, const std::vector<int64_t>& axes, bool keepdims) {
  const pl::Shape& s = in.shape();
  pl::Array want(in.dtype(), result_shape(s, axes, keepdims));
  dispatch_dtype(in.dtype(), [&]<class T>() {
    using C = compute_t<T>;
    C init;
    if constexpr (std::is_floating_point_v<C>)
      init = f == Fold::sum ? C(0) : f == Fold::max ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
    else
      init = f == Fold::sum ? C(0) : f == Fold::max ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
    std::unique_ptr<C[]> acc(new C[static_cast<size_t>(want.size())]);  // not vector<bool>: its elements are bits
    std::fill(acc.get(), acc.get() + want.size(), init);
    const T* p = in.data_as<T>();
    for (int64_t i = 0; i < in.size(); ++i) {
      // The result element of source element i: its kept coordinates, row-major.
      int64_t rest = i, o = 0, scale = 1;
      for (int64_t d = static_cast<int64_t>(s.size()) - 1; d >= 0; --d) {
        const int64_t c = rest % s[d];
        rest /= s[d];
        if (std::find(axes.begin(), axes.end(), d) != axes.end()) continue;
        o += c * scale;
        scale *= s[d];
      }
      C& a = acc[o];
      const C v = widen(p[i]);
      if constexpr (std::is_floating_point_v<C>) {
        a = f == Fold::sum ? a + v : f == Fold::max ? rules::float_max(a, v) : rules::float_min(a, v);
      } else if constexpr (std::is_same_v<C, bool>) {
        a = f == Fold::max ? (a || v) : (a && v);
      } else {
        a = f == Fold::sum ? rules::wrap_add(a, v) : f == Fold::max ? rules::int_max(a, v) : rules::int_min(a, v);
      }
    }
    for (int64_t o = 0; o < want.size(); ++o) want.mutable_data_as<T>()[o] = narrow<T>(acc[o]);
  });
  return want;
}

// Small integers, and for floats an edge value every `period` elements (NaN, -inf, +inf, -0 in
// turn), so that some result elements hold each of them and the others none.
pl::Array input(pl::DType d, const pl::Shape& s, int64_t period) {
  const int64_t n = pl::num_elements(s);
  std::vector<double> v(static_cast<size_t>(n));
  const double specials[] = {std::nan(""), -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(), -0.0};
  for (int64_t i = 0; i < n; ++i) {
    v[i] = static_cast<double>((i * 7 + 3) % 17) - 8;
    if (d == pl::bool_) v[i] = (i * 5 + 1) % 3 == 0;
    else if (pl::is_float(d) && i % period == period - 1) v[i] = specials[(i / period) % 4];
  }
  return pl::Array::from_vector<double>(v, s, d);
}

// Element i's bits.
uint64_t bits(const pl::Array& a, int64_t i) {
  uint64_t u = 0;
  std::memcpy(&u, a.data() + i * pl::dtype_size(a.dtype()), static_cast<size_t>(pl::dtype_size(a.dtype())));
  return u;
}

// Both backends' results equal the rule's bit for bit (a sum's NaN may be any NaN: which operand's
// NaN an add returns is not a rule; max and min return the canonical one).
void check(const pl::Array& in, Fold f, const std::vector<int64_t>& axes, bool keepdims) {
  const pl::Array want = reference(in, f, axes, keepdims);
  const pl::Axes a = axes_of(axes);
  auto kernel = [f, a, keepdims](pl::Ref x, pl::Ref o) { o() = apply(f, x(), a, keepdims); };
  for (const testing::Backend& backend : testing::backends()) {
    const pl::Array got = pl::pallas_call(kernel, pl::GridSpec{}, pl::ShapeDtype(want.shape(), want.dtype()), backend.options)(in);
    INFO(fmt::format("{} {} of ({}) over ({}){} ({})", name_of(f), pl::dtype_name(in.dtype()), fmt::join(in.shape(), ", "),
                     fmt::join(axes, ", "), keepdims ? " keepdims" : "", backend.name));
    REQUIRE(got.shape() == want.shape());
    int bad = 0;
    std::string report;
    for (int64_t i = 0; i < want.size(); ++i) {
      if (bits(got, i) == bits(want, i)) continue;
      const double g = got.reshape({got.size()}).at<double>({i}), w = want.reshape({want.size()}).at<double>({i});
      if (f == Fold::sum && std::isnan(g) && std::isnan(w)) continue;
      if (++bad <= 4) report += fmt::format(" [{}] {} want {};", i, g, w);
    }
    CHECK_MESSAGE(bad == 0, bad << " of " << want.size() << " differ:" << report);
  }
}

const std::vector<pl::DType> kNumeric = {pl::f32, pl::bf16, pl::f16, pl::f64, pl::i32, pl::i8,
                                         pl::i16, pl::u8,   pl::u16, pl::u32, pl::u64};

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("reductions: over the first axis of a matrix (column sums), every dtype and odd width") {
    // Widths below, at and past a vector's width, and not a multiple of it; one row and one column.
    const std::vector<pl::Shape> shapes = {{7, 37}, {33, 16}, {5, 131}, {1, 37}, {37, 1}, {2, 3}};
    for (pl::DType d : kNumeric)
      for (const pl::Shape& s : shapes)
        for (Fold f : {Fold::sum, Fold::max, Fold::min})
          for (bool keepdims : {false, true}) check(input(d, s, 11), f, {0}, keepdims);
  }

  TEST_CASE("reductions: over each axis and pair of axes of a 3-d block, every dtype") {
    const pl::Shape s = {3, 5, 19};
    const std::vector<std::vector<int64_t>> axes = {{0}, {1}, {2}, {0, 1}, {0, 2}, {1, 2}, {0, 1, 2}};
    for (pl::DType d : kNumeric)
      for (const std::vector<int64_t>& a : axes)
        for (Fold f : {Fold::sum, Fold::max, Fold::min})
          check(input(d, s, 7), f, a, /*keepdims=*/d == pl::bf16);  // keepdims only reshapes the result
  }

  TEST_CASE("reductions: max and min of bool over leading and middle axes") {
    for (const std::vector<int64_t>& a : std::vector<std::vector<int64_t>>{{0}, {1}, {0, 1}})
      for (Fold f : {Fold::max, Fold::min}) check(input(pl::bool_, {4, 3, 21}, 1), f, a, false);
  }

  TEST_CASE("reductions: a column of NaN, -inf or signed zeros alone, over the first axis") {
    // Column c holds one kind of value down all its rows: max / min must find the canonical NaN,
    // -inf, or +0 / -0 whatever the order the zeros come in.
    const double inf = std::numeric_limits<double>::infinity();
    for (pl::DType d : {pl::f32, pl::bf16, pl::f16, pl::f64}) {
      const int64_t rows = 9, cols = 40;
      std::vector<double> v(static_cast<size_t>(rows * cols));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const double zero = (r + c) % 3 ? -0.0 : 0.0;
          const double kinds[] = {std::nan(""), -inf, inf, zero, -0.0, 0.0, static_cast<double>(r - 4)};
          v[static_cast<size_t>(r * cols + c)] = kinds[c % 7];
        }
      const pl::Array in = pl::Array::from_vector<double>(v, {rows, cols}, d);
      for (Fold f : {Fold::sum, Fold::max, Fold::min}) check(in, f, {0}, false);
    }
  }

  TEST_CASE("reductions: a column sum's loop is vector code over the contiguous axis, however short") {
    // The fold over the rows runs along each row (slice into slice): the optimised IR adds whole
    // vectors of the row to vectors of accumulators, and max / min are vector maximum / minimum.
    setenv("TESSERA_CACHE", "0", 1);
    setenv("TESSERA_DUMP_LLVM", "1", 1);
    const pl::Array x = testing::ramp(64, 256);
    std::string ir;
    pl::Array sums, maxima, folds;
    ir = testing::capture_stderr([&] {
      sums = pl::pallas_call([](pl::Ref a, pl::Ref o) { o() = pl::sum(a(), 0); }, pl::GridSpec{},
                             pl::ShapeDtype({256}, pl::f32))(x);
      maxima = pl::pallas_call([](pl::Ref a, pl::Ref o) { o() = pl::max(a(), 0); }, pl::GridSpec{},
                               pl::ShapeDtype({256}, pl::f32))(x);
      // Rows folded to 16 partials: a middle axis, whose kept axis is a single vector long. (Stored
      // flat: a store of 16-wide rows is a loop of its own, which this test is not about.)
      folds = pl::pallas_call([](pl::Ref a, pl::Ref o) { o() = pl::max(a().reshape({64, 16, 16}), 1).reshape({64 * 16}); },
                              pl::GridSpec{}, pl::ShapeDtype({64 * 16}, pl::f32))(x);
    });
    unsetenv("TESSERA_DUMP_LLVM");
    unsetenv("TESSERA_CACHE");
    CHECK(std::regex_search(ir, std::regex(R"(fadd reassoc <(8|16) x float>)")));
    CHECK(std::regex_search(ir, std::regex(R"(load <(8|16) x float>)")));
    // A chain down each column would gather one element per row stride into a vector; a short
    // contiguous axis, unrolled before the vectoriser saw it, would leave the loop around it to
    // gathers and scatters.
    CHECK(ir.find("@llvm.masked.gather") == std::string::npos);
    CHECK(ir.find("@llvm.masked.scatter") == std::string::npos);
    CHECK(std::regex_search(ir, std::regex(R"(@llvm\.maximum\.v(8|16)f32)")));
    // And the vector code computes the columns' sums and maxima.
    const pl::Array want_sums = reference(x, Fold::sum, {0}, false), want_max = reference(x, Fold::max, {0}, false);
    const pl::Array want_folds = reference(x.reshape({64, 16, 16}), Fold::max, {1}, false);
    for (int64_t i = 0; i < 64 * 16; ++i) CHECK(folds.at<float>({i}) == want_folds.reshape({64 * 16}).at<float>({i}));
    for (int64_t c = 0; c < 256; ++c) {
      CHECK(sums.at<float>({c}) == want_sums.at<float>({c}));
      CHECK(maxima.at<float>({c}) == want_max.at<float>({c}));
    }
  }
}
