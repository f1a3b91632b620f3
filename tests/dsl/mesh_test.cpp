// Meshes, shardings, shard_map and kernels that talk to other devices (docs/design.md §4.8-10, §4b), in
// both backends.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "examples/seed_distributed.h"
#include "tests/support/capture.h"
#include "tests/support/kernels.h"
#include "tests/support/scoped_env.h"

using namespace tessera;
namespace pl = tessera;
using doctest::Contains;

namespace {

pl::Array iota(pl::Shape shape) {
  std::vector<float> v(static_cast<size_t>(num_elements(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return pl::Array::from_vector(v, shape);
}

// Seed 000's 1-D ring all-gather along mesh axis x, for any ring length (at step s every device sends
// the block it got at step s - 1 to its right neighbour), as example 8 and the benchmarks run it.
pl::Array ring_all_gather(const pl::Array& x, const pl::CallOptions& options) {
  return seed::make_ag(x, /*bidirectional=*/false, options);
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("mesh: coordinates, logical ids and errors") {
    pl::Mesh mesh({4, 2}, {"x", "y"});
    CHECK(mesh.size() == 8);
    CHECK(mesh.coords(5) == std::vector<int64_t>{2, 1});
    CHECK(mesh.logical(std::vector<int64_t>{3, 1}) == 7);
    CHECK(mesh.axis_size("y") == 2);
    CHECK(mesh.str() == "Mesh('x': 4, 'y': 2)");
    CHECK_THROWS_WITH_AS(mesh.axis("z"), Contains("the mesh has no axis `z`"), UserError);
    CHECK_THROWS_WITH_AS(pl::Mesh({2, 2}, {"x", "x"}), Contains("mesh axis names must be distinct"), UserError);
    CHECK_THROWS_WITH_AS(pl::Mesh({2}, {"x", "y"}), Contains("a mesh needs one name per axis"), UserError);
  }

  TEST_CASE("sharding: device_put splits by the partition spec and gather puts it back together") {
    pl::Mesh mesh({2, 2}, {"x", "y"});
    pl::Array x = iota({4, 6});
    pl::ShardedArray s = pl::device_put(x, pl::NamedSharding(mesh, pl::P("x", "y")));
    CHECK(s.shard(0).shape() == pl::Shape{2, 3});
    CHECK(s.shard(1).at<float>({0, 0}) == 3.0f);   // (x=0, y=1): columns 3..5 of rows 0..1
    CHECK(s.shard(2).at<float>({0, 0}) == 12.0f);  // (x=1, y=0): rows 2..3
    CHECK(pl::allclose(s.gather(), x, 0, 0));
    pl::ShardedArray r = pl::device_put(x, pl::NamedSharding(mesh, pl::P("x")));  // replicated over y
    CHECK(r.shard(1).shape() == pl::Shape{2, 6});
    CHECK(pl::allclose(r.shard(1), r.shard(0), 0, 0));
    pl::ShardedArray both = pl::device_put(x, pl::NamedSharding(mesh, pl::P({"x", "y"}, pl::None)));
    CHECK(both.shard(3).at<float>({0, 0}) == 18.0f);  // the fourth of four row blocks
    const std::string picture = pl::visualize_array_sharding(s, /*print=*/false);
    CHECK(picture.find("device 0") != std::string::npos);
    CHECK(picture.find("device 3") != std::string::npos);
    CHECK(picture.find("┼") != std::string::npos);
    CHECK(pl::visualize_array_sharding(r, false).find("device 0,1") != std::string::npos);
    CHECK_THROWS_WITH_AS(pl::device_put(x, pl::NamedSharding(mesh, pl::P(pl::None, "x", "y"))),
                         Contains("the partition spec has more dims than the array"), UserError);
    CHECK_THROWS_WITH_AS(pl::device_put(iota({3, 4}), pl::NamedSharding(mesh, pl::P("x"))),
                         Contains("dim 0 of size 3 does not split evenly into 2 parts"), UserError);
    CHECK_THROWS_WITH_AS(pl::device_put(x, pl::NamedSharding(mesh, pl::P("x", "x"))),
                         Contains("mesh axis `x` splits two dims"), UserError);
  }

  TEST_CASE("shard_map: each device runs the function on its blocks, kernels see their coordinates") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      pl::Mesh mesh({2, 2}, {"x", "y"});
      auto f = pl::shard_map(
          [&](const pl::Array& block) {
            // Kernel: add 100 * x + 10 * y + the device id to the block.
            auto kernel = [](pl::Ref in, pl::Ref out) {
              out() = in() + (pl::axis_index("x") * 100 + pl::axis_index("y") * 10 + pl::device_id()).astype(pl::f32);
            };
            pl::Array out = pl::pallas_call(kernel, pl::GridSpec{}, pl::ShapeDtype(block.shape(), block.dtype()), backend)(block);
            // Host code knows its coordinates too: add 1000 * x on the host. (No doctest checks in here: this
            // runs on the device threads.)
            std::vector<float> v = out.to_vector<float>();
            for (float& e : v) e += 1000.0f * static_cast<float>(pl::host_axis_index("x"));
            return pl::Array::from_vector(v, out.shape());
          },
          mesh, {pl::P("x", "y")}, {pl::P("x", "y")});
      pl::Array x = pl::Array::zeros({4, 4}, pl::f32);
      pl::Array out = f(x);
      CHECK(out.at<float>({0, 0}) == 0.0f);
      CHECK(out.at<float>({0, 2}) == 11.0f);   // x=0, y=1: 10 + id 1
      CHECK(out.at<float>({2, 0}) == 1102.0f);  // x=1, y=0: 1000 (host) + 100 + id 2
      CHECK(out.at<float>({3, 3}) == 1113.0f);
    });
  }

  TEST_CASE("shard_map: one pallas_call used on two meshes with the same block shapes traces each mesh") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      // The trace reads the mesh (axis sizes, device ids): the second mesh must not reuse the first's.
      auto kernel = [](pl::Ref in, pl::Ref out) {
        out() = in() + (pl::axis_size("x") * 100 + pl::device_id()).astype(pl::f32);
      };
      auto call = pl::pallas_call(kernel, pl::GridSpec{}, pl::ShapeDtype({1, 8}, pl::f32), backend);
      auto run = [&](const pl::Mesh& mesh, const pl::P& spec, const pl::Array& x) {
        return pl::shard_map([&](const pl::Array& block) { return call(block); }, mesh, {spec}, {spec})(x);
      };
      const pl::Array line = run(pl::Mesh({4}, {"x"}), pl::P("x"), pl::Array::zeros({4, 8}, pl::f32));
      CHECK(line.at<float>({3, 0}) == 403.0f);  // 4 devices along x, device 3
      const pl::Array square = run(pl::Mesh({2, 2}, {"x", "y"}), pl::P("x", "y"), pl::Array::zeros({2, 16}, pl::f32));
      CHECK(square.at<float>({1, 8}) == 203.0f);  // 2 devices along x, device (1, 1) = 3
      CHECK(square.at<float>({0, 0}) == 200.0f);
    });
  }

  TEST_CASE("remote copies: the seed's ring all-gather on 2x2 and 4x2 meshes") {
    for (auto [rows, cols] : {std::pair{2, 2}, std::pair{4, 2}}) {
      testing::for_each_backend([&](const pl::CallOptions& backend) {
        pl::Mesh mesh({rows, cols}, {"x", "y"});
        pl::Array w = iota({8L * rows, 16});
        auto gather = pl::shard_map([&](const pl::Array& block) { return ring_all_gather(block, backend); }, mesh,
                                    {pl::P("x")}, {pl::P()});
        pl::ShardedArray out = gather(w);
        for (int64_t d = 0; d < mesh.size(); ++d) CHECK(pl::allclose(out.shard(d), w, 0, 0));
      });
    }
  }

  TEST_CASE("remote copies land in the target's buffers of the same launch whatever the devices' timing") {
    // Random delays before every launch and remote operation; several launches in a row, so a fast
    // device's next launch overlaps a slow device's current one.
    pl::set_random_delays(300, 42);
    for (int rep = 0; rep < 3; ++rep) {
      testing::for_each_backend([&](const pl::CallOptions& backend) {
        pl::Mesh mesh({4, 2}, {"x", "y"});
        pl::Array w = iota({32, 8});
        auto gather_twice = pl::shard_map(
            [&](const pl::Array& block) {
              pl::Array once = ring_all_gather(block, backend);
              pl::Array doubled = pl::Array::from_vector(
                  [&] {
                    std::vector<float> v = block.to_vector<float>();
                    for (float& e : v) e *= 2.0f;
                    return v;
                  }(),
                  block.shape());
              pl::Array twice = ring_all_gather(doubled, backend);
              return pl::concatenate({once, twice}, 1);
            },
            mesh, {pl::P("x")}, {pl::P()});
        pl::Array out = gather_twice(w);
        std::vector<float> want = w.to_vector<float>();
        for (int64_t r = 0; r < 32; ++r)
          for (int64_t c = 0; c < 8; ++c) {
            CHECK(out.at<float>({r, c}) == want[r * 8 + c]);
            CHECK(out.at<float>({r, 8 + c}) == 2.0f * want[r * 8 + c]);
          }
      });
    }
    pl::set_random_delays(0);
  }

  TEST_CASE("barrier semaphore: neighbours signal each other's, with a collective_id") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      pl::Mesh mesh({4}, {"i"});
      auto kernel = [](pl::Ref o) {
        const int64_t n = pl::axis_size("i");
        pl::Value me = pl::axis_index("i");
        pl::Ref barrier = pl::get_barrier_semaphore();
        pl::semaphore_signal(barrier, 1, pl::DeviceId({(me + 1) % n}));
        pl::semaphore_signal(barrier, 1, pl::DeviceId({(me + n - 1) % n}), pl::DeviceIdType::MESH);
        pl::semaphore_wait(barrier, 2);
        o[0] = pl::semaphore_read(barrier);
      };
      auto f = pl::shard_map(
          [&](const pl::Array&) {
            pl::CallOptions options = backend;
            options.compiler_params.collective_id = 7;
            return pl::pallas_call(kernel, pl::GridSpec{.out_specs = {pl::BlockSpec(pl::SMEM)}}, pl::ShapeDtype({1}, pl::i32),
                                   options)();
          },
          mesh, {pl::P("i")}, {pl::P("i")});
      CHECK(pl::Array(f(pl::Array::zeros({4}, pl::f32))).to_vector<int32_t>() == std::vector<int32_t>{0, 0, 0, 0});
    });
  }

  TEST_CASE("remote signals with logical device ids, and a remote copy into this device itself") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      pl::Mesh mesh({2, 2}, {"x", "y"});
      // Every device signals the device with the next logical id, then copies its block onto itself.
      auto kernel = [](pl::Ref in, pl::Ref out, pl::Ref flag, pl::Ref send, pl::Ref recv) {
        pl::semaphore_signal(flag, 3, pl::DeviceId((pl::device_id() + 1) % 4), pl::DeviceIdType::LOGICAL);
        pl::semaphore_wait(flag, 3);
        auto copy = pl::make_async_remote_copy(in, out, send, recv, pl::DeviceId(pl::device_id()), pl::DeviceIdType::LOGICAL);
        copy.start();
        copy.wait();
      };
      auto f = testing::on_every_device(
          kernel, mesh, pl::P("x", "y"), {pl::SemaphoreType::REGULAR, pl::SemaphoreType::DMA, pl::SemaphoreType::DMA},
          backend);
      pl::Array x = iota({4, 4});
      CHECK(pl::allclose(f(x), x, 0, 0));
    });
  }

  TEST_CASE("run_scoped: a remote signal that lands before the receiver enters the scope is kept") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      pl::Mesh mesh({2}, {"x"});
      // Device 1 signals device 0's scoped semaphore and leaves the scope, then says `go`; device 0
      // enters the scope only after `go`, so the signal is already there (not lost to a re-zeroing).
      auto kernel = [](pl::Ref in, pl::Ref out, pl::Ref go) {
        const pl::Value me = pl::axis_index("x");
        pl::when(me == 0, [&] { pl::semaphore_wait(go, 1); });
        pl::run_scoped(
            [&](pl::Ref sem) {
              pl::when(me == 1, [&] { pl::semaphore_signal(sem, 1, pl::DeviceId({{"x", 0}})); });
              pl::when(me == 0, [&] { pl::semaphore_wait(sem, 1); });
            },
            pl::SemaphoreType::REGULAR);
        pl::when(me == 1, [&] { pl::semaphore_signal(go, 1, pl::DeviceId({{"x", 0}})); });
        pl::sync_copy(in, out);
      };
      auto f = testing::on_every_device(kernel, mesh, pl::P("x"), {pl::SemaphoreType::REGULAR}, backend);
      pl::Array x = iota({4, 4});
      CHECK(pl::allclose(f(x), x, 0, 0));
    });
  }

  TEST_CASE("mesh errors: a deadlock across devices is one report with every device's wait") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      pl::Mesh mesh({2, 2}, {"x", "y"});
      const int wait_line = __LINE__ + 4;
      auto kernel = [](pl::Ref o, pl::Ref sem) {
        // Devices with x = 0 signal their x = 1 partner twice; everybody waits for 2: x = 0 never gets them.
        pl::when(pl::axis_index("x") == 0, [&] { pl::semaphore_signal(sem, 2, pl::DeviceId({{"x", 1}})); });
        pl::semaphore_wait(sem, 2);
        o() = pl::zeros_like(o);
      };
      auto f = pl::shard_map(
          [&](const pl::Array&) {
            return pl::pallas_call(kernel, pl::GridSpec{.scratch_shapes = {pl::SemaphoreType::REGULAR}},
                                   pl::ShapeDtype({1}, pl::f32), backend)();
          },
          mesh, {pl::P("x", "y")}, {pl::P("x", "y")});
      pl::Array x = pl::Array::zeros({2, 2}, pl::f32);
      CHECK_THROWS_WITH_AS(f(x), Contains("deadlock: nothing can make progress in collective kernel `kernel`"), RuntimeError);
      const std::string line = fmt::format("async_test.cpp");
      try {
        f(x);
      } catch (const RuntimeError& e) {
        const std::string m = e.what();
        CHECK(m.find("device 0 (x=0, y=0): semaphore_wait on semaphore `scratch 0`") != std::string::npos);
        CHECK(m.find(fmt::format("mesh_test.cpp:{}: holds 0 of 2", wait_line)) != std::string::npos);
        CHECK(m.find("device 2 (x=1, y=0): finished the kernel") != std::string::npos);
      }
    });
  }

  TEST_CASE("mesh errors: bad device ids, mismatched launches and specs, remote copies outside a mesh") {
    pl::Mesh mesh({2, 2}, {"x", "y"});
    pl::Array x = pl::Array::zeros({4, 4}, pl::f32);
    auto run = [&](std::function<void(pl::Ref, pl::Ref, pl::Ref, pl::Ref, pl::Ref)> kernel, pl::CallOptions options = {}) {
      return testing::on_every_device(
          kernel, mesh, pl::P("x", "y"), {pl::SemaphoreType::DMA, pl::SemaphoreType::DMA, pl::SemaphoreType::REGULAR},
          options)(x);
    };
    using R = pl::Ref;
    for (const pl::CallOptions& backend : {pl::CallOptions{}, testing::interpret()}) {
      CHECK_THROWS_WITH_AS(run([](R in, R out, R send, R recv, R) {
                             pl::make_async_remote_copy(in, out, send, recv, pl::DeviceId({pl::axis_index("x") + 2, 0})).start();
                           }, backend),
                           Contains("is outside Mesh('x': 2, 'y': 2): its coordinate on axis `x` is "),
                           RuntimeError);
      CHECK_THROWS_WITH_AS(run([](R, R, R, R, R sem) { pl::semaphore_signal(sem, 1, pl::DeviceId(7), pl::DeviceIdType::LOGICAL); },
                               backend),
                           Contains("device id 7 is outside Mesh('x': 2, 'y': 2)"), RuntimeError);
    }
    CHECK_THROWS_WITH_AS(run([](R in, R out, R send, R recv, R) {
                           pl::make_async_remote_copy(in.at(0), out, send, recv, pl::DeviceId({0, 0}));
                         }),
                         Contains("pl::make_async_remote_copy: the source and destination differ in shape"), UserError);
    CHECK_THROWS_WITH_AS(run([](R in, R out, R send, R, R regular) {
                           pl::make_async_remote_copy(in, out, send, regular, pl::DeviceId({0, 0}));
                         }),
                         Contains("pl::make_async_remote_copy needs a DMA semaphore, but got a regular semaphore"),
                         UserError);
    CHECK_THROWS_WITH_AS(run([](R in, R out, R send, R recv, R) {
                           pl::make_async_remote_copy(in, out, send, recv, pl::DeviceId({0}));
                         }),
                         Contains("the device id has 1 coordinate(s) for a mesh of 2 axes"), UserError);
    CHECK_THROWS_WITH_AS(run([](R, R, R, R, R sem) { pl::semaphore_signal(sem, 1, pl::DeviceId({{"z", 0}})); }),
                         Contains("the mesh has no axis `z`"), UserError);
    CHECK_THROWS_WITH_AS(run([](R, R, R, R, R) { pl::get_barrier_semaphore(); }),
                         Contains("pl::get_barrier_semaphore needs the kernel's collective_id"), UserError);
    // Devices launching different collective kernels.
    auto mismatched = pl::shard_map(
        [&](const pl::Array& block) {
          pl::CallOptions options;
          options.compiler_params.collective_id = pl::host_axis_index("x") == 0 ? 1 : 2;
          // Every device signals itself: nothing but the launch's key ties the devices together.
          return pl::pallas_call([](R, R o, R sem) {
                                   pl::semaphore_signal(sem, 1, pl::DeviceId({pl::axis_index("x"), pl::axis_index("y")}));
                                   pl::semaphore_wait(sem);
                                   o() = pl::zeros_like(o);
                                 },
                                 pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)}, .scratch_shapes = {pl::SemaphoreType::REGULAR}},
                                 pl::ShapeDtype({1}, pl::f32), options)(block);
        },
        mesh, {pl::P("x", "y")}, {pl::P("x", "y")});
    CHECK_THROWS_WITH_AS(mismatched(x), Contains("the devices' collective launch #0 differ"), UserError);
    // Specs that do not divide the array, and a remote copy outside shard_map.
    auto identity = pl::shard_map([](const pl::Array& a) { return a; }, mesh, {pl::P("x")}, {pl::P("x")});
    CHECK_THROWS_WITH_AS(identity(pl::Array::zeros({3, 4}, pl::f32)),
                         Contains("pl::shard_map input 0: dim 0 of size 3 does not split evenly into 2 parts"), UserError);
    auto outside = pl::pallas_call(
        [](R in, R out, R send, R recv) { pl::make_async_remote_copy(in, out, send, recv, pl::DeviceId({0, 0})).start(); },
        pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                     .out_specs = {pl::BlockSpec(pl::ANY)},
                     .scratch_shapes = {pl::SemaphoreType::DMA, pl::SemaphoreType::DMA}},
        pl::ShapeDtype({4}, pl::f32));
    CHECK_THROWS_WITH_AS(outside(pl::Array::zeros({4}, pl::f32)),
                         Contains("pl::make_async_remote_copy needs a mesh, and none is current"), UserError);
  }

  TEST_CASE("mesh errors: a device that stops early leaves the others an error, not a hang") {
    pl::Mesh mesh({2}, {"i"});
    auto f = pl::shard_map(
        [&](const pl::Array& block) {
          if (pl::host_axis_index("i") == 1) throw std::runtime_error("device 1 gave up");
          return pl::pallas_call(
              [](pl::Ref, pl::Ref o, pl::Ref sem) {
                pl::semaphore_signal(sem, 1, pl::DeviceId({1 - pl::axis_index("i")}));
                pl::semaphore_wait(sem);
                o() = pl::zeros_like(o);
              },
              pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)}, .scratch_shapes = {pl::SemaphoreType::REGULAR}},
              pl::ShapeDtype({1}, pl::f32))(block);
        },
        mesh, {pl::P("i")}, {pl::P("i")});
    CHECK_THROWS_WITH_AS(f(pl::Array::zeros({2}, pl::f32)), Contains("device 1 gave up"), std::runtime_error);
  }

  TEST_CASE("host collectives: all_gather, psum, psum_scatter and ppermute along one axis of a 4x2 mesh") {
    // Compiled, then interpreted (the collectives' kernels follow TESSERA_INTERPRET).
    for (bool interpreted : {false, true}) {
      INFO("interpreted: " << interpreted);
      if (interpreted) setenv("TESSERA_INTERPRET", "1", 1);
      pl::Mesh mesh({4, 2}, {"x", "y"});
      pl::Array a = iota({8, 6});
      // Tiled all-gather along x of row blocks: everybody gets the whole array.
      auto gather_rows = pl::shard_map([](const pl::Array& b) { return pl::all_gather(b, "x", 0, true); }, mesh,
                                       {pl::P("x")}, {pl::P()});
      CHECK(pl::allclose(gather_rows(a), a, 0, 0));
      // Untiled: a new leading dim of size 4 (then merged by out_specs P(None) as device 0's copy).
      auto stack = pl::shard_map([](const pl::Array& b) { return pl::all_gather(b, "x"); }, mesh, {pl::P("x")}, {pl::P()});
      CHECK(pl::Array(stack(a)).shape() == pl::Shape{4, 2, 6});
      CHECK(pl::allclose(pl::Array(stack(a)).reshape({8, 6}), a, 0, 0));
      // Column blocks gathered along y into dim 1.
      auto gather_cols = pl::shard_map([](const pl::Array& b) { return pl::all_gather(b, "y", 1, true); }, mesh,
                                       {pl::P("x", "y")}, {pl::P("x")});
      CHECK(pl::allclose(gather_cols(a), a, 0, 0));
      // psum over y of the column halves = the row sums of the two halves side by side.
      auto sum_halves = pl::shard_map([](const pl::Array& b) { return pl::psum(b, "y"); }, mesh, {pl::P("x", "y")},
                                      {pl::P("x")});
      pl::Array s = sum_halves(a);
      CHECK(s.shape() == pl::Shape{8, 3});
      for (int64_t i = 0; i < 8; ++i)
        for (int64_t j = 0; j < 3; ++j) CHECK(s.at<float>({i, j}) == a.at<float>({i, j}) + a.at<float>({i, j + 3}));
      // psum_scatter over x of a replicated array: device i gets row block i of 4 x the array.
      auto scatter = pl::shard_map([](const pl::Array& b) { return pl::psum_scatter(b, "x", 0, true); }, mesh, {pl::P()},
                                   {pl::P("x")});
      pl::Array ps = scatter(a);
      for (int64_t i = 0; i < 8; ++i) CHECK(ps.at<float>({i, 5}) == 4.0f * a.at<float>({i, 5}));
      // A ring shift along x: device i gets device i - 1's block; a one-way permutation leaves zeros.
      auto shift = pl::shard_map([](const pl::Array& b) { return pl::ppermute(b, "x", {{0, 1}, {1, 2}, {2, 3}, {3, 0}}); },
                                 mesh, {pl::P("x")}, {pl::P("x")});
      pl::Array shifted = shift(a);
      for (int64_t i = 0; i < 8; ++i) CHECK(shifted.at<float>({i, 0}) == a.at<float>({(i + 6) % 8, 0}));
      auto one_way = pl::shard_map([](const pl::Array& b) { return pl::ppermute(b, "x", {{0, 3}}); }, mesh, {pl::P("x")},
                                   {pl::P("x")});
      pl::Array ow = one_way(a);
      CHECK(ow.at<float>({6, 1}) == a.at<float>({0, 1}));
      CHECK(ow.at<float>({2, 1}) == 0.0f);
      if (interpreted) unsetenv("TESSERA_INTERPRET");
    }
    pl::Mesh mesh({2}, {"i"});
    CHECK_THROWS_WITH_AS(pl::psum(pl::Array::zeros({2}, pl::f32), "i"), Contains("pl::psum is a collective of pl::shard_map"),
                         UserError);
    auto bad = pl::shard_map([](const pl::Array& b) { return pl::ppermute(b, "i", {{0, 1}, {1, 1}}); }, mesh, {pl::P("i")},
                             {pl::P("i")});
    CHECK_THROWS_WITH_AS(bad(pl::Array::zeros({2}, pl::f32)), Contains("pl::ppermute: the permutation is not one along axis"),
                         UserError);
  }

  // A host collective keeps its kernel's call object (dsl/collectives.cpp, collective_call): called again,
  // on the same shapes and mesh, it neither compiles nor loads its kernel, so TESSERA_LOG=cache says
  // nothing; before, every call traced the kernel again and loaded it from the disk cache on every device.
  TEST_CASE("host collectives: called again, a collective reuses its compiled kernel") {
    const testing::ScopedEnv log("TESSERA_LOG", "cache");
    pl::Mesh mesh({2}, {"i"});
    const pl::Array a = iota({4, 3});
    auto sum = pl::shard_map([](const pl::Array& b) { return pl::psum(b, "i"); }, mesh, {pl::P("i")}, {pl::P()});
    auto shift = pl::shard_map([](const pl::Array& b) { return pl::ppermute(b, "i", {{0, 1}, {1, 0}}); }, mesh,
                               {pl::P("i")}, {pl::P("i")});
    const std::string first = testing::capture_stderr([&] {
      sum(a);
      shift(a);
    });
    CHECK(first.find("tessera cache:") != std::string::npos);  // the first calls compile or load the kernels
    for (int round = 0; round < 3; ++round) {
      pl::Array s, p;
      const std::string again = testing::capture_stderr([&] {
        s = sum(a);
        p = shift(a);
      });
      INFO("round " << round << ": " << again);
      CHECK(again.find("tessera cache:") == std::string::npos);
      for (int64_t j = 0; j < 3; ++j) CHECK(s.at<float>({1, j}) == a.at<float>({1, j}) + a.at<float>({3, j}));
      CHECK(p.at<float>({0, 2}) == a.at<float>({2, 2}));
      CHECK(p.at<float>({2, 2}) == a.at<float>({0, 2}));
    }
  }

  TEST_CASE("remote copies on a 2x2x2 mesh: coordinates, per-axis maps and logical ids") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      pl::Mesh mesh({2, 2, 2}, {"x", "y", "z"});
      // Three copies per device, into three outputs: to the device with z flipped (full coordinates),
      // with y flipped (a per-axis map), and to logical id 7 - me (every coordinate flipped).
      auto kernel = [](pl::Ref in, pl::Ref oz, pl::Ref oy, pl::Ref ox, pl::Ref send, pl::Ref recv) {
        pl::Value x = pl::axis_index("x"), y = pl::axis_index("y"), z = pl::axis_index("z");
        auto c1 = pl::make_async_remote_copy(in, oz, send, recv, pl::DeviceId({x, y, 1 - z}));
        auto c2 = pl::make_async_remote_copy(in, oy, send, recv, pl::DeviceId({{"y", 1 - y}}));
        auto c3 = pl::make_async_remote_copy(in, ox, send, recv, pl::DeviceId(7 - pl::device_id()), pl::DeviceIdType::LOGICAL);
        for (auto* c : {&c1, &c2, &c3}) c->start();
        for (auto* c : {&c1, &c2, &c3}) c->wait();
      };
      auto f = pl::shard_map(
          [&](const pl::Array& block) {
            const pl::ShapeDtype sd(block.shape(), block.dtype());
            return pl::pallas_call(kernel,
                                   pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                                                .out_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::ANY)},
                                                .scratch_shapes = {pl::SemaphoreType::DMA, pl::SemaphoreType::DMA}},
                                   {sd, sd, sd}, backend)(block);
          },
          mesh, {pl::P("x", "y", "z")}, {pl::P("x", "y", "z"), pl::P("x", "y", "z"), pl::P("x", "y", "z")});
      pl::Array a = iota({2, 2, 2});  // one element per device: its logical id
      std::vector<pl::ShardedArray> out = f(a);
      for (int64_t d = 0; d < 8; ++d) {
        const std::vector<int64_t> c = mesh.coords(d);
        CHECK(out[0].shard(d).item() == static_cast<double>(mesh.logical(std::vector<int64_t>{c[0], c[1], 1 - c[2]})));
        CHECK(out[1].shard(d).item() == static_cast<double>(mesh.logical(std::vector<int64_t>{c[0], 1 - c[1], c[2]})));
        CHECK(out[2].shard(d).item() == static_cast<double>(7 - d));
      }
    });
  }
}
