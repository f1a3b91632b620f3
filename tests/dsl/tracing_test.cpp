#include <doctest/doctest.h>
#include <fmt/format.h>

#include "jit/ir/printer.h"
#include "tests/support/golden.h"
#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;

namespace {


int kernel_line = 0;
void located_kernel(pl::Ref x, pl::Ref o) {
  kernel_line = __LINE__ + 1;
  o() = pl::exp(x());
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("tracing: ops record the user's source line") {
    auto call = pl::pallas_call(located_kernel, pl::GridSpec{}, pl::ShapeDtype({4}, pl::f32));
    const ir::Function& fn = call.traced({pl::Array::zeros({4}, pl::f32)});
    bool found = false;
    for (const ir::Op& op : fn.ops)
      if (op.kind == ir::OpKind::Exp) {
        found = true;
        CHECK(op.loc.line == static_cast<uint32_t>(kernel_line));
        CHECK(std::string(op.loc.file).find("tracing_test.cpp") != std::string::npos);
      }
    CHECK(found);
    std::string with_locations = ir::print(fn, {.locations = true});
    CHECK(with_locations.find(fmt::format("tracing_test.cpp:{}", kernel_line)) != std::string::npos);
  }

  TEST_CASE("tracing: identical pure expressions are traced once and unused loads vanish") {
    auto kernel = [](pl::Ref x, pl::Ref o) {
      pl::Value a = x() * 2.0f;
      pl::Value b = x() * 2.0f;  // a second load (loads are never merged), the same multiply shape
      o() = a + b;
      pl::Value unused = x();
      (void)unused;
    };
    auto call = pl::pallas_call(kernel, pl::GridSpec{}, pl::ShapeDtype({4}, pl::f32));
    std::string text = ir::print(call.traced({pl::Array::zeros({4}, pl::f32)}));
    testing::check_golden("hash_consing.traced.ir", text);
  }

  TEST_CASE("tracing: auto v = x() loads once, before later stores") {
    auto kernel = [](pl::Ref x, pl::Ref o) {
      auto before = x();     // a RefSlot: the loaded value
      x() = x() + 1.0f;      // writes the input block
      o() = before;          // still the value loaded first
    };
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      pl::Array x = pl::Array::from_vector<float>({1, 2}, {2});
      pl::Array out = pl::pallas_call(kernel, pl::GridSpec{}, pl::ShapeDtype({2}, pl::f32), backend)(x);
      CHECK(out.to_vector<float>() == std::vector<float>{1, 2});
      CHECK(x.to_vector<float>() == std::vector<float>{1, 2});  // the caller's array never changes
    });
  }

  TEST_CASE("tracing: the kernel is traced once per argument signature") {
    int traces = 0;
    auto kernel = [&](pl::Ref x, pl::Ref o) {
      ++traces;
      o() = x();
    };
    auto call = pl::pallas_call(kernel, pl::GridSpec{}, pl::ShapeDtype({4}, pl::f32), testing::interpret());
    call(pl::Array::zeros({4}, pl::f32));
    call(pl::Array::zeros({4}, pl::f32));
    CHECK(traces == 1);
    call(pl::Array::zeros({4}, pl::i32).astype(pl::f32));
    CHECK(traces == 1);
  }

  TEST_CASE("tracing: the call keeps its name and cost estimate") {
    auto call = pl::pallas_call([](pl::Ref x, pl::Ref o) { o() = x(); }, pl::GridSpec{}, pl::ShapeDtype({4}, pl::f32),
                                {.cost_estimate = pl::CostEstimate{.flops = 8, .bytes_accessed = 32}, .name = "copy"});
    REQUIRE(call.cost_estimate().has_value());
    CHECK(call.cost_estimate()->flops == 8);
    CHECK(call.cost_estimate()->bytes_accessed == 32);
    CHECK(call.name() == "copy");
    CHECK(call.traced({pl::Array::zeros({4}, pl::f32)}).name == "copy");
    auto unnamed = pl::pallas_call([](pl::Ref x, pl::Ref o) { o() = x(); }, pl::GridSpec{}, pl::ShapeDtype({4}, pl::f32));
    CHECK(unnamed.name() == "kernel");
    CHECK_FALSE(unnamed.cost_estimate().has_value());
  }

  TEST_CASE("tracing: C++ bools and literal conditions are applied while tracing") {
    auto kernel = [](pl::Ref x, pl::Ref o) {
      o() = x();
      pl::when(false, [&] { o() = x() * 2.0f; });
      pl::when(true, [&] { o() = x() + 1.0f; });
      pl::Value r = pl::cond(1, [&] { return x() * 3.0f; }, [&] { return x(); });
      o() = o() + r;
    };
    auto call = pl::pallas_call(kernel, pl::GridSpec{}, pl::ShapeDtype({2}, pl::f32), testing::interpret());
    pl::Array x = pl::Array::from_vector<float>({1, 2}, {2});
    CHECK(call(x).to_vector<float>() == std::vector<float>{5, 9});
    std::string text = ir::print(call.traced({x}));
    CHECK(text.find("if") == std::string::npos);
  }
}
