// Meshes spread over the processes of an mpiexec launch (docs/design.md §4c): the seeds' distributed
// kernels, the collective kernels of ops/ and the host collectives give bit for bit what the same mesh gives on threads in one
// process, and a deadlock or a device's failure is reported on every process. CTest runs this
// executable under `mpiexec -n 2` and `-n 4` (tests/CMakeLists.txt); every process runs every test case.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstring>
#include <functional>
#include <numeric>
#include <stdexcept>

#include "examples/collective_matmul.h"
#include "examples/matmul_strategies.h"
#include "examples/seed_distributed.h"
#include "ops/collectives/collectives.h"
#include "runtime/mpi_transport.h"
#include "runtime/transport.h"
#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;
using doctest::Contains;

namespace {

pl::Array iota(pl::Shape shape, float scale = 1.0f) {
  std::vector<float> v(static_cast<size_t>(num_elements(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(i % 1000) - 7.0f;
  return pl::Array::from_vector(v, shape);
}

// What `run` gives when every device of the mesh is a thread of this process.
template <class F>
auto on_threads(F run) {
  rt::Transport* processes = &rt::process_transport();
  rt::set_process_transport(nullptr);
  struct Restore {
    rt::Transport* t;
    ~Restore() { rt::set_process_transport(t); }
  } restore{processes};
  return run();
}

bool same_bits(const pl::Array& a, const pl::Array& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.data(), b.data(), static_cast<size_t>(a.nbytes())) == 0;
}

// Runs `run` across the processes and on threads, and checks every device's block bit for bit.
void check_like_threads(const std::function<pl::ShardedArray()>& run) {
  const pl::ShardedArray across = run();
  const pl::ShardedArray threads = on_threads(run);
  REQUIRE(across.shards().size() == threads.shards().size());
  for (size_t d = 0; d < across.shards().size(); ++d) {
    INFO("device " << d);
    INFO("across processes: " << across.shards()[d].to_string() << "\non threads: " << threads.shards()[d].to_string());
    CHECK(same_bits(across.shards()[d], threads.shards()[d]));
  }
}

}  // namespace

TEST_SUITE("mpi") {
  TEST_CASE("processes: every process is one of the launch, devices split in contiguous ranges") {
    CHECK(pl::distributed::is_initialized());
    REQUIRE(pl::process_count() > 1);
    CHECK(pl::process_index() < pl::process_count());
    // Device d of a mesh of 4 runs in process d * count / 4: a shard_map's devices report where they ran.
    pl::Mesh mesh({4}, {"x"});
    auto where = pl::shard_map(
        [](const pl::Array&) { return pl::Array::full({1}, pl::process_index(), pl::i32); }, mesh, {pl::P("x")},
        {pl::P("x")});
    const std::vector<int32_t> got = pl::Array(where(pl::Array::zeros({4}, pl::f32))).to_vector<int32_t>();
    for (int32_t d = 0; d < 4; ++d) {
      const auto [lo, hi] = rt::process_devices(4, got[d], pl::process_count());
      CHECK((d >= lo && d < hi));
    }
  }

  TEST_CASE("pl::distributed::initialize: a second call and a window out of range are UserErrors") {
    CHECK_THROWS_WITH_AS(pl::distributed::initialize(), Contains("pl::distributed::initialize was called twice"),
                         UserError);
    CHECK_THROWS_WITH_AS(pl::distributed::initialize({.window_bytes = 1024}),
                         Contains("window_bytes is out of range\n  given: window_bytes = 1024"), UserError);
  }

  TEST_CASE("remote copies: the seed's ring all-gathers (one way and both ways) as on threads") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      for (bool bidirectional : {false, true}) {
        INFO("bidirectional: " << bidirectional);
        pl::Mesh mesh({4, 2}, {"x", "y"});
        const pl::Array w = iota({32, 16});
        check_like_threads([&] {
          return pl::shard_map([&](const pl::Array& b) { return seed::make_ag(b, bidirectional, backend); }, mesh,
                               {pl::P("x")}, {pl::P()})(w);
        });
        // And it is the whole array on every device.
        const pl::ShardedArray out =
            pl::shard_map([&](const pl::Array& b) { return seed::make_ag(b, bidirectional, backend); }, mesh,
                          {pl::P("x")}, {pl::P()})(w);
        for (const pl::Array& s : out.shards()) CHECK(same_bits(s, w));
      }
    });
  }

  TEST_CASE("remote copies of 16 KiB and more go straight into the destination: ring all-gathers as on threads") {
    // Blocks of 128 x 64 f32 (32 KiB): put into the receiver's output through the dynamic window, with
    // rows of the destination a block apart (one way) and whole rows (both ways).
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      for (bool bidirectional : {false, true}) {
        INFO("bidirectional: " << bidirectional);
        const pl::Mesh mesh({4, 2}, {"x", "y"});
        const pl::Array w = iota({512, 64}, 0.5f);
        const pl::ShardedArray out = pl::shard_map([&](const pl::Array& b) { return seed::make_ag(b, bidirectional, backend); },
                                                   mesh, {pl::P("x")}, {pl::P()})(w);
        for (const pl::Array& s : out.shards()) CHECK(same_bits(s, w));
      }
      // A box with strides on both sides: each device sends the left half of its columns, landing
      // in the right half of its neighbour's output (256 rows of 32 f32 out of 64).
      const pl::Mesh ring({4}, {"i"});
      const auto call = pl::pallas_call(
          [](pl::Ref in, pl::Ref o, pl::Ref send, pl::Ref recv) {
            pl::Value right = (pl::axis_index("i") + 1) % 4;
            o.at(pl::ds(0, 256), pl::ds(0, 32))() = in.at(pl::ds(0, 256), pl::ds(32, 32))();
            auto copy = pl::make_async_remote_copy(in.at(pl::ds(0, 256), pl::ds(0, 32)), o.at(pl::ds(0, 256), pl::ds(32, 32)),
                                                   send, recv, pl::DeviceId({right}));
            copy.start();
            copy.wait();
          },
          pl::GridSpec{.in_specs = {pl::BlockSpec(pl::VMEM)},
                       .out_specs = {pl::BlockSpec(pl::VMEM)},
                       .scratch_shapes = {pl::SemaphoreType::DMA, pl::SemaphoreType::DMA}},
          pl::ShapeDtype({256, 64}, pl::f32), backend);
      check_like_threads([&] {
        return pl::shard_map([&](const pl::Array& b) { return call(b); }, ring, {pl::P("i")}, {pl::P("i")})(iota({1024, 64}));
      });
    });
  }

  TEST_CASE("a remote copy into a run_scoped buffer goes straight into it: a ring as on threads") {
    // Two devices per process on a ring; each copies its block (128 x 64 f32, 32 KiB) into a run_scoped
    // buffer of its right neighbour and returns what arrived there. Both backends make a kernel's
    // allocations, run_scoped ones too, before it becomes ready (an alloc op only poisons its buffer
    // again), so the buffer is exposed with the rest: toward a process of this host the copy is a
    // memcpy into it. The neighbour signals once it entered its scope, since entering it poisons the
    // buffer (interpreter) and a copy must not land before.
    const int64_t n = 2 * pl::process_count(), rows = 128, cols = 64;
    const pl::Mesh ring({n}, {"i"});
    const pl::Array x = iota({n * rows, cols}, 0.5f);
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      const auto call = pl::pallas_call(
          [n](pl::Ref in, pl::Ref out, pl::Ref send, pl::Ref recv, pl::Ref entered) {
            pl::run_scoped(
                [&](pl::Ref landed) {
                  pl::Value me = pl::axis_index("i");
                  pl::semaphore_signal(entered, 1, pl::DeviceId({(me + n - 1) % n}));
                  pl::semaphore_wait(entered);
                  auto copy = pl::make_async_remote_copy(in, landed, send, recv, pl::DeviceId({(me + 1) % n}));
                  copy.start();
                  copy.wait();
                  out() = landed();
                },
                pl::VMEM({rows, cols}, pl::f32));
          },
          pl::GridSpec{.in_specs = {pl::BlockSpec(pl::VMEM)},
                       .out_specs = {pl::BlockSpec(pl::VMEM)},
                       .scratch_shapes = {pl::SemaphoreType::DMA, pl::SemaphoreType::DMA, pl::SemaphoreType::REGULAR}},
          pl::ShapeDtype({rows, cols}, pl::f32), backend);
      const rt::mpi::CopyPaths before = rt::mpi::copy_paths();
      check_like_threads([&] {
        return pl::shard_map([&](const pl::Array& b) { return call(b); }, ring, {pl::P("i")}, {pl::P("i")})(x);
      });
      const rt::mpi::CopyPaths after = rt::mpi::copy_paths();
      // Of this process's two devices, the second one's right neighbour runs in the next process.
      CHECK(after.shared_memory + after.window + after.mailbox - before.shared_memory - before.window - before.mailbox == 1);
      if (rt::mpi::has_shared_segment()) CHECK(after.shared_memory - before.shared_memory == 1);
      else CHECK(after.shared_memory == before.shared_memory);
    });
  }

  TEST_CASE("example 9's bidirectional collective matmul across processes, as on threads") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      // Shards of 32 (copies through the mailbox) and 128 (straight into the neighbour's scratch).
      for (int64_t size : {32, 128})
        for (auto [num_rings, ring_len] : {std::pair<int64_t, int64_t>{1, 4}, std::pair<int64_t, int64_t>{2, 4}})
          for (int64_t buffering : {2, 4}) {
            INFO("shards " << size << ", rings " << num_rings << " x " << ring_len << ", buffering " << buffering);
            const pl::Mesh mesh({num_rings, ring_len}, {"ring", "i"});
            const pl::Array lhs = pl::Array::random_normal({num_rings * size, ring_len * size}, pl::bf16, 1);
            const pl::Array rhs = pl::Array::random_normal({ring_len * size, ring_len * 32}, pl::bf16, 2);
            std::vector<int32_t> ids(static_cast<size_t>(num_rings * ring_len));
            std::iota(ids.begin(), ids.end(), 0);
            const pl::Array rings = pl::Array::from_vector(ids, {num_rings, ring_len});
            const pl::Array positions = pl::Array::from_vector(ids, {num_rings * ring_len});
            check_like_threads([&] {
              return pl::shard_map(
                  [&](const pl::Array& l, const pl::Array& r) {
                    return seed::collective_matmul(l, r, ring_len, buffering, rings, positions, backend);
                  },
                  mesh, {pl::P("ring", "i"), pl::P(pl::None, "i")}, {pl::P("ring", "i")})(lhs, rhs);
            });
          }
    });
  }

  TEST_CASE("example 10's matmul strategies (GSPMD, Wang, systolic) across processes, as on threads") {
    using namespace strategies;
    const int64_t bs = 2 * 32, hd = 4 * 16;
    const pl::Array x = ramp({bs, hd}), w = ramp({hd, 4 * hd}), x1 = ramp({bs, 4 * hd}), w1 = ramp({4 * hd, hd});
    const pl::Array w1_t = pl::transpose(w1), x_t = pl::transpose(x), w_narrow = ramp({hd, 8});
    using Strategy = std::function<pl::Array(const pl::Array&, const pl::Array&)>;
    const std::vector<std::tuple<const char*, Strategy, const pl::Array*, const pl::Array*>> cases = {
        {"GSPMD OS", gspmd_os, &x, &w},
        {"GSPMD IS", gspmd_is, &x1, &w1_t},
        {"GSPMD WS", gspmd_ws, &x_t, &w},
        {"Wang OS", wang_os, &x, &w},
        {"Wang IS", wang_is, &x1, &w1_t},
        {"Wang WS, input split", wang_ws, &x_t, &w},
        {"Wang WS, output split", wang_ws, &x_t, &w_narrow},
        {"Systolic OS", [](const pl::Array& a, const pl::Array& b) { return systolic_os(a, b, 2, 4); }, &x, &w},
        {"Systolic IS", [](const pl::Array& a, const pl::Array& b) { return systolic_is(a, b, 2, 4); }, &x1, &w1_t},
        {"Systolic WS", [](const pl::Array& a, const pl::Array& b) { return systolic_ws(a, b, 2, 4); }, &x_t, &w},
    };
    for (auto [rows, cols] : {std::pair{4, 2}, std::pair{2, 4}}) {
      const pl::Mesh mesh({rows, cols}, {"row", "col"});
      for (const auto& [name, f, a, b] : cases) {
        INFO(name << " on " << rows << " x " << cols);
        check_like_threads([&] {
          return pl::shard_map(f, mesh, {pl::P("row", "col"), pl::P("row", "col")}, {pl::P("row", "col")})(*a, *b);
        });
      }
    }
  }

  TEST_CASE("mpmd_map after initialize runs wholly in each process that calls it, as without MPI") {
    // Its participants share operand memory (docs/design.md §4c, limits): every process runs all of them.
    // A producer stages x in shared HBM and signals a shared semaphore; a consumer waits and copies it out.
    auto produce = [](pl::Ref x, pl::Ref, pl::Ref stage, pl::Ref full) {
      pl::sync_copy(x, stage);
      pl::semaphore_signal(full);
    };
    auto consume = [](pl::Ref, pl::Ref o, pl::Ref stage, pl::Ref full) {
      pl::semaphore_wait(full);
      pl::sync_copy(stage, o);
    };
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      const auto call = pl::mpmd_map({{pl::CoreMesh("producer", 1), produce}, {pl::CoreMesh("consumer", 1), consume}},
                                     pl::ShapeDtype({8, 6}, pl::f32),
                                     {pl::HBM({8, 6}, pl::f32), pl::SemaphoreType::REGULAR}, backend);
      const pl::Array x = iota({8, 6}, 0.5f);
      const pl::Array across = call(x);
      CHECK(same_bits(across, x));
      CHECK(same_bits(across, on_threads([&] { return call(x); })));
    });
  }

  TEST_CASE("distributed matmuls of example 8: all-gather and all-reduce kernels, fused AG + GEMM, host collectives") {
    // The seed's kernels work on 128-blocks: every device's shards are 128 x 128.
    const pl::Array inputs = pl::Array::random_normal({256, 256}, pl::bf16, 0);
    const pl::Array weights = pl::Array::random_normal({256, 128}, pl::bf16, 1);
    testing::for_each_backend([&](const pl::CallOptions& options) {
      using F = std::function<pl::Array(const pl::Array&, const pl::Array&)>;
      const std::vector<std::pair<const char*, F>> variants = {
          {"xla_matmul_2", seed::xla_matmul_2},
          {"AG kernel -> GEMM -> AR kernel",
           [&](const pl::Array& in, const pl::Array& w) { return seed::slow_ag_gemm_ar(in, w, options); }},
          {"fused AG + GEMM + AR kernel",
           [&](const pl::Array& in, const pl::Array& w) { return seed::make_ar(seed::fused_ag_gemm(in, w, options), options); }},
      };
      const pl::Mesh mesh({2, 2}, {"x", "y"});
      for (const auto& [what, f] : variants) {
        INFO(std::string(what));
        check_like_threads([&] {
          return pl::shard_map(f, mesh, {pl::P("x", "y"), pl::P("x", pl::None)}, {pl::P("x", pl::None)})(inputs, weights);
        });
      }
    });
  }

  TEST_CASE("host collectives and signals: psum, ppermute, the barrier semaphore with a collective_id") {
    pl::Mesh mesh({4}, {"i"});
    const pl::Array a = iota({8, 6}, 0.25f);
    check_like_threads([&] { return pl::shard_map([](const pl::Array& b) { return pl::psum(b, "i"); }, mesh, {pl::P("i")}, {pl::P("i")})(a); });
    check_like_threads([&] {
      return pl::shard_map([](const pl::Array& b) { return pl::ppermute(b, "i", {{0, 1}, {1, 2}, {2, 3}, {3, 0}}); }, mesh,
                           {pl::P("i")}, {pl::P("i")})(a);
    });
    // With a collective_id (no entry barrier): device d adds d + 1 to the barrier semaphore of device
    // d + 1 by logical id, waits for what its left neighbour adds, and reports that amount.
    auto kernel = [](pl::Ref o) {
      pl::Value me = pl::device_id();
      pl::Value left = (me + 3) % 4;
      pl::Ref barrier = pl::get_barrier_semaphore();
      pl::semaphore_signal(barrier, me + 1, pl::DeviceId((me + 1) % 4), pl::DeviceIdType::LOGICAL);
      pl::semaphore_wait(barrier, left + 1);
      o[0] = (left + 1) * 10 + pl::semaphore_read(barrier);
    };
    pl::CallOptions with_id;
    with_id.compiler_params.collective_id = 3;
    const auto call =
        pl::pallas_call(kernel, pl::GridSpec{.out_specs = {pl::BlockSpec(pl::SMEM)}}, pl::ShapeDtype({1}, pl::i32), with_id);
    auto signals = pl::shard_map([&](const pl::Array&) { return call(); }, mesh, {pl::P("i")}, {pl::P("i")});
    CHECK(pl::Array(signals(pl::Array::zeros({4}, pl::f32))).to_vector<int32_t>() == std::vector<int32_t>{40, 10, 20, 30});
  }

  TEST_CASE("collective kernels (reduce-scatter, all-to-all, all-gather, all-reduce) across processes, as on threads") {
    // Small arrays (copies through the mailbox) and large ones (blocks of 16 KiB and more put
    // straight into the receiver's buffers), f32 and bf16, along each axis of 1-D and 2-D meshes.
    namespace cl = tessera::collectives;
    for (const bool interpret : {false, true})
      for (const auto& [shape, names] : {std::pair<pl::Shape, std::vector<std::string>>{{4}, {"x"}},
                                         {{2, 2}, {"x", "y"}},
                                         {{4, 2}, {"x", "y"}}})
        for (const std::string& axis : names)
          for (pl::DType dtype : {pl::f32, pl::bf16})
            for (int64_t rows : {8, 256}) {
              INFO((interpret ? "interpret" : "compiled") << ", mesh of " << names.size() << " axes, along " << axis << ", "
                                                          << pl::dtype_name(dtype) << ", " << rows << " rows");
              const pl::Mesh mesh(shape, names);
              cl::Options o{.block_elements = 4096};
              if (interpret) o.interpret = pl::InterpretParams{};
              const pl::P spec = names.size() == 1 ? pl::P("x") : pl::P(pl::PartitionDim({"x", "y"}));
              const pl::Array a = iota({mesh.size() * rows, 24}, 0.25f).astype(dtype);
              auto run = [&](std::function<pl::Array(const pl::Array&)> f) {
                check_like_threads([&] { return pl::shard_map(f, mesh, {spec}, {spec})(a); });
              };
              run([&](const pl::Array& b) { return cl::reduce_scatter(b, axis, 0, o); });
              run([&](const pl::Array& b) { return cl::all_to_all(b, axis, 0, 1, true, o); });
              run([&](const pl::Array& b) { return cl::all_gather(b, axis, 1, o); });
              run([&](const pl::Array& b) { return cl::all_reduce(b, axis, o); });
              if (names.size() == 2) run([&](const pl::Array& b) { return cl::reduce_scatter(b, names, 1, o); });
            }
  }

  TEST_CASE("remote copies in flight across calls land before the next call waits, across processes") {
    // docs/design.md §4.9: every device starts a copy of its block into its right neighbour's output
    // and returns, the send and receive semaphores among its outputs; the next call waits on them and
    // reads the output. Devices 1 and 3 send to devices in another process (under -n 2 and -n 4), whose
    // kernels hold at their end until this process's have ended, so the copy lands in their outputs
    // and its count in their semaphores. Small blocks travel in the mailbox, 32 KiB ones straight into
    // the destination (a kLanded message raises the semaphore); random delays vary who ends first.
    pl::set_random_delays(200, 5);
    for (const pl::Shape& block : {pl::Shape{2, 8}, pl::Shape{64, 128}}) {
      testing::for_each_backend([&](const pl::CallOptions& backend) {
        INFO("block " << block[0] << "x" << block[1]);
        auto right = [] { return pl::DeviceId({(pl::axis_index("x") + 1) % 4}); };
        auto start = pl::pallas_call(
            [&](pl::Ref x, pl::Ref o, pl::Ref send, pl::Ref recv) {
              pl::make_async_remote_copy(x, o, send, recv, right()).start();
            },
            pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                         .out_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::SEMAPHORE), pl::BlockSpec(pl::SEMAPHORE)}},
            {pl::ShapeDtype(block, pl::f32), pl::SemaphoreType::DMA, pl::SemaphoreType::DMA}, backend);
        pl::CallOptions done_options = backend;
        done_options.input_output_aliases = {{0, 0}};
        auto done = pl::pallas_call(
            [&](pl::Ref, pl::Ref send, pl::Ref recv, pl::Ref o, pl::Ref y) {
              auto copy = pl::make_async_remote_copy(o, o, send, recv, right());
              copy.wait_send();
              copy.wait_recv();
              pl::sync_copy(o, y);
            },
            pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::SEMAPHORE), pl::BlockSpec(pl::SEMAPHORE)},
                         .out_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::ANY)}},
            {pl::ShapeDtype(block, pl::f32), pl::ShapeDtype(block, pl::f32)}, done_options);
        const pl::Array x = iota({4 * block[0], block[1]});
        for (int round = 0; round < 3; ++round) {
          const pl::Array out = pl::shard_map(
              [&](const pl::Array& b) {
                const std::vector<pl::Array> started = start(b);
                return done(started[0], started[1], started[2])[1];
              },
              pl::Mesh({4}, {"x"}), {pl::P("x")}, {pl::P("x")})(x);
          for (int64_t d = 0; d < 4; ++d)
            for (int64_t r = 0; r < block[0]; r += block[0] - 1)
              for (int64_t j = 0; j < block[1]; j += block[1] - 1)
                CHECK(out.at<float>({d * block[0] + r, j}) == x.at<float>({((d + 3) % 4) * block[0] + r, j}));
        }
      });
    }
    pl::set_random_delays(0);
  }

  TEST_CASE("errors across processes: a copy toward a kernel without semaphore outputs that never waits for it") {
    // Device 1 copies into device 2's output (another process under -n 2 and -n 4), the receive
    // semaphore device 2's scratch, which device 2 never waits on: nothing would receive the count
    // after device 2's end, so every process fails, with device 2's non-zero semaphore or with the
    // copy that came too late, whatever the timing; then the next call starts clean.
    pl::set_random_delays(200, 9);
    const int start_line = __LINE__ + 7;  // copy.start() below
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      pl::Mesh mesh({4}, {"x"});
      const auto call = pl::pallas_call(
          [](pl::Ref x, pl::Ref o, pl::Ref send, pl::Ref recv) {
            pl::when(pl::axis_index("x") == 1, [&] {
              auto copy = pl::make_async_remote_copy(x, o, send, recv, pl::DeviceId({2}));
              copy.start();  // the line of the late copy's error (start_line)
              copy.wait_send();
            });
          },
          pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)}, .out_specs = {pl::BlockSpec(pl::ANY)},
                       .scratch_shapes = {pl::SemaphoreType::DMA, pl::SemaphoreType::DMA}},
          pl::ShapeDtype({2, 8}, pl::f32), backend);
      auto f = pl::shard_map([&](const pl::Array& b) { return call(b); }, mesh, {pl::P("x")}, {pl::P("x")});
      for (int round = 0; round < 3; ++round) {
        std::string m;
        try {
          f(iota({8, 8}));
        } catch (const RuntimeError& e) {
          m = e.what();
        }
        INFO(m);
        REQUIRE_FALSE(m.empty());
        CHECK(((m.find("`scratch 1` is 64 when the kernel ends") != std::string::npos) ||
               (m.find("device 1 (x=1)") != std::string::npos && m.find("device 2 (x=2)") != std::string::npos &&
                m.find("ended") != std::string::npos)));
        if (m.find("reached device 2 (x=2) after") != std::string::npos) {  // the receiving process's report
          CHECK(m.find("from device 1 (x=1), core 0,") != std::string::npos);
          CHECK(m.find("distributed_test.cpp:") != std::string::npos);  // the pallas_call
          CHECK(m.find("Make the receiver wait for it") != std::string::npos);
          // The sender's failure, as on threads: its device and core, and the line of its copy.
          CHECK(m.find("where: device 1, core 0") != std::string::npos);
          CHECK(m.find(fmt::format("distributed_test.cpp:{}", start_line)) != std::string::npos);
        }
      }
      const pl::Array w = iota({16, 4});
      check_like_threads([&] {
        return pl::shard_map([&](const pl::Array& b) { return seed::make_ag(b, false, backend); }, mesh, {pl::P("x")},
                             {pl::P()})(w);
      });
    });
    pl::set_random_delays(0);
  }

  TEST_CASE("errors across processes: a deadlock is reported on every process") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      pl::Mesh mesh({4}, {"x"});
      // Device 0 signals device 3 once; every device waits for two signals: none ever gets them.
      const auto call = pl::pallas_call(
          [](pl::Ref o, pl::Ref sem) {
            pl::when(pl::axis_index("x") == 0, [&] { pl::semaphore_signal(sem, 1, pl::DeviceId({{"x", 3}})); });
            pl::semaphore_wait(sem, 2);
            o() = pl::zeros_like(o);
          },
          pl::GridSpec{.scratch_shapes = {pl::SemaphoreType::REGULAR}}, pl::ShapeDtype({1}, pl::f32), backend);
      auto f = pl::shard_map([&](const pl::Array&) { return call(); }, mesh, {pl::P("x")}, {pl::P("x")});
      try {
        f(pl::Array::zeros({4}, pl::f32));
        FAIL("the deadlock went unreported");
      } catch (const RuntimeError& e) {
        // Every process throws the report; the devices of other processes are named as such.
        const std::string m = e.what();
        CHECK(m.find("deadlock: nothing can make progress in collective kernel") != std::string::npos);
        CHECK(m.find("waits or is done in another process") != std::string::npos);
        CHECK(m.find("holds 0 of 2") != std::string::npos);
      }
      // The next shard_map call starts clean.
      const pl::Array w = iota({16, 4});
      check_like_threads([&] {
        return pl::shard_map([&](const pl::Array& b) { return seed::make_ag(b, false, backend); }, mesh, {pl::P("x")},
                             {pl::P()})(w);
      });
    });
  }

  TEST_CASE("errors across processes: one device's failure is every process's, not a hang") {
    pl::Mesh mesh({4}, {"i"});
    // Device 1 gives up before its kernel; the others wait for its signal in theirs.
    auto f = pl::shard_map(
        [&](const pl::Array& block) {
          if (pl::host_axis_index("i") == 1) throw std::runtime_error("device 1 gave up");
          return pl::pallas_call(
              [](pl::Ref, pl::Ref o, pl::Ref sem) {
                pl::semaphore_signal(sem, 1, pl::DeviceId({(pl::axis_index("i") + 1) % 4}));
                pl::semaphore_wait(sem);
                o() = pl::zeros_like(o);
              },
              pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)}, .scratch_shapes = {pl::SemaphoreType::REGULAR}},
              pl::ShapeDtype({1}, pl::f32))(block);
        },
        mesh, {pl::P("i")}, {pl::P("i")});
    CHECK_THROWS_WITH_AS(f(pl::Array::zeros({4}, pl::f32)), Contains("device 1 gave up"), std::runtime_error);

    // A fault in a kernel (a device id off the mesh) on device 2 only.
    auto bad = pl::shard_map(
        [&](const pl::Array& block) {
          return pl::pallas_call(
              [](pl::Ref in, pl::Ref o, pl::Ref send, pl::Ref recv) {
                pl::Value me = pl::axis_index("i");
                pl::Value to = pl::where(me == 2, me + 5, (me + 1) % 4);
                auto copy = pl::make_async_remote_copy(in, o, send, recv, pl::DeviceId({to}));
                copy.start();
                copy.wait();
              },
              pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                           .out_specs = {pl::BlockSpec(pl::ANY)},
                           .scratch_shapes = {pl::SemaphoreType::DMA, pl::SemaphoreType::DMA}},
              pl::ShapeDtype({1}, pl::f32))(block);
        },
        mesh, {pl::P("i")}, {pl::P("i")});
    CHECK_THROWS_WITH_AS(bad(pl::Array::zeros({4}, pl::f32)), Contains("device (7) is outside Mesh('i': 4)"),
                         RuntimeError);
  }
}

