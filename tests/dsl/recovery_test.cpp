// A failed call followed by a good one, on every path a launch takes: a pallas_call compiled and
// interpreted, a shard_map over a mesh (its kernels and a host collective), an mpmd_map, a compiled
// call checked against the interpreter (differential mode), schedule exploration, and a kernel whose
// trace failed. The same call object fails and then works, so nothing a failure leaves behind (a
// half-run launch group, arenas, semaphores, the compile cache, a half-built program) may reach the
// next call (docs/design.md §4.12).
#include <doctest/doctest.h>

#include <numeric>
#include <string>

#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;
using doctest::Contains;

namespace {

// Reads the 4 elements of its block starting at the block's first element: data decides whether
// the slice is in bounds, so one call object both fails and works.
void window_kernel(pl::Ref x, pl::Ref o) { o() = x(pl::ds(x[0], 4)); }

auto window_call(const pl::CallOptions& backend) {
  return pl::pallas_call(window_kernel, pl::GridSpec{}, pl::ShapeDtype({4}, pl::i32), backend);
}

// 8 elements: the start, then 1..7.
pl::Array block_starting_at(int32_t start) {
  std::vector<int32_t> v(8);
  std::iota(v.begin(), v.end(), 0);
  v[0] = start;
  return pl::Array::from_vector(v, {8});
}

// o = x @ y, compiled and checked against the interpreter with no tolerance. x is (16, 2), y (2, 32).
auto checked_dot() {
  return pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref o) { o() = pl::dot(x(), y()); }, pl::GridSpec{},
                         pl::ShapeDtype({16, 32}, pl::f32),
                         {.check_against_interpreter = true, .check_tolerance = pl::Tolerance{0, 0}});
}

// Operands of checked_dot whose products round differently in the two backends, or not: with
// `fma_sensitive`, rows 8 to 15 of x are [-1, 1 + 2^-12] and y's second row is 1 + 2^-12, so that
// -1 + (1 + 2^-12)^2 is 2^-11 + 2^-24 when the multiply is fused into the add (compiled code) and
// 2^-11 when the product is rounded first (the interpreter; tests/dsl/differential_test.cpp has the
// same premise). Otherwise every product and sum is a small integer, exact in both.
std::pair<pl::Array, pl::Array> dot_operands(bool fma_sensitive) {
  const float eps = fma_sensitive ? 0x1p-12f : 0.0f;
  std::vector<float> x(16 * 2), y(2 * 32);
  for (int r = 0; r < 16; ++r) {
    x[r * 2] = r < 8 ? 1.0f : -1.0f;
    x[r * 2 + 1] = r < 8 ? 0.0f : 1.0f + eps;
  }
  for (int c = 0; c < 32; ++c) {
    y[c] = 1.0f;
    y[32 + c] = 1.0f + eps;
  }
  return {pl::Array::from_vector(x, {16, 2}), pl::Array::from_vector(y, {2, 32})};
}

// Schedule exploration over 8 seeds (interpreted, copies completing at their waits).
pl::CallOptions exploring() {
  return testing::interpret(pl::InterpretParams{
      .dma_execution_mode = pl::DmaExecutionMode::on_wait, .random_seed = 0, .num_schedules = 8});
}

// Two parallel grid steps on two simulated cores each copy their half of x (rows 8p to 8p + 7) into
// the same output rows: the last copy wins, which depends on the schedule unless the halves are equal.
auto both_halves_into_one() {
  pl::CallOptions options = exploring();
  options.compiler_params.dimension_semantics = {pl::parallel};
  options.interpret->num_cores_or_threads = 2;
  return pl::pallas_call(
      [](pl::Ref x, pl::Ref o, pl::Ref sem) { pl::async_copy(x.at(pl::ds(pl::program_id(0) * 8, 8)), o, sem).wait(); },
      pl::GridSpec{.grid = {2},
                   .in_specs = {pl::BlockSpec(pl::ANY)},
                   .out_specs = {pl::BlockSpec(pl::ANY)},
                   .scratch_shapes = {pl::SemaphoreType::DMA}},
      pl::ShapeDtype({8, 16}, pl::f32), options);
}

// The line in shape_checked_kernel where its trace fails when x's block is not (4,).
int store_line = 0;

// Doubles x into a (4,) output, inside a pl::when and a pl::run_scoped (scopes a failed trace must
// leave closed): an input of another shape fails the trace there, adding a (4,) scratch block.
void shape_checked_kernel(pl::Ref x, pl::Ref o) {
  pl::when(x[0] >= 0, [&] {
    pl::run_scoped(
        [&](pl::Ref tmp) {
          tmp() = pl::zeros({4}, pl::i32);
          store_line = __LINE__ + 1;
          o() = x() * 2 + tmp();
        },
        pl::VMEM({4}, pl::i32));
  });
}

