// The compiled backend seen from a pallas_call: the disk cache across processes, TESSERA_INTERPRET and
// the other variables a call reads, and failures inside compiled code coming back as RuntimeErrors. (The code generator, ORC and the
// caches on their own are tested in llvm_tests.)
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "tests/support/cache_dir.h"
#include "tests/support/kernels.h"
#include "tests/support/scoped_env.h"
#include "tests/support/user_error.h"

using namespace tessera;
namespace pl = tessera;
namespace fs = std::filesystem;

namespace {

// What reads the environment in a child process (see below): a pallas_call, which reads
// TESSERA_NUM_THREADS and TESSERA_DMA (every launch does, until a read succeeds); a shard_map whose
// kernel communicates, or one calling a host collective (a tessera kernel that communicates), which
// read TESSERA_CHAOS_US; pl::num_threads() and pl::set_num_threads(0), which read
// TESSERA_NUM_THREADS outside any call.
enum class Reader { call, collective_kernel, host_collective, num_threads, set_num_threads };
constexpr const char* kReaderNames[] = {"call", "collective_kernel", "host_collective", "num_threads", "set_num_threads"};

// Runs `reader` and checks its result. `*line`: the line of the user's call that reads the
// variables, where an invalid value is reported.
void call_reading_environment(Reader reader, int* line) {
  if (reader == Reader::num_threads) {
    *line = __LINE__ + 1;
    const int threads = pl::num_threads();  // outside CHECK, which would catch its error
    CHECK(threads >= 1);
    return;
  }
  if (reader == Reader::set_num_threads) {
    *line = __LINE__ + 1;
    pl::set_num_threads(0);
    CHECK(pl::num_threads() >= 1);
    return;
  }
  if (reader == Reader::call) {
    auto copy = pl::pallas_call([](pl::Ref x, pl::Ref o) { o() = x() + 1.0f; }, pl::GridSpec{},
                                pl::ShapeDtype({4}, pl::f32));
    *line = __LINE__ + 1;
    const pl::Array out = copy(pl::Array::arange(4, pl::f32));  // outside CHECK, which would catch its error
    CHECK(out.at<float>({3}) == 4.0f);
    return;
  }
  pl::Mesh mesh({2}, {"i"});
  if (reader == Reader::host_collective) {
    // The collective's kernel is tessera's; the psum is the user's call.
    *line = __LINE__ + 1;
    auto f = pl::shard_map([](const pl::Array& x) { return pl::psum(x, "i"); }, mesh, {pl::P("i")}, {pl::P("i")});
    const pl::Array out = f(pl::Array::arange(2, pl::f32));
    CHECK(out.to_vector<float>() == std::vector<float>{1, 1});
    return;
  }
  auto ring = [](pl::Ref o) {
    pl::Ref barrier = pl::get_barrier_semaphore();
    pl::semaphore_signal(barrier, 1, pl::DeviceId({(pl::axis_index("i") + 1) % 2}));
    pl::semaphore_wait(barrier, 1);
    o() = pl::zeros_like(o) + 1.0f;
  };
  // The kernel's launch on each device reads the variable: the call inside the function is the one.
  *line = __LINE__ + 4;
  auto f = pl::shard_map(
      [&](const pl::Array&) {
        auto call = pl::pallas_call(ring, pl::GridSpec{}, pl::ShapeDtype({1}, pl::f32), {.compiler_params = {.collective_id = 5}});
        return call();
      },
      mesh, {pl::P("i")}, {pl::P("i")});
  const pl::Array out = f(pl::Array::zeros({2}, pl::f32));
  CHECK(out.to_vector<float>() == std::vector<float>{1, 1});
}

// The environment variable a run of this binary in a process of its own checks (see below).
constexpr const char* kChildVariable = "COMPILED_TEST_BAD_VARIABLE";
constexpr const char* kChildValue = "COMPILED_TEST_BAD_VALUE";
constexpr const char* kChildReader = "COMPILED_TEST_READER";  // a kReaderNames entry
constexpr const char* kBadValueCase = "compiled: a bad thread count or DMA mode or delay fails the call that reads it";

}  // namespace

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
    // A value that is neither on nor off fails the call that reads it (it used to mean on), at the
    // line where the call is made; the next call, with the variable unset, works.
    setenv("TESSERA_INTERPRET", "maybe", 1);
    CHECK_THROWS_WITH_AS(make(), doctest::Contains("TESSERA_INTERPRET=maybe"), UserError);
    int line = 0;
    try {
      line = __LINE__ + 1;
      (void)pl::pallas_call([](pl::Ref x, pl::Ref o) { o() = x(); }, pl::GridSpec{}, pl::ShapeDtype({4}, pl::f32));
      FAIL("expected a UserError");
    } catch (const UserError& e) {
      CHECK(e.loc().line == static_cast<uint32_t>(line));
      CHECK(e.loc().str().find("compiled_test.cpp") != std::string::npos);
    }
    unsetenv("TESSERA_INTERPRET");
    CHECK_FALSE(make().interpreted());
  }

  TEST_CASE("compiled: an invalid TESSERA_INTERPRET reached through a host collective points at the collective's line") {
    // The collective keeps its call object per setting (dsl/kept_call.h): the read is the psum's.
    pl::Mesh mesh({2}, {"i"});
    const int line = __LINE__ + 1;
    auto f = pl::shard_map([](const pl::Array& x) { return pl::psum(x, "i"); }, mesh, {pl::P("i")}, {pl::P("i")});
    {
      testing::ScopedEnv interpret("TESSERA_INTERPRET", "maybe");
      testing::check_user_error_at(line, "compiled_test.cpp", [&] { (void)f(pl::Array::arange(2, pl::f32)); },
                                   "TESSERA_INTERPRET=maybe");
    }
    const pl::Array out = f(pl::Array::arange(2, pl::f32));
    CHECK(out.to_vector<float>() == std::vector<float>{1, 1});
  }

  TEST_CASE("compiled: an invalid setting a call's compile reads points at the call's line") {
    // TESSERA_DUMP_IR is read whenever a kernel is lowered: by the first call for a signature.
    auto call = pl::pallas_call([](pl::Ref x, pl::Ref o) { o() = x(); }, pl::GridSpec{}, pl::ShapeDtype({4}, pl::f32));
    const pl::Array x = pl::Array::arange(4, pl::f32);
    {
      testing::ScopedEnv dump("TESSERA_DUMP_IR", "everything");
      int line = 0;
      try {
        line = __LINE__ + 1;
        call(x);
        FAIL("expected a UserError");
      } catch (const UserError& e) {
        CHECK(std::string(e.what()).find("TESSERA_DUMP_IR=everything") != std::string::npos);
        CHECK(e.loc().line == static_cast<uint32_t>(line));
      }
      // The same for an mpmd_map, as it is made (TESSERA_INTERPRET) and as it is called.
      auto copy = [](pl::Ref x, pl::Ref o) { pl::sync_copy(x, o); };
      try {
        line = __LINE__ + 1;
        pl::mpmd_map({{pl::CoreMesh("c", 1), copy}}, pl::ShapeDtype({4}, pl::f32))(x);
        FAIL("expected a UserError");
      } catch (const UserError& e) {
        CHECK(std::string(e.what()).find("TESSERA_DUMP_IR=everything") != std::string::npos);
        CHECK(e.loc().line == static_cast<uint32_t>(line));
      }
      dump.set(nullptr);
      testing::ScopedEnv interpret("TESSERA_INTERPRET", "maybe");
      try {
        line = __LINE__ + 1;
        (void)pl::mpmd_map({{pl::CoreMesh("c", 1), copy}}, pl::ShapeDtype({4}, pl::f32));
        FAIL("expected a UserError");
      } catch (const UserError& e) {
        CHECK(std::string(e.what()).find("TESSERA_INTERPRET=maybe") != std::string::npos);
        CHECK(e.loc().line == static_cast<uint32_t>(line));
      }
    }
    CHECK(call(x).to_vector<float>() == x.to_vector<float>());
  }

  TEST_CASE(kBadValueCase) {
    // These variables are read once per process, by its first launch that needs them (an invalid value
    // is not kept: the next launch reads it again), so each is checked in a fresh process: this binary
    // run again for this case alone, with the variable, its value and what reads it passed in
    // kChildVariable/Value/Reader.
    if (const char* child = std::getenv(kChildVariable)) {
      const std::string name = child, value = std::getenv(kChildValue), reader_name = std::getenv(kChildReader);
      const auto named = std::find(std::begin(kReaderNames), std::end(kReaderNames), reader_name);
      REQUIRE(named != std::end(kReaderNames));
      const auto reader = static_cast<Reader>(named - std::begin(kReaderNames));
      {
        testing::ScopedEnv bad(name.c_str(), value.c_str());
        int line = 0;
        try {
          call_reading_environment(reader, &line);
          FAIL("expected a UserError");
        } catch (const UserError& e) {
          CHECK_MESSAGE(std::string(e.what()).find(fmt::format("{}={}", name, value)) != std::string::npos, e.what());
          // At the line of the call that read it.
          CHECK_MESSAGE(e.loc().line == static_cast<uint32_t>(line), e.what());
          CHECK_MESSAGE(std::string(e.what()).find(fmt::format("compiled_test.cpp:{}", line)) != std::string::npos, e.what());
        }
      }
      // Once the variable is unset, the next call works.
      int line = 0;
      call_reading_environment(reader, &line);
      return;
    }
    const std::string self = fs::read_symlink("/proc/self/exe").string();
    const std::string log = (fs::temp_directory_path() / fmt::format("tessera_bad_env_{}.log", ::getpid())).string();
    struct Run {
      const char* name;
      const char* value;
      Reader reader;
    };
    for (const Run& r : {Run{"TESSERA_NUM_THREADS", "abc", Reader::call}, Run{"TESSERA_NUM_THREADS", "0", Reader::num_threads},
                         Run{"TESSERA_NUM_THREADS", "-2", Reader::set_num_threads}, Run{"TESSERA_DMA", "fast", Reader::call},
                         Run{"TESSERA_CHAOS_US", "abc", Reader::collective_kernel},
                         Run{"TESSERA_CHAOS_US", "abc", Reader::host_collective}}) {
      CAPTURE(r.name);
      CAPTURE(kReaderNames[static_cast<int>(r.reader)]);
      const std::string run = fmt::format("{}={} {}={} {}={} '{}' -tc='{}' > {} 2>&1", kChildVariable, r.name, kChildValue,
                                          r.value, kChildReader, kReaderNames[static_cast<int>(r.reader)], self,
                                          kBadValueCase, log);
      const int rc = std::system(run.c_str());
      const std::string out = testing::slurp(log);
      CHECK_MESSAGE(rc == 0, out);
      CHECK_MESSAGE(out.find(" 1 passed") != std::string::npos, out);  // the case ran, in the child
    }
    fs::remove(log);
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
