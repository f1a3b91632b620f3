// The compiled backend seen from a pallas_call: the disk cache across processes, TESSERA_INTERPRET,
// and failures inside compiled code coming back as RuntimeErrors. (The code generator, ORC and the
// caches on their own are tested in llvm_tests.)
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>

#include "tests/support/cache_dir.h"
#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;
namespace fs = std::filesystem;

TEST_SUITE("dsl") {
  TEST_CASE("compiled: a second process loads the kernel from the disk cache") {
    testing::CacheDir dir("process");
    const std::string child = std::string(TESSERA_TEST_BIN_DIR) + "/jit_cache_child";
    const std::string log = (dir.path().parent_path() / "tessera_cache_child.log").string();
    const std::string run = "TESSERA_LOG=cache " + child + " 2>>" + log;
    fs::remove(log);
    REQUIRE(std::system(run.c_str()) == 0);
    REQUIRE(std::system(run.c_str()) == 0);
    const std::string text = testing::slurp(log);
    INFO(text);
    CHECK(text.find("miss, compiled for `cache_child`") != std::string::npos);
    CHECK(text.find("hit (disk) for `cache_child`") != std::string::npos);
    CHECK(text.find("miss, compiled for `cache_child`") < text.find("hit (disk) for `cache_child`"));
    fs::remove(log);
  }

  TEST_CASE("compiled: TESSERA_INTERPRET selects the interpreter for calls made while it is set") {
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

  TEST_CASE("compiled: a failure in compiled code stops the other cores and comes back as a RuntimeError") {
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
      // Core 1's range is points 4..7; the thread of core 0 may take the back of it before core 1's
      // thread starts (runtime/thread_pool.h, SharedRanges), so the first to fail is one of them.
      CHECK(e.where().core == 1);
      REQUIRE(e.where().grid_point.size() == 1);
      CHECK(e.where().grid_point[0] >= 4);
      CHECK(e.where().grid_point[0] < 8);
      CHECK(std::string(e.what()).find("out-of-bounds slice of `input 0 block`: ds(100, 4)") != std::string::npos);
    }
    pl::set_num_threads(0);
    // The process and later calls are unaffected.
    auto fine = pl::pallas_call([](pl::Ref x, pl::Ref o) { o() = x(); }, pl::GridSpec{}, pl::ShapeDtype({8}, pl::f32));
    CHECK(fine(pl::Array::arange(8, pl::f32)).at<float>({7}) == 7.0f);
  }
}