// The message of the UserError `run` throws, after checking that it points at `line` of this file
// (read after the run: a kernel's trace may set it).
std::string user_error_at(const std::function<void()>& run, const int& line) {
  try {
    run();
  } catch (const UserError& e) {
    CHECK(e.loc().line == static_cast<uint32_t>(line));
    CHECK(std::string(e.loc().file).find("recovery_test.cpp") != std::string::npos);
    return e.what();
  }
  FAIL("no UserError");
  return {};
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("recovery: a pallas_call that failed runs again, compiled and interpreted") {
    testing::for_each_backend([](const pl::CallOptions& backend) {
      auto call = window_call(backend);
      for (int round = 0; round < 3; ++round) {
        CHECK_THROWS_WITH_AS(call(block_starting_at(6)), Contains("out-of-bounds slice of `input 0 block`: ds(6, 4)"),
                             RuntimeError);
        CHECK(call(block_starting_at(2)).to_vector<int32_t>() == std::vector<int32_t>{2, 3, 4, 5});
      }
    });
  }

  TEST_CASE("recovery: a shard_map whose kernel failed on one device runs again, host collective included") {
    testing::for_each_backend([](const pl::CallOptions& backend) {
      pl::Mesh mesh({2}, {"x"});
      auto call = window_call(backend);
      // Each device reads its window, then the devices sum their windows (psum is a collective kernel).
      auto f = pl::shard_map([&](const pl::Array& block) { return pl::psum(call(block), "x"); }, mesh, {pl::P("x")},
                             {pl::P()});
      pl::Array bad = pl::concatenate({block_starting_at(1), block_starting_at(5)}, 0);
      pl::Array good = pl::concatenate({block_starting_at(1), block_starting_at(3)}, 0);
      for (int round = 0; round < 3; ++round) {
        // Device 1 fails; device 0, left alone in the psum, fails too, and the caller sees the cause.
        CHECK_THROWS_WITH_AS(f(bad), Contains("out-of-bounds slice of `input 0 block`: ds(5, 4)"), RuntimeError);
        // Windows [1, 2, 3, 4] and [3, 4, 5, 6].
        CHECK(pl::Array(f(good)).to_vector<int32_t>() == std::vector<int32_t>{4, 6, 8, 10});
      }
    });
  }

  TEST_CASE("recovery: an mpmd_map whose participant failed runs again") {
    testing::for_each_backend([](const pl::CallOptions& backend) {
      // Core p of "copy" copies row block p of x into o; core 0 of "signal" waits until both are done.
      auto copy = [](pl::Ref x, pl::Ref o, pl::Ref done, pl::Ref buf) {
        const pl::Value p = pl::axis_index("copy");
        pl::sync_copy(x.at(pl::ds(p * 4, 4)), buf);
        pl::sync_copy(buf, o.at(pl::ds(p * 4, 4)));
        pl::semaphore_signal(done);
      };
      auto wait = [](pl::Ref, pl::Ref, pl::Ref done, pl::Ref) { pl::semaphore_wait(done, 2); };
      auto call = pl::mpmd_map({{pl::CoreMesh("copy", 2), copy}, {pl::CoreMesh("signal", 1), wait}},
                               pl::ShapeDtype({8}, pl::f32), {pl::SemaphoreType::REGULAR, pl::VMEM({4}, pl::f32)},
                               backend);
      pl::Array x = pl::Array::arange(8, pl::f32);
      for (int round = 0; round < 3; ++round) {
        // Too short an input: core 1's copy is out of bounds, and the waiting core can never finish.
        CHECK_THROWS_WITH_AS(call(pl::Array::arange(6, pl::f32)), Contains("out-of-bounds slice of `input 0`: ds(4, 4)"),
                             RuntimeError);
        CHECK(call(x).to_vector<float>() == x.to_vector<float>());
      }
    });
  }

  TEST_CASE("recovery: a compiled call whose check against the interpreter failed runs again") {
    auto call = checked_dot();
    const auto [bad_x, bad_y] = dot_operands(true);
    const auto [x, y] = dot_operands(false);
    for (int round = 0; round < 3; ++round) {
      int line = 0;
      try {
        line = __LINE__ + 1;
        call(bad_x, bad_y);
        FAIL("no MismatchError");
      } catch (const pl::MismatchError& e) {
        CHECK(std::string(e.what()).find("output 0 differs between compiled code and the interpreter at index (8, 0)") !=
              std::string::npos);
        CHECK(e.loc().line == static_cast<uint32_t>(line));
      }
      // The same call with operands both backends agree on, and a new call with the others.
      const pl::Array o = call(x, y);
      CHECK(o.at<float>({3, 5}) == 1.0f);
      CHECK(o.at<float>({12, 5}) == 0.0f);
      CHECK(checked_dot()(x, y).to_vector<float>() == o.to_vector<float>());
    }
    // With the default f32 tolerance, the fused rounding is no mismatch: a new call takes the operands
    // the first one rejected.
    auto tolerant = pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref o) { o() = pl::dot(x(), y()); }, pl::GridSpec{},
                                    pl::ShapeDtype({16, 32}, pl::f32), {.check_against_interpreter = true});
    CHECK(tolerant(bad_x, bad_y).at<float>({3, 5}) == 1.0f);
  }

  TEST_CASE("recovery: a call whose schedule exploration found a schedule-dependent output runs again") {
    auto call = both_halves_into_one();
    const pl::Array differ = testing::ramp(16, 16);
    const pl::Array half = testing::ramp(8, 16);
    const pl::Array same = pl::concatenate({half, half}, 0);
    for (int round = 0; round < 3; ++round) {
      const std::string m = testing::runtime_error_of([&] { call(differ); });
      CHECK(m.find("output 0 depends on the schedule") != std::string::npos);
      CHECK(m.find(".random_seed = ") != std::string::npos);
      // Equal halves: every schedule agrees, on the same call and on a new one.
      CHECK(call(same).to_vector<float>() == half.to_vector<float>());
      CHECK(both_halves_into_one()(same).to_vector<float>() == half.to_vector<float>());
    }
  }

  TEST_CASE("recovery: a shard_map whose schedule exploration found a failing schedule runs again") {
    // Device 1 signals device 0 when its block starts with a positive number; device 0 takes the
    // signal only if it has already arrived when it looks (a missing wait): under some schedules the
    // signal is left over or arrives after device 0's kernel ended. Without the signal no schedule fails.
    auto kernel = [](pl::Ref x, pl::Ref o, pl::Ref sem) {
      const pl::Value me = pl::axis_index("x");
      pl::when(me == 1, [&] {
        pl::when(x[0] > 0, [&] { pl::semaphore_signal(sem, 1, pl::DeviceId({{"x", 0}})); });
      });
      pl::when(me == 0, [&] { pl::when(pl::semaphore_read(sem) > 0, [&] { pl::semaphore_wait(sem, 1); }); });
      o() = x();
    };
    auto call = pl::pallas_call(kernel, pl::GridSpec{.scratch_shapes = {pl::SemaphoreType::REGULAR}},
                                pl::ShapeDtype({4}, pl::i32), exploring());
    auto f = pl::shard_map([&](const pl::Array& block) { return call(block); }, pl::Mesh({2}, {"x"}), {pl::P("x")},
                           {pl::P("x")});
    const pl::Array signals = pl::Array::from_vector(std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1, 1}, {8});
    const pl::Array quiet = pl::Array::from_vector(std::vector<int32_t>{0, 1, 2, 3, -4, 5, 6, 7}, {8});
    for (int round = 0; round < 3; ++round) {
      const std::string m = testing::runtime_error_of([&] { f(signals); });
      CHECK(m.find("schedule: random_seed=") != std::string::npos);
      const bool left_over = m.find("semaphore `scratch 0` is 1 when the kernel ends") != std::string::npos;
      const bool too_late = m.find("has already ended") != std::string::npos;
      CHECK((left_over || too_late));
      CHECK(pl::Array(f(quiet)).to_vector<int32_t>() == quiet.to_vector<int32_t>());
    }
  }

  TEST_CASE("recovery: a call whose trace failed fails the same way again, and then runs") {
    testing::for_each_backend([](const pl::CallOptions& backend) {
      auto call = pl::pallas_call(shape_checked_kernel, pl::GridSpec{}, pl::ShapeDtype({4}, pl::i32), backend);
      const pl::Array bad = pl::Array::arange(5, pl::i32), good = pl::Array::arange(4, pl::i32);
      std::string first;
      for (int round = 0; round < 3; ++round) {
        // The same error each time, at the kernel's line: the trace runs again, nothing half-built is kept.
        const std::string m = user_error_at([&] { call(bad); }, store_line);
        CHECK(m.find("operator+: operand shapes do not broadcast") != std::string::npos);
        CHECK(m.find("a (5,) block of i32 and a (4,) block of i32") != std::string::npos);
        if (round == 0) first = m;
        CHECK(m == first);
        CHECK(call(good).to_vector<int32_t>() == std::vector<int32_t>{0, 2, 4, 6});
        // A new call of the same kernel, and a good call of a new one.
        CHECK(user_error_at([&] { pl::pallas_call(shape_checked_kernel, pl::GridSpec{}, pl::ShapeDtype({4}, pl::i32),
                                                  backend)(bad); },
                            store_line) == first);
        CHECK(pl::pallas_call(shape_checked_kernel, pl::GridSpec{}, pl::ShapeDtype({4}, pl::i32), backend)(good)
                  .to_vector<int32_t>() == std::vector<int32_t>{0, 2, 4, 6});
      }
      // After a good call the program of the good shape is cached; the bad shape still fails as before.
      CHECK(user_error_at([&] { call(bad); }, store_line) == first);
    });
  }
}
