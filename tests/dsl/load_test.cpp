// Load: many host threads calling the same and different kernels at once, compiled and interpreted.
// The compile cache (memory and disk) and launch are thread-safe: the first call of a shared call
// object races from every thread, identical kernels made by different threads race to the same
// cache entry, and every result is checked against the host's arithmetic.
#include <doctest/doctest.h>

#include <atomic>
#include <barrier>
#include <mutex>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "tests/support/cache_dir.h"
#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;

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
}
