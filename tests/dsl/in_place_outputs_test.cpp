// Output blocks written in place (docs/design.md §4.4): compiled code writes an output block of the
// kernel's grid where it lies in the output array when no copy could be told from none, the
// interpreter keeps its buffers. Each case checks which plan the compiled lowering chose and that
// both backends compute the same result, bit for bit, as the semantics say.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "jit/ir/printer.h"
#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;

namespace {

bool in_place(const std::string& lowered, int output) {
  return lowered.find(fmt::format("block_view \"output {}\"", output)) != std::string::npos;
}
bool copied(const std::string& lowered, int output) {
  return lowered.find(fmt::format("alloc \"output {} block\"", output)) != std::string::npos;
}

// Runs `make(backend)` on `args` compiled (on 1 and 2 threads) and interpreted, checks the results
// agree exactly, and returns the compiled call's lowered IR.
template <class Make>
std::string compare_backends(Make make, const std::vector<pl::Array>& args) {
  auto compiled = make(pl::CallOptions{});
  auto interpreted = make(testing::interpret());
  const std::vector<pl::Array> want = interpreted(args);
  for (int threads : {1, 2}) {
    INFO(threads << " threads");
    pl::set_num_threads(threads);
    const std::vector<pl::Array> got = compiled(args);
    REQUIRE(got.size() == want.size());
    for (size_t o = 0; o < got.size(); ++o) {
      INFO("output " << o);
      CHECK(pl::allclose(got[o], want[o], 0, 0));
    }
  }
  pl::set_num_threads(0);
  CHECK(copied(ir::print(interpreted.lowered(args)), 0));  // the interpreter keeps its copies
  return ir::print(compiled.lowered(args));
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("in-place outputs: accumulation over an arbitrary dim, rows split over threads") {
    // o[i] = 2 * sum_k x[i, k-block]: the output block stays while k runs, and accumulates in place.
    auto make = [](const pl::CallOptions& backend) { return testing::accumulate_over_k(8, 16, 4, 3, backend); };
    const pl::Array x = pl::Array::arange(32 * 48, pl::f32).reshape({32, 48});
    const std::string lowered = compare_backends(make, {x});
    CHECK(in_place(lowered, 0));
    const pl::Array out = make(pl::CallOptions{})(x)[0];
    for (int64_t r : {0, 13, 31})
      for (int64_t c : {0, 7, 15})
        CHECK(out.at<float>({r, c}) ==
              2.0f * (x.at<float>({r, c}) + x.at<float>({r, c + 16}) + x.at<float>({r, c + 32})));
  }

  TEST_CASE("in-place outputs: several outputs, the ones with partial edge blocks stay on the copy path") {
    // out 0 tiles its array (in place); out 1 has 10 rows in blocks of 4 (copied: writes past the
    // edge are dropped); out 2 is one block every step revisits (in place, accumulating).
    auto make = [](const pl::CallOptions& backend) {
      return pl::pallas_call(
          [](pl::Ref x, pl::Ref doubled, pl::Ref edge, pl::Ref total) {
            pl::when(pl::program_id(0) == 0, [&] { total() = pl::zeros_like(total); });
            doubled() = x() * 2.0f;
            edge() = x() + 1.0f;
            total() += x();
          },
          pl::GridSpec{.grid = {3},
                       .in_specs = {pl::BlockSpec({4, 8}, [](pl::Value i) { return pl::idx(i, 0); })},
                       .out_specs = {pl::BlockSpec({4, 8}, [](pl::Value i) { return pl::idx(i, 0); }),
                                     pl::BlockSpec({4, 8}, [](pl::Value i) { return pl::idx(i, 0); }),
                                     pl::BlockSpec({4, 8}, [](pl::Value) { return pl::idx(0, 0); })}},
          std::vector<pl::ShapeDtype>{pl::ShapeDtype({12, 8}, pl::f32), pl::ShapeDtype({10, 8}, pl::f32),
                                      pl::ShapeDtype({4, 8}, pl::f32)},
          backend);
    };
    const pl::Array x = pl::Array::arange(96, pl::f32).reshape({12, 8});
    const std::string lowered = compare_backends(make, {x});
    CHECK(in_place(lowered, 0));
    CHECK(copied(lowered, 1));
    CHECK_FALSE(in_place(lowered, 1));
    CHECK(in_place(lowered, 2));
    const std::vector<pl::Array> out = make(pl::CallOptions{})(x);
    CHECK(out[1].at<float>({9, 7}) == x.at<float>({9, 7}) + 1.0f);
    CHECK(out[2].at<float>({1, 2}) == x.at<float>({1, 2}) + x.at<float>({5, 2}) + x.at<float>({9, 2}));
  }

  TEST_CASE("in-place outputs: an output aliased to its input is copied, its revisits read what was written") {
    // Blocks 0, 1, 0, 1: each step reads the aliased array's block as the previous visit left it.
    auto make = [](const pl::CallOptions& backend) {
      pl::CallOptions options = backend;
      options.input_output_aliases = {{0, 0}};
      auto spec = pl::BlockSpec({4}, [](pl::Value, pl::Value j) { return pl::idx(j); });
      return pl::pallas_call([](pl::Ref x, pl::Ref o) { o() = x() + 1.0f; },
                             pl::GridSpec{.grid = {2, 2}, .in_specs = {spec}, .out_specs = {spec}},
                             std::vector<pl::ShapeDtype>{pl::ShapeDtype({8}, pl::f32)}, options);
    };
    const pl::Array x = pl::Array::arange(8, pl::f32);
    const std::string lowered = compare_backends(make, {x});
    CHECK(copied(lowered, 0));
    CHECK_FALSE(in_place(lowered, 0));
    CHECK(make(pl::CallOptions{})(x)[0].to_vector<float>() == std::vector<float>{2, 3, 4, 5, 6, 7, 8, 9});
  }

  TEST_CASE("in-place outputs: a non-consecutive revisit of an in-place block is still an error") {
    // Blocks 0, 1, 0, 1 of an output that tiles its array: written in place, checked like a copy.
    auto call = pl::pallas_call(
        [](pl::Ref o) { o() = pl::program_id(0).astype(pl::f32) + pl::zeros_like(o); },
        pl::GridSpec{.grid = {2, 2}, .out_specs = {pl::BlockSpec({2}, [](pl::Value, pl::Value j) { return pl::idx(j); })}},
        pl::ShapeDtype({4}, pl::f32));
    CHECK(in_place(ir::print(call.lowered({})), 0));
    CHECK_THROWS_WITH_AS(call(), doctest::Contains("output 0 is revisited non-consecutively"), RuntimeError);
    CHECK_THROWS_WITH_AS(call(), doctest::Contains("grid point (1, 0)"), RuntimeError);
  }
}
