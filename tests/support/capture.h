// Capturing what code under test writes to stderr (IR dumps, cache logs, LLVM dumps). Shared by the
// suites of every layer; depends on the C and POSIX libraries only.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

namespace tessera::testing {

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

}  // namespace tessera::testing
