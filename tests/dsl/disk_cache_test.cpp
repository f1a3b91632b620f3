// The disk cache verifies what it loads: a damaged, truncated or misplaced entry is discarded with a
// line on stderr and the kernel recompiled (never executed); writers in several processes at once
// leave whole entries; an unusable directory keeps kernels in memory with one warning.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/support/cache_dir.h"
#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;
namespace fs = std::filesystem;

namespace {

// Where a kernel came from, as the cache log says.
enum class From { compiler, disk, other };

// Builds and runs o = x * factor + 1 over 16 f32 elements with nothing of it cached in memory (the
// call, which holds the kernel, goes at the end); returns where the kernel came from and what the
// cache said on stderr, and checks the kernel computes the right thing.
std::pair<From, std::string> fresh_compile(float factor) {
  const std::string log = testing::capture_stderr([&] {
    setenv("TESSERA_LOG", "cache", 1);
    pl::CallOptions options;
    options.name = "disk_cache_scaled";
    auto call = pl::pallas_call([factor](pl::Ref x, pl::Ref o) { o() = x() * factor + 1.0f; }, pl::GridSpec{},
                                pl::ShapeDtype({16}, pl::f32), options);
    CHECK(call(pl::Array::arange(16, pl::f32)).at<float>({3}) == 3.0f * factor + 1.0f);
  });
  unsetenv("TESSERA_LOG");
  const From from = log.find("miss, compiled for `disk_cache_scaled`") != std::string::npos ? From::compiler
                    : log.find("hit (disk) for `disk_cache_scaled`") != std::string::npos   ? From::disk
                                                                                             : From::other;
  return {from, log};
}

// The entry of the kernel fresh_compile(factor) runs: the only entry of the directory, which holds
// only that kernel's.
std::string entry_path(const testing::CacheDir& dir) {
  std::string path;
  for (const auto& f : fs::directory_iterator(dir.path())) {
    CHECK(path.empty());
    path = f.path().string();
  }
  return path;
}

void rewrite(const std::string& path, const std::function<void(std::string&)>& damage) {
  std::string bytes = testing::slurp(path);
  damage(bytes);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("disk cache: an intact entry is loaded, a damaged one is discarded and recompiled") {
    testing::CacheDir dir("verified");
    CHECK(fresh_compile(5.0f).first == From::compiler);
    CHECK(fresh_compile(5.0f).first == From::disk);
    const std::string path = entry_path(dir);
    // One flipped bit in the middle of the object: it used to be loaded and executed.
    rewrite(path, [](std::string& b) { b[b.size() / 2] ^= 0x10; });
    auto [from, log] = fresh_compile(5.0f);
    CHECK(from == From::compiler);
    CHECK(log.find("tessera cache: discarded " + path) != std::string::npos);
    CHECK(log.find("content hash does not match") != std::string::npos);
    CHECK(log.find("recompiling") != std::string::npos);
    // The recompiled kernel was stored again, whole.
    CHECK(fresh_compile(5.0f).first == From::disk);
  }

  TEST_CASE("disk cache: a truncated or empty entry, an entry of another key and a foreign file are discarded") {
    std::string six_bytes;
    {
      testing::CacheDir other("other_key");
      fresh_compile(6.0f);
      six_bytes = testing::slurp(entry_path(other));
    }
    testing::CacheDir dir("truncated");
    fresh_compile(7.0f);
    const std::string seven = entry_path(dir);
    rewrite(seven, [](std::string& b) { b.resize(b.size() - 100); });
    auto [from, log] = fresh_compile(7.0f);
    CHECK(from == From::compiler);
    CHECK(log.find("truncated") != std::string::npos);
    // An empty entry: a write cut short before its first byte. It used to be skipped without a word
    // and left in place.
    rewrite(seven, [](std::string& b) { b.clear(); });
    std::tie(from, log) = fresh_compile(7.0f);
    CHECK(from == From::compiler);
    CHECK(log.find("tessera cache: discarded " + seven + ": it is empty (truncated); recompiling") != std::string::npos);
    CHECK(fresh_compile(7.0f).first == From::disk);
    // Another kernel's whole, intact entry under this key's name.
    rewrite(seven, [&](std::string& b) { b = six_bytes; });
    std::tie(from, log) = fresh_compile(7.0f);
    CHECK(from == From::compiler);
    CHECK(log.find("stored under another key") != std::string::npos);
    // An object file without the trailer (a cache written by an older tessera, or anything else).
    rewrite(seven, [](std::string& b) { b = "\x7f" "ELF not really"; });
    std::tie(from, log) = fresh_compile(7.0f);
    CHECK(from == From::compiler);
    CHECK(log.find("does not end with an entry trailer") != std::string::npos);
    CHECK(fresh_compile(7.0f).first == From::disk);
    // The entry is still an object file that objdump reads: the trailer follows the ELF data.
    CHECK(testing::slurp(seven).rfind("\x7f" "ELF", 0) == 0);
  }

  TEST_CASE("disk cache: an unusable directory keeps kernels in memory, with one warning") {
    testing::CacheDir dir("unusable");
    fs::create_directories(dir.path().parent_path());
    std::ofstream(dir.path()) << "a file where the directory should be";
    auto [from8, log8] = fresh_compile(8.0f);
    auto [from9, log9] = fresh_compile(9.0f);
    CHECK(from8 == From::compiler);
    CHECK(from9 == From::compiler);
    CHECK(log8.find("cannot write to " + dir.path().string()) != std::string::npos);
    CHECK(log8.find("kept in memory only") != std::string::npos);
    CHECK(log9.find("cannot write") == std::string::npos);  // once, not once per kernel
    fs::remove(dir.path());
  }

  TEST_CASE("disk cache: processes compiling the same kernel at once all succeed and leave one whole entry") {
    testing::CacheDir dir("processes");
    const std::string child = std::string(TESSERA_TEST_BIN_DIR) + "/jit_cache_child";
    // Four writers race on one key; each must run its kernel correctly (the child checks the result).
    std::string script;
    for (int i = 0; i < 4; ++i) script += fmt::format("({} > /dev/null 2>&1; echo $? > {}/rc{}) & ", child, dir.path().string(), i);
    fs::create_directories(dir.path());
    REQUIRE(std::system(("/bin/sh -c '" + script + "wait'").c_str()) == 0);
    int entries = 0;
    for (const auto& f : fs::directory_iterator(dir.path())) {
      const std::string name = f.path().filename().string();
      if (name.rfind("rc", 0) == 0) CHECK(testing::slurp(f.path()) == "0\n");
      else {
        CHECK(name.find(".tmp.") == std::string::npos);  // no temporary file left behind
        ++entries;
      }
    }
    CHECK(entries == 1);
    // The entry they left verifies: a fifth process loads it from disk.
    const std::string log = (dir.path() / "log").string();
    REQUIRE(std::system(("TESSERA_LOG=cache " + child + " > /dev/null 2> " + log).c_str()) == 0);
    CHECK(testing::slurp(log).find("hit (disk) for `cache_child`") != std::string::npos);
  }
}
