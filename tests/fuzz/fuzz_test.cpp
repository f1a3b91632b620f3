// The short seeded run of the random-program fuzzer (tests/fuzz/random_program.h): every program of
// a fixed range of seeds must give the same result compiled and interpreted. The long run is
// tessera_fuzz (tests/fuzz/fuzz_main.cpp, README "Testing").
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tests/fuzz/differential.h"

using namespace tessera;
namespace pl = tessera;

namespace {
constexpr uint64_t kFirstSeed = 1;
constexpr int64_t kSeeds = 40;

// How many of the program's nodes are `kind` (with the op named `op`, for op nodes).
int count(const fuzz::Program& p, fuzz::Node kind, const std::string& op = "") {
  return static_cast<int>(std::count_if(p.nodes.begin(), p.nodes.end(), [&](const fuzz::Expr& e) {
    if (e.kind != kind) return false;
    if (kind == fuzz::Node::unary) return op.empty() || op == fuzz::unary_ops()[static_cast<size_t>(e.op)].name;
    return true;
  }));
}

bool uses_tanh(const fuzz::Program& p) { return fuzz::to_text(p).find("pl::tanh(") != std::string::npos; }

// The first program from seed 1 on that `wanted` accepts.
template <class F>
fuzz::Program first_program(F wanted) {
  for (uint64_t s = 1;; ++s)
    if (fuzz::Program p = fuzz::generate(s); wanted(p)) return p;
}

// A failure planted in every program that uses pl::tanh: the backends are never run.
fuzz::Verdict planted_tanh(const fuzz::Program& p) {
  if (uses_tanh(p)) return {fuzz::Verdict::differ, "planted: the program uses pl::tanh"};
  return {};
}
}  // namespace

