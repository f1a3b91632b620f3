// Block dims besides plain blocks (docs/design.md §4.1-2): pl::Element (the index map returns an
// element offset, into the array padded as asked) and pl::BoundedSlice (the index map returns
// pl::ds(start, size) with size <= the bound known when the kernel runs), in pallas_call and in
// emit_pipeline, in both backends (compiled, checked against the interpreter; interpreted with race
// detection), against plain C++ references; their golden IR; and what is rejected.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

#include "jit/ir/parser.h"
#include "jit/ir/printer.h"
#include "tests/support/golden.h"
#include "tests/support/kernels.h"
#include "tests/support/user_error.h"

using namespace tessera;
namespace pl = tessera;

namespace {

// testing::for_each_checked_backend with this file's schedule seed.
template <class F>
void for_each_checked_backend(F body) {
  testing::for_each_checked_backend(body, 3);
}

constexpr int64_t kN = 37;    // an odd length: the last output block is partial
constexpr int64_t kOut = 8;   // output block
constexpr int64_t kWin = 10;  // input window: the block and one element either side

// A 3-tap convolution with zero padding: o[i] = x[i-1] + 2 x[i] + 3 x[i+1], x zero outside [0, kN).
// The input window of output block i is pl::Element(10, {1, 1}) at element offset 8 i of the padded
// array, so it covers x[8i - 1, 8i + 9); padding reads as uninitialised memory, so the kernel masks
// the elements outside the array itself.
void conv_body(const pl::Value& first, pl::Ref x, pl::Ref o) {
  const pl::Value at = pl::iota({kWin}, 0) + first;  // the array index of each window element
  const pl::Value v = pl::where((at >= 0) && (at < kN), x(), 0.0f);
  const pl::Value lo = v(pl::ds(0, kOut));
  const pl::Value mid = v(pl::ds(1, kOut));
  const pl::Value hi = v(pl::ds(2, kOut));
  o() = lo + mid * 2.0f + hi * 3.0f;
}

std::vector<float> conv_reference(const std::vector<float>& x) {
  auto at = [&](int64_t i) { return i < 0 || i >= kN ? 0.0f : x[static_cast<size_t>(i)]; };
  std::vector<float> out(kN);
  for (int64_t i = 0; i < kN; ++i) out[static_cast<size_t>(i)] = at(i - 1) + 2 * at(i) + 3 * at(i + 1);
  return out;
}

auto conv_call(const pl::CallOptions& options) {
  return pl::pallas_call(
      [](pl::Ref x, pl::Ref o) { conv_body(pl::program_id(0) * kOut - 1, x, o); },
      pl::GridSpec{.grid = {(kN + kOut - 1) / kOut},
                   .in_specs = {pl::BlockSpec({pl::Element(kWin, {1, 1})}, [](pl::Value i) { return pl::idx(i * kOut); })},
                   .out_specs = {pl::BlockSpec({kOut}, [](pl::Value i) { return pl::idx(i); })}},
      pl::ShapeDtype({kN}, pl::f32), options);
}

// Ragged rows: group g is rows [starts[g], starts[g] + sizes[g]) of a (21, 4) array, sizes <= 8; an
// emit_pipeline over the groups doubles each group's rows through pl::BoundedSlice(8) blocks in and
// out, so only the group's own rows are read and written back.
constexpr int64_t kRows = 21, kCols = 4, kBound = 8;

auto ragged_call(const pl::CallOptions& options, int64_t groups, int64_t buffers = 2) {
  auto kernel = [groups, buffers](pl::Ref starts, pl::Ref sizes, pl::Ref x_hbm, pl::Ref o_hbm) {
    auto map = [&](pl::Value g) { return pl::idx(pl::ds(starts[g], sizes[g]), 0); };
    pl::emit_pipeline([](pl::Ref x, pl::Ref o) { o() = x() * 2.0f + 1.0f; },
                      {.grid = {groups},
                       .in_specs = {pl::BlockSpec({pl::BoundedSlice(kBound), kCols}, map, pl::Buffered(buffers))},
                       .out_specs = {pl::BlockSpec({pl::BoundedSlice(kBound), kCols}, map)}})(x_hbm, o_hbm);
  };
  return pl::pallas_call(kernel,
                         pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 2,
                                                    .in_specs = {pl::BlockSpec(pl::ANY)},
                                                    .out_specs = {pl::BlockSpec(pl::ANY)}},
                         pl::ShapeDtype({kRows, kCols}, pl::f32), options);
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("block dims: pl::Element with padding gives a pallas_call overlapping windows (a convolution)") {
    const pl::Array x = pl::Array::arange(kN, pl::f32);
    const std::vector<float> expected = conv_reference(x.to_vector<float>());
    for_each_checked_backend([&](const pl::CallOptions& options) {
      CHECK(conv_call(options)(x).to_vector<float>() == expected);
    });
  }

