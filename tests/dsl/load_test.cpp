// Load: many host threads calling the same and different kernels at once, compiled and interpreted.
// The compile cache (memory and disk) and launch are thread-safe: the first call of a shared call
// object races from every thread, identical kernels made by different threads race to the same
// cache entry, and every result is checked against the host's arithmetic. The second case does the
// same over every launch path: shard_maps (remote copies, a host collective), mpmd_maps (alone and
// inside a shard_map) and pallas_calls at once, with calls failing on one device among them.
#include <doctest/doctest.h>

#include <atomic>
#include <barrier>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <unistd.h>

#include "tests/support/cache_dir.h"
#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;
using doctest::Contains;

namespace {

constexpr int kThreads = 8;
constexpr int kRounds = 25;
constexpr int64_t kN = 256;

// o = x * scale + offset over blocks of 64: its own kernel per (scale, offset).
auto affine_call(float scale, float offset, const pl::CallOptions& options) {
  auto kernel = [=](pl::Ref x, pl::Ref o) { o() = x() * scale + offset; };
  auto spec = pl::BlockSpec({64}, [](pl::Value i) { return pl::idx(i); });
  pl::CallOptions o = options;
  o.compiler_params.dimension_semantics = {pl::parallel};
  return pl::pallas_call(kernel, pl::GridSpec{.grid = {kN / 64}, .in_specs = {spec}, .out_specs = {spec}},
                         pl::ShapeDtype({kN}, pl::f32), o);
}

// Collects what the worker threads found; doctest's checks run on the main thread.
class Failures {
 public:
  void add(std::string what) {
    std::lock_guard lock(mutex_);
    if (list_.size() < 5) list_.push_back(std::move(what));
    ++count_;
  }
  int count() const { return count_; }
  std::string first() const { return list_.empty() ? "" : list_.front(); }

 private:
  std::mutex mutex_;
  std::vector<std::string> list_;
  int count_ = 0;
};

void expect(Failures& failures, const pl::Array& out, const pl::Array& x, float scale, float offset, const char* what) {
  std::vector<float> got = out.to_vector<float>(), in = x.to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != in[i] * scale + offset) {
      failures.add(fmt::format("{}: element {} is {}, expected {}", what, i, got[i], in[i] * scale + offset));
      return;
    }
}


// ---- every launch path: mesh kernels over blocks of kRows x kCols per device or core ----

constexpr int64_t kRows = 8, kCols = 128;
constexpr int kRing = 4;  // devices in the ring of ring_shift
// Fewer rounds under a sanitizer: its threads run several times slower, and the interleavings, not
// the count, are what it checks.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kPathRounds = 5;
#else
constexpr int kPathRounds = 20;
#endif

