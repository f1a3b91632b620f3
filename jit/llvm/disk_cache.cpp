#include "jit/llvm/disk_cache.h"

#include <fmt/format.h>
#include <llvm/Support/xxhash.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "runtime/config.h"

namespace tessera::jit {

namespace fs = std::filesystem;

namespace {

// An entry is the object file followed by a trailer line: this marker, the key, the object's size
// and its 128-bit content hash. At the end rather than in front, the file stays an object file that
// objdump reads (ELF locates everything by offset and ignores what follows). A new trailer layout
// gets a new marker, so an old entry is discarded and recompiled rather than misread.
constexpr std::string_view marker = "\ntessera kernel cache entry v1 ";

std::string content_hash(std::string_view bytes) {
  llvm::XXH128_hash_t h =
      llvm::xxh3_128bits(llvm::ArrayRef<uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

std::string trailer(std::string_view key, std::string_view object) {
  return fmt::format("{}key {} bytes {} xxh3 {}\n", marker, key, object.size(), content_hash(object));
}

// Why `bytes`, read from the entry of `key`, is not a whole and intact entry; empty when it is.
// On success `object` is the object file's bytes.
std::string verify(const std::string& key, const std::string& bytes, std::string_view& object) {
  // No entry is ever written empty (store writes a trailer even for an empty object): an empty file
  // is a write cut short before its first byte reached the disk.
  if (bytes.empty()) return "it is empty (truncated)";
  const size_t at = bytes.rfind(marker);
  if (at == std::string::npos || bytes.back() != '\n')
    return "it does not end with an entry trailer (truncated, or not written by this version of tessera)";
  object = std::string_view(bytes).substr(0, at);
  const std::string_view found = std::string_view(bytes).substr(at);
  if (found == trailer(key, object)) return {};
  char stored_key[64] = {};
  unsigned long long size = 0;
  const int n = std::sscanf(bytes.c_str() + at + marker.size(), "key %63s bytes %llu", stored_key, &size);
  if (n >= 1 && key != stored_key) return fmt::format("it was stored under another key ({})", stored_key);
  if (n == 2 && size != object.size())
    return fmt::format("it holds {} of the {} object bytes it declares (truncated)", object.size(), size);
  return "its content hash does not match (the object is damaged)";
}

// Says once per directory that the disk cache is off for it, and why.
void warn_unwritable(const std::string& dir, const std::string& why) {
  static std::mutex mutex;
  static std::set<std::string>* warned = new std::set<std::string>();  // outlives every caller
  std::lock_guard lock(mutex);
  if (!warned->insert(dir).second) return;
  std::fprintf(stderr,
               "tessera cache: warning: cannot write to %s (%s); compiled kernels are kept in memory only. Set "
               "TESSERA_CACHE_DIR to a writable directory, or TESSERA_CACHE=0 to silence this\n",
               dir.c_str(), why.c_str());
}

}  // namespace

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
  const std::string bytes = s.str();
  std::string_view object;
  if (std::string why = verify(key, bytes, object); !why.empty()) {
    // Removing the entry is safe against a concurrent writer: its rename puts a whole new entry in
    // place whether or not this removal came first.
    std::error_code ec;
    fs::remove(path(key), ec);
    std::fprintf(stderr, "tessera cache: discarded %s: %s; recompiling\n", path(key).c_str(), why.c_str());
    return std::nullopt;
  }
  return std::string(object);
}

bool DiskCache::store(const std::string& key, const std::string& object) const {
  if (!enabled()) return false;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  const std::string tmp = fmt::format("{}.tmp.{}.{}", path(key), ::getpid(),
                                      std::hash<std::thread::id>{}(std::this_thread::get_id()));
  std::string why = ec ? ec.message() : std::string();
  if (why.empty()) {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    const std::string tail = trailer(key, object);
    out.write(object.data(), static_cast<std::streamsize>(object.size()));
    out.write(tail.data(), static_cast<std::streamsize>(tail.size()));
    out.close();
    if (!out.good()) why = "the entry could not be written";
    else if (fs::rename(tmp, path(key), ec); ec)  // atomic: readers see the whole entry or none
      why = ec.message();
    if (!why.empty()) fs::remove(tmp, ec);
  }
  if (!why.empty()) warn_unwritable(dir_, why);
  return why.empty();
}

}  // namespace tessera::jit
