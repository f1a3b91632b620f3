// erf, erfc, sin and cos in kernels: tessera's own f32 algorithms (runtime/element_math.h) run in both
// backends, so compiled code gives the interpreter's bits, and a compiled loop over them is vector
// code with no call of libm's sinf, cosf, erff or erfcf. (Their accuracy is measured in
// tests/runtime/element_math_test.cpp; element_rules_test.cpp covers their edge values.)
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <regex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "jit/llvm/target.h"
#include "runtime/element_rules.h"
#include "runtime/numeric.h"
#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;

namespace {

struct Fn {
  const char* name;
  pl::Value (*op)(const pl::Operand&);
  float (*rule)(float);
};
const std::vector<Fn>& functions() {
  static const std::vector<Fn> fns = {{"erf", pl::erf, rules::float_erf<float>},
                                      {"erfc", pl::erfc, rules::float_erfc<float>},
                                      {"sin", pl::sin, rules::float_sin<float>},
                                      {"cos", pl::cos, rules::float_cos<float>}};
  return fns;
}

// f32 inputs: every 65537th bit pattern (both signs, subnormals, infinities, NaNs), and the 64
// floats either side of the places where the algorithms switch piece, quadrant or range, and of
// large arguments: powers of two, 1e30, the largest float, and the floats nearest a multiple of
// pi/2 in their binades, where the reduction cancels the most bits.
std::vector<float> f32_inputs() {
  std::vector<float> v;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 65537) v.push_back(std::bit_cast<float>(static_cast<uint32_t>(u)));
  for (float t : {0.0f, 1.0f, 2.25f, 3.85f, 0.46875f, 1.5f, 2.5f, 10.1f, 0.785398163f, 1.57079633f, 3.14159265f, 0x1p20f,
                  0x1p22f, 0x1p30f, 1e30f, std::numeric_limits<float>::max(),
                  // nearest a multiple of pi/2 in [2^22, 2^23), [2^30, 2^31), [2^95, 2^96) (of every
                  // float: |r| = 1.6e-9), [2^99, 2^100) and [2^127, 2^128)
                  0x1.4ac55cp+22f, 0x1.27a94ap+30f, 0x1.f37c8ap+95f, 0x1.f37c8ap+99f, 0x1.7b9b4p+127f}) {
    float lo = t, hi = t;
    for (int i = 0; i < 64; ++i) {
      lo = std::nextafter(lo, -std::numeric_limits<float>::infinity());
      hi = std::nextafter(hi, std::numeric_limits<float>::infinity());
      v.insert(v.end(), {lo, hi, -lo, -hi});
    }
  }
  return v;
}

