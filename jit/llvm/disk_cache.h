// The on-disk cache of compiled kernels: one object file per content key, so a second process does
// not recompile. The directory is $TESSERA_CACHE_DIR, else $XDG_CACHE_HOME/tessera, else
// ~/.cache/tessera; TESSERA_CACHE=0 turns the disk cache off. Writes go to a temporary file that is
// renamed into place, so readers never see a partial object; when the directory cannot be written
// the cache degrades to read-only (or off) and says so once under TESSERA_LOG=cache.
//
// jit/ internal.
#pragma once

#include <optional>
#include <string>

namespace tessera::jit {

class DiskCache {
 public:
  // The cache as configured by the environment now.
  static DiskCache from_environment();

  bool enabled() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }
  std::optional<std::string> load(const std::string& key) const;
  // Returns false when the object could not be written (the cache is then read-only).
  bool store(const std::string& key, const std::string& object) const;
  std::string path(const std::string& key) const;

 private:
  std::string dir_;
};

}  // namespace tessera::jit
