// The compiled backend: cache keys, the memory and disk caches (also across processes), the
// read-only fallback, logging, and properties of the generated code.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "jit/llvm/compiler.h"
#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;
namespace fs = std::filesystem;

namespace {

using Source = jit::CompiledKernel::Source;

// A scratch cache directory for one test, set in the environment while the object lives.
class CacheDir {
 public:
  explicit CacheDir(const std::string& name) : path_(fs::temp_directory_path() / ("tessera_test_cache_" + name)) {
    fs::remove_all(path_);
    const char* old = std::getenv("TESSERA_CACHE_DIR");
    if (old) old_ = old;
    setenv("TESSERA_CACHE_DIR", path_.c_str(), 1);
  }
  ~CacheDir() {
    if (old_.empty()) unsetenv("TESSERA_CACHE_DIR");
    else setenv("TESSERA_CACHE_DIR", old_.c_str(), 1);
    fs::remove_all(path_);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
  std::string old_;
};

const ir::Function& lowered_scale(float factor, int64_t n = 32) {
  static std::vector<pl::PallasCall<pl::Array>> keep;
  keep.push_back(pl::pallas_call([factor](pl::Ref x, pl::Ref o) { o() = x() * factor; }, pl::GridSpec{},
                                 pl::ShapeDtype({n}, pl::f32), testing::interpret()));
  return keep.back().lowered({pl::Array::zeros({n}, pl::f32)});
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_SUITE("jit") {
  TEST_CASE("jit: the cache key follows the IR, and only the IR") {
    const std::string a = jit::cache_key(lowered_scale(2.0f));
    CHECK(a.size() == 32);
    CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
    CHECK(jit::cache_key(lowered_scale(2.0f)) == a);
    CHECK(jit::cache_key(lowered_scale(3.0f)) != a);
    CHECK(jit::cache_key(lowered_scale(2.0f, 64)) != a);
    CHECK(!jit::host_target().empty());
  }

  TEST_CASE("jit: a live kernel is found in memory, a dropped one on disk, none with the cache off") {
    CacheDir dir("memory_disk");
    const ir::Function& fn = lowered_scale(5.0f);
    auto first = jit::compile(fn);
    CHECK(first->source() == Source::Compiled);
    CHECK(fs::exists(dir.path() / (first->key() + ".o")));
    auto second = jit::compile(fn);
    CHECK(second->source() == Source::MemoryCache);
    CHECK(reinterpret_cast<void*>(second->entry()) == reinterpret_cast<void*>(first->entry()));
    const std::string key = first->key();
    first.reset();
    second.reset();  // unloaded now
    auto third = jit::compile(fn);
    CHECK(third->source() == Source::DiskCache);
    third.reset();
    setenv("TESSERA_CACHE", "0", 1);
    auto fourth = jit::compile(fn);
    unsetenv("TESSERA_CACHE");
    CHECK(fourth->source() == Source::Compiled);
  }

  TEST_CASE("jit: a second process loads the kernel from the disk cache") {
    CacheDir dir("process");
    const std::string child = std::string(TESSERA_TEST_BIN_DIR) + "/jit_cache_child";
    const std::string log = (dir.path().parent_path() / "tessera_cache_child.log").string();
    const std::string run = "TESSERA_LOG=cache " + child + " 2>>" + log;
    fs::remove(log);
    REQUIRE(std::system(run.c_str()) == 0);
    REQUIRE(std::system(run.c_str()) == 0);
    const std::string text = slurp(log);
    INFO(text);
    CHECK(text.find("miss, compiled for `cache_child`") != std::string::npos);
    CHECK(text.find("hit (disk) for `cache_child`") != std::string::npos);
    CHECK(text.find("miss, compiled for `cache_child`") < text.find("hit (disk) for `cache_child`"));
    fs::remove(log);
  }

  TEST_CASE("jit: an unwritable cache directory degrades to no disk cache, and a corrupt object to a recompile") {
    {
      CacheDir dir("readonly");
      fs::create_directories(dir.path().parent_path());
      std::ofstream(dir.path()) << "a file where the directory should be";
      const std::string log = testing::capture_stderr([] {
        setenv("TESSERA_LOG", "cache", 1);
        auto k = jit::compile(lowered_scale(7.0f));
        unsetenv("TESSERA_LOG");
        CHECK(k->source() == Source::Compiled);
        CHECK(reinterpret_cast<void*>(k->entry()) != nullptr);
      });
      CHECK(log.find("using the disk cache read-only") != std::string::npos);
      fs::remove(dir.path());
    }
    {
      CacheDir dir("corrupt");
      const ir::Function& fn = lowered_scale(11.0f);
      std::string key = jit::cache_key(fn);
      fs::create_directories(dir.path());
      std::ofstream(dir.path() / (key + ".o")) << "not an object file";
      auto k = jit::compile(fn);
      CHECK(k->source() == Source::Compiled);
      k.reset();
      CHECK(jit::compile(fn)->source() == Source::DiskCache);  // the rewritten object loads
    }
  }

  TEST_CASE("jit: TESSERA_INTERPRET selects the interpreter for calls made while it is set") {
    auto make = [] {
      return pl::pallas_call([](pl::Ref x, pl::Ref o) { o() = x(); }, pl::GridSpec{}, pl::ShapeDtype({4}, pl::f32));
    };
    CHECK_FALSE(make().interpreted());
    setenv("TESSERA_INTERPRET", "1", 1);
    auto interpreted = make();
    unsetenv("TESSERA_INTERPRET");
    CHECK(interpreted.interpreted());
    CHECK(interpreted(pl::Array::arange(4, pl::f32)).at<float>({3}) == 3.0f);
    CHECK(pl::pallas_call([](pl::Ref x, pl::Ref o) { o() = x(); }, pl::GridSpec{}, pl::ShapeDtype({4}, pl::f32),
                          testing::interpret())
              .interpreted());
    // A value that is neither on nor off fails the call that reads it (it used to mean on); the
    // next call, with the variable unset, works.
    setenv("TESSERA_INTERPRET", "maybe", 1);
    CHECK_THROWS_WITH_AS(make(), doctest::Contains("TESSERA_INTERPRET=maybe"), UserError);
    unsetenv("TESSERA_INTERPRET");
    CHECK_FALSE(make().interpreted());
  }

  TEST_CASE("jit: acc() += dot(...) runs the FMA micro-kernel, element-wise chains fuse into one loop") {
    setenv("TESSERA_CACHE", "0", 1);
    setenv("TESSERA_DUMP_LLVM", "1", 1);
    const std::string matmul = testing::capture_stderr([] {
      auto call = pl::pallas_call(
          [](pl::Ref x, pl::Ref y, pl::Ref o, pl::Ref acc) {
            acc() = pl::zeros_like(acc);
            acc() += pl::dot(x(), y(), pl::f32);
            o() = acc();
          },
          pl::GridSpec{.scratch_shapes = {pl::VMEM({32, 32}, pl::f32)}}, pl::ShapeDtype({32, 32}, pl::f32));
      call(pl::Array::zeros({32, 32}, pl::f32), pl::Array::zeros({32, 32}, pl::f32));
    });
    const std::string chain = testing::capture_stderr([] {
      auto call = pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref o) { o() = pl::exp(x()) * 2.0f + y() - 1.0f; },
                                  pl::GridSpec{}, pl::ShapeDtype({8, 128}, pl::f32));
      call(pl::Array::zeros({8, 128}, pl::f32), pl::Array::zeros({8, 128}, pl::f32));
    });
    unsetenv("TESSERA_DUMP_LLVM");
    unsetenv("TESSERA_CACHE");
    CHECK(matmul.find("@llvm.fma.v8f32") != std::string::npos);
    // The dot accumulates into the scratch: its only temporaries are the packed operands.
    CHECK(chain.find("call ptr @tessera_rt_temp") == std::string::npos);  // no block materialised
    CHECK(chain.find("@expf") != std::string::npos);
  }

