// Soak: many launches on every launch path keep the process's memory flat, with a call that fails
// interleaved every few launches (a failure must not leak either). Resident memory is read before
// and after (after a warm-up, so caches, arenas and every program already exist); the slack is
// generous (allocators keep freed pages, sanitizers quarantine them) but far below what leaking each
// call's output would add. Each path is a test case of its own, so each is its own process under
// CTest. Nothing here times anything.
#include <doctest/doctest.h>

#include <fstream>
#include <functional>
#include <string>
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

// Each path's launches are divided by kScale. Under a sanitizer every launch is slower,
// ThreadSanitizer's most (measured with it: 9 ms a compiled launch, 20 ms an interpreted one, 180 ms
// a shard_map's): what counts there is that every path runs, fails and runs again under the checker;
// the release build's soaks are the ones long enough to show a leak in resident memory.
#if defined(__SANITIZE_THREAD__)
constexpr int kScale = 20;
#elif defined(__SANITIZE_ADDRESS__)
constexpr int kScale = 4;
#else
constexpr int kScale = 1;
#endif

// Every path's output: kBlocks blocks of kBlock f32 (256 KiB; a shard_map's, one per device).
constexpr int64_t kBlock = 4096, kBlocks = 16, kN = kBlock * kBlocks;
constexpr int kFailEvery = 10;  // one failing call after every 10th launch

// The block table of the gathering kernels: block i of the output is block table[i] of the input,
// here the blocks in reverse order; `bad`: the last entry is past the blocks, so the call fails
// late in its grid (sequential: dimension_semantics arbitrary).
pl::Array table(bool bad) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < kBlocks; ++i) t.push_back(static_cast<int32_t>(kBlocks - 1 - i));
  if (bad) t.back() = static_cast<int32_t>(kBlocks);
  return pl::Array::from_vector(t, {kBlocks}, pl::i32);
}

// What a gathering kernel gives for x: its blocks in reverse order, plus 1.
std::vector<float> gathered(const pl::Array& x) {
  const std::vector<float> in = x.to_vector<float>();
  std::vector<float> out(in.size());
  for (int64_t i = 0; i < kBlocks; ++i)
    for (int64_t e = 0; e < kBlock; ++e)
      out[static_cast<size_t>(i * kBlock + e)] = in[static_cast<size_t>((kBlocks - 1 - i) * kBlock + e)] + 1.0f;
  return out;
}

// A pallas_call gathering blocks by a scalar-prefetch table: its index map reads the table. The grid
// is sequential, so a bad table fails at its last steps.
auto gather_call(const pl::CallOptions& backend) {
  pl::CallOptions options = backend;
  options.compiler_params.dimension_semantics = {pl::arbitrary};
  const pl::BlockSpec by_table({kBlock}, [](pl::Value i, pl::Ref t) { return pl::idx(t(i)); });
  const pl::BlockSpec in_order({kBlock}, [](pl::Value i, pl::Ref) { return pl::idx(i); });
  return pl::pallas_call([](pl::Ref, pl::Ref x, pl::Ref o) { o() = x() + 1.0f; },
                         pl::PrefetchScalarGridSpec{
                             .num_scalar_prefetch = 1, .grid = {kBlocks}, .in_specs = {by_table}, .out_specs = {in_order}},
                         pl::ShapeDtype({kN}, pl::f32), options);
}

// On each of 2 devices along `x`: the gathering kernel (compiled) over the device's x with its own
// table, then psum over `x` (a collective kernel of remote copies). A bad table on device 1 fails it
// at its last block; device 0, left alone in the psum, fails as a consequence.
auto sharded_gather() {
  auto call = gather_call({});
  return pl::shard_map([call](const pl::Array& t, const pl::Array& x) { return pl::psum(call(t, x), "x"); },
                       pl::Mesh({2}, {"x"}), {pl::P("x"), pl::P("x")}, {pl::P()});
}

// An mpmd_map of two functions (compiled): two cores each copy their half of x to the output in
// chunks of kBlock, through their own VMEM buffer, adding 1, then signal; a third waits for both.
// Called with an input one chunk short, core 1's last copy is out of bounds (after the others) and
// the waiting core can never finish.
auto mpmd_copy() {
  auto copy = [](pl::Ref x, pl::Ref o, pl::Ref done, pl::Ref buf) {
    const pl::Value half = pl::axis_index("copy") * (kN / 2);
    pl::loop(0, kBlocks / 2, [&](pl::Value j) {
      pl::sync_copy(x.at(pl::ds(half + j * kBlock, kBlock)), buf);
      buf() = buf() + 1.0f;
      pl::sync_copy(buf, o.at(pl::ds(half + j * kBlock, kBlock)));
    });
    pl::semaphore_signal(done);
  };
  auto wait = [](pl::Ref, pl::Ref, pl::Ref done, pl::Ref) { pl::semaphore_wait(done, 2); };
  return pl::mpmd_map({{pl::CoreMesh("copy", 2), copy}, {pl::CoreMesh("wait", 1), wait}}, pl::ShapeDtype({kN}, pl::f32),
                      {pl::SemaphoreType::REGULAR, pl::VMEM({kBlock}, pl::f32)});
}

// A kernel over whole arrays in HBM that streams them through VMEM blocks with emit_pipeline
// (compiled), the input's blocks chosen by the scalar-prefetch table.
auto pipelined_gather() {
  auto kernel = [](pl::Ref t, pl::Ref x, pl::Ref o) {
    pl::emit_pipeline([](pl::Ref xb, pl::Ref ob) { ob() = xb() + 1.0f; },
                      {.grid = {kBlocks},
                       .in_specs = {pl::BlockSpec({kBlock}, [&](pl::Value i) { return pl::idx(t(i)); })},
                       .out_specs = {pl::BlockSpec({kBlock}, [](pl::Value i) { return pl::idx(i); })}})(x, o);
  };
  return pl::pallas_call(kernel,
                         pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1,
                                                    .in_specs = {pl::BlockSpec(pl::ANY)},
                                                    .out_specs = {pl::BlockSpec(pl::ANY)}},
                         pl::ShapeDtype({kN}, pl::f32));
}

