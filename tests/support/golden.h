// Golden-text comparison for tests: the expected text lives in tests/golden/<name>. With
// TESSERA_UPDATE_GOLDEN=1 the file is (re)written from the actual text instead. Golden IR is also
// the input of lowering and code generator tests (golden_text, then ir::parse).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
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

// TESSERA_UPDATE_GOLDEN, a flag declared in runtime/config.cpp's table like every TESSERA_* variable.
// Read here with getenv because the IR layer's tests, which use this header, do not link the runtime;
// it accepts what the table's flags accept.
inline bool update_golden() {
  const char* v = std::getenv("TESSERA_UPDATE_GOLDEN");
  std::string s = v ? v : "";
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (s == "1" || s == "true" || s == "on" || s == "yes") return true;
  REQUIRE_MESSAGE((s.empty() || s == "0" || s == "false" || s == "off" || s == "no"),
                  "TESSERA_UPDATE_GOLDEN=" << v << " is not accepted: set it to one of 1, true, on, yes, 0, false, off, no");
  return false;
}

inline void check_golden(const std::string& name, const std::string& actual) {
  const std::string path = std::string(TESSERA_GOLDEN_DIR) + "/" + name;
  if (update_golden()) {
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
