// Masked loads and stores are bounds-checked lane by lane (docs/design.md §4.5): a window that
// reaches past its ref's edge is fine as long as the mask leaves out every lane past it; a lane the
// mask selects outside the ref is an error. Both backends, both copy modes, one and two cores.
#include <doctest/doctest.h>

#include <limits>
#include <string>

#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;
using doctest::Contains;

namespace {

constexpr int64_t kBlock = 8;

// Per block of 8 over 16 elements, with `shift` s (a scalar-prefetch value, so the window's start is
// known only when the kernel runs): o = 0 before s and 2 * x from s on, through a masked store of
// the window [s, s + 8); loaded = x[s:] then `100`, through a masked load of the same window of x.
// `extra` more lanes are selected than lie inside the block (0: none past the edge).
auto shifted(int64_t extra, const pl::CallOptions& backend) {
  pl::CallOptions options = backend;
  options.compiler_params.dimension_semantics = {pl::parallel};
  auto spec = pl::BlockSpec({kBlock}, [](pl::Value i, pl::Ref) { return pl::idx(i); });
  return pl::pallas_call(
      [extra](pl::Ref shift, pl::Ref x, pl::Ref o, pl::Ref loaded) {
        pl::Value s = shift[0];
        pl::Value inside = pl::iota({kBlock}, 0) < (s * -1 + (kBlock + extra));
        pl::Value v = pl::load(x.at(pl::ds(s, kBlock)), inside, 100.0f);
        loaded() = v;
        o() = pl::zeros_like(o);
        pl::store(o.at(pl::ds(s, kBlock)), v * 2.0f, inside);
      },
      pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1, .grid = {2}, .in_specs = {spec}, .out_specs = {spec, spec}},
      std::vector<pl::ShapeDtype>{pl::ShapeDtype({2 * kBlock}, pl::f32), pl::ShapeDtype({2 * kBlock}, pl::f32)}, options);
}

// Every combination a semantic test of the interpreter runs in: copy modes and core counts, and
// race detection, with the compiled backend once each.
template <class F>
void for_each_configuration(F body) {
  for (pl::DmaExecutionMode dma : {pl::DmaExecutionMode::eager, pl::DmaExecutionMode::on_wait})
    for (int cores : {1, 2})
      for (bool races : {false, true}) {
        pl::InterpretParams params;
        params.dma_execution_mode = dma;
        params.num_cores_or_threads = cores;
        params.detect_races = races;
        INFO("cores: " << cores << ", on_wait: " << (dma == pl::DmaExecutionMode::on_wait) << ", races: " << races);
        testing::for_each_backend(body, params);
      }
}

}  // namespace

