// Shared pieces for the DSL tests: specs and a stderr capture.
#pragma once

#include <tessera/tessera.hpp>

#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <unistd.h>

#include <doctest/doctest.h>

namespace tessera::testing {

namespace pl = tessera;

// Options selecting the interpreter.
inline pl::CallOptions interpret(pl::InterpretParams params = {}) {
  pl::CallOptions o;
  o.interpret = params;
  return o;
}

// A backend a semantic test runs in.
struct Backend {
  const char* name;
  pl::CallOptions options;
};
// Compiled (the default) and interpreted (with `params`).
inline std::vector<Backend> backends(pl::InterpretParams params = {}) {
  return {{"compiled", pl::CallOptions{}}, {"interpret", interpret(params)}};
}
// Runs body(options) once per backend; failures name the backend.
template <class F>
void for_each_backend(F body, pl::InterpretParams params = {}) {
  for (const Backend& b : backends(params)) {
    INFO("backend: " << std::string(b.name));
    body(b.options);
  }
}
// The same options with `other` fields taken from `base` (for calls that set their own fields).
inline pl::CallOptions with_backend(pl::CallOptions options, const pl::CallOptions& backend) {
  options.interpret = backend.interpret;
  return options;
}

// Runs f with stderr redirected into a string.
inline std::string capture_stderr(const std::function<void()>& f) {
  std::fflush(stderr);
  char path[] = "/tmp/tessera_stderr_XXXXXX";
  int fd = mkstemp(path);
  int saved = dup(2);
  dup2(fd, 2);
  try {
    f();
  } catch (...) {
    std::fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    unlink(path);
    throw;
  }
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  unlink(path);
  return s.str();
}

// Collects debug_print lines while alive.
class PrintCapture {
 public:
  PrintCapture() {
    pl::rt::set_debug_print_sink([this](std::string_view line) { lines.emplace_back(line); });
  }
  ~PrintCapture() { pl::rt::set_debug_print_sink(nullptr); }
  std::vector<std::string> lines;
};

}  // namespace tessera::testing
