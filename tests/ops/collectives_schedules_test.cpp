// The library's ring collectives (ops/collectives) under schedule exploration (docs/design.md §4.15):
// race-free kernels give the same bits under every interleaving of the devices a seed draws.
#include <doctest/doctest.h>

#include <tessera/collectives.hpp>

#include <cstring>

using namespace tessera;
namespace pl = tessera;
namespace cl = tessera::collectives;

TEST_SUITE("ops") {
  TEST_CASE("collectives: ring reduce-scatter, all-gather and all-reduce agree under every explored schedule") {
    const pl::Mesh mesh({4}, {"x"});
    const pl::Array x = pl::Array::random_normal({4 * 16, 24}, pl::f32, 5);
    auto run = [&](const pl::InterpretParams& params) {
      // Small blocks: many copies, semaphore waits and capacity signals per ring step.
      const cl::Options o{.block_elements = 64, .interpret = params};
      return std::vector<pl::Array>{
          pl::shard_map([&](const pl::Array& b) { return cl::reduce_scatter(b, "x", 0, o); }, mesh, {pl::P("x")},
                        {pl::P("x")})(x)
              .gather(),
          pl::shard_map([&](const pl::Array& b) { return cl::all_gather(b, "x", 0, o); }, mesh, {pl::P("x")}, {pl::P()})(x)
              .gather(),
          pl::shard_map([&](const pl::Array& b) { return cl::all_reduce(b, "x", o); }, mesh, {pl::P("x")}, {pl::P()})(x)
              .gather()};
    };
    const std::vector<pl::Array> free_running = run(pl::InterpretParams{});
    // Exploration throws if any schedule fails or differs from the first; the first must also be the
    // free-running result (the ring's sums run in a fixed order).
    const std::vector<pl::Array> explored =
        run(pl::InterpretParams{.dma_execution_mode = pl::DmaExecutionMode::on_wait, .random_seed = 3, .num_schedules = 6});
    for (size_t i = 0; i < free_running.size(); ++i) {
      INFO("collective " << i);
      REQUIRE(explored[i].nbytes() == free_running[i].nbytes());
      CHECK(std::memcmp(explored[i].data(), free_running[i].data(), static_cast<size_t>(free_running[i].nbytes())) == 0);
    }
  }
}
