// The long run of the random-program fuzzer: checks the programs of a range of seeds compiled
// against interpreted and prints a shrunk reproducer for each disagreement.
//
//   tessera_fuzz [--seed first] [--count n] [--print]
//
// --print writes every program's text before it runs. Exits 1 when any program failed.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "tests/fuzz/differential.h"

int main(int argc, char** argv) {
  uint64_t first = 1;
  int64_t count = 1000;
  bool print = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--seed" && i + 1 < argc) first = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--count" && i + 1 < argc) count = std::strtoll(argv[++i], nullptr, 10);
    else if (a == "--print") print = true;
    else {
      fmt::print(stderr, "tessera_fuzz: unknown argument `{}`\nusage: tessera_fuzz [--seed first] [--count n] [--print]\n", a);
      return 2;
    }
  }
  // Each program is compiled once: caching the objects on disk would only fill the cache.
  setenv("TESSERA_CACHE", "0", 1);
  int failures = 0;
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t seed = first + static_cast<uint64_t>(i);
    if (print) fmt::print("{}\n", tessera::fuzz::to_text(tessera::fuzz::generate(seed)));
    failures += tessera::fuzz::run_seeds(seed, 1, [](const std::string& r) {
      fmt::print("{}\n", r);
      std::fflush(stdout);
    });
    if ((i + 1) % 100 == 0) fmt::print(stderr, "tessera_fuzz: {} programs, {} failed\n", i + 1, failures);
  }
  fmt::print("tessera_fuzz: {} program(s) from seed {}, {} failed\n", count, first, failures);
  return failures == 0 ? 0 : 1;
}
