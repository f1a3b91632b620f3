// The on-disk cache of compiled kernels: one entry per content key, so a second process does not
// recompile. The directory is $TESSERA_CACHE_DIR, else $XDG_CACHE_HOME/tessera, else
// ~/.cache/tessera; TESSERA_CACHE=0 turns the disk cache off.
//
// An entry is the object file followed by a trailer line (the key, the object's size and its
// 128-bit content hash). `load` checks all three before handing the object on: a flipped byte,
// a truncated file or another key's entry is discarded (removed, with a line on stderr) and the
// kernel is recompiled, instead of executing whatever the disk returned. Writes go to a temporary
// file of the writing process and thread that is renamed into place, so concurrent writers (threads
// or processes) and readers see a whole entry or none. A directory that cannot be written makes the
// cache memory-only for that directory, with one warning on stderr (docs/design.md §5).
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
  // The verified object stored under `key`, or nothing (absent, unreadable, or corrupt and discarded).
  std::optional<std::string> load(const std::string& key) const;
  // Returns false when the entry could not be written (the cache then keeps kernels in memory only).
  bool store(const std::string& key, const std::string& object) const;
  std::string path(const std::string& key) const;

 private:
  std::string dir_;
};

}  // namespace tessera::jit
