// The short seeded run of the random-program fuzzer (tests/fuzz/random_program.h): every program of
// a fixed range of seeds must give the same result compiled and interpreted. The long run is
// tessera_fuzz (tests/fuzz/fuzz_main.cpp, README "Testing").
#include <doctest/doctest.h>

#include <string>

#include "tests/fuzz/differential.h"

using namespace tessera;

namespace {
constexpr uint64_t kFirstSeed = 1;
constexpr int64_t kSeeds = 40;
}  // namespace

TEST_SUITE("fuzz") {
  TEST_CASE("fuzz: random programs agree compiled and interpreted") {
    int failures = fuzz::run_seeds(kFirstSeed, kSeeds, [](const std::string& reproducer) { FAIL_CHECK(reproducer); });
    CHECK(failures == 0);
  }

  TEST_CASE("fuzz: a seed makes one program, and the short run covers every kind of program") {
    CHECK(fuzz::to_text(fuzz::generate(7)) == fuzz::to_text(fuzz::generate(7)));
    CHECK(fuzz::to_text(fuzz::generate(7)) != fuzz::to_text(fuzz::generate(8)));
    int dots = 0, tiled = 0, partial = 0, whens = 0, staged = 0;
    int kinds[static_cast<int>(fuzz::Node::cond) + 1] = {};
    for (uint64_t s = kFirstSeed; s < kFirstSeed + kSeeds; ++s) {
      fuzz::Program p = fuzz::generate(s);
      dots += p.is_dot;
      tiled += p.tiled_k;
      partial += p.rows % p.block_rows != 0 || p.cols % p.block_cols != 0;
      whens += p.overwrite >= 0;
      staged += p.staged;
      for (const fuzz::Expr& e : p.nodes) ++kinds[static_cast<int>(e.kind)];
    }
    CHECK(dots > 0);
    CHECK(tiled > 0);
    CHECK(partial > 0);
    CHECK(whens > 0);
    CHECK(staged > 0);
    for (int k = 0; k <= static_cast<int>(fuzz::Node::cond); ++k) {
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
}
