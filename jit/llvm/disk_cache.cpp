#include "jit/llvm/disk_cache.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "runtime/config.h"

namespace tessera::jit {

namespace fs = std::filesystem;

DiskCache DiskCache::from_environment() {
  DiskCache cache;
  if (!config::disk_cache()) return cache;
  cache.dir_ = config::cache_dir();
  if (!cache.dir_.empty()) return cache;
  // The usual places of a user's caches: not tessera's variables, so not in its configuration table.
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) cache.dir_ = std::string(xdg) + "/tessera";
  else if (const char* home = std::getenv("HOME"); home && *home) cache.dir_ = std::string(home) + "/.cache/tessera";
  return cache;
}

std::string DiskCache::path(const std::string& key) const { return dir_ + "/" + key + ".o"; }

std::optional<std::string> DiskCache::load(const std::string& key) const {
  if (!enabled()) return std::nullopt;
  std::ifstream in(path(key), std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream s;
  s << in.rdbuf();
  if (!in.good() && !in.eof()) return std::nullopt;
  std::string bytes = s.str();
  if (bytes.empty()) return std::nullopt;
  return bytes;
}

bool DiskCache::store(const std::string& key, const std::string& object) const {
  if (!enabled()) return false;
  static std::atomic<bool> warned{false};
  std::error_code ec;
  fs::create_directories(dir_, ec);
  const std::string tmp = fmt::format("{}.tmp.{}.{}", path(key), ::getpid(),
                                      std::hash<std::thread::id>{}(std::this_thread::get_id()));
  bool ok = !ec;
  if (ok) {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(object.data(), static_cast<std::streamsize>(object.size()));
    out.close();
    ok = out.good();
    if (ok) {
      fs::rename(tmp, path(key), ec);  // atomic: readers see the whole object or none
      ok = !ec;
    }
    if (!ok) fs::remove(tmp, ec);
  }
  if (!ok && !warned.exchange(true) && config::log_enabled("cache"))
    std::fprintf(stderr, "tessera cache: cannot write to %s; using the disk cache read-only\n", dir_.c_str());
  return ok;
}

}  // namespace tessera::jit
