// Race detection in the interpreter (InterpretParams::detect_races, docs/design.md §4.17): a true
// positive for every kind of race and its fixed kernel reporting nothing, the seeds' kernels race-free
// under eager and on_wait copies on 1 and 2 cores, results unchanged by detection, and what a report
// says.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <string>

#include "examples/double_buffering.h"
#include "examples/seed_distributed.h"
#include "examples/seed_matmul.h"
#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;
using doctest::Contains;

namespace {

// Interpreted with race detection, under `mode` copies on `cores` cores.
pl::CallOptions detecting(pl::DmaExecutionMode mode = pl::DmaExecutionMode::eager, int cores = 1) {
  pl::InterpretParams p;
  p.detect_races = true;
  p.dma_execution_mode = mode;
  p.num_cores_or_threads = cores;
  p.random_seed = 3;
  return testing::interpret(p);
}

// The same options without detection.
pl::CallOptions without_detection(pl::CallOptions o) {
  o.interpret->detect_races = false;
  return o;
}

// Every combination the seeds' kernels must be race-free under.
struct Setting {
  pl::DmaExecutionMode mode;
  int cores;
};
constexpr Setting kSettings[] = {{pl::DmaExecutionMode::eager, 1},
                                 {pl::DmaExecutionMode::eager, 2},
                                 {pl::DmaExecutionMode::on_wait, 1},
                                 {pl::DmaExecutionMode::on_wait, 2}};

// Runs `call(options)` with detection in every setting: no race, and the same bits as without it.
template <class Call>
void check_race_free(Call call) {
  for (const Setting& s : kSettings) {
    INFO("on_wait: " << (s.mode == pl::DmaExecutionMode::on_wait) << ", cores: " << s.cores);
    const pl::CallOptions options = detecting(s.mode, s.cores);
    const pl::Array plain = call(without_detection(options));
    CHECK_FALSE(pl::races_found());
    const pl::Array checked = call(options);
    for (const pl::RaceReport& r : pl::race_reports()) FAIL_CHECK(r.message);
    CHECK(pl::allclose(checked, plain, 0, 0));
  }
}

std::string file_line(int line) { return fmt::format("races_test.cpp:{}", line); }

// Whether `message` names `access`, then the user's file:line `line` (after the path the build gave).
bool names(const std::string& message, const std::string& access, int line) {
  const size_t at = message.find(access + " at ");
  return at != std::string::npos && message.find(file_line(line) + "\n", at) == message.find('\n', at) - file_line(line).size();
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("races: reading a copy's destination before its wait is a race, after the wait it is not") {
    const int read_line = __LINE__ + 7;
    const int copy_line = __LINE__ + 3;
    auto make = [](bool fixed, const pl::CallOptions& options) {
      auto kernel = [fixed](pl::Ref x, pl::Ref o, pl::Ref buf, pl::Ref sem) {
        auto copy = pl::make_async_copy(x, buf, sem);
        copy.start();
        if (fixed) copy.wait();
        o() = buf() + 1.0f;
        if (!fixed) copy.wait();
      };
      return pl::pallas_call(kernel,
                             pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                                          .scratch_shapes = {pl::VMEM({8, 128}, pl::f32), pl::SemaphoreType::DMA}},
                             pl::ShapeDtype({8, 128}, pl::f32), options);
    };
    const pl::Array x = testing::ramp(8, 128);
    for (pl::DmaExecutionMode mode : {pl::DmaExecutionMode::eager, pl::DmaExecutionMode::on_wait}) {
      make(true, detecting(mode))(x);
      CHECK_FALSE(pl::races_found());
      make(false, detecting(mode))(x);
      REQUIRE(pl::races_found());
      const std::vector<pl::RaceReport> reports = pl::race_reports();
      REQUIRE(reports.size() == 1);
      const pl::RaceReport& r = reports[0];
      CHECK(r.buffer == "scratch 0");
      CHECK(r.first.kind == pl::AccessKind::dma_write);
      CHECK(r.second.kind == pl::AccessKind::read);
      const std::string& m = r.message;
      CHECK(m.find("race on `scratch 0` of device 0") != std::string::npos);
      CHECK(names(m, "DMA write of scratch 0[0:8, 0:128] (a copy started by device 0, core 0)", copy_line + 1));
      CHECK(names(m, "read of scratch 0[0:8, 0:128] by device 0, core 0", read_line));
      CHECK(m.find("fix: wait for the copy") != std::string::npos);
    }
  }