TEST_SUITE("mpi") {
  TEST_CASE("errors across processes: every process reports the failing device, core and line as that device's process does") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      pl::Mesh mesh({4}, {"i"});
      // Only device 3 (in the last process) reads out of bounds; the other devices finish.
      const uint32_t line = __LINE__ + 2;
      const auto call = pl::pallas_call(
          [](pl::Ref x, pl::Ref o) { o() = x(pl::ds(pl::axis_index("i") / 3 * 100, 1)); },
          pl::GridSpec{}, pl::ShapeDtype({1}, pl::f32), backend);
      auto f = pl::shard_map([&](const pl::Array& block) { return call(block); }, mesh, {pl::P("i")}, {pl::P("i")});
      try {
        f(pl::Array::zeros({4}, pl::f32));
        FAIL("the out-of-bounds read went unreported");
      } catch (const RuntimeError& e) {
        const std::string m = e.what();
        INFO(m);
        CHECK(e.where().device == 3);
        CHECK(e.where().core == 0);
        CHECK(e.loc().line == line);
        REQUIRE(e.loc().file != nullptr);
        CHECK(std::string_view(e.loc().file).ends_with("distributed_test.cpp"));
        CHECK(m.find("out-of-bounds slice") != std::string::npos);
        CHECK(m.find("\n  where: device 3, core 0\n") != std::string::npos);
        CHECK(m.find(fmt::format("\n  at:    {}:{}", e.loc().file, line)) != std::string::npos);
        const int last = pl::process_count() - 1;
        if (pl::process_index() != last)
          CHECK(e.problem().starts_with(fmt::format("process {} of {} failed: ", last, pl::process_count())));
      }
    });
  }

  TEST_CASE("errors across processes: a shard_map inside another one's function is a UserError on every process") {
    pl::Mesh mesh({2}, {"x"});
    auto inner = pl::shard_map([](const pl::Array& b) { return b; }, mesh, {pl::P("x")}, {pl::P("x")});
    auto outer = pl::shard_map([&](const pl::Array& b) { return pl::Array(inner(b)); }, mesh, {pl::P("x")}, {pl::P("x")});
    CHECK_THROWS_WITH_AS(outer(pl::Array::zeros({4}, pl::f32)),
                         Contains("a shard_map over processes started while another one runs in this process"),
                         std::runtime_error);
  }
}

int main(int argc, char** argv) {
  // --no-shared-segment: copies between processes of this host go through MPI (tests/CMakeLists.txt).
  bool shared = true;
  for (int a = 1; a < argc; ++a) shared = shared && std::strcmp(argv[a], "--no-shared-segment") != 0;
  pl::distributed::initialize({.shared_bytes = shared ? pl::distributed::Options{}.shared_bytes : 0});
  doctest::Context context(argc, argv);
  return context.run();
}
