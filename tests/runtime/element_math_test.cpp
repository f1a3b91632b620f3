// The accuracy of tessera's own f32 exp, log, tanh, logistic, erf, erfc, sin and cos (runtime/element_math.h) against
// the correctly rounded result, taken from double-precision libm (whose error, far below an f32
// ulp, cannot move the measured figure): a sweep across every binade of the whole f32 range, dense
// neighbourhoods of each function's thresholds, and the special values, which must be exact.
// tests/dsl/element_rules_test.cpp checks that compiled code computes the same bits.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <algorithm>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "runtime/config.h"
#include "runtime/element_rules.h"

using namespace tessera;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// |got - want| in units of the f32 ulp at want (2^-149 below the normals). A want beyond the f32
// range must round to infinity; NaN must give NaN.
double ulp_error(float got, double want) {
  if (std::isnan(want)) return std::isnan(got) ? 0 : kInf;
  const float rounded = static_cast<float>(want);
  if (std::isinf(rounded)) return got == rounded ? 0 : kInf;
  if (!std::isfinite(got)) return kInf;
  int e = 0;
  std::frexp(std::fabs(want), &e);  // |want| in [2^(e-1), 2^e)
  return std::fabs(static_cast<double>(got) - want) / std::ldexp(1.0, std::max(e - 24, -149));
}

struct Fn {
  const char* name;
  std::function<float(float)> ours;
  std::function<double(double)> exact;
  double bound;  // ulp
  std::vector<float> thresholds;  // inputs around which every neighbouring float is checked
  // The sweep checks every `sweep_every`th of its inputs: erfc, the slowest rule here (the
  // interpreter's std::fma is a libm call), takes every third, to keep the suite's time down.
  size_t sweep_every = 1;
};

// From the search over every float (TESSERA_EXHAUSTIVE=1 and the figures in runtime/element_math.h):
// the inputs with sin's and cos's worst errors, and the float nearest a multiple of pi/2 (|r| =
// 1.6e-9), where the reduction cancels the most bits. erfc's bound and its worst input come from
// every 61st bit pattern (runtime/element_math.h).
constexpr float kSinWorst = 0x1.4d56fep+83f, kCosWorst = 0x1.3cb202p+44f, kNearestToPiOver2 = 0x1.f37c8ap+95f;
constexpr double kErfcBound = 3.5;
constexpr float kErfcWorst = 0x1.b23d5cp+2f;

const std::vector<Fn>& functions() {
  static const std::vector<Fn> fns = {
      {"exp", [](float x) { return rules::float_exp(x); }, [](double x) { return std::exp(x); }, 1.0,
       // overflow, the last normal result, the last non-zero result, 0
       {88.7228394f, -87.3365479f, -103.972076f, 0.0f, 1.0f}},
      {"log", [](float x) { return rules::float_log(x); }, [](double x) { return std::log(x); }, 1.0,
       // 1 (a zero result), sqrt(1/2) and sqrt(2) (where the reduction switches), the normals' edge
       {1.0f, 0.70710677f, 1.41421354f, std::numeric_limits<float>::min(), std::numeric_limits<float>::max()}},
      {"tanh", [](float x) { return rules::float_tanh(x); }, [](double x) { return std::tanh(x); }, 2.0,
       // 0, where the two formulas meet, saturation to 1
       {0.0f, 0.625f, -0.625f, 9.01091290f, -9.01091290f}},
      {"logistic", [](float x) { return rules::float_logistic(x); },
       [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, 2.0,
       // 0 (the two formulas), saturation to 1, the last normal and the last non-zero results
       {0.0f, 16.6355324f, -87.3365479f, -103.972076f}},
      {"erf", [](float x) { return rules::float_erf(x); }, [](double x) { return std::erf(x); }, 2.0,
       // 0, where the small-x polynomial hands over (1), where the erfc pieces meet (2.25), where
       // erf rounds to 1 (3.8325) and where the algorithm returns 1 (3.85)
       {0.0f, 1.0f, -1.0f, 2.25f, -2.25f, 3.83250284f, 3.85f}},
      {"erfc", [](float x) { return rules::float_erfc(x); }, [](double x) { return std::erfc(x); }, kErfcBound,
       // 0, where 1 - erf hands over (0.46875), where the fits of the tail meet (1.5, 2.5), the
       // last non-zero result (10.0546), where the algorithm returns 0 (10.1) and the worst input found
       {0.0f, 0.46875f, -0.46875f, 1.5f, -1.5f, 2.5f, -2.5f, 10.0546f, 10.1f, kErfcWorst},
       3},
      {"sin", [](float x) { return rules::float_sin(x); }, [](double x) { return std::sin(x); }, 2.0,
       // 0, multiples of pi/4 (quadrant and polynomial changes, the switch to the reduction), the
       // inputs with the worst error and the one nearest a multiple of pi/2 found by the search
       // over every float (TESSERA_EXHAUSTIVE below), large arguments, the largest floats
       {0.0f, 0.785398163f, 1.57079633f, 3.14159265f, -4.71238898f, kSinWorst, kNearestToPiOver2, 0x1p22f, 0x1p30f,
        1e30f, std::numeric_limits<float>::max()}},
      {"cos", [](float x) { return rules::float_cos(x); }, [](double x) { return std::cos(x); }, 2.0,
       {0.0f, 0.785398163f, 1.57079633f, -3.14159265f, 4.71238898f, kCosWorst, kNearestToPiOver2, 0x1p22f, -0x1p30f,
        1e30f, std::numeric_limits<float>::max()}},
  };
  return fns;
}

// Checks `f` on every input from `inputs`, reporting the worst one.
void check_accuracy(const Fn& f, const std::string& where, const std::vector<float>& inputs) {
  double worst = 0;
  float worst_x = 0;
  for (float x : inputs) {
    const double err = ulp_error(f.ours(x), f.exact(static_cast<double>(x)));
    if (!(err <= worst)) {
      worst = err;
      worst_x = x;
    }
  }
  INFO(fmt::format("{} over {}: worst {:.3f} ulp at x = {:a} ({}), got {:a}, want {:a}", f.name, where, worst, worst_x,
                   worst_x, f.ours(worst_x), f.exact(worst_x)));
  CHECK(worst <= f.bound);
}

}  // namespace