  TEST_CASE("jit: a failure in compiled code stops the other cores and comes back as a RuntimeError") {
    // Every step of core 1 indexes out of bounds; core 0 has many valid steps.
    auto kernel = [](pl::Ref x, pl::Ref o) { o() = x(pl::ds(pl::program_id(0) * 0 + pl::program_id(0) / 4 * 100, 4)); };
    auto call = pl::pallas_call(kernel,
                                pl::GridSpec{.grid = {8}, .out_specs = {pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i); })}},
                                pl::ShapeDtype({32}, pl::f32), {.compiler_params = {.dimension_semantics = {pl::parallel}}});
    pl::set_num_threads(2);
    try {
      call(pl::Array::zeros({8}, pl::f32));
      FAIL("expected a RuntimeError");
    } catch (const RuntimeError& e) {
      CHECK(e.where().core == 1);
      CHECK(e.where().grid_point == std::vector<int64_t>{4});
      CHECK(std::string(e.what()).find("out-of-bounds slice of `input 0 block`: ds(100, 4)") != std::string::npos);
    }
    pl::set_num_threads(0);
    // The process and later calls are unaffected.
    auto fine = pl::pallas_call([](pl::Ref x, pl::Ref o) { o() = x(); }, pl::GridSpec{}, pl::ShapeDtype({8}, pl::f32));
    CHECK(fine(pl::Array::arange(8, pl::f32)).at<float>({7}) == 7.0f);
  }
}
