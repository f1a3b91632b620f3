// Sets (or, with nullptr, unsets) an environment variable for a scope and puts back what was there
// before. Used by the configuration tests (runtime_tests) and the tests of switches a call reads
// (dsl_tests).
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace tessera::testing {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    set(value);
  }
  ~ScopedEnv() { set(old_ ? old_->c_str() : nullptr); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  void set(const char* value) {
    if (value) setenv(name_, value, 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace tessera::testing
