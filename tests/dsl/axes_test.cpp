// Axis names (docs/design.md §4.8): named grid dims read with pl::axis_index / pl::axis_size /
// pl::num_programs, joint axes over several mesh axes (in kernels, on the host and in device ids), and
// the barrier semaphore of an mpmd_map with a collective_id. Every case runs compiled (checked against
// the interpreter) and interpreted.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "tests/support/kernels.h"
#include "tests/support/user_error.h"

using namespace tessera;
namespace pl = tessera;
using doctest::Contains;

namespace {

constexpr int64_t kRows = 8, kCols = 128;

// Compiled with every output checked against the interpreter, and interpreted.
std::vector<testing::Backend> checked_backends() {
  pl::CallOptions compiled;
  compiled.check_against_interpreter = true;
  return {{"compiled, checked against the interpreter", compiled}, {"interpret", testing::interpret()}};
}

template <class F>
void for_each_checked_backend(F body) {
  for (const testing::Backend& b : checked_backends()) {
    INFO("backend: " << std::string(b.name));
    body(b.options);
  }
}

// A participant's epilogue: after its barrier waits, writes what the barrier holds (0 once every
// signal was taken) * 100 + `me` into its row block of `o`, through its own VMEM `buf`.
void write_barrier_and_index(pl::Ref o, pl::Ref buf, pl::Ref barrier, const pl::Value& me) {
  buf() = pl::broadcast_to((pl::semaphore_read(barrier) * 100 + me).astype(pl::f32), {kRows, kCols});
  pl::sync_copy(buf, o.at(pl::ds(me * kRows, kRows)));
}

// Each of `n` row blocks of `out` holds its own index (the barrier was back at zero everywhere).
void check_blocks_hold_their_index(const pl::Array& out, int64_t n) {
  for (int64_t b = 0; b < n; ++b) {
    CHECK(out.at<float>({b * kRows, 0}) == static_cast<float>(b));
    CHECK(out.at<float>({b * kRows + kRows - 1, kCols - 1}) == static_cast<float>(b));
  }
}

// The error `f` throws, which must be a UserError.
template <class F>
UserError user_error(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e;
  }
  FAIL("expected a UserError");
  throw std::logic_error("unreachable");
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("named grid: axis_index, axis_size and num_programs read a named dim") {
    for_each_checked_backend([](const pl::CallOptions& backend) {
      constexpr int64_t rows = 2, cols = 3;
      // Each block holds 1000 * size(i) + 100 * num_programs(j) + 10 * i + j of its grid point.
      auto kernel = [](pl::Ref o) {
        const pl::Value v = pl::axis_index("i") * 10 + pl::axis_index("j") + pl::num_programs("j") * 100 +
                            static_cast<int32_t>(pl::axis_size("i") * 1000);
        o() = pl::broadcast_to(v.astype(pl::f32), {kRows, kCols});
      };
      auto call = pl::pallas_call(
          kernel,
          pl::GridSpec{.grid = {pl::axis("i", rows), pl::axis("j", cols)},
                       .out_specs = {pl::BlockSpec({kRows, kCols}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })}},
          pl::ShapeDtype({rows * kRows, cols * kCols}, pl::f32), backend);
      const pl::Array out = call();
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          const float expected = static_cast<float>(1000 * rows + 100 * cols + 10 * i + j);
          CHECK(out.at<float>({i * kRows, j * kCols}) == expected);
          CHECK(out.at<float>({i * kRows + kRows - 1, j * kCols + kCols - 1}) == expected);
        }
    });
  }

  TEST_CASE("named grid: a grid axis name is the same dim as its position, with parallel semantics too") {
    for_each_checked_backend([](const pl::CallOptions& backend) {
      pl::CallOptions options = backend;
      options.compiler_params.dimension_semantics = {pl::parallel, pl::arbitrary};
      // program_id(1) and axis_index("k") agree: the output accumulates 1 + the difference, once per k.
      auto kernel = [](pl::Ref o) {
        pl::when(pl::axis_index("k") == 0, [&] { o() = pl::zeros_like(o); });
        o() += (pl::axis_index("k") - pl::program_id(1) + pl::axis_index("r") - pl::program_id(0) + 1).astype(pl::f32);
      };
      auto call = pl::pallas_call(
          kernel,
          pl::GridSpec{.grid = {pl::axis("r", 2), pl::axis("k", 4)},
                       .out_specs = {pl::BlockSpec({kRows, kCols}, [](pl::Value r, pl::Value) { return pl::idx(r, 0); })}},
          pl::ShapeDtype({2 * kRows, kCols}, pl::f32), options);
      const pl::Array out = call();
      CHECK(out.at<float>({0, 0}) == 4.0f);
      CHECK(out.at<float>({2 * kRows - 1, kCols - 1}) == 4.0f);
    });
  }

  TEST_CASE("named grid: errors for duplicate, empty, unknown and ambiguous names") {
    testing::check_user_error([] { pl::Grid g{pl::axis("i", 2), pl::axis("i", 4)}; }, "grid axis `i` is named twice",
                              "a grid with dims i and another `i`", "give every grid dim its own name", "axes_test.cpp");
    testing::check_user_error([] { pl::Grid g{pl::axis("", 2)}; }, "a named grid dim needs a non-empty name",
                              "pl::axis(\"\", 2)", "name every dim, e.g. pl::axis(\"i\", 4), or give the grid plain sizes",
                              "axes_test.cpp");
    for_each_checked_backend([](const pl::CallOptions& backend) {
      const int unknown_line = __LINE__ + 1;
      auto unknown = [](pl::Ref o) { o() = pl::broadcast_to(pl::axis_index("z").astype(pl::f32), {kRows, kCols}); };
      auto call = pl::pallas_call(unknown, pl::GridSpec{.grid = {pl::axis("i", 2)}, .out_specs = {pl::BlockSpec({kRows, kCols}, [](pl::Value i) { return pl::idx(i, 0); })}},
                                  pl::ShapeDtype({2 * kRows, kCols}, pl::f32), backend);
      const UserError e = user_error([&] { call(); });
      CHECK(e.problem() == "pl::axis_index: there is no axis `z`");
      CHECK(e.given() == "the grid's axes i (no mesh is current)");
      CHECK(std::string(e.loc().file).find("axes_test.cpp") != std::string::npos);
      CHECK(e.loc().line == unknown_line);

      // num_programs of a name that is not a grid dim.
      auto of_unknown = [](pl::Ref o) { o() = pl::broadcast_to(pl::num_programs("j").astype(pl::f32), {kRows, kCols}); };
      CHECK_THROWS_WITH_AS(pl::pallas_call(of_unknown, pl::GridSpec{.grid = {pl::axis("i", 1)}}, pl::ShapeDtype({kRows, kCols}, pl::f32), backend)(),
                           Contains("pl::num_programs: there is no axis `j`"), UserError);

      // A name both a grid dim and a mesh axis is an error, inside shard_map.
      pl::Mesh mesh({2}, {"i"});
      const int clash_line = __LINE__ + 1;
      auto clash = [](pl::Ref o) { o() = pl::broadcast_to(pl::axis_index("i").astype(pl::f32), {kRows, kCols}); };
      auto f = pl::shard_map(
          [&](const pl::Array&) {
            return pl::pallas_call(clash, pl::GridSpec{.grid = {pl::axis("i", 1)}}, pl::ShapeDtype({kRows, kCols}, pl::f32), backend)();
          },
          mesh, {pl::P("i")}, {pl::P("i")});
      const UserError c = user_error([&] { f(pl::Array::zeros({2 * kRows, kCols}, pl::f32)); });
      CHECK(c.problem() == "pl::axis_index: `i` names both a grid dim and a mesh axis");
      CHECK(c.given() == "the grid's axes i and Mesh('i': 2)");
      CHECK(c.fix() == "rename the grid dim (pl::axis) or the mesh axis so that every name means one axis");
      CHECK(c.loc().line == clash_line);
    });
  }

  TEST_CASE("joint axes: axis_index over (y, x) is row-major in the order given, in kernels and on the host") {
    for_each_checked_backend([](const pl::CallOptions& backend) {
      pl::Mesh mesh({2, 3}, {"x", "y"});
      // Each device writes its joint index over (y, x) and over (x, y), and the joint size.
      auto kernel = [](pl::Ref o) {
        const pl::Value yx = pl::axis_index({"y", "x"}), xy = pl::axis_index({"x", "y"});
        o[0] = yx;
        o[1] = xy;
        o[2] = pl::axis_index("x") * 0 + static_cast<int32_t>(pl::axis_size({"y", "x"}));
        o[3] = pl::axis_index({"x"}) - pl::axis_index("x");
      };
      auto f = pl::shard_map(
          [&](const pl::Array&) {
            pl::Array out = pl::pallas_call(kernel, pl::GridSpec{.out_specs = {pl::BlockSpec(pl::SMEM)}},
                                            pl::ShapeDtype({5}, pl::i32), backend)();
            // The host's joint index, next to the kernel's.
            std::vector<int32_t> v = out.to_vector<int32_t>();
            v[4] = static_cast<int32_t>(pl::host_axis_index({"y", "x"}));
            return pl::Array::from_vector(v, {5});
          },
          mesh, {pl::P(pl::PartitionDim{"x", "y"})}, {pl::P(pl::PartitionDim{"x", "y"})});
      const std::vector<int32_t> out = pl::Array(f(pl::Array::zeros({30}, pl::f32))).to_vector<int32_t>();
      for (int64_t x = 0; x < 2; ++x)
        for (int64_t y = 0; y < 3; ++y) {
          const size_t d = static_cast<size_t>(x * 3 + y) * 5;
          INFO("device x=" << x << ", y=" << y);
          CHECK(out[d] == y * 2 + x);
          CHECK(out[d + 1] == x * 3 + y);
          CHECK(out[d + 2] == 6);
          CHECK(out[d + 3] == 0);
          CHECK(out[d + 4] == y * 2 + x);
        }
    });
  }

  TEST_CASE("joint axes: a device id over (y, x) reaches the device of that joint index") {
    for_each_checked_backend([](const pl::CallOptions& backend) {
      pl::Mesh mesh({2, 2}, {"x", "y"});
      // A ring in joint (y, x) order: every device copies its block to the next one's output.
      auto kernel = [](pl::Ref x, pl::Ref o, pl::Ref send, pl::Ref recv) {
        const int64_t n = pl::axis_size({"y", "x"});
        const pl::Value next = (pl::axis_index({"y", "x"}) + 1) % static_cast<int32_t>(n);
        auto copy = pl::make_async_remote_copy(x, o, send, recv, pl::DeviceId({{{"y", "x"}, next}}));
        copy.start();
        copy.wait();
      };
      auto f = testing::on_every_device(kernel, mesh, pl::P(pl::PartitionDim{"x", "y"}),
                                        {pl::SemaphoreType::DMA, pl::SemaphoreType::DMA}, backend);
      const pl::Array x = pl::Array::arange(4 * kRows, pl::f32);
      const std::vector<float> out = pl::Array(f(x)).to_vector<float>();
      // Device (x, y) holds block x * 2 + y; it receives from the device before it in (y, x) order.
      for (int64_t dx = 0; dx < 2; ++dx)
        for (int64_t dy = 0; dy < 2; ++dy) {
          const int64_t joint = dy * 2 + dx, prev = (joint + 3) % 4;
          const int64_t from = (prev % 2) * 2 + prev / 2;  // (x, y) of joint index prev: x = prev % 2, y = prev / 2
          const int64_t block = dx * 2 + dy;
          INFO("device x=" << dx << ", y=" << dy);
          CHECK(out[static_cast<size_t>(block * kRows)] == static_cast<float>(from * kRows));
          CHECK(out[static_cast<size_t>(block * kRows + kRows - 1)] == static_cast<float>(from * kRows + kRows - 1));
        }
    });
  }

  TEST_CASE("joint axes: errors name the axis that is missing or named twice") {
    pl::Mesh mesh({2, 2}, {"x", "y"});
    auto f = pl::shard_map(
        [&](const pl::Array& a) {
          (void)pl::axis_size({"y", "z"});
          return a;
        },
        mesh, {pl::P("x")}, {pl::P("x")});
    CHECK_THROWS_WITH_AS(f(pl::Array::zeros({4}, pl::f32)), Contains("the mesh has no axis `z`"), Error);
    for_each_checked_backend([&](const pl::CallOptions& backend) {
      auto twice = [](pl::Ref, pl::Ref, pl::Ref sem, pl::Ref) {
        pl::semaphore_signal(sem, 1, pl::DeviceId({{{"y", "x"}, 0}, {"x", 1}}));
      };
      auto g = testing::on_every_device(twice, mesh, pl::P(pl::PartitionDim{"x", "y"}), {pl::SemaphoreType::REGULAR, pl::SemaphoreType::REGULAR}, backend);
      CHECK_THROWS_WITH_AS(g(pl::Array::zeros({4 * kRows}, pl::f32)), Contains("axis `x` is named twice in the device id"), Error);
    });
  }

  TEST_CASE("mpmd_map: get_barrier_semaphore with a collective_id, one barrier per participant") {
    for_each_checked_backend([](const pl::CallOptions& backend) {
      pl::CallOptions options = backend;
      options.compiler_params.collective_id = 5;
      // A 4-device ring: every device signals both neighbours' barriers and waits for both signals, then
      // writes what its barrier held before the wait (>= 0) plus its coordinate.
      auto kernel = [](pl::Ref o, pl::Ref buf) {
        const pl::Value me = pl::axis_index("x");
        pl::Ref barrier = pl::get_barrier_semaphore();
        pl::semaphore_signal(barrier, 1, pl::DeviceId({(me + 1) % 4}));
        pl::semaphore_signal(barrier, 1, pl::DeviceId({(me + 3) % 4}));
        pl::semaphore_wait(barrier, 2);
        write_barrier_and_index(o, buf, barrier, me);
      };
      auto call = pl::mpmd_map({{pl::Mesh({4}, {"x"}), kernel}}, pl::ShapeDtype({4 * kRows, kCols}, pl::f32),
                               {pl::VMEM({kRows, kCols}, pl::f32)}, options);
      check_blocks_hold_their_index(call(), 4);
    });
  }

  TEST_CASE("mpmd_map: get_barrier_semaphore without a collective_id names the mpmd_map") {
    for_each_checked_backend([](const pl::CallOptions& backend) {
      const int line = __LINE__ + 1;
      auto kernel = [](pl::Ref) { pl::semaphore_signal(pl::get_barrier_semaphore(), 0, pl::DeviceId({0})); };
      auto call = pl::mpmd_map({{pl::Mesh({2}, {"x"}), kernel}}, pl::ShapeDtype({kRows, kCols}, pl::f32), {}, backend);
      const UserError e = user_error([&] { call(); });
      CHECK(e.problem() == "pl::get_barrier_semaphore needs the kernel's collective_id");
      CHECK(e.given() == "the mpmd_map's CompilerParams have no collective_id");
      CHECK(e.fix() == "give the mpmd_map CompilerParams{.collective_id = k}, with k unique to this communication pattern");
      CHECK(e.loc().line == line);
      CHECK(std::string(e.loc().file).find("axes_test.cpp") != std::string::npos);
    });
  }

  TEST_CASE("core_index: a signal to another core's barrier semaphore on a CoreMesh") {
    for_each_checked_backend([](const pl::CallOptions& backend) {
      pl::CallOptions options = backend;
      options.compiler_params.collective_id = 2;
      // Three cores in a ring: each signals the next core's barrier twice, by a static and a traced
      // core index, and waits for its own two signals; then writes what its barrier held after the
      // wait plus its core.
      auto kernel = [](pl::Ref o, pl::Ref buf) {
        const pl::Value c = pl::axis_index("core");
        pl::Ref barrier = pl::get_barrier_semaphore();
        pl::semaphore_signal(barrier, 1, pl::CoreIndex((c + 1) % 3));
        pl::when(c == 2, [&] { pl::semaphore_signal(barrier, 1, pl::CoreIndex(0)); });
        pl::when(c != 2, [&] { pl::semaphore_signal(barrier, 1, pl::CoreIndex(c + 1)); });
        pl::semaphore_wait(barrier, 2);
        write_barrier_and_index(o, buf, barrier, c);
      };
      auto call = pl::mpmd_map({{pl::CoreMesh("core", 3), kernel}}, pl::ShapeDtype({3 * kRows, kCols}, pl::f32),
                               {pl::VMEM({kRows, kCols}, pl::f32)}, options);
      check_blocks_hold_their_index(call(), 3);
    });
  }

  TEST_CASE("core_index: out of range, and outside a CoreMesh, is a UserError at the signal's line") {
    for_each_checked_backend([](const pl::CallOptions& backend) {
      pl::CallOptions options = backend;
      options.compiler_params.collective_id = 2;
      const int line = __LINE__ + 1;
      auto far = [](pl::Ref) { pl::semaphore_signal(pl::get_barrier_semaphore(), 1, pl::CoreIndex(2)); };
      auto call = pl::mpmd_map({{pl::CoreMesh("core", 2), far}}, pl::ShapeDtype({kRows, kCols}, pl::f32), {}, options);
      const UserError e = user_error([&] { call(); });
      CHECK(e.problem() == "pl::semaphore_signal: core_index 2 is out of range");
      CHECK(e.given() == "a kernel on 2 cores (pl::CoreMesh(\"core\", 2))");
      CHECK(e.fix() == "name a core in [0, 2)");
      CHECK(e.loc().line == line);
      CHECK(std::string(e.loc().file).find("axes_test.cpp") != std::string::npos);

      const int local_line = __LINE__ + 2;
      auto local = [](pl::Ref o, pl::Ref sem) {
        pl::semaphore_signal(sem, 1, pl::CoreIndex(0));
        pl::semaphore_wait(sem, 1);
        o() = pl::zeros_like(o);
      };
      auto plain = pl::pallas_call(local, pl::GridSpec{.scratch_shapes = {pl::SemaphoreType::REGULAR}},
                                   pl::ShapeDtype({kRows, kCols}, pl::f32), backend);
      const UserError p = user_error([&] { plain(); });
      CHECK(p.problem() == "pl::semaphore_signal: core_index names a core of a pl::CoreMesh, and this kernel runs on none");
      CHECK(p.given() == "pl::CoreIndex in a kernel of a pallas_call");
      CHECK(p.loc().line == local_line);
    });
  }

  // Two devices of two cores each: participant me = 2 * x + c. Each signal below goes to one other
  // participant with an amount only its sender sends, and each receiver waits for exactly the amount
  // its sender sent: a signal reaching anyone else leaves a wait hanging (a deadlock) or a barrier
  // non-zero at the end (an error), so the blocks holding their index prove every signal's target.
  TEST_CASE("device_id with core_index: a signal to a core of another device") {
    for_each_checked_backend([](const pl::CallOptions& backend) {
      pl::CallOptions options = backend;
      options.compiler_params.collective_id = 3;
      auto kernel = [](pl::Ref o, pl::Ref buf) {
        const pl::Value x = pl::axis_index("x"), c = pl::axis_index("core");
        const pl::Value me = x * 2 + c;
        pl::Ref barrier = pl::get_barrier_semaphore();
        // (x, c) -> (1 - x, 1 - c): the sender of each receiver is its own target. Static and traced
        // core indices.
        pl::when(c == 0, [&] { pl::semaphore_signal(barrier, me + 1, pl::DeviceId({1 - x}), pl::CoreIndex(1)); });
        pl::when(c == 1, [&] { pl::semaphore_signal(barrier, me + 1, pl::DeviceId({1 - x}), pl::CoreIndex(1 - c)); });
        pl::semaphore_wait(barrier, (1 - x) * 2 + (1 - c) + 1);
        // The device alone: the same core of device 1 - x (a logical id, split over the device axes).
        pl::semaphore_signal(barrier, (me + 1) * 10, pl::DeviceId(1 - x), pl::DeviceIdType::LOGICAL);
        pl::semaphore_wait(barrier, ((1 - x) * 2 + c + 1) * 10);
        // The core alone: core 1 - c of this device.
        pl::semaphore_signal(barrier, (me + 1) * 100, pl::CoreIndex(1 - c));
        pl::semaphore_wait(barrier, (x * 2 + (1 - c) + 1) * 100);
        // pl::device_id() is the device's, not the participant's.
        pl::Value tag = me + (pl::device_id() - x) * 1000;
        write_barrier_and_index(o, buf, barrier, tag);
      };
      auto call = pl::mpmd_map({{pl::Mesh({2}, {"x"}), pl::CoreMesh("core", 2), kernel}},
                               pl::ShapeDtype({4 * kRows, kCols}, pl::f32), {pl::VMEM({kRows, kCols}, pl::f32)}, options);
      check_blocks_hold_their_index(call(), 4);
    });
  }

  TEST_CASE("device_id with core_index: a core or device outside the kernel's is an error naming it") {
    for_each_checked_backend([](const pl::CallOptions& backend) {
      pl::CallOptions options = backend;
      options.compiler_params.collective_id = 3;
      auto run = [&](auto kernel) {
        return pl::mpmd_map({{pl::Mesh({2}, {"x"}), pl::CoreMesh("core", 2), kernel}},
                            pl::ShapeDtype({kRows, kCols}, pl::f32), {}, options)();
      };
      const int line = __LINE__ + 2;
      const UserError e = user_error([&] {
        run([](pl::Ref) { pl::semaphore_signal(pl::get_barrier_semaphore(), 1, pl::DeviceId({0}), pl::CoreIndex(2)); });
      });
      CHECK(e.problem() == "pl::semaphore_signal: core_index 2 is out of range");
      CHECK(e.given() == "a kernel on 2 cores (pl::CoreMesh(\"core\", 2))");
      CHECK(e.fix() == "name a core in [0, 2)");
      CHECK(e.loc().line == line);
      // Traced, a coordinate of the kernel's mesh checked when the signal runs.
      CHECK_THROWS_WITH_AS(run([](pl::Ref) {
                             const pl::Value c = pl::axis_index("core");
                             pl::semaphore_signal(pl::get_barrier_semaphore(), 1, pl::DeviceId({0}), pl::CoreIndex(c + 2));
                           }),
                           Contains("is outside Mesh('x': 2, 'core': 2): its coordinate on axis `core` is"), RuntimeError);
      CHECK_THROWS_WITH_AS(run([](pl::Ref) {
                             pl::semaphore_signal(pl::get_barrier_semaphore(), 1, pl::DeviceId({2}), pl::CoreIndex(0));
                           }),
                           Contains("device (2, 0) is outside Mesh('x': 2, 'core': 2): its coordinate on axis `x` is 2, "
                                    "valid ones are [0, 2)"),
                           RuntimeError);
      CHECK_THROWS_WITH_AS(run([](pl::Ref) {
                             pl::semaphore_signal(pl::get_barrier_semaphore(), 1, pl::DeviceId({{"core", 1}}),
                                                  pl::CoreIndex(0));
                           }),
                           Contains("axis `core` is named twice in the device id"), UserError);
      // On the cores of one device, a device id beside the core means nothing.
      const UserError one = user_error([&] {
        pl::mpmd_map({{pl::CoreMesh("core", 2),
                       [](pl::Ref) {
                         pl::semaphore_signal(pl::get_barrier_semaphore(), 1, pl::DeviceId({0}), pl::CoreIndex(1));
                       }}},
                     pl::ShapeDtype({kRows, kCols}, pl::f32), {}, options)();
      });
      CHECK(one.problem() ==
            "pl::semaphore_signal: a signal naming a device and a core needs a kernel on the cores of several devices");
      CHECK_THROWS_WITH_AS(pl::MeshKernel(pl::Mesh({2}, {"core"}), pl::CoreMesh("core", 2), [](pl::Ref) {}),
                           Contains("the cores' axis `core` is also an axis of the device mesh"), UserError);
    });
  }

  TEST_CASE("device_id with core_index: a wait nothing signals is reported naming the device and the core") {
    for_each_checked_backend([](const pl::CallOptions& backend) {
      pl::CallOptions options = backend;
      options.compiler_params.collective_id = 3;
      options.name = "cores";
      // Everyone signals core 0 of device 0 once; device 1's core 1 also waits, for a signal never sent.
      auto kernel = [](pl::Ref) {
        const pl::Value x = pl::axis_index("x"), c = pl::axis_index("core");
        pl::Ref barrier = pl::get_barrier_semaphore();
        pl::semaphore_signal(barrier, 1, pl::DeviceId({0}), pl::CoreIndex(0));
        pl::when((x == 0) & (c == 0), [&] { pl::semaphore_wait(barrier, 4); });
        pl::when((x == 1) & (c == 1), [&] { pl::semaphore_wait(barrier, 1); });
      };
      auto call = pl::mpmd_map({{pl::Mesh({2}, {"x"}), pl::CoreMesh("core", 2), kernel}},
                               pl::ShapeDtype({kRows, kCols}, pl::f32), {}, options);
      CHECK_THROWS_WITH_AS(call(),
                           Contains("function 0 (Mesh('x': 2) with CoreMesh(\"core\", 2)) at x=1, core=1: semaphore_wait"),
                           RuntimeError);
    });
  }

  TEST_CASE("device_id with core_index: the signal orders the sender's writes before the receiver's wait") {
    // Core 1 of device 0 writes shared memory and signals core 0 of device 1, which reads it after
    // its wait: no race. Read before the wait, the same bytes are a race.
    for (const bool waits_first : {true, false}) {
      INFO("reader waits first: " << waits_first);
      pl::CallOptions options = testing::interpret();
      options.interpret->detect_races = true;
      options.compiler_params.collective_id = 3;
      auto kernel = [waits_first](pl::Ref o, pl::Ref shared, pl::Ref buf) {
        const pl::Value x = pl::axis_index("x"), c = pl::axis_index("core");
        pl::Ref barrier = pl::get_barrier_semaphore();
        pl::when((x == 0) & (c == 1), [&] {
          buf() = pl::full({kRows, kCols}, 7.0f, pl::f32);
          pl::sync_copy(buf, shared);
          pl::semaphore_signal(barrier, 1, pl::DeviceId({1}), pl::CoreIndex(0));
        });
        pl::when((x == 1) & (c == 0), [&] {
          if (waits_first) pl::semaphore_wait(barrier, 1);
          pl::sync_copy(shared, o);
          if (!waits_first) pl::semaphore_wait(barrier, 1);
        });
      };
      auto call = pl::mpmd_map({{pl::Mesh({2}, {"x"}), pl::CoreMesh("core", 2), kernel}},
                               pl::ShapeDtype({kRows, kCols}, pl::f32),
                               {pl::HBM({kRows, kCols}, pl::f32), pl::VMEM({kRows, kCols}, pl::f32)}, options);
      const pl::Array out = call();
      if (waits_first) {
        CHECK(out.at<float>({kRows - 1, kCols - 1}) == 7.0f);
        CHECK(pl::race_reports().empty());
      } else {
        CHECK_FALSE(pl::race_reports().empty());
      }
    }
  }
}

