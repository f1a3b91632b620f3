// Schedule exploration of an mpmd_map (InterpretParams::num_schedules, docs/design.md §4.15): every
// participant of the group takes turns under each seed, a schedule that fails or gives other outputs
// than the first is an error naming its seed, and `.random_seed = K, .num_schedules = 1` replays it
// with the same error text; of several participants failing under one seed, the first in the
// schedule's order is the one reported, whatever the host threads' timing.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <regex>
#include <set>

#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;
using doctest::Contains;

namespace {

constexpr int64_t kRows = 8, kCols = 128;

pl::CallOptions seeded(uint64_t seed, int64_t schedules,
                       pl::DmaExecutionMode mode = pl::DmaExecutionMode::on_wait) {
  pl::CallOptions o = testing::interpret(
      pl::InterpretParams{.dma_execution_mode = mode, .random_seed = seed, .num_schedules = schedules});
  o.name = "two_cores";
  return o;
}

// The seed a schedule-exploration error names first: the schedule that failed.
uint64_t failing_seed(const std::string& message) {
  std::smatch m;
  REQUIRE(std::regex_search(message, m, std::regex("random_seed=([0-9]+)")));
  return std::stoull(m[1].str());
}

std::string error_of(const std::function<void()>& run) { return testing::runtime_error_of(run); }

// testing::core_handoff over a ramp of 2 * kRows rows.
pl::Array handoff(const pl::CallOptions& options, bool ordered) {
  return testing::core_handoff(testing::ramp(2 * kRows, kCols), kRows, options, ordered);
}

// Two participants copy their own input block into the same output rows with copies of their own:
// the one whose copy lands last wins. With `ordered`, the second starts its copy only once the first
// signalled that its copy was waited for (a DMA semaphore per participant, a regular one between).
pl::Array two_copies_into_one_block(const pl::CallOptions& options, bool ordered) {
  auto first = [](pl::Ref x, pl::Ref out, pl::Ref mine, pl::Ref, pl::Ref done) {
    pl::async_copy(x.at(pl::ds(0, kRows)), out, mine).wait();
    pl::semaphore_signal(done);
  };
  auto second = [ordered](pl::Ref x, pl::Ref out, pl::Ref, pl::Ref mine, pl::Ref done) {
    if (ordered) pl::semaphore_wait(done);
    pl::async_copy(x.at(pl::ds(kRows, kRows)), out, mine).wait();
    if (!ordered) pl::semaphore_wait(done);  // every semaphore back at zero at the end
  };
  return pl::mpmd_map({{pl::CoreMesh("a", 1), first}, {pl::CoreMesh("b", 1), second}},
                      pl::ShapeDtype({kRows, kCols}, pl::f32),
                      {pl::SemaphoreType::DMA, pl::SemaphoreType::DMA, pl::SemaphoreType::REGULAR},
                      options)(testing::ramp(2 * kRows, kCols));
}

// Participant 1 signals participant 0, which takes the signal only if it already arrived when it
// looks (semaphore_read): a missing wait. When it looks too early, the shared semaphore is left at 1
// when the mpmd_map ends.
void missing_wait(const pl::CallOptions& options) {
  auto looks = [](pl::Ref, pl::Ref sem) { pl::when(pl::semaphore_read(sem) > 0, [&] { pl::semaphore_wait(sem); }); };
  auto signals = [](pl::Ref, pl::Ref sem) { pl::semaphore_signal(sem); };
  pl::mpmd_map({{pl::CoreMesh("looks", 1), looks}, {pl::CoreMesh("signals", 1), signals}}, pl::ShapeDtype({8}, pl::f32),
               {pl::SemaphoreType::REGULAR}, options)();
}

// Both cores copy a block in (a scheduling point each), then slice past the input's end: both fail,
// each naming itself; the seed decides which fails first.
void both_fail(const pl::CallOptions& options) {
  auto kernel = [](pl::Ref x, pl::Ref, pl::Ref buf) {
    const pl::Value c = pl::axis_index("core");
    pl::sync_copy(x.at(pl::ds(c * kRows, kRows)), buf);
    pl::sync_copy(x.at(pl::ds(c * kRows + 4 * kRows, kRows)), buf);
  };
  pl::mpmd_map({{pl::CoreMesh("core", 2), kernel}}, pl::ShapeDtype({kRows, kCols}, pl::f32),
               {pl::VMEM({kRows, kCols}, pl::f32)}, options)(testing::ramp(2 * kRows, kCols));
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("mpmd schedules: a handshake over a shared semaphore gives the same result under every schedule") {
    const pl::Array x = testing::ramp(2 * kRows, kCols);
    const std::vector<float> second = pl::dynamic_slice(x, {kRows, 0}, {kRows, kCols}).to_vector<float>();
    std::vector<float> expected = second;
    expected.insert(expected.end(), second.begin(), second.end());
    CHECK(handoff(seeded(0, 16), /*ordered=*/true).to_vector<float>() == expected);
    // Copies waited for on another participant (DMA semaphores) in a fixed order: the second wins.
    CHECK(two_copies_into_one_block(seeded(5, 16), /*ordered=*/true).to_vector<float>() == second);
  }

  TEST_CASE("mpmd schedules: unordered writes are found, named by seed, output and element, and replayed") {
    const pl::Array x = testing::ramp(2 * kRows, kCols);
    const std::string m = error_of([&] { handoff(seeded(0, 16), /*ordered=*/false); });
    INFO(m);
    CHECK(m.find("mpmd_map `two_cores`: output 0 depends on the schedule: at index (") == 0);
    CHECK(m.find("interleaving of cores and devices") != std::string::npos);
    const uint64_t k = failing_seed(m);
    CHECK(k > 0);
    CHECK(m.find(fmt::format(".random_seed = {}, .num_schedules = 1", k)) != std::string::npos);
    CHECK(m.find("under random_seed=0 (") != std::string::npos);  // the first schedule it differs from
    // The element named holds the two values the message quotes under the two seeds.
    std::smatch found;
    REQUIRE(std::regex_search(m, found, std::regex(R"(at index \((\d+), (\d+)\) it is (\S+) under random_seed=\d+ but (\S+) under)")));
    const std::vector<int64_t> index = {std::stoll(found[1]), std::stoll(found[2])};
    const pl::Array replayed = handoff(seeded(k, 1), false), first = handoff(seeded(0, 1), false);
    CHECK(fmt::format("{:.9g}", replayed.at<float>(index)) == found[3].str());
    CHECK(fmt::format("{:.9g}", first.at<float>(index)) == found[4].str());
    // The seed replays: the same outputs every time.
    CHECK(handoff(seeded(k, 1), false).to_vector<float>() == replayed.to_vector<float>());

    // The same with two copies (DMA semaphores) landing in one block in either order.
    const std::string copies = error_of([&] { two_copies_into_one_block(seeded(0, 16), false); });
    CHECK(copies.find("output 0 depends on the schedule") != std::string::npos);
    const uint64_t c = failing_seed(copies);
    const pl::Array a = two_copies_into_one_block(seeded(c, 1), false), b = two_copies_into_one_block(seeded(0, 1), false);
    CHECK(a.to_vector<float>() != b.to_vector<float>());
    CHECK(two_copies_into_one_block(seeded(c, 1), false).to_vector<float>() == a.to_vector<float>());
    const std::set<std::vector<float>> blocks = {pl::dynamic_slice(x, {0, 0}, {kRows, kCols}).to_vector<float>(),
                                                 pl::dynamic_slice(x, {kRows, 0}, {kRows, kCols}).to_vector<float>()};
    CHECK(blocks.count(a.to_vector<float>()) == 1);
    CHECK(blocks.count(b.to_vector<float>()) == 1);
  }

  TEST_CASE("mpmd schedules: a missing wait fails under some seed, and replaying it gives the same error text") {
    const std::string explored = error_of([&] { missing_wait(seeded(0, 16)); });
    INFO(explored);
    CHECK(explored.find("semaphore `scratch 0` is 1 when mpmd_map `two_cores` ends") != std::string::npos);
    const uint64_t k = failing_seed(explored);
    CHECK(explored.find(fmt::format("schedule: random_seed={} ({} of 16 explored)", k, k + 1)) != std::string::npos);
    // The replay's error is the schedule's, bit for bit: the explored one adds only the schedule line.
    const std::string replayed = error_of([&] { missing_wait(seeded(k, 1)); });
    const size_t where = replayed.find("\n  where:");
    REQUIRE(where != std::string::npos);
    CHECK(explored.rfind(replayed.substr(0, where) + "\n  schedule: random_seed=", 0) == 0);
    CHECK(explored.substr(explored.find("\n  where:")) == replayed.substr(where));
    for (int i = 0; i < 30; ++i) CHECK(error_of([&] { missing_wait(seeded(k, 1)); }) == replayed);
    // Seeds before k pass: exploration stops at the first schedule that fails.
    for (uint64_t s = 0; s < k; ++s) CHECK_NOTHROW(missing_wait(seeded(s, 1)));
  }

  TEST_CASE("mpmd schedules: of several participants failing under one seed, the first in schedule order is reported") {
    std::set<std::string> reported;
    for (uint64_t seed = 0; seed < 8; ++seed) {
      const std::string once = error_of([&] { both_fail(seeded(seed, 1)); });
      INFO(once);
      CHECK(once.find("out-of-bounds slice of `input 0`") != std::string::npos);
      // The same participant and text every time the seed runs, whichever thread the host ran first.
      for (int i = 0; i < 30; ++i) CHECK(error_of([&] { both_fail(seeded(seed, 1)); }) == once);
      reported.insert(once.substr(0, once.find(':')));
    }
    // Which core fails first is the schedule's to decide: both are reported under some seed.
    CHECK(reported == std::set<std::string>{"mpmd_map `two_cores`, function 0 (CoreMesh(\"core\", 2)) at core=0",
                                            "mpmd_map `two_cores`, function 0 (CoreMesh(\"core\", 2)) at core=1"});
    // Exploring names the first seed's failure with its seed.
    const std::string explored = error_of([&] { both_fail(seeded(3, 4)); });
    CHECK(explored.find("schedule: random_seed=3 (1 of 4 explored)") != std::string::npos);
  }

  TEST_CASE("mpmd schedules: a deadlock under exploration is the usual report naming its seed") {
    auto producer = [](pl::Ref, pl::Ref ready) { pl::semaphore_signal(ready); };
    auto consumer = [](pl::Ref, pl::Ref ready) { pl::semaphore_wait(ready, 2); };
    auto run = [&](uint64_t seed, int64_t schedules) {
      pl::CallOptions o = seeded(seed, schedules);
      o.name = "pc";
      return error_of([&] {
        pl::mpmd_map({{pl::CoreMesh("p", 1), producer}, {pl::CoreMesh("c", 1), consumer}}, pl::ShapeDtype({8}, pl::f32),
                     {pl::SemaphoreType::REGULAR}, o)();
      });
    };
    const std::string m = run(3, 4);
    CHECK(m.find("deadlock: nothing can make progress in mpmd_map `pc`") != std::string::npos);
    CHECK(m.find("function 1 (CoreMesh(\"c\", 1)) at c=0: semaphore_wait on semaphore `scratch 0`") != std::string::npos);
    CHECK(m.find("holds 1 of 2") != std::string::npos);
    CHECK(m.find("schedule: random_seed=3 (1 of 4 explored); replay it with InterpretParams{.dma_execution_mode = "
                 "pl::DmaExecutionMode::on_wait, .random_seed = 3, .num_schedules = 1}") != std::string::npos);
    CHECK(run(5, 1) == run(5, 1));
  }

  TEST_CASE("mpmd schedules: num_schedules below 1, or above 1 with eager copies, is a user error") {
    CHECK_THROWS_WITH_AS(handoff(seeded(0, 0), true),
                         Contains("mpmd_map `two_cores`: InterpretParams::num_schedules must be >= 1"), UserError);
    CHECK_THROWS_WITH_AS(handoff(seeded(0, -3), true), Contains("given: -3"), UserError);
    CHECK_THROWS_WITH_AS(handoff(seeded(0, 4, pl::DmaExecutionMode::eager), true),
                         Contains("fix:   set .dma_execution_mode = pl::DmaExecutionMode::on_wait"), UserError);
    // Eager copies run one schedule as before.
    const pl::Array x = testing::ramp(2 * kRows, kCols);
    CHECK(handoff(seeded(0, 1, pl::DmaExecutionMode::eager), true).to_vector<float>() ==
          handoff(seeded(0, 1), true).to_vector<float>());
  }
}