TEST_SUITE("fuzz") {
  TEST_CASE("fuzz: random programs agree compiled and interpreted") {
    int failures = fuzz::run_seeds(kFirstSeed, kSeeds, [](const std::string& reproducer) { FAIL_CHECK(reproducer); });
    CHECK(failures == 0);
  }

  TEST_CASE("fuzz: a seed makes one program, and the short run covers every kind of program") {
    CHECK(fuzz::to_text(fuzz::generate(7)) == fuzz::to_text(fuzz::generate(7)));
    CHECK(fuzz::to_text(fuzz::generate(7)) != fuzz::to_text(fuzz::generate(8)));
    int dots = 0, tiled = 0, partial = 0, whens = 0, staged = 0, prefetched = 0, empty = 0;
    int kinds[static_cast<int>(fuzz::Node::switch_) + 1] = {};
    for (uint64_t s = kFirstSeed; s < kFirstSeed + kSeeds; ++s) {
      fuzz::Program p = fuzz::generate(s);
      dots += p.is_dot;
      tiled += p.tiled_k;
      partial += p.rows % p.block_rows != 0 || p.cols % p.block_cols != 0;
      whens += p.overwrite >= 0;
      staged += p.staged;
      prefetched += p.prefetched;
      // A zero-size array: a grid with a zero dim, an empty result.
      empty += p.rows * p.cols == 0 && p.grid()[0] * p.grid()[1] == 0;
      for (const fuzz::Expr& e : p.nodes) ++kinds[static_cast<int>(e.kind)];
    }
    CHECK(dots > 0);
    CHECK(tiled > 0);
    CHECK(partial > 0);
    CHECK(whens > 0);
    CHECK(staged > 0);
    CHECK(prefetched > 0);
    CHECK(empty > 0);
    for (int k = 0; k <= static_cast<int>(fuzz::Node::switch_); ++k) {
      INFO("node kind " << k);
      CHECK(kinds[k] > 0);
    }
  }

  TEST_CASE("fuzz: a program prints as DSL text naming its seed, shapes, grid and kernel body") {
    for (uint64_t s = kFirstSeed; s < kFirstSeed + 10; ++s) {
      fuzz::Program p = fuzz::generate(s);
      std::string text = fuzz::to_text(p);
      CHECK(text.find("seed " + std::to_string(s)) != std::string::npos);
      CHECK(text.find("grid (") != std::string::npos);
      CHECK(text.find(p.is_dot ? "pl::dot(x(), y()" : "o() = (") != std::string::npos);
    }
  }

  TEST_CASE("fuzz: the shrinker keeps what fails and drops the rest of the program") {
    // A big program with pl::tanh, an overwrite and scratch staging; failing is using pl::tanh.
    fuzz::Program p = first_program([](const fuzz::Program& q) {
      return !q.is_dot && q.nodes.size() >= 15 && q.overwrite >= 0 && q.staged && uses_tanh(q);
    });
    fuzz::Program small = fuzz::shrink(p, uses_tanh);
    INFO(fuzz::to_text(small));
    CHECK(small.seed == p.seed);
    CHECK(count(small, fuzz::Node::unary, "pl::tanh") == 1);
    CHECK(small.overwrite == -1);
    CHECK_FALSE(small.staged);
    // tanh of a constant, cast to the root's type when that differs from tanh's.
    CHECK(small.nodes.size() <= 3);
    CHECK(count(small, fuzz::Node::constant) == 1);
    for (fuzz::Node k : {fuzz::Node::binary, fuzz::Node::select, fuzz::Node::reduce, fuzz::Node::loop,
                         fuzz::Node::cond, fuzz::Node::while_loop, fuzz::Node::switch_, fuzz::Node::x, fuzz::Node::y})
      CHECK(count(small, k) == 0);
    // A failure that nothing smaller keeps is the program itself.
    fuzz::Program same = fuzz::shrink(small, uses_tanh);
    CHECK(fuzz::to_text(same) == fuzz::to_text(small));
    // The verdict form: failing the same way under the checker.
    fuzz::Program by_verdict = fuzz::shrink(p, planted_tanh(p), planted_tanh);
    CHECK(fuzz::to_text(by_verdict) == fuzz::to_text(small));
  }

  TEST_CASE("fuzz: the reproducer names the seed and is the shrunk program's DSL text") {
    fuzz::Program p = first_program([](const fuzz::Program& q) { return !q.is_dot && q.nodes.size() >= 10 && uses_tanh(q); });
    const fuzz::Verdict failure = planted_tanh(p);
    const std::string text = fuzz::reproducer(p, failure, planted_tanh);
    const std::string seed = std::to_string(p.seed);
    CHECK(text.find("seed " + seed) != std::string::npos);
    CHECK(text.find("tessera_fuzz --seed " + seed + " --count 1") != std::string::npos);
    CHECK(text.find("planted: the program uses pl::tanh") != std::string::npos);
    CHECK(text.find(fuzz::to_text(fuzz::shrink(p, uses_tanh))) != std::string::npos);
    CHECK(text.find(fuzz::to_text(p)) == std::string::npos);  // the program as generated is not what is shown
    CHECK(text.find("its traced IR:") != std::string::npos);
    CHECK(text.find("tracing failed") == std::string::npos);
  }

  TEST_CASE("fuzz: a run whose comparison reports a mismatch gives each failure's reproducer") {
    // The backends really run; the checker turns their agreement on every dot into a mismatch.
    auto mismatch_on_dots = [](const fuzz::Program& p) {
      fuzz::Verdict v = fuzz::check(p);
      REQUIRE(v.kind == fuzz::Verdict::agree);
      if (p.is_dot) return fuzz::Verdict{fuzz::Verdict::differ, "element (0, 0): compiled 1, interpreted 2 (planted)"};
      return v;
    };
    // Three seeds around the first dot: the run stays short, since the shrinker runs the backends too.
    const uint64_t first = first_program([](const fuzz::Program& q) { return q.is_dot; }).seed - 1;
    constexpr int64_t n = 3;
    std::vector<uint64_t> dots;
    for (uint64_t s = first; s < first + n; ++s)
      if (fuzz::generate(s).is_dot) dots.push_back(s);
    REQUIRE(!dots.empty());
    std::vector<std::string> reproducers;
    const int failures =
        fuzz::run_seeds(first, n, [&](const std::string& r) { reproducers.push_back(r); }, mismatch_on_dots);
    CHECK(failures == static_cast<int>(dots.size()));
    REQUIRE(reproducers.size() == dots.size());
    for (size_t i = 0; i < dots.size(); ++i) {
      INFO(reproducers[i]);
      CHECK(reproducers[i].find("disagree on the program of seed " + std::to_string(dots[i]) + " ") != std::string::npos);
      CHECK(reproducers[i].find("compiled 1, interpreted 2 (planted)") != std::string::npos);
      CHECK(reproducers[i].find("pl::dot(x(), y()") != std::string::npos);
    }
  }

  TEST_CASE("fuzz: the shrinker takes the grid, the blocks and the control flow down to what fails") {
    // Failing is having a fori_loop: one 1x1 block, the loop of two constants, nothing else.
    auto uses_loop = [](const fuzz::Program& q) { return count(q, fuzz::Node::loop) > 0; };
    fuzz::Program p = first_program([&](const fuzz::Program& q) {
      return !q.is_dot && uses_loop(q) && count(q, fuzz::Node::cond) + count(q, fuzz::Node::select) > 0 &&
             q.grid()[0] * q.grid()[1] >= 4 && (q.reversed || q.transposed_grid) && q.parallel_axes > 0;
    });
    fuzz::Program small = fuzz::shrink(p, uses_loop);
    INFO(fuzz::to_text(small));
    CHECK(small.rows == 1);
    CHECK(small.cols == 1);
    CHECK(small.grid() == std::vector<int64_t>{1, 1});
    CHECK(count(small, fuzz::Node::loop) == 1);
    CHECK(count(small, fuzz::Node::cond) == 0);
    CHECK(count(small, fuzz::Node::select) == 0);
    // The loop (stored, or in the pl::when overwrite where it was) of one trip over two constants,
    // cast when its type is not the stored one; a constant stored beside a kept overwrite.
    CHECK(count(small, fuzz::Node::cast) <= 1);
    CHECK(count(small, fuzz::Node::constant) == (small.overwrite >= 0 ? 3 : 2));
    CHECK(small.nodes.size() == 1 + count(small, fuzz::Node::cast) + count(small, fuzz::Node::constant));
    for (const fuzz::Expr& e : small.nodes)
      if (e.kind == fuzz::Node::loop) CHECK(e.value == 1);
    CHECK_FALSE(small.reversed);
    CHECK_FALSE(small.transposed_grid);
    CHECK(small.parallel_axes == 0);
    CHECK(small.interpret_cores == 1);
    CHECK(small.x_buffers == 1);

    // Failing is a partial edge block along the rows: 3 rows in blocks of 2, one column, one node.
    fuzz::Program q = first_program([](const fuzz::Program& r) { return !r.is_dot && r.rows % r.block_rows != 0 && r.rows > 20; });
    fuzz::Program partial = fuzz::shrink(q, [](const fuzz::Program& r) { return r.rows % r.block_rows != 0; });
    INFO(fuzz::to_text(partial));
    CHECK(partial.rows == 3);
    CHECK(partial.block_rows == 2);
    CHECK(partial.cols == 1);
    CHECK(partial.block_cols == 1);
    CHECK(partial.nodes.size() == 1);

    // Failing is three or more steps along the first grid axis: exactly three steps of one element.
    fuzz::Program steps = fuzz::shrink(q, [](const fuzz::Program& r) { return r.grid()[0] >= 3; });
    INFO(fuzz::to_text(steps));
    CHECK(steps.grid() == std::vector<int64_t>{3, 1});
    CHECK(steps.block_rows * steps.block_cols == 1);
  }

  TEST_CASE("fuzz: the shrinker takes a dot down to the k steps that fail") {
    // Failing is a k tiled in two or more steps: two k steps of one element, one 1x1 output block.
    fuzz::Program p = first_program([](const fuzz::Program& q) { return q.is_dot && q.tiled_k && q.depth / q.block_depth >= 3 && q.block_depth > 1; });
    fuzz::Program small = fuzz::shrink(p, [](const fuzz::Program& q) { return q.tiled_k && q.depth / q.block_depth >= 2; });
    INFO(fuzz::to_text(small));
    CHECK(small.tiled_k);
    CHECK(small.depth == 2);
    CHECK(small.block_depth == 1);
    CHECK(small.grid() == std::vector<int64_t>{1, 1, 2});
  }

  TEST_CASE("fuzz: found by the fuzzer, min and max keep -0 below +0 beside an integer converted to float") {
    // Seed 1002326: in the branch where 3 - program_id(1) <= 0, min(y, that index as f64) with y
    // = -0 gave +0 compiled. LLVM knew the converted integer is never -0 and took a select between
    // equal operands as free to return either. Rule 13: min(-0, +0) = -0, max(-0, +0) = +0.
    for (pl::DType dtype : {pl::f16, pl::f32, pl::f64}) {
      for (bool is_min : {true, false}) {
        auto kernel = [is_min](pl::Ref y, pl::Ref o) {
          auto pick = [&] {
            pl::Value index = pl::broadcast_to((3 - pl::program_id(1)).astype(pl::f64), {1, 1});
            pl::Value v = y().astype(pl::f64);
            return is_min ? pl::minimum(v, index) : pl::maximum(index, v);
          };
          auto one = [] { return pl::full({1, 1}, 1, pl::f64); };
          o() = pl::switch_(3 - pl::program_id(1), {pick, one, one});
        };
        auto map = [](pl::Value a, pl::Value b) { return pl::idx(3 - b, 7 - a); };
        const pl::Array y = pl::Array::from_vector(std::vector<double>(32, -0.0), {4, 8}, dtype);
        for (bool interpret : {false, true}) {
          INFO(pl::dtype_name(dtype) << (is_min ? " min" : " max") << (interpret ? ", interpreted" : ", compiled"));
          pl::CallOptions options;
          if (interpret) options.interpret = pl::InterpretParams{};
          const std::vector<double> out =
              pl::pallas_call(kernel, pl::GridSpec{.grid = {8, 4}, .in_specs = {pl::BlockSpec({1, 1}, map)}, .out_specs = {pl::BlockSpec({1, 1}, map)}},
                              pl::ShapeDtype({4, 8}, pl::f64), options)(y)
                  .to_vector<double>();
          for (size_t i = 0; i < 8; ++i) {  // row 0: the branch of the min or max
            CHECK(out[i] == 0.0);
            CHECK(std::signbit(out[i]) == is_min);
          }
          for (size_t i = 8; i < 32; ++i) CHECK(out[i] == 1.0);
        }
      }
    }
  }
}