// Integer-valued floats in [-30, 30]: exact under any order of sums, different for every seed.
pl::Array integers(const pl::Shape& shape, int seed) {
  std::vector<float> v(static_cast<size_t>(num_elements(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((static_cast<int64_t>(i) * 7 + seed * 13) % 61 - 30);
  return pl::Array::from_vector(v, shape);
}

// Device d of a ring along `x` sends its block (kRows x kCols) to device d + 1 by a remote copy and
// receives device d - 1's.
void ring_kernel(pl::Ref in, pl::Ref out, pl::Ref send, pl::Ref recv) {
  const pl::Value next = (pl::axis_index("x") + 1) % kRing;
  auto copy = pl::make_async_remote_copy(in, out, send, recv, pl::DeviceId({{"x", next}}));
  copy.start();
  copy.wait();
}

// The ring over a mesh of kRing devices, every device calling one pallas_call object (shared by
// every device of every call of the shard_map).
auto ring_shift(const pl::CallOptions& backend) {
  auto call = pl::pallas_call(ring_kernel,
                              pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                                           .out_specs = {pl::BlockSpec(pl::ANY)},
                                           .scratch_shapes = {pl::SemaphoreType::DMA, pl::SemaphoreType::DMA}},
                              pl::ShapeDtype({kRows, kCols}, pl::f32), backend);
  return pl::shard_map([call](const pl::Array& block) { return call(block); }, pl::Mesh({kRing}, {"x"}), {pl::P("x")},
                       {pl::P("x")});
}

// The same ring, each device making its own pallas_call at every call (testing::on_every_device):
// the same kernel traced again and found in the compile cache.
auto ring_shift_traced_per_call(const pl::CallOptions& backend) {
  return testing::on_every_device(ring_kernel, pl::Mesh({kRing}, {"x"}), pl::P("x"),
                                  {pl::SemaphoreType::DMA, pl::SemaphoreType::DMA}, backend);
}

bool ring_shifted(const pl::Array& out, const pl::Array& x) {
  const std::vector<float> got = out.to_vector<float>(), in = x.to_vector<float>();
  const size_t block = static_cast<size_t>(kRows * kCols);
  for (size_t d = 0; d < static_cast<size_t>(kRing); ++d)
    for (size_t e = 0; e < block; ++e)
      if (got[d * block + e] != in[(d + kRing - 1) % kRing * block + e]) return false;
  return true;
}

constexpr int64_t kTableBlocks = 4;  // blocks of kCols per device in table_sum

// On each of 2 devices along `y`: block i of the output = block table[i] of the device's x, plus 1
// (the block index read from a scalar-prefetch table); then psum over `y` (a collective kernel).
// A table entry past the blocks fails on that device, and the other, left alone in the psum, fails
// as a consequence.
auto table_sum(const pl::CallOptions& backend) {
  pl::CallOptions options = backend;
  options.compiler_params.dimension_semantics = {pl::arbitrary};
  const pl::BlockSpec by_table({kCols}, [](pl::Value i, pl::Ref table) { return pl::idx(table(i)); });
  const pl::BlockSpec in_order({kCols}, [](pl::Value i, pl::Ref) { return pl::idx(i); });
  auto gather = pl::pallas_call([](pl::Ref, pl::Ref x, pl::Ref o) { o() = x() + 1.0f; },
                                pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1,
                                                           .grid = {kTableBlocks},
                                                           .in_specs = {by_table},
                                                           .out_specs = {in_order}},
                                pl::ShapeDtype({kTableBlocks * kCols}, pl::f32), options);
  return pl::shard_map([gather](const pl::Array& table, const pl::Array& x) { return pl::psum(gather(table, x), "y"); },
                       pl::Mesh({2}, {"y"}), {pl::P("y"), pl::P("y")}, {pl::P()});
}

// Tables for table_sum: both devices' blocks in reverse order; `bad`: device 1's last entry is past
// its blocks.
pl::Array table(bool bad) {
  std::vector<int32_t> t;
  for (int d = 0; d < 2; ++d)
    for (int64_t i = 0; i < kTableBlocks; ++i) t.push_back(static_cast<int32_t>(kTableBlocks - 1 - i));
  if (bad) t.back() = static_cast<int32_t>(kTableBlocks);
  return pl::Array::from_vector(t, {2 * kTableBlocks}, pl::i32);
}

bool table_summed(const pl::Array& out, const pl::Array& x) {
  const std::vector<float> got = out.to_vector<float>(), in = x.to_vector<float>();
  const int64_t device = kTableBlocks * kCols;
  for (int64_t i = 0; i < kTableBlocks; ++i)
    for (int64_t e = 0; e < kCols; ++e) {
      const int64_t from = (kTableBlocks - 1 - i) * kCols + e;
      if (got[static_cast<size_t>(i * kCols + e)] != (in[static_cast<size_t>(from)] + 1.0f) + (in[static_cast<size_t>(device + from)] + 1.0f))
        return false;
    }
  return true;
}

// An mpmd_map of two functions: two producer cores write 2 * their half of x into shared HBM
// scratch and signal; the consumer core waits for both and writes the scratch + 1: o = 2 * x + 1.
auto handoff(const pl::CallOptions& backend) {
  auto produce = [](pl::Ref x, pl::Ref, pl::Ref stage, pl::Ref ready, pl::Ref buf) {
    const pl::Value p = pl::axis_index("producer");
    pl::sync_copy(x.at(pl::ds(p * kRows, kRows)), buf);
    buf() = buf() * 2.0f;
    pl::sync_copy(buf, stage.at(pl::ds(p * kRows, kRows)));
    pl::semaphore_signal(ready);
  };
  auto consume = [](pl::Ref, pl::Ref o, pl::Ref stage, pl::Ref ready, pl::Ref buf) {
    pl::semaphore_wait(ready, 2);
    for (int64_t half = 0; half < 2; ++half) {
      pl::sync_copy(stage.at(pl::ds(half * kRows, kRows)), buf);
      buf() = buf() + 1.0f;
      pl::sync_copy(buf, o.at(pl::ds(half * kRows, kRows)));
    }
  };
  return pl::mpmd_map({{pl::CoreMesh("producer", 2), produce}, {pl::CoreMesh("consumer", 1), consume}},
                      pl::ShapeDtype({2 * kRows, kCols}, pl::f32),
                      {pl::HBM({2 * kRows, kCols}, pl::f32), pl::SemaphoreType::REGULAR, pl::VMEM({kRows, kCols}, pl::f32)},
                      backend);
}

bool handed_off(const pl::Array& out, const pl::Array& x) {
  const std::vector<float> got = out.to_vector<float>(), in = x.to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != 2.0f * in[i] + 1.0f) return false;
  return true;
}

