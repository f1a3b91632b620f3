// The interpreter's check that no load reads scratch the kernel never wrote (docs/design.md §4.6):
// the error for scratch_shapes and run_scoped buffers, VMEM and SMEM, vector and scalar loads, with
// the scratch, the element and the user's line; and no error for the ways kernels legitimately fill
// scratch (whole and masked stores, copies, a first step's initialisation, each core its own).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <string>

#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;

namespace {

// Runs f, which must throw a RuntimeError whose message holds every one of `words` and names this
// file's line `line` (which the kernel sets while f traces it, so it is read afterwards).
void uninitialized_read(const std::function<void()>& f, std::initializer_list<std::string> words, const int& line) {
  try {
    f();
    FAIL("expected a RuntimeError");
  } catch (const RuntimeError& e) {
    const std::string what = e.what();
    CHECK_MESSAGE(what.find("read of never-written scratch") != std::string::npos, what);
    CHECK_MESSAGE(what.find("pl::when(pl::program_id(k) == 0)") != std::string::npos, what);
    for (const std::string& w : words) CHECK_MESSAGE(what.find(w) != std::string::npos, what);
    CHECK_MESSAGE(what.find(fmt::format("uninitialized_reads_test.cpp:{}", line)) != std::string::npos, what);
  }
}

const pl::Array kX = pl::Array::arange(8, pl::f32);

}  // namespace