TEST_SUITE("masked access") {
  TEST_CASE("masked access: lanes the mask leaves out may lie past the ref's edge, and nothing is touched there") {
    const pl::Array x = pl::Array::arange(2 * kBlock, pl::f32);
    for_each_configuration([&](const pl::CallOptions& backend) {
      for (int32_t s : {0, 3, 7}) {
        INFO("shift: " << s);
        std::vector<pl::Array> out = shifted(0, backend)(pl::Array::from_vector<int32_t>({s}, {1}), x);
        for (int64_t b = 0; b < 2; ++b)
          for (int64_t j = 0; j < kBlock; ++j) {
            const int64_t at = b * kBlock + j;
            CHECK(out[0].at<float>({at}) == (j < s ? 0.0f : 2.0f * x.at<float>({at})));
            CHECK(out[1].at<float>({at}) == (j < kBlock - s ? x.at<float>({at + s}) : 100.0f));
          }
        if (backend.interpret && backend.interpret->detect_races) CHECK(pl::race_reports().empty());
      }
    });
  }

  TEST_CASE("masked access: a lane the mask selects past the ref's edge is an error naming it") {
    const pl::Array x = pl::Array::arange(2 * kBlock, pl::f32);
    for_each_configuration([&](const pl::CallOptions& backend) {
      // Shift 3 with one lane too many selected: lane 5 of the window is element 8 of a block of 8.
      CHECK_THROWS_WITH_AS(shifted(1, backend)(pl::Array::from_vector<int32_t>({3}, {1}), x),
                           Contains("out-of-bounds masked load from `input 0 block`: a lane the mask selects is at "
                                    "element 8 in dimension 0 of a ref of shape (8,); valid elements are [0, 8). Lanes "
                                    "the mask leaves out may lie past the ref's edge, selected ones may not"),
                           RuntimeError);
    });
  }

  TEST_CASE("masked access: a masked store selecting a lane past the edge is an error, one left out before the start is not") {
    pl::CallOptions options;
    for_each_configuration([&](const pl::CallOptions& backend) {
      auto call = pl::pallas_call(
          [](pl::Ref shift, pl::Ref o) {
            pl::Value s = shift[0];
            o() = pl::zeros_like(o);
            // Lanes 0.. of the window [s, s + 4) selected while s + lane >= 0.
            pl::store(o.at(pl::ds(s, 4), pl::all), pl::full({4, 2}, 1.0f, pl::f32), pl::iota({4, 2}, 0) + s >= 0);
          },
          pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1, .out_specs = {pl::BlockSpec()}},
          pl::ShapeDtype({4, 2}, pl::f32), testing::with_backend(options, backend));
      // s = -2: lanes 0 and 1 reach rows -2 and -1, left out; rows 0 and 1 are written.
      pl::Array out = call(pl::Array::from_vector<int32_t>({-2}, {1}));
      CHECK(out.to_vector<float>() == std::vector<float>{1, 1, 1, 1, 0, 0, 0, 0});
      // s = 2: every lane selected, rows 4 and 5 lie past the edge.
      CHECK_THROWS_WITH_AS(call(pl::Array::from_vector<int32_t>({2}, {1})),
                           Contains("out-of-bounds masked store into `output 0 block`: a lane the mask selects is at element "
                                    "4 in dimension 0 of a ref of shape (4, 2); valid elements are [0, 4)"),
                           RuntimeError);
    });
  }
}

TEST_SUITE("masked access") {
  TEST_CASE("masked access: a window starting near INT64_MAX is checked lane by lane without overflow") {
    // ds(s, 8) at s = INT64_MAX - 2: lane 3 is past INT64_MAX. start + lane wrapped to INT64_MIN (signed
    // overflow in the interpreter) and the fault named element -9223372036854775808; now the position
    // saturates, and lanes the mask leaves out are never checked, however far off they are.
    constexpr int64_t s = std::numeric_limits<int64_t>::max() - 2;
    for_each_configuration([&](const pl::CallOptions& backend) {
      auto call = [&](int64_t lanes) {
        return pl::pallas_call(
            [lanes](pl::Ref shift, pl::Ref x, pl::Ref o) {
              pl::Value start = shift[0];
              o() = pl::load(x.at(pl::ds(start, kBlock)), pl::iota({kBlock}, 0) < lanes, -1.0f);
            },
            pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1, .in_specs = {pl::BlockSpec()}},
            pl::ShapeDtype({kBlock}, pl::f32), testing::with_backend({}, backend));
      };
      const pl::Array shift = pl::Array::from_vector<int64_t>({s}, {1});
      const pl::Array x = pl::Array::arange(kBlock, pl::f32);
      CHECK(call(0)(shift, x).to_vector<float>() == std::vector<float>(kBlock, -1.0f));
      CHECK_THROWS_WITH_AS(call(4)(shift, x),
                           Contains("out-of-bounds masked load from `input 0 block`: a lane the mask selects is at element "
                                    "9223372036854775805 in dimension 0"),
                           RuntimeError);
      // Lanes 0..2 are masked out: lane 3, the first selected, saturates.
      auto from_three = pl::pallas_call(
          [](pl::Ref shift, pl::Ref x, pl::Ref o) {
            pl::Value start = shift[0];
            o() = pl::load(x.at(pl::ds(start, kBlock)), pl::iota({kBlock}, 0) >= 3, -1.0f);
          },
          pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1, .in_specs = {pl::BlockSpec()}},
          pl::ShapeDtype({kBlock}, pl::f32), testing::with_backend({}, backend));
      CHECK_THROWS_WITH_AS(from_three(shift, x),
                           Contains("a lane the mask selects is at element 9223372036854775807 in dimension 0"),
                           RuntimeError);
    });
  }
}
