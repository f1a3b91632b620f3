// The configuration table (runtime/config.h): defaults when unset, the values each kind accepts, a
// UserError for each kind of invalid value (naming the variable, the value and what is accepted) after
// which the next read works, and README.md's environment table against the table it is made from.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "jit/ir/diagnostics.h"
#include "runtime/config.h"
#include "runtime/thread_pool.h"
#include "tests/support/scoped_env.h"

using namespace tessera;

namespace {

using testing::ScopedEnv;

// The message of the UserError `read` throws; fails the test when it throws nothing or something else.
template <class F>
std::string user_error(F read) {
  try {
    read();
  } catch (const UserError& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("not a UserError: " << e.what());
  }
  FAIL("no error");
  return {};
}

// Checks that `name`=`value` makes `read` throw a UserError naming the variable, the value and
// `accepted`; and that once the variable is unset again, the same read works.
template <class F>
void check_rejected(const char* name, const char* value, const std::string& accepted, F read) {
  CAPTURE(name);
  CAPTURE(value);
  {
    ScopedEnv env(name, value);
    const std::string message = user_error(read);
    CHECK_MESSAGE(message.find(std::string(name) + "=" + value) != std::string::npos, message);
    CHECK_MESSAGE(message.find(accepted) != std::string::npos, message);
    CHECK(user_error(read) == message);  // nothing invalid is kept: the next read says it again
  }
  ScopedEnv unset(name, nullptr);
  CHECK_NOTHROW(read());
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_SUITE("runtime") {
  TEST_CASE("config: every variable is declared once, with a name, a valid default and one line of doc") {
    std::set<std::string> names;
    size_t i = 0;
    for (const config::Variable& v : config::variables()) {
      CAPTURE(v.name);
      CHECK(static_cast<size_t>(v.var) == i++);
      CHECK(std::string(v.name).starts_with("TESSERA_"));
      CHECK(names.insert(v.name).second);
      CHECK(config::find(v.name) == &v);
      CHECK(!v.doc.empty());
      CHECK(v.doc.find('\n') == std::string_view::npos);
      CHECK(v.doc.find('|') == std::string_view::npos);  // it goes in a Markdown table cell
      if (v.kind == config::Kind::choice || v.kind == config::Kind::list) CHECK(!v.choices.empty());
      if (v.kind == config::Kind::integer) CHECK(v.min <= v.max);
      if (v.kind == config::Kind::text) CHECK(!v.placeholder.empty());
    }
    CHECK(i == config::var_count);
    CHECK(config::find("NO_SUCH_VARIABLE") == nullptr);
  }

  TEST_CASE("config: defaults apply when the variables are unset") {
    std::vector<std::unique_ptr<ScopedEnv>> unset;
    for (const config::Variable& v : config::variables()) unset.push_back(std::make_unique<ScopedEnv>(v.name, nullptr));
    CHECK(config::dump_ir() == "0");
    CHECK(!config::time_passes());
    CHECK(!config::dump_llvm());
    CHECK(!config::log_enabled("cache"));
    CHECK(!config::interpret());
    CHECK(config::num_threads() == std::nullopt);
    CHECK(config::dma() == "auto");
    CHECK(config::chaos_us() == 0);
    CHECK(config::trace_path().empty());
    CHECK(config::cache_dir().empty());
    CHECK(config::disk_cache());
    CHECK(!config::flag(config::Var::update_golden));
    // The thread count falls back to the hardware threads.
    set_num_threads(0);
    CHECK(num_threads() == static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    // Set but empty: the default, except for flags, where it is false (`TESSERA_CACHE=` turns the cache off).
    ScopedEnv dma("TESSERA_DMA", "");
    CHECK(config::dma() == "auto");
    ScopedEnv cache("TESSERA_CACHE", "");
    CHECK(!config::disk_cache());
  }

  TEST_CASE("config: valid values, read again whenever they change") {
    ScopedEnv interpret("TESSERA_INTERPRET", "1");
    CHECK(config::interpret());
    for (const char* yes : {"1", "true", "TRUE", "on", "Yes"}) {
      interpret.set(yes);
      CHECK(config::interpret());
    }
    for (const char* no : {"0", "false", "Off", "no", ""}) {
      interpret.set(no);
      CHECK(!config::interpret());
    }
    ScopedEnv threads("TESSERA_NUM_THREADS", "3");
    CHECK(config::num_threads() == 3);
    set_num_threads(0);
    CHECK(num_threads() == 3);
    threads.set("4096");
    CHECK(config::num_threads() == 4096);
    threads.set(nullptr);
    set_num_threads(0);
    ScopedEnv dma("TESSERA_DMA", "eager");
    CHECK(config::dma() == "eager");
    dma.set("worker");
    CHECK(config::dma() == "worker");
    ScopedEnv chaos("TESSERA_CHAOS_US", "250");
    CHECK(config::chaos_us() == 250);
    ScopedEnv dump("TESSERA_DUMP_IR", "expand_pipelines");
    CHECK(config::dump_ir() == "expand_pipelines");
    dump.set("all");
    CHECK(config::dump_ir() == "all");
    ScopedEnv log("TESSERA_LOG", "cache");
    CHECK(config::log_enabled("cache"));
    log.set("all");
    CHECK(config::log_enabled("cache"));
    log.set("cache,all");
    CHECK(config::log_enabled("cache"));
    ScopedEnv trace("TESSERA_TRACE", "/tmp/t.json");
    CHECK(config::trace_path() == "/tmp/t.json");
    ScopedEnv dir("TESSERA_CACHE_DIR", "/tmp/kernels");
    CHECK(config::cache_dir() == "/tmp/kernels");
  }

  TEST_CASE("config: an invalid thread count is a UserError from the call that reads it") {
    const std::string accepted = "an integer from 1 to 4096";
    for (const char* bad : {"0", "-3", "abc", "4x", " 2", "99999999999999999999", "5000"})
      check_rejected("TESSERA_NUM_THREADS", bad, accepted, [] { return config::num_threads(); });
    // Through the runtime's own reader: restoring the default reads the variable.
    check_rejected("TESSERA_NUM_THREADS", "0", accepted, [] { set_num_threads(0); });
    CHECK(num_threads() >= 1);
  }

  TEST_CASE("config: an unknown DMA mode is a UserError naming the modes") {
    for (const char* bad : {"fast", "EAGER", "auto "})
      check_rejected("TESSERA_DMA", bad, "one of auto, eager, worker", [] { return config::dma(); });
  }

  TEST_CASE("config: a delay that is not a number of microseconds is a UserError") {
    for (const char* bad : {"abc", "-1", "1.5", "10000001"})
      check_rejected("TESSERA_CHAOS_US", bad, "an integer from 0 to 10000000", [] { return config::chaos_us(); });
  }

  TEST_CASE("config: a flag that is neither on nor off is a UserError, not on") {
    const std::string accepted = "one of 1, true, on, yes, 0, false, off, no";
    check_rejected("TESSERA_INTERPRET", "maybe", accepted, [] { return config::interpret(); });
    check_rejected("TESSERA_INTERPRET", "2", accepted, [] { return config::interpret(); });
    check_rejected("TESSERA_CACHE", "disabled", accepted, [] { return config::disk_cache(); });
    check_rejected("TESSERA_TIME_PASSES", "verbose", accepted, [] { return config::time_passes(); });
    check_rejected("TESSERA_DUMP_LLVM", "stdout", accepted, [] { return config::dump_llvm(); });
  }

  TEST_CASE("config: an unknown pass to dump after is a UserError listing the passes") {
    const std::string accepted = "one of 0, 1, all, canonicalize, expand_pipelines, fuse_dot_accumulate, check_vmem_budget";
    for (const char* bad : {"expand", "ALL", "lower"})
      check_rejected("TESSERA_DUMP_IR", bad, accepted, [] { return config::dump_ir(); });
  }

  TEST_CASE("config: an unknown log topic is a UserError naming it") {
    const std::string accepted = "a comma-separated list of cache, all";
    check_rejected("TESSERA_LOG", "compile", accepted, [] { return config::log_enabled("cache"); });
    check_rejected("TESSERA_LOG", "cache,bogus", accepted, [] { return config::log_enabled("cache"); });
    check_rejected("TESSERA_LOG", "cache,", accepted, [] { return config::log_enabled("cache"); });
    ScopedEnv log("TESSERA_LOG", "cache,bogus");
    CHECK(user_error([] { return config::log_enabled("cache"); }).find("`bogus`") != std::string::npos);
  }

  TEST_CASE("config: an invalid value read during a call points at the call's line, the innermost call's") {
    auto loc_of = [] {
      try {
        config::dma();
      } catch (const UserError& e) {
        return e.loc();
      }
      FAIL("no UserError");
      return SourceLoc{};
    };
    ScopedEnv dma("TESSERA_DMA", "fast");
    CHECK_FALSE(loc_of().known());  // read outside any call: no line
    CHECK_FALSE(config::call_site().known());
    const SourceLoc outer = std::source_location::current();
    {
      const config::CallSite site(outer);
      CHECK(loc_of() == outer);
      const SourceLoc inner = std::source_location::current();
      {
        const config::CallSite nested(inner);
        CHECK(loc_of() == inner);
        CHECK(user_error([] { config::dma(); }).find(fmt::format("config_test.cpp:{}", inner.line)) != std::string::npos);
      }
      CHECK(loc_of() == outer);
      // The call site is the thread's: another thread reading meanwhile has none.
      SourceLoc elsewhere = outer;
      std::thread([&] { elsewhere = loc_of(); }).join();
      CHECK_FALSE(elsewhere.known());
    }
    CHECK_FALSE(loc_of().known());
  }

  TEST_CASE("config: a read fixed after an error works, and reads from many threads agree") {
    ScopedEnv threads("TESSERA_NUM_THREADS", "abc");
    CHECK_THROWS_AS(config::num_threads(), UserError);
    threads.set("2");
    CHECK(config::num_threads() == 2);
    std::vector<std::thread> readers;
    std::atomic<int> wrong{0};
    for (int t = 0; t < 8; ++t)
      readers.emplace_back([&] {
        for (int i = 0; i < 2000; ++i)
          if (config::num_threads() != 2 || config::dma() != "auto") ++wrong;
      });
    for (std::thread& r : readers) r.join();
    CHECK(wrong == 0);
  }

  TEST_CASE("config: README.md's environment table is the one the configuration renders") {
    const std::string readme = read_file(std::filesystem::path(TESSERA_SOURCE_DIR) / "README.md");
    const std::string expected = config::readme_table();
    const std::string header = expected.substr(0, expected.find('\n') + 1);
    const size_t start = readme.find(header);
    REQUIRE_MESSAGE(start != std::string::npos, "README.md has no line `" << header << "`; paste in:\n" << expected);
    size_t end = start;
    while (end < readme.size() && readme[end] == '|') end = readme.find('\n', end) + 1;
    CHECK_MESSAGE(readme.substr(start, end - start) == expected,
                  "README.md's environment table differs from runtime/config.cpp's; replace it with:\n" << expected);
  }

  TEST_CASE("config: every TESSERA_* variable the sources and README.md name is declared") {
    namespace fs = std::filesystem;
    const fs::path root(TESSERA_SOURCE_DIR);
    // In code, a name right after a double quote (a getenv or setenv argument, a command line):
    // macros such as TESSERA_OP are not variables. In README.md, any mention.
    auto check = [](const std::string& text, bool quoted, const std::string& where) {
      const std::string prefix = "TESSERA_";
      for (size_t at = text.find(prefix); at != std::string::npos; at = text.find(prefix, at + 1)) {
        if (quoted && (at == 0 || text[at - 1] != '"')) continue;
        size_t end = at + prefix.size();
        while (end < text.size() && (std::isupper(static_cast<unsigned char>(text[end])) ||
                                     std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '_'))
          ++end;
        if (end == at + prefix.size()) continue;  // the prefix alone
        const std::string name = text.substr(at, end - at);
        CHECK_MESSAGE(config::find(name) != nullptr, where << " names " << name << ", which runtime/config.cpp does not declare");
      }
    };
    int files = 0;
    for (const char* dir : {"dsl", "jit", "runtime", "ops", "include", "tests", "examples", "benchmarks"}) {
      if (!fs::exists(root / dir)) continue;
      for (const fs::directory_entry& e : fs::recursive_directory_iterator(root / dir)) {
        const std::string ext = e.path().extension().string();
        if (!e.is_regular_file() || (ext != ".cpp" && ext != ".h" && ext != ".hpp")) continue;
        check(read_file(e.path()), true, e.path().string());
        ++files;
      }
    }
    CHECK(files > 50);
    check(read_file(root / "README.md"), false, "README.md");
  }
}