// What a soak saw.
struct Soak {
  int64_t before = 0, after = 0;  // resident bytes after the warm-up, and at the last reading
  int wrong = 0;                  // good calls with a wrong result
  int not_failed = 0;             // failing calls that did not throw the expected error
  std::string unexpected;         // the first other error, if any
};

// `launches` calls of `good` (true when its result is right), with a call of `bad` after every
// kFailEvery-th (it throws; `error` must be in its message), after `warmup` rounds of both.
Soak soak(int launches, int warmup, const std::function<bool()>& good, const std::function<void()>& bad,
          const std::string& error) {
  Soak s;
  auto fail = [&] {
    try {
      bad();
      ++s.not_failed;
    } catch (const RuntimeError& e) {
      if (std::string(e.what()).find(error) == std::string::npos) {
        ++s.not_failed;
        if (s.unexpected.empty()) s.unexpected = e.what();
      }
    }
  };
  for (int i = 0; i < warmup; ++i) {
    good();
    if (i % kFailEvery == 0) fail();
  }
  s.before = s.after = resident_bytes();
  const int readings = std::max(1, launches / 10);
  for (int i = 0; i < launches; ++i) {
    s.wrong += !good();
    if (i % kFailEvery == kFailEvery - 1) fail();
    if (i % readings == readings - 1) {
      s.after = resident_bytes();
      if (s.after - s.before > kSlack) break;  // stop early rather than grow without bound
    }
  }
  return s;
}

// `output_bytes`: what one good launch returns.
void check(const Soak& s, int launches, int64_t output_bytes) {
  INFO("resident before " << s.before / kMiB << " MiB, after " << s.after / kMiB << " MiB");
  INFO("first unexpected error: " << s.unexpected);
  // Leaking every output would pass the slack: the soak can see a leak. (Not the shortened soaks
  // under a sanitizer; there AddressSanitizer's leak checker reports what a run leaks at exit.)
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  CHECK(launches * output_bytes > kSlack);
#else
  (void)launches;
  (void)output_bytes;
#endif
  CHECK(s.wrong == 0);
  CHECK(s.not_failed == 0);
  CHECK(s.after - s.before <= kSlack);
}

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

  // The gather pallas_call made with `options`, soaked with a failing call every 10 launches.
  void soak_gather_call(const pl::CallOptions& options) {
    auto call = gather_call(options);
    const pl::Array x = pl::Array::arange(kN, pl::f32), good = table(false), bad = table(true);
    const std::vector<float> want = gathered(x);
    const int launches = 10'000 / kScale;
    const Soak s = soak(
        launches, 50, [&] { return call(good, x).to_vector<float>() == want; }, [&] { call(bad, x); },
        "block of input 0 out of bounds");
    check(s, launches, kN * 4);
  }

  TEST_CASE("soak: a compiled pallas_call, with a failing call every 10 launches") { soak_gather_call({}); }

  TEST_CASE("soak: an interpreted pallas_call, with a failing call every 10 launches") {
    soak_gather_call(testing::interpret());
  }

  TEST_CASE("soak: a shard_map with a host collective, with a call failing on one device every 10 launches") {
    auto f = sharded_gather();
    const pl::Array x = pl::Array::arange(2 * kN, pl::f32);
    const pl::Array good = pl::concatenate({table(false), table(false)}, 0);
    const pl::Array bad = pl::concatenate({table(false), table(true)}, 0);
    // Device d gathers from its half of x; psum adds the two.
    const std::vector<float> d0 = gathered(pl::Array::arange(kN, pl::f32));
    std::vector<float> want = d0;
    for (float& v : want) v += v - 1.0f + static_cast<float>(kN) + 1.0f;  // device 1's x is device 0's + kN
    // Fewer: every call is two collective launches over 2 devices (the gather, then psum's exchange).
    const int launches = 1500 / kScale;
    const Soak s = soak(
        launches, 20, [&] { return pl::Array(f(good, x)).to_vector<float>() == want; }, [&] { f(bad, x); },
        "block of input 0 out of bounds");
    check(s, launches, 2 * kN * 4);
  }

  TEST_CASE("soak: an mpmd_map, with a call failing on one core every 10 launches") {
    auto call = mpmd_copy();
    const pl::Array x = pl::Array::arange(kN, pl::f32), short_x = pl::Array::arange(kN - kBlock, pl::f32);
    std::vector<float> want = x.to_vector<float>();
    for (float& v : want) v += 1.0f;
    const int launches = 5000 / kScale;
    const Soak s = soak(
        launches, 20, [&] { return call(x).to_vector<float>() == want; }, [&] { call(short_x); },
        "out-of-bounds slice of `input 0`");
    check(s, launches, kN * 4);
  }

  TEST_CASE("soak: an emit_pipeline kernel, with a failing call every 10 launches") {
    auto call = pipelined_gather();
    const pl::Array x = pl::Array::arange(kN, pl::f32), good = table(false), bad = table(true);
    const std::vector<float> want = gathered(x);
    const int launches = 10'000 / kScale;
    const Soak s = soak(
        launches, 50, [&] { return call(good, x).to_vector<float>() == want; }, [&] { call(bad, x); },
        "out of bounds");
    check(s, launches, kN * 4);
  }
}