  TEST_CASE("races: writing a copy's source before its wait is a race, after the wait it is not") {
    const int write_line = __LINE__ + 7;
    auto make = [](bool fixed, const pl::CallOptions& options) {
      auto kernel = [fixed](pl::Ref x, pl::Ref o, pl::Ref buf, pl::Ref sem) {
        buf() = x() * 2.0f;
        auto copy = pl::make_async_copy(buf, o, sem);
        copy.start();
        if (fixed) copy.wait();
        buf() = x();
        if (!fixed) copy.wait();
      };
      return pl::pallas_call(kernel,
                             pl::GridSpec{.out_specs = {pl::BlockSpec(pl::ANY)},
                                          .scratch_shapes = {pl::VMEM({8, 128}, pl::f32), pl::SemaphoreType::DMA}},
                             pl::ShapeDtype({8, 128}, pl::f32), options);
    };
    const pl::Array x = testing::ramp(8, 128);
    make(true, detecting())(x);
    CHECK_FALSE(pl::races_found());
    const pl::Array racy = make(false, detecting())(x);
    REQUIRE(pl::race_reports().size() == 1);
    const pl::RaceReport r = pl::race_reports()[0];
    CHECK(r.first.kind == pl::AccessKind::dma_read);
    CHECK(r.second.kind == pl::AccessKind::write);
    CHECK(r.second.loc.line == static_cast<uint32_t>(write_line));
    // Detection changes nothing: the eager copy read the buffer before it was overwritten.
    CHECK(pl::allclose(racy, make(false, without_detection(detecting()))(x), 0, 0));
  }

  TEST_CASE("races: two cores writing the same region of an output unordered, their own rows are fine") {
    const int copy_line = __LINE__ + 6;
    auto make = [](bool fixed, const pl::CallOptions& options) {
      pl::CallOptions o = options;
      o.compiler_params.dimension_semantics = {pl::parallel};
      auto kernel = [fixed](pl::Ref x, pl::Ref out, pl::Ref sem) {
        pl::Value row = fixed ? pl::program_id(0) * 8 : pl::Value(0);
        pl::async_copy(x.at(pl::ds(pl::program_id(0) * 8, 8)), out.at(pl::ds(row, 8)), sem).wait();
      };
      return pl::pallas_call(kernel,
                             pl::GridSpec{.grid = {4},
                                          .in_specs = {pl::BlockSpec(pl::ANY)},
                                          .out_specs = {pl::BlockSpec(pl::ANY)},
                                          .scratch_shapes = {pl::SemaphoreType::DMA}},
                             pl::ShapeDtype({32, 128}, pl::f32), o);
    };
    const pl::Array x = testing::ramp(32, 128);
    const pl::Array out = make(true, detecting(pl::DmaExecutionMode::eager, 2))(x);
    CHECK_FALSE(pl::races_found());
    CHECK(pl::allclose(out, x, 0, 0));
    // One core: program order, however often the same rows are written.
    make(false, detecting(pl::DmaExecutionMode::eager, 1))(x);
    CHECK_FALSE(pl::races_found());
    if (testing::kThreadSanitizer) return;  // the racing cores race on the host too
    make(false, detecting(pl::DmaExecutionMode::on_wait, 2))(x);
    REQUIRE(pl::race_reports().size() == 1);
    const pl::RaceReport r = pl::race_reports()[0];
    CHECK(r.buffer == "output 0");
    CHECK(r.first.kind == pl::AccessKind::dma_write);
    CHECK(r.second.kind == pl::AccessKind::dma_write);
    CHECK(r.first.point.core != r.second.point.core);
    CHECK(r.first.point.grid_point != r.second.point.grid_point);
    // Core 0 runs grid points 0 and 1, core 1 points 2 and 3: which of them met first depends on timing.
    for (const pl::AccessSite* s : {&r.first, &r.second}) {
      CHECK(s->point.grid_point[0] / 2 == s->point.core);
      CHECK(names(r.message,
                  fmt::format("DMA write of output 0[0:8, 0:128] (a copy started by device 0, core {}, grid point ({}))",
                              s->point.core, s->point.grid_point[0]),
                  copy_line));
    }
  }

