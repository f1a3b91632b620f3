// Meshes, shardings, shard_map and kernels that talk to other devices (DESIGN.md §4.8-10, §4b), in
// both backends.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;
using doctest::Contains;

namespace {

pl::Array iota(pl::Shape shape) {
  std::vector<float> v(static_cast<size_t>(num_elements(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return pl::Array::from_vector(v, shape);
}

// Seed 000's 1-D ring all-gather along mesh axis x, for any ring length: at step s every device sends
// the block it got at step s - 1 to its right neighbour.
void ring_all_gather_kernel(pl::Ref input, pl::Ref output, pl::Ref local_sem, pl::Ref send_sem, pl::Ref recv_sem) {
  const int64_t n = pl::axis_size("x"), h = input.shape()[0];
  pl::Value step = pl::program_id(0);
  pl::Value me = pl::axis_index("x");
  pl::when(step == 0, [&] { pl::async_copy(input, output.at(pl::ds(me * h, h), pl::all), local_sem).wait(); });
  pl::Value slot = (me - step + n) % n;
  auto block = output.at(pl::ds(slot * h, h), pl::all);
  auto copy = pl::make_async_remote_copy(block, block, send_sem, recv_sem,
                                         pl::DeviceId({{"x", (me + 1) % n}}));  // y stays this device's
  copy.start();
  copy.wait();
}

pl::Array ring_all_gather(const pl::Array& x, const pl::CallOptions& options) {
  const int64_t n = pl::axis_size("x");
  return pl::pallas_call(ring_all_gather_kernel,
                         pl::GridSpec{.grid = {n - 1},
                                      .in_specs = {pl::BlockSpec(pl::ANY)},
                                      .out_specs = {pl::BlockSpec(pl::ANY)},
                                      .scratch_shapes = {pl::SemaphoreType::DMA, pl::SemaphoreType::DMA,
                                                         pl::SemaphoreType::DMA}},
                         pl::ShapeDtype({x.shape()[0] * n, x.shape()[1]}, x.dtype()), options)(x);
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
}