// A core_map inside shard_map: each of 2 devices along `d` runs one shared mpmd_map over its 2 cores
// (a program per device: the device's coordinate is a number of the trace); core c of device d adds
// 10 * d + c to its rows.
auto cores_of_devices(const pl::CallOptions& backend) {
  auto kernel = [](pl::Ref x, pl::Ref o) {
    const pl::Value c = pl::axis_index("core");
    const pl::Value tag = (pl::axis_index("d") * 10 + c).astype(pl::f32);
    pl::run_scoped(
        [&](pl::Ref buf) {
          pl::sync_copy(x.at(pl::ds(c * kRows, kRows)), buf);
          buf() = buf() + tag;
          pl::sync_copy(buf, o.at(pl::ds(c * kRows, kRows)));
        },
        pl::VMEM({kRows, kCols}, pl::f32));
  };
  auto per_device = pl::mpmd_map({{pl::CoreMesh("core", 2), kernel}}, pl::ShapeDtype({2 * kRows, kCols}, pl::f32), {},
                                 backend);
  return pl::shard_map([per_device](const pl::Array& block) { return per_device(block); }, pl::Mesh({2}, {"d"}),
                       {pl::P("d")}, {pl::P("d")});
}

// `call` on each of 2 devices along `y`, on its half of the array.
template <class Call>
auto on_two_devices(Call call) {
  return pl::shard_map([call](const pl::Array& block) { return call(block); }, pl::Mesh({2}, {"y"}), {pl::P("y")},
                       {pl::P("y")});
}

