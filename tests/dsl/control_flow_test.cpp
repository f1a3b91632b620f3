// The control flow a kernel says beyond when/cond/fori_loop: pl::while_loop, pl::switch_ and pl::loop
// with a carry. Each runs inside a real kernel compiled and interpreted; the two must agree exactly,
// and both are checked against the same computation done on the host.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "jit/ir/parser.h"
#include "jit/ir/printer.h"
#include "tests/support/golden.h"
#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;
using doctest::Contains;

namespace {

// Runs `run` compiled and interpreted, checks the two results are identical, returns the compiled one.
pl::Array both(const std::function<pl::Array(const pl::CallOptions&)>& run) {
  pl::Array compiled = run(pl::CallOptions{});
  pl::Array interpreted = run(testing::interpret());
  INFO("compiled:    " << compiled.to_string());
  INFO("interpreted: " << interpreted.to_string());
  CHECK(compiled.to_vector<double>() == interpreted.to_vector<double>());
  return compiled;
}

pl::BlockSpec row_spec(int64_t n) {
  return pl::BlockSpec({n}, [](pl::Value i) { return pl::idx(i); });
}

// Traces `kernel` over one f32 (8,) input with a whole-array block and runs it interpreted.
void trace1(const std::function<void(pl::Ref, pl::Ref)>& kernel) {
  pl::pallas_call(kernel, pl::GridSpec{}, pl::ShapeDtype({8}, pl::f32), testing::interpret())(pl::Array::zeros({8}, pl::f32));
}

}  // namespace