  TEST_CASE("block dims: pl::Element windows in emit_pipeline, double-buffered") {
    // Overlapping windows without padding: o block i (4 elements) sums three shifted views of the
    // 6-element window at element offset 4 i of x, windows [0, 6) .. [20, 26) of a 30-element x.
    constexpr int64_t n = 30, ob = 4, win = 6, blocks = 6;
    auto kernel = [](pl::Ref x_hbm, pl::Ref o_hbm) {
      pl::emit_pipeline(
          [](pl::Ref x, pl::Ref o) {
            const pl::Value v = x();
            o() = v(pl::ds(0, ob)) + v(pl::ds(1, ob)) + v(pl::ds(2, ob));
          },
          {.grid = {blocks},
           .in_specs = {pl::BlockSpec({pl::Element(win)}, [](pl::Value i) { return pl::idx(i * ob); })},
           .out_specs = {pl::BlockSpec({ob}, [](pl::Value i) { return pl::idx(i); })}})(x_hbm, o_hbm);
    };
    const pl::Array x = pl::Array::arange(n, pl::f32);
    std::vector<float> expected(blocks * ob);
    for (int64_t i = 0; i < blocks * ob; ++i) expected[static_cast<size_t>(i)] = static_cast<float>(3 * i + 3);
    for_each_checked_backend([&](const pl::CallOptions& options) {
      auto call = pl::pallas_call(kernel, pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)}, .out_specs = {pl::BlockSpec(pl::ANY)}},
                                  pl::ShapeDtype({blocks * ob}, pl::f32), options);
      CHECK(call(x).to_vector<float>() == expected);
    });
  }

  TEST_CASE("block dims: pl::BoundedSlice reads and writes only each group's rows") {
    // Groups of 5, 8, 0, 3 and 5 rows (an empty group copies nothing), with one and two buffers.
    const std::vector<int32_t> sizes{5, 8, 0, 3, 5}, starts{0, 5, 13, 13, 16};
    const pl::Array x = testing::ramp(kRows, kCols);
    std::vector<float> expected;
    for (float v : x.to_vector<float>()) expected.push_back(v * 2 + 1);
    for (int64_t buffers : {1, 2}) {
      INFO("buffers: " << buffers);
      for_each_checked_backend([&](const pl::CallOptions& options) {
        const pl::Array out = ragged_call(options, 5, buffers)(pl::Array::from_vector(starts, {5}),
                                                               pl::Array::from_vector(sizes, {5}), x);
        CHECK(out.to_vector<float>() == expected);
      });
    }
  }

  TEST_CASE("block dims: rows a BoundedSlice does not cover are neither read nor written") {
    // Two groups cover rows [2, 5) and [9, 16). In the interpreter the output's other rows keep the
    // poison of memory nobody wrote (NaN), so no block wrote back past its slice; compiled, they are
    // unspecified (so not compared with the interpreter's) and the covered rows are checked.
    const std::vector<int32_t> sizes{3, 7}, starts{2, 9};
    const pl::Array x = testing::ramp(kRows, kCols);
    pl::InterpretParams races;
    races.detect_races = true;
    for (const testing::Backend& backend : testing::backends(races)) {
      INFO("backend: " << std::string(backend.name));
      const bool interpreted = std::string(backend.name) == "interpret";
      const pl::Array out =
          ragged_call(backend.options, 2)(pl::Array::from_vector(starts, {2}), pl::Array::from_vector(sizes, {2}), x);
      for (int64_t r = 0; r < kRows; ++r) {
        const bool covered = (r >= 2 && r < 5) || (r >= 9 && r < 16);
        for (int64_t c = 0; c < kCols; ++c) {
          INFO("row " << r << ", col " << c);
          if (covered) CHECK(out.at<float>({r, c}) == x.at<float>({r, c}) * 2 + 1);
          else if (interpreted) CHECK(std::isnan(out.at<float>({r, c})));
        }
      }
      CHECK(pl::race_reports().empty());
    }
  }

  TEST_CASE("block dims: golden IR of Element and BoundedSlice pipelines") {
    auto conv = conv_call(pl::CallOptions{.name = "element_conv"});
    const std::vector<pl::Array> conv_args{pl::Array::zeros({kN}, pl::f32)};
    testing::check_golden("element_conv.traced.ir", ir::print(conv.traced(conv_args)));
    testing::check_golden("element_conv.lowered.ir", ir::print(conv.lowered(conv_args)));
    auto ragged = ragged_call(pl::CallOptions{.name = "bounded_slice"}, 2);
    const std::vector<pl::Array> ragged_args{pl::Array::from_vector(std::vector<int32_t>{0, 8}, {2}),
                                             pl::Array::from_vector(std::vector<int32_t>{8, 8}, {2}),
                                             pl::Array::zeros({kRows, kCols}, pl::f32)};
    testing::check_golden("bounded_slice.traced.ir", ir::print(ragged.traced(ragged_args)));
    testing::check_golden("bounded_slice.lowered.ir", ir::print(ragged.lowered(ragged_args)));
    // The printed IR parses back to the same functions.
    for (const ir::Function& f : {conv.traced(conv_args), conv.lowered(conv_args), ragged.traced(ragged_args),
                                  ragged.lowered(ragged_args)})
      CHECK(ir::print(ir::parse(ir::print(f))) == ir::print(f));
  }

  TEST_CASE("block dims: an Element offset outside the padded array is a RuntimeError at the BlockSpec's line") {
    for_each_checked_backend([&](const pl::CallOptions& options) {
      // Offset 12 i: block 3 asks for offset 36, but the array padded by (1, 1) has 39 elements, so
      // 36 is valid; block 4 asks for 48.
      const int line = __LINE__ + 4;
      auto call = pl::pallas_call(
          [](pl::Ref x, pl::Ref o) { o() = x(pl::ds(0, kOut)); },
          pl::GridSpec{.grid = {5},
                       .in_specs = {pl::BlockSpec({pl::Element(kWin, {1, 1})}, [](pl::Value i) { return pl::idx(i * 12); })},
                       .out_specs = {pl::BlockSpec({kOut}, [](pl::Value i) { return pl::idx(i); })}},
          pl::ShapeDtype({40}, pl::f32), options);
      try {
        call(pl::Array::arange(kN, pl::f32));
        FAIL("expected a RuntimeError");
      } catch (const RuntimeError& e) {
        CHECK_MESSAGE(e.problem().find("dimension 0 is a pl::Element dim and its index map returned element offset 48, but "
                                       "the array padded by (1, 1) has 39 elements there (shape (37,)); valid offsets are "
                                       "[0, 39)") != std::string::npos,
                      e.problem());
        CHECK(std::string(e.loc().file).find("block_dims_test.cpp") != std::string::npos);
        CHECK(e.loc().line == static_cast<uint32_t>(line));
      }
    });
  }

  TEST_CASE("block dims: a BoundedSlice size over its bound, or a slice past the array, is a RuntimeError") {
    for_each_checked_backend([&](const pl::CallOptions& options) {
      auto call = ragged_call(options, 2);
      auto run = [&](std::vector<int32_t> starts, std::vector<int32_t> sizes) {
        call(pl::Array::from_vector(starts, {2}), pl::Array::from_vector(sizes, {2}), pl::Array::zeros({kRows, kCols}, pl::f32));
      };
      // Each is a RuntimeError whose problem contains `text`, at this file's BlockSpec.
      auto expect_error = [&](std::vector<int32_t> starts, std::vector<int32_t> sizes, const std::string& text) {
        try {
          run(std::move(starts), std::move(sizes));
          FAIL("expected a RuntimeError");
        } catch (const RuntimeError& e) {
          CHECK_MESSAGE(e.problem().find(text) != std::string::npos, e.problem());
          CHECK(std::string(e.loc().file).find("block_dims_test.cpp") != std::string::npos);
        }
      };
      expect_error({0, 8}, {8, 9},
                   "the pl::BoundedSlice of dimension 0 has bound 8, but its index map returned pl::ds(8, 9), whose size "
                   "is over the bound");
      expect_error({0, 16}, {8, 6},
                   "the index map returned pl::ds(16, 6) for dimension 0 (a pl::BoundedSlice), but the array has shape "
                   "(21, 4); the slice must lie in [0, 21)");
    });
  }

  TEST_CASE("block dims: pl::Buffered(n, true) looks ahead past revisited blocks, in emit_pipeline and pallas_call") {
    // Step t reads input block ids[t] (runs of revisits, a non-consecutive revisit of block 0, a
    // partial last block of x) and writes o block t = x block * 2 + t.
    const std::vector<int32_t> ids{0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 0, 0, 4, 4};
    const int64_t steps = static_cast<int64_t>(ids.size()), n = 37, b = 8;
    const pl::Array x = pl::Array::arange(n, pl::f32);
    std::vector<float> expected;
    for (int64_t t = 0; t < steps; ++t)
      for (int64_t e = 0; e < b; ++e) {
        const int64_t src = ids[static_cast<size_t>(t)] * b + e;
        // Past x's end the block holds poison; the kernel zeroes it by the iota mask below.
        expected.push_back(src < n ? static_cast<float>(src) * 2 + static_cast<float>(t) : static_cast<float>(t));
      }
    auto body = [n, b](pl::Ref xb, pl::Ref o, const pl::Value& block, const pl::Value& t) {
      const pl::Value at = pl::iota({b}, 0) + block * static_cast<int32_t>(b);
      o() = pl::where(at < n, xb(), 0.0f) * 2.0f + t.astype(pl::f32);
    };
    for (int64_t buffers : {2, 3, 5}) {
      INFO("buffers: " << buffers);
      for_each_checked_backend([&](const pl::CallOptions& options) {
        // emit_pipeline inside a kernel.
        auto nested = pl::pallas_call(
            [&](pl::Ref table, pl::Ref x_hbm, pl::Ref o_hbm) {
              pl::emit_pipeline(
                  [&](pl::Ref xb, pl::Ref o) { body(xb, o, table[pl::program_id(0)], pl::program_id(0)); },
                  {.grid = {steps},
                   .in_specs = {pl::BlockSpec({b}, [&](pl::Value t) { return pl::idx(table[t]); }, pl::Buffered(buffers, true))},
                   .out_specs = {pl::BlockSpec({b}, [](pl::Value t) { return pl::idx(t); })}})(x_hbm, o_hbm);
            },
            pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1, .in_specs = {pl::BlockSpec(pl::ANY)}, .out_specs = {pl::BlockSpec(pl::ANY)}},
            pl::ShapeDtype({steps * b}, pl::f32), options);
        CHECK(nested(pl::Array::from_vector(ids, {steps}), x).to_vector<float>() == expected);
        // The kernel's own grid.
        auto own = pl::pallas_call(
            [&](pl::Ref table, pl::Ref xb, pl::Ref o) { body(xb, o, table[pl::program_id(0)], pl::program_id(0)); },
            pl::PrefetchScalarGridSpec{
                .num_scalar_prefetch = 1,
                .grid = {steps},
                .in_specs = {pl::BlockSpec({b}, [](pl::Value t, pl::Ref table) { return pl::idx(table[t]); },
                                           pl::Buffered(buffers, true))},
                .out_specs = {pl::BlockSpec({b}, [](pl::Value t, pl::Ref) { return pl::idx(t); })}},
            pl::ShapeDtype({steps * b}, pl::f32), options);
        CHECK(own(pl::Array::from_vector(ids, {steps}), x).to_vector<float>() == expected);
      });
    }
  }

  TEST_CASE("block dims: golden IR of a lookahead input") {
    auto call = pl::pallas_call(
        [](pl::Ref, pl::Ref xb, pl::Ref o) { o() = xb(); },
        pl::PrefetchScalarGridSpec{
            .num_scalar_prefetch = 1,
            .grid = {4},
            .in_specs = {pl::BlockSpec({8}, [](pl::Value t, pl::Ref table) { return pl::idx(table[t]); }, pl::Buffered(2, true))},
            .out_specs = {pl::BlockSpec({8}, [](pl::Value t, pl::Ref) { return pl::idx(t); })}},
        pl::ShapeDtype({32}, pl::f32), pl::CallOptions{.name = "lookahead"});
    // x has a partial last block, so its blocks are copied (not read in place) and the ring shows.
    const std::vector<pl::Array> args{pl::Array::from_vector(std::vector<int32_t>{0, 0, 1, 2}, {4}), pl::Array::zeros({36}, pl::f32)};
    testing::check_golden("lookahead.traced.ir", ir::print(call.traced(args)));
    testing::check_golden("lookahead.lowered.ir", ir::print(call.lowered(args)));
    CHECK(ir::print(ir::parse(ir::print(call.traced(args)))) == ir::print(call.traced(args)));
  }

  TEST_CASE("block dims: what is rejected when tracing") {
    auto copy = [](pl::Ref x, pl::Ref o) { o() = x(); };
    auto trace = [&](pl::BlockSpec in, pl::BlockSpec out) {
      pl::pallas_call(copy, pl::GridSpec{.grid = {2}, .in_specs = {std::move(in)}, .out_specs = {std::move(out)}},
                      pl::ShapeDtype({16}, pl::f32))(pl::Array::zeros({16}, pl::f32));
    };
    auto blocks = [](pl::Value i) { return pl::idx(i); };
    const pl::BlockSpec plain({8}, blocks);
    // A BoundedSlice dim given a block index, and a plain dim given a slice.
    testing::check_user_error([&] { trace(pl::BlockSpec({pl::BoundedSlice(8)}, blocks), plain); },
                              "pallas_call `kernel`: the index map of input 0 returns an index for a pl::BoundedSlice dim",
                              "an index at position 0, whose block dim is pl::BoundedSlice(8)",
                              "return pl::ds(start, size) for a BoundedSlice dim, size <= the bound", "block_dims_test.cpp");
    testing::check_user_error(
        [&] { trace(pl::BlockSpec({8}, [](pl::Value i) { return pl::idx(pl::ds(i * 8, 8)); }), plain); },
        "pallas_call `kernel`: the index map of input 0 returns a slice for a dim that is not a pl::BoundedSlice",
        "pl::ds(...) at position 0",
        "return a block index (or an element offset for pl::Element), or make the block dim pl::BoundedSlice(n)",
        "block_dims_test.cpp");
    // A static size over the bound.
    testing::check_user_error(
        [&] { trace(pl::BlockSpec({pl::BoundedSlice(8)}, [](pl::Value i) { return pl::idx(pl::ds(i * 8, 9)); }), plain); },
        "pallas_call `kernel`: the index map of input 0 returns a slice over its pl::BoundedSlice bound",
        "pl::ds(..., 9) at position 0, whose bound is 8", "return a size in [0, 8], or raise the bound",
        "block_dims_test.cpp");
    // Negative Element padding.
    testing::check_user_error([&] { trace(pl::BlockSpec({pl::Element(8, {-1, 0})}, blocks), plain); },
                              "pallas_call `kernel`: the pl::Element padding of input 0 must be >= 0",
                              "padding (-1, 0) in block dim 0", "pad by zero or more elements before and after the array",
                              "block_dims_test.cpp");
    // Buffered(0), and lookahead on an output (Pallas: "Output buffering does not support lookahead").
    testing::check_user_error([&] { trace(pl::BlockSpec({8}, blocks, pl::Buffered(0)), plain); },
                              "pallas_call `kernel`: input 0 asks for 0 block buffers", "pl::Buffered(0) on an input",
                              "use pl::Buffered(n) with n >= 1", "block_dims_test.cpp");
    testing::check_user_error([&] { trace(plain, pl::BlockSpec({8}, blocks, pl::Buffered(2, true))); },
                              "pallas_call `kernel`: output 0 asks for lookahead, which outputs do not support",
                              "pl::Buffered(2, true) on an output",
                              "drop use_lookahead on the output; it fetches inputs ahead, and outputs are only written back",
                              "block_dims_test.cpp");
    testing::check_user_error([&] { trace(pl::BlockSpec({8}, blocks, pl::Buffered(1, true)), plain); },
                              "pallas_call `kernel`: input 0 asks for lookahead with 1 block buffer",
                              "pl::Buffered(1, true)",
                              "use pl::Buffered(n, true) with n >= 2: lookahead fills the buffers the current block does not use",
                              "block_dims_test.cpp");
  }
}
