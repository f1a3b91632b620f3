// Copies, semaphores, run_scoped and emit_pipeline (docs/design.md §4.7-9, 12), in both backends: every
// case runs compiled and interpreted.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>

#include "examples/double_buffering.h"
#include "jit/ir/printer.h"
#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;
using doctest::Contains;

namespace {

pl::Array iota_rows(int64_t m, int64_t n) {
  std::vector<float> v(static_cast<size_t>(m * n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return pl::Array::from_vector(v, {m, n});
}

// out's four pairs of rows are x's in reverse order (the copies of the DMA tests below).
void check_pairs_reversed(const pl::Array& out, const pl::Array& x) {
  for (int64_t c = 0; c < 4; ++c)
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t j = 0; j < 3; ++j) CHECK(out.at<float>({(3 - c) * 2 + r, j}) == x.at<float>({c * 2 + r, j}));
}

// A naive f32 matmul of two f32 or bf16 arrays.
pl::Array reference_matmul(const pl::Array& a, const pl::Array& b) {
  const int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  pl::Array af = a.astype(pl::f32), bf = b.astype(pl::f32);
  std::vector<float> out(static_cast<size_t>(m * n), 0.0f);
  const float* pa = af.data_as<float>();
  const float* pb = bf.data_as<float>();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t kk = 0; kk < k; ++kk)
      for (int64_t j = 0; j < n; ++j) out[i * n + j] += pa[i * k + kk] * pb[kk * n + j];
  return pl::Array::from_vector(out, {m, n});
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("dma: an HBM array is copied into VMEM scratch and used after the wait") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      auto kernel = [](pl::Ref x_hbm, pl::Ref o, pl::Ref buf, pl::Ref sem) {
        auto copy = pl::make_async_copy(x_hbm, buf, sem);
        copy.start();
        copy.wait();
        o() = buf() * 2.0f;
      };
      auto call = pl::pallas_call(kernel,
                                  pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                                               .scratch_shapes = {pl::VMEM({8, 16}, pl::f32), pl::SemaphoreType::DMA}},
                                  pl::ShapeDtype({8, 16}, pl::f32), backend);
      pl::Array x = iota_rows(8, 16);
      pl::Array out = call(x);
      for (int64_t i = 0; i < 8; ++i)
        for (int64_t j = 0; j < 16; ++j) CHECK(out.at<float>({i, j}) == 2.0f * x.at<float>({i, j}));
    });
  }

  TEST_CASE("dma: windows on both sides, HBM to HBM, and an array of semaphores indexed dynamically") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      // Reverse the order of 4 row chunks of an HBM array straight into an HBM output.
      auto kernel = [](pl::Ref x, pl::Ref o, pl::Ref sems) {
        pl::loop(0, 4, [&](pl::Value c) {
          pl::async_copy(x.at(pl::ds(c * 2, 2), pl::all), o.at(pl::ds((3 - c) * 2, 2), pl::all), sems.at(c));
        });
        pl::loop(0, 4, [&](pl::Value c) {
          pl::make_async_copy(x.at(pl::ds(0, 2), pl::all), o.at(pl::ds(0, 2), pl::all), sems.at(c)).wait();
        });
      };
      auto call = pl::pallas_call(kernel,
                                  pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                                               .out_specs = {pl::BlockSpec(pl::ANY)},
                                               .scratch_shapes = {pl::SemaphoreType::DMA({4})}},
                                  pl::ShapeDtype({8, 3}, pl::f32), backend);
      pl::Array x = iota_rows(8, 3);
      pl::Array out = call(x);
      check_pairs_reversed(out, x);
    });
  }

  TEST_CASE("dma: copies between SMEM and VMEM, and a sync_copy of one element") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      auto kernel = [](pl::Ref table, pl::Ref o, pl::Ref row, pl::Ref sem) {
        pl::async_copy(table.at(pl::ds(2, 4)), row, sem).wait();  // SMEM -> VMEM
        pl::Value doubled = row() * 2;
        row() = doubled;
        pl::async_copy(row, table.at(pl::ds(0, 4)), sem).wait();  // VMEM -> SMEM
        pl::sync_copy(table.at(7), table.at(6));                  // one element
        pl::sync_copy(table, o);
      };
      auto call = pl::pallas_call(kernel,
                                  pl::GridSpec{.in_specs = {pl::BlockSpec(pl::SMEM)},
                                               .out_specs = {pl::BlockSpec(pl::SMEM)},
                                               .scratch_shapes = {pl::VMEM({4}, pl::i32), pl::SemaphoreType::DMA}},
                                  pl::ShapeDtype({8}, pl::i32), backend);
      pl::Array t = pl::Array::arange(8, pl::i32);
      CHECK(call(t).to_vector<int32_t>() == std::vector<int32_t>{4, 6, 8, 10, 4, 5, 7, 7});
    });
  }

  TEST_CASE("dma: a manual double-buffered loop prefetches the next chunk while using the current one") {
    testing::for_each_backend(
        [&](const pl::CallOptions& backend) {
          constexpr int64_t kChunks = 6, kRows = 4, kCols = 8;
          // Sum every chunk of rows into one block: chunk c + 1 is copied while chunk c is added.
          auto call = pl::pallas_call(
              examples::double_buffered_sum,
              pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                           .scratch_shapes = {pl::VMEM({2, kRows, kCols}, pl::f32), pl::SemaphoreType::DMA({2})}},
              pl::ShapeDtype({kRows, kCols}, pl::f32), backend);
          pl::Array x = iota_rows(kChunks * kRows, kCols);
          pl::Array out = call(x);
          for (int64_t r = 0; r < kRows; ++r)
            for (int64_t j = 0; j < kCols; ++j) {
              float expected = 0;
              for (int64_t c = 0; c < kChunks; ++c) expected += x.at<float>({c * kRows + r, j});
              CHECK(out.at<float>({r, j}) == expected);
            }
        },
        pl::InterpretParams{.dma_execution_mode = pl::DmaExecutionMode::on_wait, .random_seed = 7});
  }

  TEST_CASE("semaphores: signal adds, wait subtracts, read sees the count") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      auto kernel = [](pl::Ref o, pl::Ref sem) {
        o[0] = pl::semaphore_read(sem);
        pl::semaphore_signal(sem, 3);
        o[1] = pl::semaphore_read(sem);
        pl::semaphore_wait(sem, 2);
        o[2] = pl::semaphore_read(sem);
        pl::semaphore_signal(sem);
        pl::semaphore_wait(sem, pl::semaphore_read(sem));
        o[3] = pl::semaphore_read(sem);
      };
      auto call = pl::pallas_call(kernel,
                                  pl::GridSpec{.out_specs = {pl::BlockSpec(pl::SMEM)},
                                               .scratch_shapes = {pl::SemaphoreType::REGULAR}},
                                  pl::ShapeDtype({4}, pl::i32), backend);
      CHECK(call().to_vector<int32_t>() == std::vector<int32_t>{0, 3, 1, 0});
    });
  }

  TEST_CASE("run_scoped: scoped VMEM and a semaphore, a result returned, and scopes in a loop") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      auto kernel = [](pl::Ref x, pl::Ref o) {
        pl::Value total = pl::fori_loop(0, 3, 0.0f, [&](pl::Value i, pl::Value acc) {
          return pl::run_scoped(
              [&](pl::Ref tmp, pl::Ref sem) {
                pl::sync_copy(x.at(i), tmp);
                pl::semaphore_signal(sem, 2);
                pl::semaphore_wait(sem, 2);
                return acc + pl::sum(tmp());
              },
              pl::VMEM({4}, pl::f32), pl::SemaphoreType::REGULAR);
        });
        o() = pl::broadcast_to(total, {1});
      };
      auto call = pl::pallas_call(kernel, pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)}},
                                  pl::ShapeDtype({1}, pl::f32), backend);
      pl::Array x = iota_rows(3, 4);
      CHECK(call(x).at<float>({0}) == 66.0f);
    });
  }

  TEST_CASE("emit_pipeline: a GEMM accumulating into its output block across consecutive k steps") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      // No accumulator: the output block stays in VMEM while k runs and is written back once.
      constexpr int64_t kM = 128, kK = 192, kN = 64, kB = 32;
      auto kernel = [](pl::Ref x_hbm, pl::Ref w_hbm, pl::Ref o_hbm) {
        auto by = [](int a, int b) {
          return [=](pl::Value i, pl::Value j, pl::Value k) {
            pl::Value ids[] = {i, j, k};
            return pl::idx(ids[a], ids[b]);
          };
        };
        pl::emit_pipeline(
            [&](pl::Ref x, pl::Ref w, pl::Ref o) {
              pl::when(pl::program_id(2) == 0, [&] { o() = pl::zeros_like(o); });
              o() += pl::dot(x(), w(), pl::f32);
            },
            {.grid = {kM / kB, kN / kB, kK / kB},
             .in_specs = {pl::BlockSpec({kB, kB}, by(0, 2)), pl::BlockSpec({kB, kB}, by(2, 1), pl::Buffered(3))},
             .out_specs = {pl::BlockSpec({kB, kB}, by(0, 1))}})(x_hbm, w_hbm, o_hbm);
      };
      auto call = pl::pallas_call(kernel,
                                  pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::ANY)},
                                               .out_specs = {pl::BlockSpec(pl::ANY)}},
                                  pl::ShapeDtype({kM, kN}, pl::f32), backend);
      pl::Array x = pl::Array::random_normal({kM, kK}, pl::bf16, 1);
      pl::Array w = pl::Array::random_normal({kK, kN}, pl::bf16, 2);
      CHECK(pl::allclose(call(x, w), reference_matmul(x, w), 1e-4, 1e-3));
    });
  }

  TEST_CASE("emit_pipeline: no_pipelining copies every block when its step needs it, whatever pl::Buffered says") {
    constexpr int64_t kM = 64, kK = 96, kN = 64, kB = 32;
    auto make = [](bool no_pipelining, const pl::CallOptions& backend) {
      auto kernel = [no_pipelining](pl::Ref x_hbm, pl::Ref w_hbm, pl::Ref o_hbm) {
        pl::emit_pipeline(
            [&](pl::Ref x, pl::Ref w, pl::Ref o) {
              pl::when(pl::program_id(2) == 0, [&] { o() = pl::zeros_like(o); });
              o() += pl::dot(x(), w(), pl::f32);
            },
            {.grid = {kM / kB, kN / kB, kK / kB},
             .in_specs = {pl::BlockSpec({kB, kB}, [](pl::Value i, pl::Value, pl::Value k) { return pl::idx(i, k); }),
                          pl::BlockSpec({kB, kB}, [](pl::Value, pl::Value j, pl::Value k) { return pl::idx(k, j); },
                                        pl::Buffered(3, true))},
             .out_specs = {pl::BlockSpec({kB, kB}, [](pl::Value i, pl::Value j, pl::Value) { return pl::idx(i, j); })},
             .no_pipelining = no_pipelining})(x_hbm, w_hbm, o_hbm);
      };
      return pl::pallas_call(kernel,
                             pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::ANY)},
                                          .out_specs = {pl::BlockSpec(pl::ANY)}},
                             pl::ShapeDtype({kM, kN}, pl::f32), backend);
    };
    const pl::Array x = pl::Array::random_normal({kM, kK}, pl::f32, 1), w = pl::Array::random_normal({kK, kN}, pl::f32, 2);
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      CHECK(pl::allclose(make(true, backend)(x, w), make(false, backend)(x, w), 0, 0));
    });
    // The pipeline's operands have one buffer and no lookahead; without the flag, the defaults and
    // pl::Buffered(3, true).
    const std::vector<pl::Array> args{x, w};
    const std::string plain = ir::print(make(true, {}).traced(args)), buffered = ir::print(make(false, {}).traced(args));
    CHECK(plain.find("buffers=") == std::string::npos);
    CHECK(plain.find("lookahead") == std::string::npos);
    CHECK(buffered.find("buffers=3 lookahead") != std::string::npos);
  }

  TEST_CASE("emit_pipeline: edge blocks, deeper buffering, revisited outputs and program_id of the inner grid") {
    testing::for_each_backend(
        [&](const pl::CallOptions& backend) {
          // Row sums of a (10, 11) array in (4, 4) blocks (edge blocks in both dims): the output block
          // of a row stays while the inner grid walks its columns.
          auto kernel = [](pl::Ref x_hbm, pl::Ref o_hbm, pl::Ref steps) {
            steps[0] = 0;
            pl::emit_pipeline(
                [&](pl::Ref x, pl::Ref o) {
                  pl::when(pl::program_id(1) == 0, [&] { o() = pl::zeros_like(o); });
                  pl::Value cols = pl::iota({4, 4}, 1, pl::i32) + pl::program_id(1) * 4;
                  o() += pl::reshape(pl::sum(pl::where(cols < 11, x(), 0.0f), 1), {4, 1});
                  steps[0] = steps[0] + 1;
                },
                {.grid = {3, 3},
                 .in_specs = {pl::BlockSpec({4, 4}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); }, pl::Buffered(3))},
                 .out_specs = {pl::BlockSpec({4, 1}, [](pl::Value i, pl::Value) { return pl::idx(i, 0); })}})(x_hbm, o_hbm);
          };
          auto call = pl::pallas_call(kernel,
                                      pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                                                   .out_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::SMEM)}},
                                      {pl::ShapeDtype({10, 1}, pl::f32), pl::ShapeDtype({1}, pl::i32)}, backend);
          pl::Array x = iota_rows(10, 11);
          std::vector<pl::Array> out = call(x);
          for (int64_t i = 0; i < 10; ++i) {
            float expected = 0;
            for (int64_t j = 0; j < 11; ++j) expected += x.at<float>({i, j});
            CHECK(out[0].at<float>({i, 0}) == expected);
          }
          CHECK(out[1].at<int32_t>({0}) == 9);
        },
        pl::InterpretParams{.dma_execution_mode = pl::DmaExecutionMode::on_wait, .random_seed = 3});
  }

  TEST_CASE("ANY/HBM specs: a block equal to the array at block index 0 hands the pallas_call kernel the array") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      // Pallas's Mosaic lowering accepts such a spec and passes the array itself (a trivial window).
      // Step i copies row block i of x into row block 3 - i of o, so o is x's blocks reversed.
      auto kernel = [](pl::Ref x_hbm, pl::Ref o_hbm) {
        CHECK(x_hbm.shape() == pl::Shape{8, 3});
        CHECK(x_hbm.memory_space() == pl::MemorySpace::ANY);
        CHECK(o_hbm.shape() == pl::Shape{8, 3});
        CHECK(o_hbm.memory_space() == pl::MemorySpace::HBM);
        pl::Value i = pl::program_id(0);
        pl::sync_copy(x_hbm.at(pl::ds(i * 2, 2), pl::all), o_hbm.at(pl::ds((3 - i) * 2, 2), pl::all));
      };
      auto call = pl::pallas_call(
          kernel,
          pl::GridSpec{.grid = {4},
                       .in_specs = {pl::BlockSpec({8, 3}, [](pl::Value) { return pl::idx(0, 0); }, pl::ANY)},
                       .out_specs = {pl::BlockSpec({8, 3}, [](pl::Value) { return pl::idx(0, 0); }, pl::HBM)}},
          pl::ShapeDtype({8, 3}, pl::f32), backend);
      pl::Array x = iota_rows(8, 3);
      pl::Array out = call(x);
      check_pairs_reversed(out, x);
    });
  }

  TEST_CASE("ANY/HBM specs: a trivial window traces to the same IR as no block shape") {
    // The index map that decides it leaves nothing behind in the kernel.
    auto kernel = [](pl::Ref x, pl::Ref o) { pl::sync_copy(x, o); };
    auto zeros = [](pl::Value) { return pl::idx(0, 0); };
    auto blocked = pl::pallas_call(kernel,
                                   pl::GridSpec{.grid = {2},
                                                .in_specs = {pl::BlockSpec({8, 3}, zeros, pl::ANY)},
                                                .out_specs = {pl::BlockSpec({8, 3}, zeros, pl::ANY)}},
                                   pl::ShapeDtype({8, 3}, pl::f32));
    auto whole = pl::pallas_call(kernel,
                                 pl::GridSpec{.grid = {2}, .in_specs = {pl::BlockSpec(pl::ANY)}, .out_specs = {pl::BlockSpec(pl::ANY)}},
                                 pl::ShapeDtype({8, 3}, pl::f32));
    const std::vector<pl::Array> args{pl::Array::zeros({8, 3}, pl::f32)};
    CHECK(ir::print(blocked.traced(args)) == ir::print(whole.traced(args)));
  }

  TEST_CASE("ANY/HBM specs: an emit_pipeline HBM spec with a block shape hands the body a view of the step's block") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      // As Pallas's emit_pipeline (BufferedRef.bind_existing_ref: ref.at[block], nothing copied): the
      // HBM output view of step i is rows [4i, 4i + 4) of o, the squeezed HBM input view is y[i], the
      // pl::Element view starts at the element offset its index map returns, and the whole-array HBM
      // output (block = array at index 0) is the array itself.
      auto kernel = [](pl::Ref x_hbm, pl::Ref y_hbm, pl::Ref o_hbm, pl::Ref whole_hbm) {
        pl::emit_pipeline(
            [&](pl::Ref x, pl::Ref y, pl::Ref x_rows, pl::Ref o, pl::Ref whole) {
              CHECK(x.memory_space() == pl::MemorySpace::VMEM);
              CHECK(x_rows.shape() == pl::Shape{4, 8});
              CHECK(y.shape() == pl::Shape{4, 8});
              CHECK(y.memory_space() == pl::MemorySpace::ANY);  // a view keeps the array's memory space
              CHECK(o.shape() == pl::Shape{4, 8});
              CHECK(whole.shape() == pl::Shape{16, 8});
              pl::run_scoped(
                  [&](pl::Ref buf, pl::Ref rows) {
                    pl::sync_copy(y, buf);
                    pl::sync_copy(x_rows, rows);
                    buf() = buf() + x() + rows();
                    pl::sync_copy(buf, o);  // lands in o's block of this step
                    pl::sync_copy(buf, whole.at(pl::ds((3 - pl::program_id(0)) * 4, 4), pl::all));
                  },
                  pl::VMEM({4, 8}, pl::f32), pl::VMEM({4, 8}, pl::f32));
            },
            {.grid = {4},
             .in_specs = {pl::BlockSpec({4, 8}, [](pl::Value i) { return pl::idx(i, 0); }),
                          pl::BlockSpec({pl::squeezed, 4, 8}, [](pl::Value i) { return pl::idx(i, 0, 0); }, pl::HBM),
                          pl::BlockSpec({pl::Element(4), 8}, [](pl::Value i) { return pl::idx(i * 4, 0); }, pl::HBM)},
             .out_specs = {pl::BlockSpec({4, 8}, [](pl::Value i) { return pl::idx(i, 0); }, pl::HBM),
                           pl::BlockSpec({16, 8}, [](pl::Value) { return pl::idx(0, 0); }, pl::HBM)}})(
            x_hbm, y_hbm, x_hbm, o_hbm, whole_hbm);
      };
      auto call = pl::pallas_call(kernel,
                                  pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::ANY)},
                                               .out_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::ANY)}},
                                  {pl::ShapeDtype({16, 8}, pl::f32), pl::ShapeDtype({16, 8}, pl::f32)}, backend);
      pl::Array x = iota_rows(16, 8);
      std::vector<float> yv(4 * 4 * 8);
      for (size_t k = 0; k < yv.size(); ++k) yv[k] = 1000.0f + static_cast<float>(k);
      pl::Array y = pl::Array::from_vector(yv, {4, 4, 8});
      std::vector<pl::Array> out = call(x, y);
      for (int64_t i = 0; i < 16; ++i)
        for (int64_t j = 0; j < 8; ++j) {
          const float sum = 2.0f * x.at<float>({i, j}) + y.at<float>({i / 4, i % 4, j});
          CHECK(out[0].at<float>({i, j}) == sum);
          CHECK(out[1].at<float>({(3 - i / 4) * 4 + i % 4, j}) == sum);
        }
    });
  }

  TEST_CASE("ANY/HBM specs: an emit_pipeline HBM view out of bounds fails its bounds check, a far-off index too") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      // Block index `far` times the block size 4 is 2^64, which a plain 64-bit product would wrap to 0
      // (block 0, in bounds): the view's start saturates instead, as block copies' offsets do.
      for (int64_t far : {int64_t{2}, int64_t{1} << 62}) {
        INFO("block index " << far);
        const int spec_line = __LINE__ + 5;
        auto kernel = [far](pl::Ref x_hbm, pl::Ref o_hbm) {
          pl::emit_pipeline([](pl::Ref x, pl::Ref o) { pl::sync_copy(x, o); },
                            {.grid = {2},
                             .in_specs = {pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i); })},
                             .out_specs = {pl::BlockSpec({4}, [far](pl::Value) { return pl::idx(far); }, pl::HBM)}})(
              x_hbm, o_hbm);
        };
        auto call = pl::pallas_call(kernel,
                                    pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)}, .out_specs = {pl::BlockSpec(pl::ANY)}},
                                    pl::ShapeDtype({8}, pl::f32), backend);
        const std::string slice = far == 2 ? "ds(8, 4)" : "ds(9223372036854775807, 4)";
        CHECK_THROWS_WITH_AS(call(pl::Array::zeros({8}, pl::f32)),
                             Contains(fmt::format("out-of-bounds slice of `output 0`: {} in dimension 0", slice).c_str()), RuntimeError);
        // The view is blamed on its BlockSpec's line, at the pipeline's step.
        CHECK_THROWS_WITH_AS(call(pl::Array::zeros({8}, pl::f32)), Contains("emit_pipeline step (0)"), RuntimeError);
        CHECK_THROWS_WITH_AS(call(pl::Array::zeros({8}, pl::f32)), Contains(fmt::format("async_test.cpp:{}", spec_line).c_str()),
                             RuntimeError);
      }
    });
  }

  TEST_CASE("dma: on_wait mode shows a read of a copy's destination before its wait") {
    // The wait comes after the read: eager copies hide the bug, on_wait copies expose it as poison.
    auto kernel = [](pl::Ref x_hbm, pl::Ref o, pl::Ref buf, pl::Ref sem) {
      auto copy = pl::make_async_copy(x_hbm, buf, sem);
      copy.start();
      o() = buf();
      copy.wait();
    };
    auto run = [&](pl::CallOptions options) {
      return pl::pallas_call(kernel,
                             pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                                          .scratch_shapes = {pl::VMEM({4}, pl::f32), pl::SemaphoreType::DMA}},
                             pl::ShapeDtype({4}, pl::f32), options)(pl::Array::arange(4, pl::f32));
    };
    pl::set_dma_execution(pl::DmaExecution::eager);  // on the worker, the early read would race with the copy
    CHECK(run({}).to_vector<float>() == std::vector<float>{0, 1, 2, 3});
    pl::set_dma_execution(pl::DmaExecution::automatic);
    CHECK(run(testing::interpret()).to_vector<float>() == std::vector<float>{0, 1, 2, 3});
    pl::Array early = run(testing::interpret({.dma_execution_mode = pl::DmaExecutionMode::on_wait}));
    for (float v : early.to_vector<float>()) CHECK(std::isnan(v));
  }

  TEST_CASE("dma: compiled kernels give the same results with copies on the DMA worker") {
    pl::set_dma_execution(pl::DmaExecution::worker);
    auto kernel = [](pl::Ref x, pl::Ref o, pl::Ref buf, pl::Ref sems) {
      o() = pl::zeros_like(o);
      pl::loop(0, 8, [&](pl::Value c) {
        pl::Value slot = c % 2;
        pl::async_copy(x.at(c), buf.at(slot), sems.at(slot)).wait();
        o() += buf(slot);
      });
    };
    pl::Array x = iota_rows(8, 16);
    pl::Array out;
    CHECK_NOTHROW(out = pl::pallas_call(kernel,
                                        pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                                                     .scratch_shapes = {pl::VMEM({2, 16}, pl::f32), pl::SemaphoreType::DMA({2})}},
                                        pl::ShapeDtype({16}, pl::f32))(x));
    pl::set_dma_execution(pl::DmaExecution::automatic);
    for (int64_t j = 0; j < 16; ++j) {
      float expected = 0;
      for (int64_t c = 0; c < 8; ++c) expected += x.at<float>({c, j});
      CHECK(out.at<float>({j}) == expected);
    }
  }

  TEST_CASE("dma errors: a semaphore not back at zero when the kernel ends is named with its count") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      const int scratch_line = __LINE__ + 1;
      const pl::ScratchShape regular = pl::SemaphoreType::REGULAR;
      auto call = [&](std::function<void(pl::Ref, pl::Ref, pl::Ref, pl::Ref, pl::Ref)> kernel) {
        return pl::pallas_call(kernel,
                               pl::GridSpec{.grid = {2},
                                            .in_specs = {pl::BlockSpec(pl::ANY)},
                                            .scratch_shapes = {pl::VMEM({4, 4}, pl::f32), regular, pl::SemaphoreType::DMA}},
                               pl::ShapeDtype({4}, pl::f32), backend);
      };
      pl::Array x = pl::Array::zeros({4, 4}, pl::f32);
      auto signal_once = call([](pl::Ref, pl::Ref o, pl::Ref, pl::Ref sem, pl::Ref) {
        pl::semaphore_signal(sem, 2);
        pl::semaphore_wait(sem);
        o() = pl::zeros_like(o);
      });
      CHECK_THROWS_WITH_AS(signal_once(x), Contains("semaphore `scratch 1` is 2 when the kernel ends"), RuntimeError);
      CHECK_THROWS_WITH_AS(signal_once(x), Contains("2 signalled that no semaphore_wait took"), RuntimeError);
      const std::string scratch_at = fmt::format("async_test.cpp:{}", scratch_line);
      CHECK_THROWS_WITH_AS(signal_once(x), Contains(scratch_at.c_str()), RuntimeError);
      CHECK_THROWS_WITH_AS(signal_once(x), Contains("grid point (1)"), RuntimeError);
      auto never_waited = call([](pl::Ref x, pl::Ref o, pl::Ref buf, pl::Ref, pl::Ref dma) {
        pl::async_copy(x, buf, dma);
        o() = pl::zeros_like(o);
      });
      // The second step's copy finds the first one's bytes still there.
      CHECK_THROWS_WITH_AS(never_waited(x), Contains("DMA semaphore `scratch 2` is 128 when the kernel ends"), RuntimeError);
      CHECK_THROWS_WITH_AS(never_waited(x), Contains("128 bytes of copies were never waited for"), RuntimeError);
      // A failed call does not poison the next one.
      auto fine = call([](pl::Ref x, pl::Ref o, pl::Ref buf, pl::Ref, pl::Ref dma) {
        pl::async_copy(x, buf, dma).wait();
        o() = buf(0);
      });
      CHECK(fine(x).to_vector<float>() == std::vector<float>(4, 0.0f));
    });
  }

  TEST_CASE("dma errors: a semaphore of a run_scoped region must be zero when the region ends") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      auto kernel = [](pl::Ref o) {
        pl::run_scoped([&](pl::Ref sem) { pl::semaphore_signal(sem); }, pl::SemaphoreType::REGULAR);
        o() = pl::zeros_like(o);
      };
      auto call = pl::pallas_call(kernel, pl::GridSpec{}, pl::ShapeDtype({4}, pl::f32), backend);
      CHECK_THROWS_WITH_AS(call(), Contains("semaphore `run_scoped 0` is 1 when its run_scoped region ends"), RuntimeError);
    });
  }

  TEST_CASE("dma errors: a wait nothing can satisfy is a deadlock report, not a hang") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      auto call = [&](std::function<void(pl::Ref, pl::Ref, pl::Ref, pl::Ref, pl::Ref)> kernel) {
        return pl::pallas_call(kernel,
                               pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                                            .scratch_shapes = {pl::VMEM({4, 4}, pl::f32), pl::SemaphoreType::REGULAR,
                                                               pl::SemaphoreType::DMA}},
                               pl::ShapeDtype({4}, pl::f32), backend);
      };
      pl::Array x = pl::Array::zeros({4, 4}, pl::f32);
      const int wait_line = __LINE__ + 2;
      auto unsignalled = call([](pl::Ref, pl::Ref o, pl::Ref, pl::Ref sem, pl::Ref) {
        pl::semaphore_wait(sem);
        o() = pl::zeros_like(o);
      });
      CHECK_THROWS_WITH_AS(unsignalled(x),
                           Contains("deadlock: this semaphore_wait can never return: semaphore `scratch 1` holds 0 and the "
                                    "wait needs 1"),
                           RuntimeError);
      const std::string blocked = fmt::format("async_test.cpp:{}: holds 0 of 1", wait_line);
      CHECK_THROWS_WITH_AS(unsignalled(x), Contains(blocked.c_str()), RuntimeError);
      // Waiting for a whole (4, 4) block after copying one row of it.
      auto short_copy = call([](pl::Ref x, pl::Ref o, pl::Ref buf, pl::Ref, pl::Ref dma) {
        pl::async_copy(x.at(0), buf.at(0), dma);
        pl::make_async_copy(x, buf, dma).wait();
        o() = pl::zeros_like(o);
      });
      CHECK_THROWS_WITH_AS(short_copy(x),
                           Contains("DMA semaphore `scratch 2` holds 16 bytes and the wait needs 64 bytes"), RuntimeError);
    });
    pl::set_dma_execution(pl::DmaExecution::worker);
    auto worker = pl::pallas_call(
        [](pl::Ref x, pl::Ref o, pl::Ref buf, pl::Ref dma) {
          pl::async_copy(x.at(0), buf.at(0), dma);
          pl::make_async_copy(x, buf, dma).wait();
          o() = pl::zeros_like(o);
        },
        pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                     .scratch_shapes = {pl::VMEM({4, 4}, pl::f32), pl::SemaphoreType::DMA}},
        pl::ShapeDtype({4}, pl::f32));
    CHECK_THROWS_WITH_AS(worker(pl::Array::zeros({4, 4}, pl::f32)),
                         Contains("DMA semaphore `scratch 1` holds 16 bytes and the wait needs 64 bytes"), RuntimeError);
    pl::set_dma_execution(pl::DmaExecution::automatic);
  }

  TEST_CASE("dma errors: a copy window out of bounds names the ref, the index and the grid point") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      auto kernel = [](pl::Ref x, pl::Ref o, pl::Ref buf, pl::Ref dma) {
        pl::async_copy(x.at(pl::ds(pl::program_id(0) * 2, 4)), buf, dma).wait();
        o() = buf();
      };
      auto call = pl::pallas_call(kernel,
                                  pl::GridSpec{.grid = {3},
                                               .in_specs = {pl::BlockSpec(pl::ANY)},
                                               .out_specs = {pl::BlockSpec({4}, [](pl::Value) { return pl::idx(0); })},
                                               .scratch_shapes = {pl::VMEM({4}, pl::f32), pl::SemaphoreType::DMA}},
                                  pl::ShapeDtype({4}, pl::f32), backend);
      pl::Array x = pl::Array::zeros({6}, pl::f32);
      CHECK_THROWS_WITH_AS(call(x), Contains("out-of-bounds slice of `input 0`: ds(4, 4) in dimension 0"), RuntimeError);
      CHECK_THROWS_WITH_AS(call(x), Contains("grid point (2)"), RuntimeError);
    });
  }

  TEST_CASE("dma errors: VMEM over the limit lists the pipeline's buffers and scoped ones") {
    auto kernel = [](pl::Ref x_hbm, pl::Ref o_hbm) {
      pl::run_scoped(
          [&](pl::Ref) {
            pl::emit_pipeline([](pl::Ref x, pl::Ref o) { o() = x(); },
                              {.grid = {4},
                               .in_specs = {pl::BlockSpec({64, 256}, [](pl::Value i) { return pl::idx(i, 0); })},
                               .out_specs = {pl::BlockSpec({64, 256}, [](pl::Value i) { return pl::idx(i, 0); })}})(x_hbm,
                                                                                                                  o_hbm);
          },
          pl::VMEM({256, 256}, pl::f32));
    };
    auto call = pl::pallas_call(kernel,
                                pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)}, .out_specs = {pl::BlockSpec(pl::ANY)}},
                                pl::ShapeDtype({256, 256}, pl::f32),
                                {.compiler_params = {.vmem_limit_bytes = 256 * 1024}});
    pl::Array x = pl::Array::zeros({256, 256}, pl::f32);
    CHECK_THROWS_WITH_AS(call(x), Contains("needs more VMEM per core than it may use"), UserError);
    CHECK_THROWS_WITH_AS(call(x), Contains("run_scoped 0 (ref<256x256xf32, vmem>"), UserError);
    CHECK_THROWS_WITH_AS(call(x), Contains("emit_pipeline output 0 blocks (ref<2x64x256xf32, vmem>"), UserError);
  }

  TEST_CASE("emit_pipeline: a pipeline run twice writes its blocks again, a non-consecutive revisit is an error") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      auto pipeline = [](pl::Ref src, pl::Ref dst, std::function<pl::Value(pl::Value)> out_block, int64_t steps) {
        pl::emit_pipeline([](pl::Ref x, pl::Ref o) { o() = x() + 1.0f; },
                          {.grid = {steps},
                           .in_specs = {pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i); })},
                           .out_specs = {pl::BlockSpec({4}, [=](pl::Value i) { return pl::idx(out_block(i)); })}})(src, dst);
      };
      // The seed's pattern: the same GEMM pipeline twice over one output.
      auto twice = pl::pallas_call(
          [&](pl::Ref x, pl::Ref o) {
            pipeline(x, o, [](pl::Value i) { return i; }, 4);
            pipeline(x, o, [](pl::Value i) { return i; }, 4);
          },
          pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)}, .out_specs = {pl::BlockSpec(pl::ANY)}},
          pl::ShapeDtype({16}, pl::f32), backend);
      CHECK(twice(pl::Array::zeros({16}, pl::f32)).to_vector<float>() == std::vector<float>(16, 1.0f));
      // Output blocks 0, 1, 0, 1: the third step comes back to block 0.
      auto revisit = pl::pallas_call(
          [&](pl::Ref x, pl::Ref o) { pipeline(x, o, [](pl::Value i) { return i % 2; }, 4); },
          pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)}, .out_specs = {pl::BlockSpec(pl::ANY)}},
          pl::ShapeDtype({16}, pl::f32), backend);
      CHECK_THROWS_WITH_AS(revisit(pl::Array::zeros({16}, pl::f32)),
                           Contains("emit_pipeline output 0 is revisited non-consecutively"), RuntimeError);
      CHECK_THROWS_WITH_AS(revisit(pl::Array::zeros({16}, pl::f32)), Contains("its block at element offset (0) was written back at emit_pipeline step (0) and is "
                                    "written back again at emit_pipeline step (2)"),
                           RuntimeError);
    });
  }

  TEST_CASE("grid: pallas_call blocks with pl::Buffered(n) behave as synchronous copies") {
    testing::for_each_backend(
        [&](const pl::CallOptions& backend) {
          // Input block indices 0, 0, 1, 1, 2, 2 (fetched on change, the kernel's writes to it kept while
          // it stays); the output accumulates over pairs of steps; two cores split the parallel dim.
          auto kernel = [](pl::Ref x, pl::Ref o) {
            x() = x() + 1.0f;
            pl::when(pl::program_id(1) == 0, [&] { o() = pl::zeros_like(o); });
            o() += x();
          };
          auto spec_in = pl::BlockSpec({2, 4}, [](pl::Value i, pl::Value) { return pl::idx(i, 0); }, pl::Buffered(3));
          auto spec_out = pl::BlockSpec({2, 4}, [](pl::Value i, pl::Value) { return pl::idx(i, 0); }, pl::Buffered(2));
          auto call = pl::pallas_call(kernel,
                                      pl::GridSpec{.grid = {3, 2}, .in_specs = {spec_in}, .out_specs = {spec_out}},
                                      pl::ShapeDtype({6, 4}, pl::f32),
                                      testing::with_backend({.compiler_params = {.dimension_semantics = {pl::parallel,
                                                                                                         pl::arbitrary}}},
                                                            backend));
          pl::Array x = iota_rows(6, 4);
          pl::Array out = call(x);
          for (int64_t i = 0; i < 6; ++i)
            for (int64_t j = 0; j < 4; ++j) CHECK(out.at<float>({i, j}) == 2.0f * x.at<float>({i, j}) + 3.0f);
        },
        pl::InterpretParams{.num_cores_or_threads = 2, .dma_execution_mode = pl::DmaExecutionMode::on_wait});
  }
}
