// Golden-text comparison for tests: the expected text lives in tests/golden/<name>. With
// TESSERA_UPDATE_GOLDEN=1 the file is (re)written from the actual text instead. Golden IR is also
// the input of lowering and code generator tests (golden_text, then ir::parse).
#pragma once

#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace tessera::testing {

inline std::string golden_text(const std::string& name) {
  const std::string path = std::string(TESSERA_GOLDEN_DIR) + "/" + name;
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "missing golden file " << path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

inline void check_golden(const std::string& name, const std::string& actual) {
  const std::string path = std::string(TESSERA_GOLDEN_DIR) + "/" + name;
  const char* update = std::getenv("TESSERA_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    std::ofstream(path) << actual;
    return;
  }
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "missing golden file " << path << " (run with TESSERA_UPDATE_GOLDEN=1 to create it)");
  std::stringstream expected;
  expected << in.rdbuf();
  INFO("golden file: " << path);
  CHECK(actual == expected.str());
}

}  // namespace tessera::testing