TEST_SUITE("runtime") {
  TEST_CASE("element math: error bounds over a sweep of the whole f32 range") {
    // Every 199th bit pattern: 21 million inputs, about 40,000 in every binade, both
    // signs, subnormals, infinities and NaNs included.
    std::vector<float> inputs;
    for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 199) inputs.push_back(std::bit_cast<float>(static_cast<uint32_t>(u)));
    for (const Fn& f : functions()) {
      if (f.sweep_every == 1) {
        check_accuracy(f, "the sweep", inputs);
        continue;
      }
      std::vector<float> some;
      for (size_t i = 0; i < inputs.size(); i += f.sweep_every) some.push_back(inputs[i]);
      check_accuracy(f, fmt::format("1 in {} inputs of the sweep", f.sweep_every), some);
    }
  }

  TEST_CASE("element math: error bounds next to each function's thresholds") {
    for (const Fn& f : functions())
      for (float t : f.thresholds) {
        // The 20,000 floats on either side of the threshold.
        std::vector<float> inputs;
        float lo = t, hi = t;
        for (int i = 0; i < 20000; ++i) {
          lo = std::nextafter(lo, -kInf);
          hi = std::nextafter(hi, kInf);
          inputs.push_back(lo);
          inputs.push_back(hi);
        }
        inputs.push_back(t);
        check_accuracy(f, fmt::format("the neighbourhood of {:a}", t), inputs);
      }
  }

  // Every f32 input, for sin and cos: 2^32 inputs each, minutes rather than seconds, so only when
  // TESSERA_EXHAUSTIVE=1 (the figures in runtime/element_math.h and docs/design.md §4.13 come from
  // it). Reports the worst error and where.
  TEST_CASE("element math: sin and cos over every float (TESSERA_EXHAUSTIVE=1)") {
    if (!config::flag(config::Var::exhaustive)) return;
    for (const Fn& f : functions()) {
      if (std::string(f.name) != "sin" && std::string(f.name) != "cos") continue;
      const unsigned n = std::max(1u, std::thread::hardware_concurrency());
      std::vector<double> worst(n, 0);
      std::vector<float> worst_x(n, 0);
      std::vector<std::thread> threads;
      for (unsigned k = 0; k < n; ++k)
        threads.emplace_back([&, k] {
          for (uint64_t u = k; u < (uint64_t{1} << 32); u += n) {
            const float x = std::bit_cast<float>(static_cast<uint32_t>(u));
            const double err = ulp_error(f.ours(x), f.exact(static_cast<double>(x)));
            if (!(err <= worst[k])) {
              worst[k] = err;
              worst_x[k] = x;
            }
          }
        });
      for (std::thread& t : threads) t.join();
      const size_t k = static_cast<size_t>(std::max_element(worst.begin(), worst.end()) - worst.begin());
      MESSAGE(fmt::format("{} over every float: worst {:.4f} ulp at x = {:a}", f.name, worst[k], worst_x[k]));
      CHECK(worst[k] <= f.bound);
    }
  }

  TEST_CASE("element math: special values are exact") {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float denorm = std::numeric_limits<float>::denorm_min();
    auto same = [](float got, float want) { return std::isnan(want) ? std::isnan(got) : std::bit_cast<uint32_t>(got) == std::bit_cast<uint32_t>(want); };
    struct Case {
      float (*f)(float);
      const char* name;
      float x, want;
    };
    const std::vector<Case> cases = {
        {rules::float_exp<float>, "exp", 0.0f, 1.0f},          {rules::float_exp<float>, "exp", -0.0f, 1.0f},
        {rules::float_exp<float>, "exp", kInf, kInf},          {rules::float_exp<float>, "exp", -kInf, 0.0f},
        {rules::float_exp<float>, "exp", nan, nan},            {rules::float_exp<float>, "exp", 89.0f, kInf},
        {rules::float_exp<float>, "exp", -104.0f, 0.0f},       {rules::float_exp<float>, "exp", denorm, 1.0f},
        {rules::float_exp<float>, "exp", -103.0f, static_cast<float>(std::exp(-103.0))},
        {rules::float_log<float>, "log", 1.0f, 0.0f},          {rules::float_log<float>, "log", 0.0f, -kInf},
        {rules::float_log<float>, "log", -0.0f, -kInf},        {rules::float_log<float>, "log", kInf, kInf},
        {rules::float_log<float>, "log", -1.0f, nan},          {rules::float_log<float>, "log", -kInf, nan},
        {rules::float_log<float>, "log", nan, nan},            {rules::float_log<float>, "log", -denorm, nan},
        {rules::float_log<float>, "log", denorm, static_cast<float>(std::log(static_cast<double>(denorm)))},
        {rules::float_tanh<float>, "tanh", 0.0f, 0.0f},        {rules::float_tanh<float>, "tanh", -0.0f, -0.0f},
        {rules::float_tanh<float>, "tanh", kInf, 1.0f},        {rules::float_tanh<float>, "tanh", -kInf, -1.0f},
        {rules::float_tanh<float>, "tanh", 20.0f, 1.0f},       {rules::float_tanh<float>, "tanh", nan, nan},
        {rules::float_tanh<float>, "tanh", denorm, denorm},    {rules::float_tanh<float>, "tanh", -denorm, -denorm},
        {rules::float_logistic<float>, "logistic", 0.0f, 0.5f}, {rules::float_logistic<float>, "logistic", -0.0f, 0.5f},
        {rules::float_logistic<float>, "logistic", kInf, 1.0f}, {rules::float_logistic<float>, "logistic", -kInf, 0.0f},
        {rules::float_logistic<float>, "logistic", nan, nan},  {rules::float_logistic<float>, "logistic", 20.0f, 1.0f},
        {rules::float_logistic<float>, "logistic", -100.0f, static_cast<float>(1.0 / (1.0 + std::exp(100.0)))},
        {rules::float_erf<float>, "erf", 0.0f, 0.0f},          {rules::float_erf<float>, "erf", -0.0f, -0.0f},
        {rules::float_erf<float>, "erf", kInf, 1.0f},          {rules::float_erf<float>, "erf", -kInf, -1.0f},
        {rules::float_erf<float>, "erf", nan, nan},            {rules::float_erf<float>, "erf", 4.0f, 1.0f},
        {rules::float_erf<float>, "erf", -1e30f, -1.0f},       {rules::float_erf<float>, "erf", denorm, static_cast<float>(std::erf(static_cast<double>(denorm)))},
        {rules::float_erf<float>, "erf", -denorm, -static_cast<float>(std::erf(static_cast<double>(denorm)))},
        {rules::float_erfc<float>, "erfc", 0.0f, 1.0f},        {rules::float_erfc<float>, "erfc", -0.0f, 1.0f},
        {rules::float_erfc<float>, "erfc", kInf, 0.0f},        {rules::float_erfc<float>, "erfc", -kInf, 2.0f},
        {rules::float_erfc<float>, "erfc", nan, nan},          {rules::float_erfc<float>, "erfc", 11.0f, 0.0f},
        {rules::float_erfc<float>, "erfc", -11.0f, 2.0f},      {rules::float_erfc<float>, "erfc", denorm, 1.0f},
        {rules::float_sin<float>, "sin", 0.0f, 0.0f},          {rules::float_sin<float>, "sin", -0.0f, -0.0f},
        {rules::float_sin<float>, "sin", kInf, nan},           {rules::float_sin<float>, "sin", -kInf, nan},
        {rules::float_sin<float>, "sin", nan, nan},            {rules::float_sin<float>, "sin", denorm, denorm},
        {rules::float_sin<float>, "sin", -denorm, -denorm},
        {rules::float_cos<float>, "cos", 0.0f, 1.0f},          {rules::float_cos<float>, "cos", -0.0f, 1.0f},
        {rules::float_cos<float>, "cos", kInf, nan},           {rules::float_cos<float>, "cos", -kInf, nan},
        {rules::float_cos<float>, "cos", nan, nan},            {rules::float_cos<float>, "cos", denorm, 1.0f},
    };
    for (const Case& c : cases) {
      const float got = c.f(c.x);
      INFO(fmt::format("{}({:a}) = {:a}, want {:a}", c.name, c.x, got, c.want));
      CHECK(same(got, c.want));
    }
  }
}