bool cores_tagged(const pl::Array& out, const pl::Array& x) {
  const std::vector<float> got = out.to_vector<float>(), in = x.to_vector<float>();
  const size_t rows = static_cast<size_t>(kRows * kCols);
  for (size_t i = 0; i < got.size(); ++i) {
    const size_t d = i / (2 * rows), c = i / rows % 2;
    if (got[i] != in[i] + static_cast<float>(10 * d + c)) return false;
  }
  return true;
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("load: many threads call the same and different kernels at once, compiled and interpreted") {
    testing::CacheDir cache("load");  // an empty disk cache: the threads race to fill it
    auto shared = affine_call(2.0f, 1.0f, {});
    auto shared_interpreted = affine_call(2.0f, 1.0f, testing::interpret());
    Failures failures;
    std::barrier start(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        // Threads t and t + kThreads / 2 make the same kernel from separate call objects.
        const float scale = 3.0f + static_cast<float>(t % (kThreads / 2)), offset = -static_cast<float>(t % (kThreads / 2));
        auto own = affine_call(scale, offset, {});
        pl::Array x = pl::Array::random_uniform({kN}, pl::f32, static_cast<uint64_t>(t), -8, 8);
        start.arrive_and_wait();  // every thread's first call at once
        try {
          for (int r = 0; r < kRounds; ++r) {
            expect(failures, shared(x), x, 2.0f, 1.0f, "shared call");
            expect(failures, own(x), x, scale, offset, "own call");
            if (r % 5 == t % 5) expect(failures, shared_interpreted(x), x, 2.0f, 1.0f, "shared interpreted call");
          }
        } catch (const std::exception& e) {
          failures.add(fmt::format("thread {} threw: {}", t, e.what()));
        }
      });
    for (std::thread& t : threads) t.join();
    INFO(failures.first());
    CHECK(failures.count() == 0);
  }

  TEST_CASE("load: many threads run shard_maps, mpmd_maps and pallas_calls at once, some failing, compiled and interpreted") {
    testing::CacheDir cache("load_paths");
    // The directory is this process's own: the same test of another build running at once on this
    // machine once removed it under this one (a std::filesystem error in ~CacheDir, then abort).
    CHECK(cache.path().filename().string().ends_with("_" + std::to_string(getpid())));
    // Shared objects, [0] compiled and [1] interpreted; each thread also makes its own of some.
    const std::vector<pl::CallOptions> backends{{}, testing::interpret()};
    std::vector<decltype(ring_shift({}))> rings;
    std::vector<decltype(table_sum({}))> sums;
    std::vector<decltype(handoff({}))> handoffs;
    std::vector<decltype(cores_of_devices({}))> nested;
    std::vector<decltype(affine_call(0, 0, {}))> affines;
    for (const pl::CallOptions& b : backends) {
      rings.push_back(ring_shift(b));
      sums.push_back(table_sum(b));
      handoffs.push_back(handoff(b));
      nested.push_back(cores_of_devices(b));
      affines.push_back(affine_call(2.0f, 1.0f, b));
    }
    // The same pallas_call objects also run on the devices of a mesh: one object's programs for no
    // mesh and for a mesh, made and found by many threads at once.
    std::vector<decltype(on_two_devices(affines[0]))> affines_on_mesh;
    for (const auto& a : affines) affines_on_mesh.push_back(on_two_devices(a));
    Failures failures;
    std::atomic<int> failed_as_expected{0};
    std::barrier start(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        const pl::CallOptions& own_backend = backends[static_cast<size_t>(t % 2)];
        auto own_ring = ring_shift_traced_per_call(own_backend);
        auto own_handoff = handoff(own_backend);
        start.arrive_and_wait();  // every thread's first calls at once
        for (int r = 0; r < kPathRounds; ++r) {
          const size_t b = static_cast<size_t>((t + r) % 2);  // threads alternate backends, round by round
          const char* backend = b == 0 ? "compiled" : "interpreted";
          auto check = [&](bool ok, const char* what) {
            if (!ok) failures.add(fmt::format("thread {} round {}: {} {} gave a wrong result", t, r, backend, what));
          };
          try {
            const int seed = t * 100 + r;
            const pl::Array ring_in = integers({kRing * kRows, kCols}, seed);
            check(ring_shifted(pl::Array(rings[b](ring_in)), ring_in), "shared ring shard_map");
            check(ring_shifted(pl::Array(own_ring(ring_in)), ring_in), "own ring shard_map");
            const pl::Array sum_in = integers({2 * kTableBlocks * kCols}, seed + 1);
            check(table_summed(pl::Array(sums[b](table(false), sum_in)), sum_in), "psum shard_map");
            if ((t + r) % 3 == 0) {
              // One device fails while other threads run the same shard_map: the caller sees that
              // device's error, the other threads' calls are untouched.
              try {
                sums[b](table(true), sum_in);
                failures.add(fmt::format("thread {} round {}: {} psum shard_map with a bad table did not fail", t, r, backend));
              } catch (const RuntimeError& e) {
                if (std::string(e.what()).find("block of input 0 out of bounds") == std::string::npos)
                  failures.add(fmt::format("thread {} round {}: {} psum shard_map failed with another error: {}", t, r,
                                           backend, e.what()));
                else
                  ++failed_as_expected;
              }
            }
            const pl::Array pair_in = integers({2 * kRows, kCols}, seed + 2);
            check(handed_off(handoffs[b](pair_in), pair_in), "shared mpmd_map");
            if ((t + r) % 3 == 1) {
              // An input 4 rows short: producer 1's copy is out of bounds, and the consumer, left
              // waiting, fails as a consequence; the caller sees the producer's error.
              try {
                handoffs[b](integers({2 * kRows - 4, kCols}, seed));
                failures.add(fmt::format("thread {} round {}: {} mpmd_map with a short input did not fail", t, r, backend));
              } catch (const RuntimeError& e) {
                if (std::string(e.what()).find("at producer=1: out-of-bounds slice of `input 0`") == std::string::npos)
                  failures.add(fmt::format("thread {} round {}: {} mpmd_map failed with another error: {}", t, r, backend,
                                           e.what()));
                else
                  ++failed_as_expected;
              }
            }
            check(handed_off(own_handoff(pair_in), pair_in), "own mpmd_map");
            const pl::Array nested_in = integers({4 * kRows, kCols}, seed + 3);
            check(cores_tagged(pl::Array(nested[b](nested_in)), nested_in), "mpmd_map in shard_map");
            const pl::Array x = integers({kN}, seed + 4);
            expect(failures, affines[b](x), x, 2.0f, 1.0f, "shared pallas_call");
            const pl::Array both = integers({2 * kN}, seed + 5);
            expect(failures, pl::Array(affines_on_mesh[b](both)), both, 2.0f, 1.0f, "shared pallas_call on a mesh");
          } catch (const std::exception& e) {
            failures.add(fmt::format("thread {} round {} ({}) threw: {}", t, r, backend, e.what()));
          }
        }
      });
    for (std::thread& t : threads) t.join();
    INFO(failures.first());
    CHECK(failures.count() == 0);
    int expected_failures = 0;
    for (int t = 0; t < kThreads; ++t)
      for (int r = 0; r < kPathRounds; ++r) expected_failures += (t + r) % 3 == 0 || (t + r) % 3 == 1;
    CHECK(failed_as_expected.load() == expected_failures);
  }
}