TEST_SUITE("uninitialized reads") {
  TEST_CASE("uninitialized reads: a vector load of never-written VMEM scratch") {
    int line = 0;
    auto call = pl::pallas_call(
        [&](pl::Ref x, pl::Ref o, pl::Ref scratch) {
          line = __LINE__ + 1;
          o() = x() + scratch();
        },
        pl::GridSpec{.scratch_shapes = {pl::VMEM({8}, pl::f32)}}, pl::ShapeDtype({8}, pl::f32), testing::interpret());
    uninitialized_read([&] { call(kX); }, {"`scratch 0` (a (8,) f32 ref in vmem)", "at element (0)", "device 0, core 0"},
                       line);
  }

  TEST_CASE("uninitialized reads: a scalar load of never-written SMEM scratch") {
    int line = 0;
    auto call = pl::pallas_call(
        [&](pl::Ref x, pl::Ref o, pl::Ref table) {
          table(0) = 5;
          line = __LINE__ + 1;
          o() = x() + pl::broadcast_to(table(2).astype(pl::f32), {8});
        },
        pl::GridSpec{.scratch_shapes = {pl::SMEM({4}, pl::i32)}}, pl::ShapeDtype({8}, pl::f32), testing::interpret());
    uninitialized_read([&] { call(kX); }, {"`scratch 0` (a (4,) i32 ref in smem)", "at element (2)"}, line);
  }

  TEST_CASE("uninitialized reads: partly written scratch read outside the written part names the first unwritten element") {
    int line = 0;
    auto call = pl::pallas_call(
        [&](pl::Ref x, pl::Ref o, pl::Ref scratch) {
          scratch.at(pl::ds(0, 2), pl::all)() = pl::zeros({2, 8}, pl::f32);
          o() = x() + scratch.at(1)();  // inside the written rows: fine
          line = __LINE__ + 1;
          o() = pl::sum(scratch.at(pl::ds(1, 2), pl::all)(), {0});  // rows 1 and 2
        },
        pl::GridSpec{.scratch_shapes = {pl::VMEM({4, 8}, pl::f32)}}, pl::ShapeDtype({8}, pl::f32), testing::interpret());
    uninitialized_read([&] { call(kX); }, {"`scratch 0` (a (4, 8) f32 ref in vmem)", "at element (2, 0)"}, line);
  }

  TEST_CASE("uninitialized reads: a masked load of only the written lanes passes, one more lane does not") {
    auto call = [](int64_t read_lanes, int& line) {
      return pl::pallas_call(
          [&line, read_lanes](pl::Ref x, pl::Ref o, pl::Ref scratch) {
            const pl::Value lane = pl::iota({8}, 0);
            pl::store(scratch, x() * 2.0f, lane < 5);  // lanes 0..4 written
            line = __LINE__ + 1;
            o() = pl::load(scratch, lane < read_lanes, -1.0f);
          },
          pl::GridSpec{.scratch_shapes = {pl::VMEM({8}, pl::f32)}}, pl::ShapeDtype({8}, pl::f32), testing::interpret());
    };
    int line = 0;
    CHECK(call(5, line)(kX).to_vector<float>() == std::vector<float>{0, 2, 4, 6, 8, -1, -1, -1});
    uninitialized_read([&] { call(6, line)(kX); }, {"at element (5)"}, line);
  }

  TEST_CASE("uninitialized reads: scratch filled by a copy passes, in both copy modes") {
    for (pl::DmaExecutionMode mode : {pl::DmaExecutionMode::eager, pl::DmaExecutionMode::on_wait}) {
      auto call = pl::pallas_call(
          [](pl::Ref x_hbm, pl::Ref o, pl::Ref buf, pl::Ref sem) {
            auto copy = pl::make_async_copy(x_hbm, buf.at(pl::ds(2, 8)), sem);
            copy.start();
            copy.wait();
            o() = buf.at(pl::ds(2, 8))() + 1.0f;
          },
          pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                       .scratch_shapes = {pl::VMEM({12}, pl::f32), pl::SemaphoreType::DMA}},
          pl::ShapeDtype({8}, pl::f32), testing::interpret({.dma_execution_mode = mode}));
      CHECK(call(kX).to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
    }
  }

  TEST_CASE("uninitialized reads: a copy out of partly written scratch is no error") {
    // A staging buffer copied out whole while only part of it holds data: only a load is checked.
    auto call = pl::pallas_call(
        [](pl::Ref x, pl::Ref o_hbm, pl::Ref stage, pl::Ref spare) {
          stage.at(pl::ds(0, 8))() = x();
          pl::sync_copy(stage.at(pl::ds(0, 8)), o_hbm);
          pl::sync_copy(stage, spare);  // the unwritten half too: a copy, not a load
        },
        pl::GridSpec{.out_specs = {pl::BlockSpec(pl::ANY)},
                     .scratch_shapes = {pl::VMEM({16}, pl::f32), pl::VMEM({16}, pl::f32)}},
        pl::ShapeDtype({8}, pl::f32), testing::interpret());
    CHECK(call(kX).to_vector<float>() == kX.to_vector<float>());
  }

  TEST_CASE("uninitialized reads: scratch another device fills by remote copy is not reported") {
    // Its writes land through the transport, which this core does not see: such scratch is left
    // unchecked rather than reported falsely.
    testing::for_each_backend([](const pl::CallOptions& options) {
      pl::Mesh mesh({2}, {"x"});
      auto swap = testing::on_every_device(
          [](pl::Ref in, pl::Ref out, pl::Ref inbox, pl::Ref result, pl::Ref send, pl::Ref recv) {
            auto copy = pl::make_async_remote_copy(in, inbox, send, recv, pl::DeviceId((pl::device_id() + 1) % 2),
                                                   pl::DeviceIdType::LOGICAL);
            copy.start();
            copy.wait();
            result() = inbox() + 1.0f;
            pl::sync_copy(result, out);
          },
          mesh, pl::P("x"), {pl::VMEM({4}, pl::f32), pl::VMEM({4}, pl::f32), pl::SemaphoreType::DMA, pl::SemaphoreType::DMA},
          options);
      CHECK(swap(kX).gather().to_vector<float>() == std::vector<float>{5, 6, 7, 8, 1, 2, 3, 4});
    });
  }

  TEST_CASE("uninitialized reads: a run_scoped buffer read before it is written, each time its region begins") {
    int line = 0;
    // Written in the first run of the region only: the second run's buffer is a new allocation.
    auto call = pl::pallas_call(
        [&](pl::Ref x, pl::Ref o) {
          o() = pl::zeros_like(o);
          pl::loop(0, 2, [&](pl::Value i) {
            pl::run_scoped(
                [&](pl::Ref tmp) {
                  pl::when(i == 0, [&] { tmp() = x(); });
                  line = __LINE__ + 1;
                  o() = o() + tmp();
                },
                pl::VMEM({8}, pl::f32));
          });
        },
        pl::GridSpec{}, pl::ShapeDtype({8}, pl::f32), testing::interpret());
    uninitialized_read([&] { call(kX); }, {"`run_scoped 0` (a (8,) f32 ref in vmem)", "at element (0)"}, line);
  }

  TEST_CASE("uninitialized reads: scratch written at the first step is read at later steps") {
    // A running sum across an arbitrary grid dim, initialised under pl::when(program_id == 0).
    testing::for_each_backend([](const pl::CallOptions& options) {
      auto call = pl::pallas_call(
          [](pl::Ref x, pl::Ref o, pl::Ref acc, pl::Ref count) {
            pl::when(pl::program_id(0) == 0, [&] {
              acc() = pl::zeros_like(acc);
              count(0) = 0;
            });
            acc() = acc() + x();
            count(0) = count(0) + 1;
            o() = acc() * count(0).astype(pl::f32);
          },
          pl::GridSpec{.grid = {3},
                       .in_specs = {pl::BlockSpec({8}, [](pl::Value i) { return pl::idx(i); })},
                       .out_specs = {pl::BlockSpec({8}, [](pl::Value i) { return pl::idx(i); })},
                       .scratch_shapes = {pl::VMEM({8}, pl::f32), pl::SMEM({1}, pl::i32)}},
          pl::ShapeDtype({24}, pl::f32), options);
      const pl::Array x = pl::Array::arange(24, pl::f32);
      const pl::Array out = call(x);
      for (int64_t i = 0; i < 8; ++i) {
        const float a = x.at<float>({i}), b = a + x.at<float>({i + 8}), c = b + x.at<float>({i + 16});
        CHECK(out.at<float>({i}) == a);
        CHECK(out.at<float>({i + 8}) == 2 * b);
        CHECK(out.at<float>({i + 16}) == 3 * c);
      }
    });
  }

  TEST_CASE("uninitialized reads: each core has its own scratch, and a core that does not initialise its own fails") {
    // Two cores split the parallel dim i; the arbitrary dim k accumulates in scratch.
    auto call = [](bool per_point_init, int& line) {
      return pl::pallas_call(
          [&line, per_point_init](pl::Ref x, pl::Ref o, pl::Ref acc) {
            const pl::Value first = per_point_init ? pl::program_id(1) == 0
                                                   : (pl::program_id(0) == 0) & (pl::program_id(1) == 0);
            pl::when(first, [&] { acc() = pl::zeros_like(acc); });
            line = __LINE__ + 1;
            acc() = acc() + x();
            o() = acc();
          },
          pl::GridSpec{.grid = {2, 3},
                       .in_specs = {pl::BlockSpec({8}, [](pl::Value i, pl::Value k) { return pl::idx(i * 3 + k); })},
                       .out_specs = {pl::BlockSpec({8}, [](pl::Value i, pl::Value) { return pl::idx(i); })},
                       .scratch_shapes = {pl::VMEM({8}, pl::f32)}},
          pl::ShapeDtype({16}, pl::f32),
          {.compiler_params = {.dimension_semantics = {pl::parallel, pl::arbitrary}},
           .interpret = pl::InterpretParams{.num_cores_or_threads = 2}});
    };
    const pl::Array x = pl::Array::arange(48, pl::f32);
    int line = 0;
    const pl::Array out = call(true, line)(x);
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 8; ++j) {
        float sum = 0;
        for (int64_t k = 0; k < 3; ++k) sum += x.at<float>({(i * 3 + k) * 8 + j});
        CHECK(out.at<float>({i * 8 + j}) == sum);
      }
    // Only core 0 runs the step (0, 0): core 1's scratch was never written.
    uninitialized_read([&] { call(false, line)(x); }, {"core 1, grid point (1, 0)", "`scratch 0`"}, line);
  }

  TEST_CASE("uninitialized reads: with uninitialized_memory = zero, never-written scratch reads as zero") {
    // The user asked for zeros: that is what a read gets, and no error.
    pl::InterpretParams zero;
    zero.uninitialized_memory = pl::UninitializedMemory::zero;
    auto call = pl::pallas_call(
        [](pl::Ref x, pl::Ref o, pl::Ref scratch, pl::Ref table) {
          o() = x() + scratch() + pl::broadcast_to(table(3).astype(pl::f32), {8});
        },
        pl::GridSpec{.scratch_shapes = {pl::VMEM({8}, pl::f32), pl::SMEM({4}, pl::i32)}}, pl::ShapeDtype({8}, pl::f32),
        testing::interpret(zero));
    CHECK(call(kX).to_vector<float>() == kX.to_vector<float>());
  }
}