// Bit equality, any NaN matching any NaN (which NaN an op returns is not a rule).
void check_same(const std::string& what, const pl::Array& got, const pl::Array& want, const pl::Array& in) {
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(got.size() == want.size());
  const int64_t es = pl::dtype_size(got.dtype());
  int bad = 0;
  std::string report;
  for (int64_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(got.data() + i * es, want.data() + i * es, static_cast<size_t>(es)) == 0) continue;
    const double g = got.reshape({got.size()}).at<double>({i}), w = want.reshape({want.size()}).at<double>({i});
    if (std::isnan(g) && std::isnan(w)) continue;
    if (++bad <= 6) report += fmt::format("\n  f({:a}) = {:a}, want {:a}", in.reshape({in.size()}).at<double>({i}), g, w);
  }
  if (bad) FAIL_CHECK(what << ": " << bad << " of " << got.size() << " elements differ" << report);
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("erf, erfc, sin and cos: compiled code gives the rule's bits, f32 over a sweep and bf16/f16 over every value") {
    for (pl::DType d : {pl::f32, pl::bf16, pl::f16}) {
      pl::Array x;
      if (d == pl::f32) {
        const std::vector<float> v = f32_inputs();
        x = pl::Array::from_vector(v, {static_cast<int64_t>(v.size())});
      } else {
        x = pl::Array(d, {65536});
        for (uint32_t u = 0; u < 65536; ++u) {
          const uint16_t b = static_cast<uint16_t>(u);
          std::memcpy(x.mutable_data() + u * 2, &b, 2);
        }
      }
      for (const Fn& f : functions()) {
        // The rule, element by element: computed in f32 and rounded once to the dtype.
        pl::Array want(d, x.shape());
        dispatch_dtype(d, [&]<class T>() {
          if constexpr (std::is_floating_point_v<compute_t<T>>)
            for (int64_t i = 0; i < x.size(); ++i)
              want.mutable_data_as<T>()[i] = narrow<T>(f.rule(static_cast<float>(widen(x.data_as<T>()[i]))));
        });
        auto op = f.op;
        for (const testing::Backend& backend : testing::backends()) {
          pl::Array got = pl::pallas_call([op](pl::Ref a, pl::Ref o) { o() = op(a()); }, pl::GridSpec{},
                                          pl::ShapeDtype(x.shape(), d), backend.options)(x);
          check_same(fmt::format("{} {} ({})", f.name, pl::dtype_name(d), backend.name), got, want, x);
        }
      }
    }
  }

  TEST_CASE("erf, erfc, sin and cos: exact GELU (through erf and erfc) and sin * cos pass the differential check") {
    // Blocked over a grid, so the compiled loops run over whole and partial vectors; each call runs
    // again in the interpreter and must agree (CallOptions::check_against_interpreter).
    std::vector<float> v(96 * 80);
    for (size_t i = 0; i < v.size(); ++i) v[i] = (static_cast<float>(i % 997) - 498.0f) * 0.0173f;
    const pl::Array x = pl::Array::from_vector(v, {96, 80});
    const pl::GridSpec grid{.grid = {3},
                            .in_specs = {pl::BlockSpec({32, 80}, [](pl::Value i) { return pl::idx(i, 0); })},
                            .out_specs = {pl::BlockSpec({32, 80}, [](pl::Value i) { return pl::idx(i, 0); })}};
    const pl::CallOptions check{.check_against_interpreter = true};
    pl::Array gelu = pl::pallas_call(
        [](pl::Ref a, pl::Ref o) { o() = 0.5f * a() * (1.0f + pl::erf(a() * static_cast<float>(M_SQRT1_2))); }, grid,
        pl::ShapeDtype({96, 80}, pl::f32), check)(x);
    // GELU again through erfc: 0.5 x erfc(-x / sqrt(2)), which stays accurate for large negative x.
    pl::Array gelu_c = pl::pallas_call(
        [](pl::Ref a, pl::Ref o) { o() = 0.5f * a() * pl::erfc(-a() * static_cast<float>(M_SQRT1_2)); }, grid,
        pl::ShapeDtype({96, 80}, pl::f32), check)(x);
    pl::Array rot = pl::pallas_call([](pl::Ref a, pl::Ref o) { o() = pl::sin(a()) * pl::cos(a()); }, grid,
                                    pl::ShapeDtype({96, 80}, pl::f32), check)(x);
    // And the values are the functions': within 1e-6 (absolute, and relative beyond 1) of the
    // double-precision result.
    for (int64_t i = 0; i < 96 * 80; ++i) {
      const double t = v[static_cast<size_t>(i)];
      const double g = 0.5 * t * (1 + std::erf(t * M_SQRT1_2)), r = std::sin(t) * std::cos(t);
      INFO("x = " << t);
      CHECK(gelu.reshape({96 * 80}).at<float>({i}) == doctest::Approx(g).epsilon(1e-6));
      CHECK(gelu_c.reshape({96 * 80}).at<float>({i}) == doctest::Approx(g).epsilon(1e-6));
      CHECK(rot.reshape({96 * 80}).at<float>({i}) == doctest::Approx(r).epsilon(1e-6));
    }
  }

  TEST_CASE("erf, erfc, sin and cos: a compiled loop over them is vector code with no libm call") {
    setenv("TESSERA_CACHE", "0", 1);
    setenv("TESSERA_DUMP_LLVM", "1", 1);
    const pl::Array x = testing::ramp(64, 256);
    pl::Array out;
    const std::string ir = testing::capture_stderr([&] {
      out = pl::pallas_call([](pl::Ref a, pl::Ref o) { o() = pl::erf(a()) + pl::erfc(a()) + pl::sin(a()) * pl::cos(a()); }, pl::GridSpec{},
                            pl::ShapeDtype({64, 256}, pl::f32))(x);
    });
    unsetenv("TESSERA_DUMP_LLVM");
    unsetenv("TESSERA_CACHE");
    for (const char* libm : {"@sinf", "@cosf", "@erff", "@erfcf"}) {
      INFO(libm);
      CHECK(ir.find(libm) == std::string::npos);
    }
    // The steps are widened to the target's vectors: 16 floats on AVX-512, else 8.
    const bool zmm = jit::select_target("").avx512;
    CHECK(ir.find(zmm ? "@llvm.fma.v16f32" : "@llvm.fma.v8f32") != std::string::npos);
    CHECK(std::regex_search(ir, std::regex(zmm ? R"(select <16 x i1> .*<16 x float>)" : R"(select <8 x i1> .*<8 x float>)")));
    // And the vector code computes the rule.
    for (int64_t i = 0; i < 64 * 256; ++i) {
      const float t = x.reshape({64 * 256}).at<float>({i});
      const float want = rules::float_erf(t) + rules::float_erfc(t) + rules::float_sin(t) * rules::float_cos(t);
      CHECK(std::bit_cast<uint32_t>(out.reshape({64 * 256}).at<float>({i})) == std::bit_cast<uint32_t>(want));
    }
  }
}