  TEST_CASE("races: two cores updating a shared mpmd scratch without a semaphore, with one it is ordered") {
    auto make = [](bool fixed, const pl::CallOptions& options) {
      auto produce = [fixed](pl::Ref x, pl::Ref, pl::Ref slot, pl::Ref full) {
        pl::sync_copy(x, slot);
        if (fixed) pl::semaphore_signal(full);
      };
      auto consume = [fixed](pl::Ref, pl::Ref o, pl::Ref slot, pl::Ref full) {
        if (fixed) pl::semaphore_wait(full);
        pl::sync_copy(slot, o);
      };
      pl::CallOptions o = options;
      o.name = "pair";
      return pl::mpmd_map({{pl::CoreMesh("producer", 1), produce}, {pl::CoreMesh("consumer", 1), consume}},
                          pl::ShapeDtype({8, 128}, pl::f32), {pl::HBM({8, 128}, pl::f32), pl::SemaphoreType::REGULAR}, o);
    };
    const pl::Array x = testing::ramp(8, 128);
    for (pl::DmaExecutionMode mode : {pl::DmaExecutionMode::eager, pl::DmaExecutionMode::on_wait}) {
      const pl::Array out = make(true, detecting(mode))(x);
      CHECK_FALSE(pl::races_found());
      CHECK(pl::allclose(out, x, 0, 0));
      if (testing::kThreadSanitizer) continue;  // the racing participants race on the host too
      make(false, detecting(mode))(x);
      REQUIRE(pl::race_reports().size() == 1);
      const pl::RaceReport r = pl::race_reports()[0];
      CHECK(r.buffer == "scratch 0");
      // Which participant got there first depends on timing; the pair is the same.
      std::set<pl::AccessKind> kinds{r.first.kind, r.second.kind};
      CHECK(kinds == std::set<pl::AccessKind>{pl::AccessKind::dma_read, pl::AccessKind::dma_write});
      CHECK(r.first.point.core != r.second.point.core);
    }
  }