TEST_SUITE("control_flow") {
  TEST_CASE("control_flow: while_loop runs Newton steps per block until they converge") {
    // sqrt(x) by Newton's method, iterated per block until the largest residual is small: blocks of
    // large numbers need more steps than blocks of small ones.
    auto kernel = [](pl::Ref x, pl::Ref o) {
      pl::Value v = x();
      std::vector<pl::Value> r = pl::while_loop(
          [&](const std::vector<pl::Value>& c) { return pl::abs(c[0] * c[0] - v).max() > 1e-3f * v.max() && c[1] < 50; },
          [&](const std::vector<pl::Value>& c) { return std::vector<pl::Value>{0.5f * (c[0] + v / c[0]), c[1] + 1}; },
          {v, pl::zeros({}, pl::i32)});
      o() = r[0] + 0.0f * r[1].astype(pl::f32);
    };
    std::vector<float> in(32);
    for (size_t i = 0; i < in.size(); ++i) in[i] = i < 8 ? 1.0f + static_cast<float>(i) : 1000.0f * static_cast<float>(i);
    pl::Array x = pl::Array::from_vector(in, {32});
    pl::Array out = both([&](const pl::CallOptions& opts) {
      return pl::pallas_call(kernel, pl::GridSpec{.grid = {4}, .in_specs = {row_spec(8)}, .out_specs = {row_spec(8)}},
                             pl::ShapeDtype({32}, pl::f32), opts)(x);
    });
    std::vector<float> got = out.to_vector<float>();
    for (size_t i = 0; i < in.size(); ++i) CHECK(std::abs(got[i] - std::sqrt(in[i])) <= 1e-3f * std::sqrt(in[i]));
  }

  TEST_CASE("control_flow: while_loop trip counts depend on the data of each program") {
    // The Collatz steps of n = program_id + 1: scalars carried in registers, a trip count per program.
    auto kernel = [](pl::Ref o) {
      pl::Value n = pl::program_id(0) + 1;
      std::vector<pl::Value> r = pl::while_loop(
          [](const std::vector<pl::Value>& c) { return c[0] != 1; },
          [](const std::vector<pl::Value>& c) {
            pl::Value even = c[0] % 2 == 0;
            return std::vector<pl::Value>{pl::where(even, c[0] / 2, 3 * c[0] + 1), c[1] + 1};
          },
          {n, pl::zeros({}, pl::i32)});
      o(0) = r[1];
    };
    const int programs = 30;
    pl::Array out = both([&](const pl::CallOptions& opts) {
      return pl::pallas_call(kernel, pl::GridSpec{.grid = {programs}, .out_specs = {row_spec(1)}},
                             pl::ShapeDtype({programs}, pl::i32), opts)();
    });
    for (int p = 0; p < programs; ++p) {
      int n = p + 1, steps = 0;
      while (n != 1) n = n % 2 == 0 ? n / 2 : 3 * n + 1, ++steps;
      CHECK(out.at<int32_t>({p}) == steps);
    }
  }

  TEST_CASE("control_flow: while_loop carries blocks that trade places, and may run zero times") {
    // (a, b) -> (b, a + b) while k < limit: each new block reads the other carried block.
    auto kernel = [](pl::Ref x, pl::Ref o) {
      pl::Value limit = pl::program_id(0) * 3;  // program 0 runs no step
      std::vector<pl::Value> r = pl::while_loop(
          [&](const std::vector<pl::Value>& c) { return c[2] < limit; },
          [](const std::vector<pl::Value>& c) { return std::vector<pl::Value>{c[1], c[0] + c[1], c[2] + 1}; },
          {x(), x() + 1.0f, pl::zeros({}, pl::i32)});
      o() = r[0] * 1000.0f + r[1];
    };
    pl::Array x = pl::Array::arange(16, pl::f32);
    pl::Array out = both([&](const pl::CallOptions& opts) {
      return pl::pallas_call(kernel, pl::GridSpec{.grid = {2}, .in_specs = {row_spec(8)}, .out_specs = {row_spec(8)}},
                             pl::ShapeDtype({16}, pl::f32), opts)(x);
    });
    for (int i = 0; i < 16; ++i) {
      float a = static_cast<float>(i), b = a + 1.0f;
      for (int k = 0; k < (i / 8) * 3; ++k) {
        float next = a + b;
        a = b;
        b = next;
      }
      CHECK(out.at<float>({i}) == a * 1000.0f + b);
    }
  }

  TEST_CASE("control_flow: switch_ on program_id chooses the op, the index clamped into range") {
    auto kernel = [](pl::Ref x, pl::Ref o) {
      // Programs 0 and 1 take branch 0 (index -1 clamps to 0), 2 and 3 branches 1 and 2, 4 clamps to 2.
      o() = pl::switch_(pl::program_id(0) - 1,
                        {[](const pl::Value& v) { return v + 1.0f; }, [](const pl::Value& v) { return v * 2.0f; },
                         [](const pl::Value& v) { return -v; }},
                        x());
    };
    pl::Array x = pl::Array::arange(20, pl::f32);
    pl::Array out = both([&](const pl::CallOptions& opts) {
      return pl::pallas_call(kernel, pl::GridSpec{.grid = {5}, .in_specs = {row_spec(4)}, .out_specs = {row_spec(4)}},
                             pl::ShapeDtype({20}, pl::f32), opts)(x);
    });
    for (int i = 0; i < 20; ++i) {
      const int branch = std::clamp(i / 4 - 1, 0, 2);
      const float v = static_cast<float>(i);
      CHECK(out.at<float>({i}) == (branch == 0 ? v + 1.0f : branch == 1 ? v * 2.0f : -v));
    }
  }

  TEST_CASE("control_flow: switch_ with several results, with none, and with a C++ index") {
    auto kernel = [](pl::Ref x, pl::Ref o) {
      pl::Value k = pl::program_id(0);
      std::vector<pl::Value> r = pl::switch_<std::vector<pl::Value>>(
          k, {[&] { return std::vector<pl::Value>{x(), pl::full({}, 10, pl::i32)}; },
              [&] { return std::vector<pl::Value>{x() * x(), pl::full({}, 20, pl::i32)}; }});
      o() = r[0] + r[1].astype(pl::f32);
      // Side effects only: the second program adds 100 to its first element.
      pl::switch_<void>(k, {[] {}, [&] { o(0) = o(0) + 100.0f; }});
      // A C++ index picks its branch while tracing (7 clamps to the last).
      o(1) = pl::switch_(7, {[&] { return o(1); }, [&] { return o(1) - 0.5f; }});
    };
    pl::Array x = pl::Array::arange(8, pl::f32);
    pl::Array out = both([&](const pl::CallOptions& opts) {
      return pl::pallas_call(kernel, pl::GridSpec{.grid = {2}, .in_specs = {row_spec(4)}, .out_specs = {row_spec(4)}},
                             pl::ShapeDtype({8}, pl::f32), opts)(x);
    });
    for (int i = 0; i < 8; ++i) {
      const float v = static_cast<float>(i);
      float want = i < 4 ? v + 10.0f : v * v + 20.0f;
      if (i == 4) want += 100.0f;
      if (i % 4 == 1) want -= 0.5f;
      CHECK(out.at<float>({i}) == want);
    }
  }

  TEST_CASE("control_flow: loop with init_carry steps through the range carrying a value") {
    auto kernel = [](pl::Ref x, pl::Ref o) {
      // Every other element of the block, summed from lo = 1: x[1] + x[3] + x[5] + x[7].
      pl::Value s = pl::loop(1, 8, [&](pl::Value i, pl::Value acc) { return acc + x(i); }, 2, pl::zeros({}, pl::f32));
      std::vector<pl::Value> two = pl::loop(
          0, 6, [&](pl::Value i, const std::vector<pl::Value>& c) { return std::vector<pl::Value>{c[0] + i, c[1] * 2}; }, 3,
          {pl::zeros({}, pl::i32), pl::ones({}, pl::i32)});
      o() = x() * 0.0f + s + (two[0] * 100 + two[1]).astype(pl::f32);
    };
    pl::Array x = pl::Array::arange(8, pl::f32);
    pl::Array out = both([&](const pl::CallOptions& opts) {
      return pl::pallas_call(kernel, pl::GridSpec{}, pl::ShapeDtype({8}, pl::f32), opts)(x);
    });
    float s = 0;
    for (int i = 1; i < 8; i += 2) s += static_cast<float>(i);
    int sum = 0, prod = 1;
    for (int i = 0; i < 6; i += 3) sum += i, prod *= 2;
    for (int i = 0; i < 8; ++i) CHECK(out.at<float>({i}) == s + static_cast<float>(sum * 100 + prod));
  }

  TEST_CASE("control_flow: a traced while_loop and switch_ print as golden IR that reads back") {
    auto kernel = [](pl::Ref x, pl::Ref o) {
      pl::Value n = pl::while_loop([](pl::Value c) { return c < 100.0f; }, [](pl::Value c) { return c * 2.0f; }, x(0));
      o() = pl::switch_(pl::program_id(0), {[](const pl::Value& v) { return v; }, [](const pl::Value& v) { return -v; }},
                        x() + n);
    };
    auto call = pl::pallas_call(kernel, pl::GridSpec{.grid = {2}, .in_specs = {row_spec(4)}, .out_specs = {row_spec(4)}},
                                pl::ShapeDtype({8}, pl::f32));
    const std::string text = ir::print(call.traced({pl::Array::zeros({8}, pl::f32)}));
    testing::check_golden("control_flow.traced.ir", text);
    CHECK(ir::print(ir::parse(text)) == text);
  }

  TEST_CASE("control_flow: errors name the problem and the user's line") {
    int line = 0;
    try {
      trace1([&](pl::Ref x, pl::Ref o) {
        line = __LINE__ + 1;
        o() = pl::while_loop([](pl::Value c) { return c.sum() < 1.0f; }, [](pl::Value c) { return c.astype(pl::bf16); }, x());
      });
      FAIL("expected a UserError");
    } catch (const UserError& e) {
      CHECK(e.problem() == "pl::while_loop: the body returns a carry of another type than the initial one");
      CHECK(e.given() == "initial (8xf32), returned (8xbf16)");
      CHECK(e.loc().line == static_cast<uint32_t>(line));
    }
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) {
                           o() = pl::while_loop([](pl::Value c) { return c.sum() < 1.0f; }, [](pl::Value c) { return c.sum(); },
                                                x());
                         }),
                         Contains("pl::while_loop: the body returns a carry of another type"), UserError);
    // The condition must be one bool: not a block of them, not a number.
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) {
                           o() = pl::while_loop([](pl::Value c) { return c < 1.0f; }, [](pl::Value c) { return c; }, x());
                         }),
                         Contains("pl::while_loop: the condition must return a bool scalar"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) {
                           o() = pl::while_loop([](pl::Value c) { return c.sum(); }, [](pl::Value c) { return c; }, x());
                         }),
                         Contains("pl::while_loop: the condition must return a bool scalar"), UserError);
    try {
      trace1([&](pl::Ref x, pl::Ref o) {
        line = __LINE__ + 1;
        o() = pl::switch_(x().sum().astype(pl::i32), {[&] { return x(); }, [&] { return x(); }, [&] { return x().astype(pl::i32); }})
                  .astype(pl::f32);
      });
      FAIL("expected a UserError");
    } catch (const UserError& e) {
      CHECK(e.problem() == "pl::switch_: the branches return different types");
      CHECK(e.given() == "branch 0 returns (8xf32), branch 2 returns (8xi32)");
      CHECK(e.loc().line == static_cast<uint32_t>(line));
    }
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) {
                           o() = pl::switch_(x().sum(), {[&] { return x(); }, [&] { return -x(); }});
                         }),
                         Contains("pl::switch_ needs an integer scalar index"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) {
                           o() = x();
                           pl::switch_<void>(x().sum().astype(pl::i32), {});
                         }),
                         Contains("pl::switch_ needs at least one branch"), UserError);
  }
}
