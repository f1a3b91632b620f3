// Soak: 10,000 launches of one kernel keep the process's memory flat. Resident memory is read
// before and after (after a warm-up, so caches and arenas already exist); the slack is generous
// (allocators keep freed pages, sanitizers quarantine them) but far below what leaking each call's
// output would add. Nothing here times anything.
#include <doctest/doctest.h>

#include <fstream>
#include <unistd.h>

#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;

namespace {

// Resident set size in bytes, from /proc/self/statm.
int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

constexpr int64_t kMiB = int64_t{1} << 20;

// AddressSanitizer holds freed memory in a quarantine (256 MiB by default) before reusing it.
#if defined(__SANITIZE_ADDRESS__)
constexpr int64_t kSlack = 384 * kMiB;
#else
constexpr int64_t kSlack = 128 * kMiB;
#endif

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("soak: 10,000 launches keep resident memory flat") {
    constexpr int64_t n = 16 * 1024;  // a 64 KiB output per launch: leaking them would add 640 MiB
    constexpr int kLaunches = 10'000, kWarmup = 200;
    auto kernel = [](pl::Ref x, pl::Ref o) { o() = x() + 1.0f; };
    auto spec = pl::BlockSpec({n / 4}, [](pl::Value i) { return pl::idx(i); });
    auto call = pl::pallas_call(kernel, pl::GridSpec{.grid = {4}, .in_specs = {spec}, .out_specs = {spec}},
                                pl::ShapeDtype({n}, pl::f32),
                                {.compiler_params = {.dimension_semantics = {pl::parallel}}});
    pl::Array x = pl::Array::arange(n, pl::f32);
    for (int i = 0; i < kWarmup; ++i) call(x);
    const int64_t before = resident_bytes();
    int64_t after = before;
    int wrong = 0;
    for (int i = 0; i < kLaunches; ++i) {
      pl::Array out = call(x);
      wrong += out.at<float>({i % n}) != static_cast<float>(i % n + 1);
      if (i % 1000 == 999) {
        after = resident_bytes();
        if (after - before > kSlack) break;  // stop early rather than grow without bound
      }
    }
    INFO("resident before " << before / kMiB << " MiB, after " << after / kMiB << " MiB");
    CHECK(wrong == 0);
    CHECK(after - before <= kSlack);
  }
}
