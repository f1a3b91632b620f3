#include "runtime/env.h"

#include <algorithm>
#include <cstdlib>

namespace tessera::env {

std::optional<std::string> get(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  return std::string(v);
}

bool flag(const char* name) {
  auto v = get(name);
  if (!v) return false;
  std::string s = *v;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return !(s.empty() || s == "0" || s == "false" || s == "off" || s == "no");
}

}  // namespace tessera::env
