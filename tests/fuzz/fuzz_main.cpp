// The long run of the random-program fuzzer: checks the programs of a range of seeds compiled
// against interpreted and prints a shrunk reproducer for each disagreement.
//
//   tessera_fuzz [--seed first] [--count n] [--print] [--generate-only]
//
// --print writes every program's text before it runs; --generate-only makes the programs and says
// what kinds they cover without running them. A run ends with the same coverage line. Exits 1 when
// any program failed.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>

#include <fmt/format.h>

#include "tests/fuzz/differential.h"

namespace {

// How many programs of each kind, and how many nodes of each kind, a range of seeds makes.
struct Coverage {
  int64_t dots = 0, tiled = 0, partial = 0, empty = 0, prefetched = 0, whens = 0, staged = 0;
  int64_t nodes[static_cast<int>(tessera::fuzz::Node::switch_) + 1] = {};

  void add(const tessera::fuzz::Program& p) {
    dots += p.is_dot;
    tiled += p.tiled_k;
    partial += p.rows % p.block_rows != 0 || p.cols % p.block_cols != 0;
    empty += p.rows * p.cols == 0;
    prefetched += p.prefetched;
    whens += p.overwrite >= 0;
    staged += p.staged;
    for (const tessera::fuzz::Expr& e : p.nodes) ++nodes[static_cast<int>(e.kind)];
  }

  std::string text() const {
    static const char* const names[] = {"x",    "y",    "constant", "iota", "program_id", "loop_index", "unary",      "binary",
                                        "select", "cast", "reduce",   "fori_loop", "cond", "prefetched", "while_loop", "switch_"};
    static_assert(std::size(names) == std::size(decltype(nodes){}));
    std::string s = fmt::format("programs: {} dot ({} tiled over k), {} with a partial edge block, {} zero-size, {} scalar-prefetched, "
                                "{} with a pl::when overwrite, {} staged in scratch\nnodes:",
                                dots, tiled, partial, empty, prefetched, whens, staged);
    for (size_t k = 0; k < std::size(names); ++k) s += fmt::format(" {} {}{}", names[k], nodes[k], k + 1 < std::size(names) ? "," : "");
    return s;
  }
};

}  // namespace

int main(int argc, char** argv) {
  uint64_t first = 1;
  int64_t count = 1000;
  bool print = false, generate_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--seed" && i + 1 < argc) first = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--count" && i + 1 < argc) count = std::strtoll(argv[++i], nullptr, 10);
    else if (a == "--print") print = true;
    else if (a == "--generate-only") generate_only = true;
    else {
      fmt::print(stderr,
                 "tessera_fuzz: unknown argument `{}`\nusage: tessera_fuzz [--seed first] [--count n] [--print] [--generate-only]\n",
                 a);
      return 2;
    }
  }
  // Each program is compiled once: caching the objects on disk would only fill the cache.
  setenv("TESSERA_CACHE", "0", 1);
  int failures = 0;
  Coverage coverage;
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t seed = first + static_cast<uint64_t>(i);
    const tessera::fuzz::Program p = tessera::fuzz::generate(seed);
    coverage.add(p);
    if (print) fmt::print("{}\n", tessera::fuzz::to_text(p));
    if (generate_only) continue;
    failures += tessera::fuzz::run_seeds(seed, 1, [](const std::string& r) {
      fmt::print("{}\n", r);
      std::fflush(stdout);
    });
    if ((i + 1) % 100 == 0) fmt::print(stderr, "tessera_fuzz: {} programs, {} failed\n", i + 1, failures);
  }
  fmt::print("{}\n", coverage.text());
  if (generate_only) return 0;
  fmt::print("tessera_fuzz: {} program(s) from seed {}, {} failed\n", count, first, failures);
  return failures == 0 ? 0 : 1;
}
