// The collective kernels (ring reduce-scatter, all-to-all, ring all-gather and all-reduce) and
// pl::all_to_all against plain host references, on meshes {4}, {2, 2} and {4, 2} along each axis,
// f32 and bf16, odd sizes and blocks that do not divide the chunks. Every device gets different
// data: quarter-integers small enough that every f32 sum is exact in any order, so the references
// compare exactly (bf16: the exact sum rounded once). Compiled calls run in differential mode (every
// kernel again in the interpreter, outputs compared, docs/design.md §4.14); interpreted ones poison
// uninitialised memory, run with race detection, and on 1 and 2 threads.
#include <doctest/doctest.h>

#include <tessera/collectives.hpp>

#include <cstring>
#include <functional>
#include <random>

#include "tests/ops/reference_check.h"
#include "tests/support/kernels.h"
#include "tests/support/user_error.h"

using namespace tessera;
namespace pl = tessera;
namespace cl = tessera::collectives;

namespace {

using Vec = std::vector<double>;

// Quarter-integers in [-16, 16]: exact in bf16, and their sums over 8 devices exact in f32.
pl::Array quarters(const pl::Shape& shape, pl::DType dtype, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> k(-64, 64);
  Vec v(static_cast<size_t>(num_elements(shape)));
  for (double& e : v) e = k(gen) * 0.25;
  return pl::Array::from_vector(v, shape, dtype);
}

// One leading dim over all the mesh's axes: device d's block is row d.
pl::P stacked(const pl::Mesh& mesh) {
  const auto& a = mesh.axis_names();
  return a.size() == 1 ? pl::P(a[0]) : pl::P(pl::PartitionDim({a[0], a[1]}));
}

// f on every device of `mesh`, device d on inputs[d]; its results, by device.
std::vector<pl::Array> on_mesh(const pl::Mesh& mesh, const std::vector<pl::Array>& inputs,
                               const std::function<pl::Array(const pl::Array&)>& f) {
  const pl::Shape shape = inputs[0].shape();
  pl::Shape global{mesh.size()};
  global.insert(global.end(), shape.begin(), shape.end());
  pl::Array all = pl::Array::zeros(global, inputs[0].dtype());
  for (size_t d = 0; d < inputs.size(); ++d)
    std::memcpy(all.mutable_data() + d * static_cast<size_t>(inputs[d].nbytes()), inputs[d].data(), static_cast<size_t>(inputs[d].nbytes()));
  const pl::ShardedArray out = pl::shard_map(
      [&](const pl::Array& block) {
        pl::Array y = f(block.reshape(shape));
        pl::Shape one{1};
        one.insert(one.end(), y.shape().begin(), y.shape().end());
        return y.reshape(one);
      },
      mesh, {stacked(mesh)}, {stacked(mesh)})(all);
  std::vector<pl::Array> results;
  for (const pl::Array& s : out.shards()) {
    pl::Shape inner(s.shape().begin() + 1, s.shape().end());
    results.push_back(s.reshape(inner));
  }
  return results;
}

std::vector<pl::Array> device_inputs(const pl::Mesh& mesh, const pl::Shape& shape, pl::DType dtype) {
  std::vector<pl::Array> v;
  for (int64_t d = 0; d < mesh.size(); ++d) v.push_back(quarters(shape, dtype, 17 + static_cast<uint64_t>(d)));
  return v;
}

// The devices along `axis` through device d (d's own coordinates elsewhere), by position.
std::vector<int64_t> group_of(const pl::Mesh& mesh, int64_t d, const std::string& axis) {
  std::vector<int64_t> c = mesh.coords(d), g;
  const int64_t a = mesh.axis(axis);
  for (int64_t i = 0; i < mesh.shape()[a]; ++i) {
    c[a] = i;
    g.push_back(mesh.logical(c));
  }
  return g;
}

// Row-major strides of `shape`.
std::vector<int64_t> strides_of(const pl::Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}
std::vector<int64_t> unflatten(int64_t e, const pl::Shape& shape) {
  std::vector<int64_t> u(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    u[i] = e % shape[i];
    e /= shape[i];
  }
  return u;
}
int64_t flatten(const std::vector<int64_t>& u, const pl::Shape& shape) {
  const std::vector<int64_t> s = strides_of(shape);
  int64_t e = 0;
  for (size_t i = 0; i < u.size(); ++i) e += u[i] * s[i];
  return e;
}

// Chunk `part` of n along `dim` of v (of `shape`).
Vec chunk(const Vec& v, const pl::Shape& shape, int64_t dim, int64_t part, int64_t n) {
  pl::Shape cs = shape;
  cs[dim] /= n;
  Vec out(static_cast<size_t>(num_elements(cs)));
  for (int64_t e = 0; e < static_cast<int64_t>(out.size()); ++e) {
    std::vector<int64_t> u = unflatten(e, cs);
    u[dim] += part * cs[dim];
    out[e] = v[flatten(u, shape)];
  }
  return out;
}

// Device d's reduce-scatter over `axis` along `dim`: chunk (d's position) of the sum over its group.
Vec reduce_scatter_reference(const pl::Mesh& mesh, const std::vector<pl::Array>& in, int64_t d, const std::string& axis,
                             int64_t dim) {
  const std::vector<int64_t> g = group_of(mesh, d, axis);
  Vec sum(static_cast<size_t>(in[d].size()), 0.0);
  for (int64_t m : g) {
    const Vec v = in[m].to_vector<double>();
    for (size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
  }
  const int64_t n = static_cast<int64_t>(g.size()), pos = mesh.coords(d)[mesh.axis(axis)];
  return chunk(sum, in[d].shape(), dim, pos, n);
}

// The sum rounded once to `dtype`.
Vec rounded(const Vec& v, pl::DType dtype) { return pl::Array::from_vector(v, {static_cast<int64_t>(v.size())}, dtype).to_vector<double>(); }

// Device d's tiled all-to-all: chunk (d's position) of every group member's x along split, joined
// along concat in the members' order.
Vec all_to_all_reference(const pl::Mesh& mesh, const std::vector<pl::Array>& in, int64_t d, const std::string& axis,
                         int64_t split, int64_t concat) {
  const std::vector<int64_t> g = group_of(mesh, d, axis);
  const int64_t n = static_cast<int64_t>(g.size()), pos = mesh.coords(d)[mesh.axis(axis)];
  const pl::Shape shape = in[d].shape();
  pl::Shape cs = shape;
  cs[split] /= n;
  pl::Shape os = cs;
  os[concat] *= n;
  Vec out(static_cast<size_t>(num_elements(os)));
  for (int64_t e = 0; e < static_cast<int64_t>(out.size()); ++e) {
    std::vector<int64_t> u = unflatten(e, os);
    const int64_t from = u[concat] / cs[concat];
    u[concat] %= cs[concat];
    u[split] += pos * cs[split];
    out[e] = in[g[from]].to_vector<double>()[flatten(u, shape)];
  }
  return out;
}

// The backends: compiled in differential mode, and interpreted (poisoned memory, races detected).
std::vector<std::pair<const char*, cl::Options>> backends(int64_t block_elements) {
  cl::Options compiled{.block_elements = block_elements, .check_against_interpreter = true};
  cl::Options interpreted{.block_elements = block_elements, .interpret = pl::InterpretParams{.detect_races = true}};
  return {{"compiled", compiled}, {"interpret", interpreted}};
}

struct MeshCase {
  pl::Mesh mesh;
  std::vector<std::string> axes;
};
std::vector<MeshCase> meshes() {
  return {{pl::Mesh({4}, {"x"}), {"x"}}, {pl::Mesh({2, 2}, {"x", "y"}), {"x", "y"}}, {pl::Mesh({4, 2}, {"x", "y"}), {"x", "y"}}};
}

std::string mesh_text(const pl::Mesh& m) { return m.str(); }

}  // namespace

TEST_SUITE("ops") {
  TEST_CASE("collectives::reduce_scatter: every axis of 1-D and 2-D meshes, f32 and bf16, partial blocks") {
    for (const MeshCase& mc : meshes())
      for (const std::string& axis : mc.axes)
        for (pl::DType dtype : {pl::f32, pl::bf16}) {
          const int64_t n = mc.mesh.axis_size(axis);
          // Scatter dims 0 and 1 of odd shapes; blocks of 6 elements cut the 5- and 7-long rows unevenly.
          for (auto [shape, dim] : {std::pair<pl::Shape, int64_t>{{n * 3, 7}, 0}, {{5, n * 3, 7}, 1}})
            for (const auto& [name, o] : backends(6)) {
              INFO(mesh_text(mc.mesh) << " along " << axis << ", " << pl::dtype_name(dtype) << ", shape " << shape.size()
                                      << "-D dim " << dim << ", " << name);
              const std::vector<pl::Array> in = device_inputs(mc.mesh, shape, dtype);
              const std::vector<pl::Array> got =
                  on_mesh(mc.mesh, in, [&, dim = dim, o = o](const pl::Array& x) { return cl::reduce_scatter(x, axis, dim, o); });
              for (int64_t d = 0; d < mc.mesh.size(); ++d) {
                CHECK(got[d].dtype() == dtype);
                testing::close_to_reference(got[d], rounded(reduce_scatter_reference(mc.mesh, in, d, axis, dim), dtype), 0.0,
                                            "device " + std::to_string(d));
              }
              if (o.interpret) CHECK_FALSE(pl::races_found());
            }
        }
  }

  TEST_CASE("collectives::reduce_scatter over both axes of a 2-D mesh: two phases, bf16 rounded once") {
    for (const pl::Mesh& mesh : {pl::Mesh({2, 2}, {"x", "y"}), pl::Mesh({4, 2}, {"x", "y"})})
      for (const std::vector<std::string>& axes : {std::vector<std::string>{"x", "y"}, std::vector<std::string>{"y", "x"}})
        for (pl::DType dtype : {pl::f32, pl::bf16})
          for (const auto& [name, o] : backends(65536)) {
            INFO(mesh.str() << " over " << axes[0] << " then " << axes[1] << ", " << pl::dtype_name(dtype) << ", " << name);
            const pl::Shape shape{3, mesh.size() * 5};
            const std::vector<pl::Array> in = device_inputs(mesh, shape, dtype);
            const std::vector<pl::Array> got =
                on_mesh(mesh, in, [&, o = o](const pl::Array& x) {
                  // A braced list of names, as written by hand, and a vector of them.
                  return axes[0] == "x" ? cl::reduce_scatter(x, {"x", "y"}, 1, o) : cl::reduce_scatter(x, axes, 1, o);
                });
            const int64_t n1 = mesh.axis_size(axes[1]);
            for (int64_t d = 0; d < mesh.size(); ++d) {
              // The sum over the whole mesh; device d keeps part (i * n1 + j) of dim 1.
              Vec sum(static_cast<size_t>(in[0].size()), 0.0);
              for (const pl::Array& a : in) {
                const Vec v = a.to_vector<double>();
                for (size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
              }
              const std::vector<int64_t> c = mesh.coords(d);
              const int64_t part = c[mesh.axis(axes[0])] * n1 + c[mesh.axis(axes[1])];
              testing::close_to_reference(got[d], rounded(chunk(sum, shape, 1, part, mesh.size()), dtype), 0.0);
            }
          }
  }

  TEST_CASE("collectives::all_to_all and pl::all_to_all: tiled and untiled, split and concat on any dims") {
    for (const MeshCase& mc : meshes())
      for (const std::string& axis : mc.axes)
        for (pl::DType dtype : {pl::f32, pl::bf16}) {
          const int64_t n = mc.mesh.axis_size(axis);
          for (auto [split, concat] : {std::pair<int64_t, int64_t>{0, 0}, {0, 1}, {1, 0}, {2, 1}}) {
            const pl::Shape shape{n * 3, n * 2, 5};  // any split of dims 0 and 1 works; dim 2 is 5 (odd)
            const pl::Shape tiled_shape = split == 2 ? pl::Shape{3, 2, n * 5} : shape;
            const std::vector<pl::Array> in = device_inputs(mc.mesh, tiled_shape, dtype);
            for (const auto& [name, o] : backends(65536)) {
              INFO(mc.mesh.str() << " along " << axis << ", " << pl::dtype_name(dtype) << ", split " << split << " concat "
                                 << concat << ", " << name);
              const std::vector<pl::Array> got = on_mesh(
                  mc.mesh, in, [&, split = split, concat = concat, o = o](const pl::Array& x) {
                    return cl::all_to_all(x, axis, split, concat, true, o);
                  });
              const std::vector<pl::Array> host = on_mesh(mc.mesh, in, [&, split = split, concat = concat](const pl::Array& x) {
                return pl::all_to_all(x, axis, split, concat, true);
              });
              for (int64_t d = 0; d < mc.mesh.size(); ++d) {
                const Vec want = all_to_all_reference(mc.mesh, in, d, axis, split, concat);
                testing::close_to_reference(got[d], want, 0.0, "kernel, device " + std::to_string(d));
                testing::close_to_reference(host[d], want, 0.0, "pl::all_to_all, device " + std::to_string(d));
                CHECK(got[d].shape() == host[d].shape());
              }
              if (o.interpret) CHECK_FALSE(pl::races_found());
            }
            // Untiled: split has the axis' size; it goes, and an axis of that size comes at concat.
            pl::Shape untiled = tiled_shape;
            untiled[split] = n;
            const std::vector<pl::Array> u = device_inputs(mc.mesh, untiled, dtype);
            const std::vector<pl::Array> host = on_mesh(mc.mesh, u, [&, split = split, concat = concat](const pl::Array& x) {
              return pl::all_to_all(x, axis, split, concat, false);
            });
            pl::Shape want_shape = untiled;
            want_shape.erase(want_shape.begin() + split);
            want_shape.insert(want_shape.begin() + concat, n);
            for (const auto& [name, o] : backends(65536)) {
              INFO(mc.mesh.str() << " along " << axis << ", " << pl::dtype_name(dtype) << ", untiled, split " << split
                                 << " concat " << concat << ", " << name);
              const std::vector<pl::Array> got = on_mesh(mc.mesh, u, [&, split = split, concat = concat, o = o](const pl::Array& x) {
                return cl::all_to_all(x, axis, split, concat, false, o);
              });
              for (int64_t d = 0; d < mc.mesh.size(); ++d) {
                CHECK(got[d].shape() == want_shape);
                CHECK(host[d].shape() == want_shape);
                // The same elements as the tiled all-to-all (split chunks of 1, concat of the senders).
                const Vec want = all_to_all_reference(mc.mesh, u, d, axis, split, split);
                Vec reordered(want.size());
                pl::Shape tiled_out = untiled;  // [.., n (senders), ..] at split, chunk of 1 squeezed
                for (int64_t e = 0; e < static_cast<int64_t>(want.size()); ++e) {
                  std::vector<int64_t> t = unflatten(e, tiled_out);
                  const int64_t from = t[split];
                  t.erase(t.begin() + split);
                  t.insert(t.begin() + concat, from);
                  reordered[flatten(t, want_shape)] = want[e];
                }
                testing::close_to_reference(got[d], reordered, 0.0, "kernel, device " + std::to_string(d));
                testing::close_to_reference(host[d], reordered, 0.0, "pl::all_to_all, device " + std::to_string(d));
              }
              if (o.interpret) CHECK_FALSE(pl::races_found());
            }
          }
        }
  }

  TEST_CASE("collectives::all_gather and all_reduce: every axis, f32 and bf16") {
    for (const MeshCase& mc : meshes())
      for (const std::string& axis : mc.axes)
        for (pl::DType dtype : {pl::f32, pl::bf16})
          for (const auto& [name, o] : backends(6)) {
            INFO(mc.mesh.str() << " along " << axis << ", " << pl::dtype_name(dtype) << ", " << name);
            const int64_t n = mc.mesh.axis_size(axis);
            const std::vector<pl::Array> in = device_inputs(mc.mesh, {3, n * 5}, dtype);
            const std::vector<pl::Array> gathered =
                on_mesh(mc.mesh, in, [&, o = o](const pl::Array& x) { return cl::all_gather(x, axis, 1, o); });
            const std::vector<pl::Array> reduced =
                on_mesh(mc.mesh, in, [&, o = o](const pl::Array& x) { return cl::all_reduce(x, axis, o); });
            for (int64_t d = 0; d < mc.mesh.size(); ++d) {
              const std::vector<int64_t> g = group_of(mc.mesh, d, axis);
              Vec want(static_cast<size_t>(3 * n * n * 5)), sum(static_cast<size_t>(in[d].size()), 0.0);
              for (int64_t j = 0; j < n; ++j) {
                const Vec v = in[g[j]].to_vector<double>();
                for (int64_t r = 0; r < 3; ++r)
                  for (int64_t c = 0; c < n * 5; ++c) want[r * n * n * 5 + j * n * 5 + c] = v[r * n * 5 + c];
                for (size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
              }
              testing::close_to_reference(gathered[d], want, 0.0, "all_gather, device " + std::to_string(d));
              testing::close_to_reference(reduced[d], rounded(sum, dtype), 0.0, "all_reduce, device " + std::to_string(d));
            }
            if (o.interpret) CHECK_FALSE(pl::races_found());
          }
  }

  TEST_CASE("collectives: compiled on 1 and 2 threads and interpreted on 1 and 2 cores give the same results") {
    const pl::Mesh mesh({4, 2}, {"x", "y"});
    const std::vector<pl::Array> in = device_inputs(mesh, {40, 9}, pl::bf16);
    auto all = [&](const cl::Options& o) {
      std::vector<pl::Array> out = on_mesh(mesh, in, [&](const pl::Array& x) { return cl::reduce_scatter(x, "x", 0, o); });
      for (const pl::Array& a : on_mesh(mesh, in, [&](const pl::Array& x) { return cl::all_to_all(x, "x", 0, 1, true, o); }))
        out.push_back(a);
      return out;
    };
    std::vector<std::vector<pl::Array>> runs;
    const int before = pl::num_threads();
    for (int threads : {1, 2}) {
      pl::set_num_threads(threads);
      runs.push_back(all({.block_elements = 32}));
      runs.push_back(all({.block_elements = 32, .interpret = pl::InterpretParams{.num_cores_or_threads = threads}}));
    }
    pl::set_num_threads(before);
    for (size_t r = 1; r < runs.size(); ++r)
      for (size_t i = 0; i < runs[0].size(); ++i) {
        INFO("run " << r << ", result " << i);
        CHECK(std::memcmp(runs[r][i].data(), runs[0][i].data(), static_cast<size_t>(runs[0][i].nbytes())) == 0);
      }
  }

  TEST_CASE("collectives: an axis the mesh lacks, a size the axis does not divide, a dtype that cannot be summed") {
    const pl::Mesh mesh({4, 2}, {"x", "y"});
    const std::vector<pl::Array> in = device_inputs(mesh, {6, 5}, pl::f32);
    auto on = [&](const std::function<pl::Array(const pl::Array&)>& f) { return [&, f] { on_mesh(mesh, in, f); }; };
    testing::check_user_error(on([](const pl::Array& x) { return cl::reduce_scatter(x, "z"); }),
                              "collectives::reduce_scatter: the mesh has no axis `z`", "Mesh('x': 4, 'y': 2)",
                              "name one of its axes: x, y", "collectives_test.cpp");
    testing::check_user_error(on([](const pl::Array& x) { return cl::reduce_scatter(x, "x", 0); }),
                              "collectives::reduce_scatter: dim 0 of size 6 does not split into the 4 devices along `x`",
                              "x of shape (6, 5)", "make dim 0 a multiple of 4", "collectives_test.cpp");
    testing::check_user_error(on([](const pl::Array& x) { return cl::reduce_scatter(x.astype(pl::i32), "y"); }),
                              "collectives::reduce_scatter: x must be f32 or bf16 (the sum is taken in f32)", "x of dtype i32",
                              "convert it first: x.astype(pl::f32)", "collectives_test.cpp");
    testing::check_user_error(on([](const pl::Array& x) { return cl::reduce_scatter(x, "y", 0, {.block_elements = 0}); }),
                              "collectives::reduce_scatter: block_elements must be positive", "block_elements = 0",
                              "pass e.g. block_elements = 65536", "collectives_test.cpp");
    testing::check_user_error(on([](const pl::Array& x) { return cl::all_to_all(x, "z", 0, 0, true); }),
                              "collectives::all_to_all: the mesh has no axis `z`", "Mesh('x': 4, 'y': 2)",
                              "name one of its axes: x, y", "collectives_test.cpp");
    testing::check_user_error(on([](const pl::Array& x) { return cl::all_to_all(x, "x", 1, 0, true); }),
                              "collectives::all_to_all: dim 1 of size 5 does not split into the 4 devices along `x`",
                              "x of shape (6, 5)", "make dim 1 a multiple of 4", "collectives_test.cpp");
    testing::check_user_error(on([](const pl::Array& x) { return cl::all_to_all(x, "y", 0, 1, false); }),
                              "collectives::all_to_all: split_axis 0 of size 6 is not the size of axis `y` (2)",
                              "x of shape (6, 5)", "make split_axis the axis' size, or pass tiled = true", "collectives_test.cpp");
    testing::check_user_error(on([](const pl::Array& x) { return pl::all_to_all(x, "x", 1, 0, true); }),
                              "pl::all_to_all: split_axis 1 of size 5 does not split over the 4 devices along `x`", "(6, 5)",
                              "make split_axis a multiple of the axis size", "collectives_test.cpp");
    testing::check_user_error(on([](const pl::Array& x) { return cl::all_reduce(x, "x"); }),
                              "collectives::all_reduce: x has 30 elements, not a multiple of the 4 devices along `x`",
                              "x of shape (6, 5)", "pad x to a multiple of the axis size, or use pl::psum", "collectives_test.cpp");
    testing::check_user_error([&] { cl::all_gather(in[0], "x"); }, "collectives::all_gather is a collective of pl::shard_map",
                              "a call outside pl::shard_map", "call it inside the function pl::shard_map runs on every device",
                              "collectives_test.cpp");
  }
}