  TEST_CASE("races: a remote write racing a read on the receiving device, after wait_recv it is ordered") {
    const int read_line = __LINE__ + 7;
    auto make = [](bool fixed, const pl::CallOptions& options) {
      auto kernel = [fixed](pl::Ref in, pl::Ref out, pl::Ref buf, pl::Ref send, pl::Ref recv) {
        const pl::Value me = pl::axis_index("x");
        auto copy = pl::make_async_remote_copy(in, buf, send, recv, pl::DeviceId({{"x", 1 - me}}));
        copy.start();
        if (fixed) copy.wait();
        out() = buf() + 0.0f;
        if (!fixed) copy.wait();
      };
      return pl::shard_map(
          [=](const pl::Array& block) {
            return pl::pallas_call(kernel,
                                   pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                                                .scratch_shapes = {pl::VMEM({8, 128}, pl::f32), pl::SemaphoreType::DMA,
                                                                   pl::SemaphoreType::DMA}},
                                   pl::ShapeDtype(block.shape(), block.dtype()), options)(block);
          },
          pl::Mesh({2}, {"x"}), {pl::P("x")}, {pl::P("x")});
    };
    const pl::Array x = testing::ramp(16, 128);
    for (pl::DmaExecutionMode mode : {pl::DmaExecutionMode::eager, pl::DmaExecutionMode::on_wait}) {
      const pl::Array swapped = make(true, detecting(mode))(x);
      CHECK_FALSE(pl::races_found());
      CHECK(pl::allclose(pl::dynamic_slice(swapped, {0, 0}, {8, 128}), pl::dynamic_slice(x, {8, 0}, {8, 128}), 0, 0));
      if (testing::kThreadSanitizer) continue;  // the racing devices race on the host too
      make(false, detecting(mode))(x);
      // The shard_map's caller sees the races of every device's call: one per pair of sites.
      REQUIRE(pl::race_reports().size() == 1);
      const pl::RaceReport r = pl::race_reports()[0];
      CHECK(r.buffer == "scratch 0");
      const pl::AccessSite& remote = r.first.kind == pl::AccessKind::remote_write ? r.first : r.second;
      const pl::AccessSite& read = r.first.kind == pl::AccessKind::remote_write ? r.second : r.first;
      CHECK(remote.kind == pl::AccessKind::remote_write);
      CHECK(read.kind == pl::AccessKind::read);
      CHECK(remote.target_device == read.point.device);
      CHECK(remote.point.device != read.point.device);
      CHECK(read.loc.line == static_cast<uint32_t>(read_line));
      CHECK(r.message.find(fmt::format("remote write of scratch 0[0:8, 0:128] on device {} (a copy started by device {}",
                                       read.point.device, remote.point.device)) != std::string::npos);
    }
  }

  TEST_CASE("races: a barrier handshake orders a neighbour's remote write after this device's own use") {
    // Every device uses its buffer, then receives its left neighbour's block into it. Without the
    // handshake (each device signals both neighbours' barrier semaphore once done with its buffer,
    // and waits for both) the neighbour's write races with that use, whatever the timing.
    const int use_line = __LINE__ + 6;
    auto make = [](bool fixed, const pl::CallOptions& options) {
      auto kernel = [fixed](pl::Ref x, pl::Ref o, pl::Ref buf, pl::Ref send, pl::Ref recv) {
        const int64_t n = pl::axis_size("i");
        const pl::Value me = pl::axis_index("i");
        const pl::Value right = (me + 1) % n, left = (me + n - 1) % n;
        buf() = x();
        o() = buf() * 2.0f;
        if (fixed) {
          pl::Ref barrier = pl::get_barrier_semaphore();
          pl::semaphore_signal(barrier, 1, pl::DeviceId({left}));
          pl::semaphore_signal(barrier, 1, pl::DeviceId({right}));
          pl::semaphore_wait(barrier, 2);
        }
        auto copy = pl::make_async_remote_copy(x, buf, send, recv, pl::DeviceId({right}));
        copy.start();
        copy.wait();
        o() = o() + buf();
      };
      pl::CallOptions o = options;
      o.compiler_params.collective_id = 7;
      return pl::shard_map(
          [=](const pl::Array& block) {
            return pl::pallas_call(kernel,
                                   pl::GridSpec{.scratch_shapes = {pl::VMEM({8, 128}, pl::f32), pl::SemaphoreType::DMA,
                                                                   pl::SemaphoreType::DMA}},
                                   pl::ShapeDtype(block.shape(), block.dtype()), o)(block);
          },
          pl::Mesh({4}, {"i"}), {pl::P("i")}, {pl::P("i")});
    };
    const pl::Array x = testing::ramp(32, 128);
    for (pl::DmaExecutionMode mode : {pl::DmaExecutionMode::eager, pl::DmaExecutionMode::on_wait}) {
      const pl::Array out = make(true, detecting(mode))(x);
      CHECK_FALSE(pl::races_found());
      CHECK(pl::allclose(out, make(true, without_detection(detecting(mode)))(x), 0, 0));
      if (testing::kThreadSanitizer) continue;  // the racing devices race on the host too
      make(false, detecting(mode))(x);
      REQUIRE(pl::races_found());
      for (const pl::RaceReport& r : pl::race_reports()) {
        CHECK(r.buffer == "scratch 0");
        const pl::AccessSite& remote = r.first.kind == pl::AccessKind::remote_write ? r.first : r.second;
        const pl::AccessSite& local = r.first.kind == pl::AccessKind::remote_write ? r.second : r.first;
        CHECK(remote.kind == pl::AccessKind::remote_write);
        CHECK(remote.target_device == (remote.point.device + 1) % 4);
        CHECK(local.point.device == remote.target_device);
        CHECK((local.loc.line == static_cast<uint32_t>(use_line) || local.loc.line == static_cast<uint32_t>(use_line + 1)));
      }
    }
  }

  TEST_CASE("races: the seeds' kernels are race-free with detection, eager and on_wait, on 1 and 2 cores") {
    SUBCASE("double buffering") {
      check_race_free([](const pl::CallOptions& options) {
        return pl::pallas_call(examples::double_buffered_sum,
                               pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                                            .scratch_shapes = {pl::VMEM({2, 8, 128}, pl::f32), pl::SemaphoreType::DMA({2})}},
                               pl::ShapeDtype({8, 128}, pl::f32), options)(testing::ramp(64, 128));
      });
    }
    SUBCASE("the seed's tiled matmul") {
      check_race_free([](const pl::CallOptions& options) {
        return seed::make_matmul(256, 256, 256, pl::f32, options, 128)(testing::ramp(256, 256), testing::ramp(256, 256));
      });
    }
    SUBCASE("emit_pipeline's GEMM") {
      check_race_free([](const pl::CallOptions& options) {
        return seed::make_emit_gemm(256, 256, pl::f32, options)(testing::ramp(256, 256), testing::ramp(256, 256));
      });
    }
    SUBCASE("the ring all-gather, the GEMM and the all-reduce kernels, and the fused all-gather GEMM") {
      check_race_free([](const pl::CallOptions& options) {
        auto f = pl::shard_map(
            [&](const pl::Array& in, const pl::Array& w) {
              return pl::concatenate(
                  {seed::slow_ag_gemm_ar(in, w, options), seed::make_ar(seed::fused_ag_gemm(in, w, options), options)}, 1);
            },
            pl::Mesh({2, 2}, {"x", "y"}), {pl::P("x", "y"), pl::P("x", pl::None)}, {pl::P("x", pl::None)});
        return pl::Array(f(testing::ramp(256, 256), testing::ramp(256, 128)));
      });
    }
  }
}
