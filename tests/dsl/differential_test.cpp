// Differential mode (CallOptions::check_against_interpreter, TESSERA_CHECK_AGAINST_INTERPRETER): a
// compiled call also runs in the interpreter; outputs that differ beyond the tolerance throw a
// MismatchError naming the output, the element, both values and the grid point whose block holds it.
// (The comparison rule itself is tested in runtime_tests: tests/runtime/differential_test.cpp.)
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>

#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;

namespace {

// o = x @ y over two row blocks of 8. Rows of block 0 are [1, 0], rows of block 1 are
// [-1, 1 + 2^-12]; y's rows are all ones and all 1 + 2^-12. The interpreter multiplies, rounds, then
// adds: -1 + round((1 + 2^-12)^2) = 2^-11. The compiled dot fuses each multiply into its add (FMA),
// which keeps the product exact: 2^-11 + 2^-24. Both are right to within the f32 tolerance; they are
// not equal.
constexpr float kEps = 0x1p-12f;

pl::Array lhs() {
  std::vector<float> x(16 * 2);
  for (int r = 0; r < 16; ++r) {
    x[r * 2] = r < 8 ? 1.0f : -1.0f;
    x[r * 2 + 1] = r < 8 ? 0.0f : 1.0f + kEps;
  }
  return pl::Array::from_vector(x, {16, 2});
}

pl::Array rhs() {
  std::vector<float> y(2 * 32);
  for (int c = 0; c < 32; ++c) {
    y[c] = 1.0f;
    y[32 + c] = 1.0f + kEps;
  }
  return pl::Array::from_vector(y, {2, 32});
}

auto dot_call(pl::CallOptions options) {
  return pl::pallas_call(
      [](pl::Ref x, pl::Ref y, pl::Ref o) { o() = pl::dot(x(), y()); },
      pl::GridSpec{.grid = {2},
                   .in_specs = {pl::BlockSpec({8, 2}, [](pl::Value i) { return pl::idx(i, 0); }),
                                pl::BlockSpec({2, 32}, [](pl::Value) { return pl::idx(0, 0); })},
                   .out_specs = {pl::BlockSpec({8, 32}, [](pl::Value i) { return pl::idx(i, 0); })}},
      pl::ShapeDtype({16, 32}, pl::f32), std::move(options));
}

// The same dot as an mpmd_map: each of two cores copies its half of x in, multiplies, copies out.
auto mpmd_dot(pl::CallOptions options) {
  auto half = [](pl::Ref x, pl::Ref y, pl::Ref o, pl::Ref xb, pl::Ref yb, pl::Ref ob) {
    const pl::Value c = pl::axis_index("c");
    pl::sync_copy(x.at(pl::ds(c * 8, 8)), xb);
    pl::sync_copy(y, yb);
    ob() = pl::dot(xb(), yb());
    pl::sync_copy(ob, o.at(pl::ds(c * 8, 8)));
  };
  return pl::mpmd_map({{pl::CoreMesh("c", 2), half}}, pl::ShapeDtype({16, 32}, pl::f32),
                      {pl::VMEM({8, 2}, pl::f32), pl::VMEM({2, 32}, pl::f32), pl::VMEM({8, 32}, pl::f32)},
                      std::move(options));
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("differential: the dtype's default tolerance accepts a fused multiply-add's rounding") {
    auto call = dot_call({.check_against_interpreter = true});
    CHECK_FALSE(call.interpreted());
    const pl::Array o = call(lhs(), rhs());
    CHECK(o.at<float>({0, 0}) == 1.0f);
    // The premise of the next test: the compiled value is the FMA's.
    CHECK(o.at<float>({8, 0}) == 0x1p-11f + 0x1p-24f);
  }

  TEST_CASE("differential: a block no step wrote is poison in the interpreter, and the mismatch says so") {
    // Step 2 of 4 skips its output block: the interpreter gives poison there (docs/design.md §4.6),
    // whatever compiled code left in that memory, which is unspecified. The output aliases a zero
    // input so that compiled code leaves numbers there (a zero or a previous block's ones), never
    // NaN by chance, which would match the poison.
    const pl::BlockSpec by_block({64}, [](pl::Value i) { return pl::idx(i); });
    auto call = pl::pallas_call(
        [](pl::Ref, pl::Ref o) { pl::when(pl::program_id(0) != 2, [&] { o() = pl::full({64}, 1.0f, pl::f32); }); },
        pl::GridSpec{.grid = {4}, .in_specs = {by_block}, .out_specs = {by_block}}, pl::ShapeDtype({256}, pl::f32),
        {.input_output_aliases = {{0, 0}}, .check_against_interpreter = true});
    try {
      call(pl::Array::zeros({256}, pl::f32));
      FAIL("no MismatchError");
    } catch (const pl::MismatchError& e) {
      INFO(e.what());
      // In block 2 (compiled: a number; interpreted: poison; the first difference is there).
      REQUIRE(e.index().size() == 1);
      CHECK(e.index()[0] >= 128);
      CHECK(e.index()[0] < 192);
      CHECK(e.interpreted() == "nan");
      CHECK(std::string(e.what()).find("the interpreted value is the poison of memory nobody wrote") != std::string::npos);
    }
  }

  TEST_CASE("differential: with check_unwritten = false, elements no step wrote are not compared, the rest are") {
    // The kernel of the test above, its output's block 2 left unwritten on purpose (the caller would
    // overwrite it, as megablox's gmm zeroes the rows outside its shard): not a difference.
    const pl::BlockSpec by_block({64}, [](pl::Value i) { return pl::idx(i); });
    auto skipping = [&](float value) {
      return pl::pallas_call(
          [value](pl::Ref, pl::Ref o) {
            pl::when(pl::program_id(0) != 2, [&] { o() = pl::full({64}, value, pl::f32); });
          },
          pl::GridSpec{.grid = {4}, .in_specs = {by_block}, .out_specs = {by_block}}, pl::ShapeDtype({256}, pl::f32),
          {.input_output_aliases = {{0, 0}}, .check_against_interpreter = true, .check_unwritten = false});
    };
    const pl::Array out = skipping(1.0f)(pl::Array::zeros({256}, pl::f32));
    CHECK(out.at<float>({0}) == 1.0f);
    CHECK(out.at<float>({255}) == 1.0f);
    // Written elements are still compared: the FMA's rounding, held to a zero tolerance, differs.
    auto call = dot_call({.check_against_interpreter = true, .check_tolerance = pl::Tolerance{0, 0}, .check_unwritten = false});
    CHECK_THROWS_WITH_AS(call(lhs(), rhs()),
                         doctest::Contains("output 0 differs between compiled code and the interpreter at index (8, 0)"),
                         pl::MismatchError);
  }

  TEST_CASE("differential: outputs that differ beyond the tolerance throw a MismatchError naming the element") {
    auto call = dot_call({.check_against_interpreter = true, .check_tolerance = pl::Tolerance{0, 0}});
    try {
      call(lhs(), rhs());
      FAIL("no MismatchError");
    } catch (const pl::MismatchError& e) {
      const std::string msg = e.what();
      INFO(msg);
      CHECK(e.output() == "output 0");
      CHECK(e.index() == std::vector<int64_t>{8, 0});  // the first element of the second block
      CHECK(e.compiled() == "0.000488340855");         // 2^-11 + 2^-24
      CHECK(e.interpreted() == "0.00048828125");       // 2^-11
      REQUIRE(e.writer().has_value());
      CHECK(e.writer()->grid_point == std::vector<int64_t>{1});
      CHECK(msg.find("pallas_call `kernel`: output 0 differs between compiled code and the interpreter at index (8, 0)") !=
            std::string::npos);
      CHECK(msg.find("256 of 512 elements differ") != std::string::npos);
      CHECK(msg.find("grid point (1)") != std::string::npos);
      CHECK(msg.find("differential_test.cpp") != std::string::npos);  // the call's line
    }
    // The call keeps working: a good call after a mismatch.
    CHECK(dot_call({.check_against_interpreter = true})(lhs(), rhs()).at<float>({3, 5}) == 1.0f);
  }

  TEST_CASE("differential: TESSERA_CHECK_AGAINST_INTERPRETER turns it on for calls made while it is set") {
    setenv("TESSERA_CHECK_AGAINST_INTERPRETER", "1", 1);
    auto checked = dot_call({.check_tolerance = pl::Tolerance{0, 0}});
    unsetenv("TESSERA_CHECK_AGAINST_INTERPRETER");
    CHECK_THROWS_AS(checked(lhs(), rhs()), pl::MismatchError);
    CHECK_NOTHROW(dot_call({.check_tolerance = pl::Tolerance{0, 0}})(lhs(), rhs()));
    // Interpreted calls are the reference: nothing to check against.
    auto interpreted = dot_call({.interpret = pl::InterpretParams{}, .check_against_interpreter = true,
                                 .check_tolerance = pl::Tolerance{0, 0}});
    CHECK(interpreted.interpreted());
    CHECK(interpreted(lhs(), rhs()).at<float>({8, 0}) == 0x1p-11f);
  }

  TEST_CASE("differential: element-wise kernels, reductions and several outputs agree on every path") {
    // Element-wise work follows one set of rules (docs/design.md §4.13); the row sums may add in
    // another order, within the default tolerance.
    auto call = pl::pallas_call(
        [](pl::Ref x, pl::Ref s, pl::Ref e) {
          s() = pl::reshape(pl::sum(x(), 1), {8, 1}) * 2.0f;
          e() = pl::exp(x()) - x() * x();
        },
        pl::GridSpec{.grid = {4},
                     .in_specs = {pl::BlockSpec({8, 16}, [](pl::Value i) { return pl::idx(i, 0); })},
                     .out_specs = {pl::BlockSpec({8, 1}, [](pl::Value i) { return pl::idx(i, 0); }),
                                   pl::BlockSpec({8, 16}, [](pl::Value i) { return pl::idx(i, 0); })}},
        {pl::ShapeDtype({32, 1}, pl::f32), pl::ShapeDtype({32, 16}, pl::f32)},
        {.compiler_params = {.dimension_semantics = {pl::parallel}}, .check_against_interpreter = true});
    const pl::Array x = pl::Array::random_normal({32, 16}, pl::f32, 7);
    const auto outs = call(x);
    REQUIRE(outs.size() == 2);
    CHECK(outs[1].at<float>({5, 3}) == std::exp(x.at<float>({5, 3})) - x.at<float>({5, 3}) * x.at<float>({5, 3}));
  }

  TEST_CASE("differential: an mpmd_map is checked against its interpreted run") {
    CHECK(mpmd_dot({.check_against_interpreter = true})(lhs(), rhs()).at<float>({8, 0}) == 0x1p-11f + 0x1p-24f);
    try {
      mpmd_dot({.check_against_interpreter = true, .check_tolerance = pl::Tolerance{0, 0}})(lhs(), rhs());
      FAIL("no MismatchError");
    } catch (const pl::MismatchError& e) {
      INFO(e.what());
      CHECK(e.index() == std::vector<int64_t>{8, 0});
      CHECK_FALSE(e.writer().has_value());
      CHECK(std::string(e.what()).find("mpmd_map `kernel`: output 0 differs") != std::string::npos);
      CHECK(std::string(e.what()).find("the kernel has no grid") != std::string::npos);
    }
  }
}
