// A scratch compile-cache directory for one test: TESSERA_CACHE_DIR points at it while the object
// lives. Used by the code generator tests (llvm_tests) and the end-to-end cache tests (dsl_tests).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>

#include <unistd.h>

namespace tessera::testing {

// The directory's name holds the process id: the suites of several builds (release, sanitizers,
// other checkouts) may run the same test at once on one machine, and one must not fill or remove the
// directory another is using.
class CacheDir {
 public:
  explicit CacheDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() /
              ("tessera_test_cache_" + name + "_" + std::to_string(static_cast<long>(getpid())))) {
    std::filesystem::remove_all(path_);
    const char* old = std::getenv("TESSERA_CACHE_DIR");
    if (old) old_ = old;
    setenv("TESSERA_CACHE_DIR", path_.c_str(), 1);
  }
  ~CacheDir() {
    if (old_.empty()) unsetenv("TESSERA_CACHE_DIR");
    else setenv("TESSERA_CACHE_DIR", old_.c_str(), 1);
    std::error_code ignored;  // a destructor must not throw: that ends the process
    std::filesystem::remove_all(path_, ignored);
  }
  CacheDir(const CacheDir&) = delete;
  CacheDir& operator=(const CacheDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::string old_;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace tessera::testing
