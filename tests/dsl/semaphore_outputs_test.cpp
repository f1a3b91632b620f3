// Semaphores as pallas_call outputs and inputs (docs/design.md §4.9): a copy started in one call and
// waited for in the next, a signal handed from one call to another, semaphore arrays aliased from
// input to output, and the errors for misusing them. Every case runs compiled (checked against the
// interpreter) and interpreted with race detection, eager and on_wait.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "tests/support/kernels.h"
#include "tests/support/user_error.h"

using namespace tessera;
namespace pl = tessera;
using doctest::Contains;

namespace {

// Compiled with the interpreter's check, and interpreted with race detection (eager and on_wait
// copies, on two cores, so that on_wait leaves copies pending when a kernel returns).
std::vector<testing::Backend> semaphore_backends() {
  pl::CallOptions compiled;
  compiled.check_against_interpreter = true;
  pl::InterpretParams eager{.detect_races = true};
  pl::InterpretParams on_wait{.num_cores_or_threads = 2, .dma_execution_mode = pl::DmaExecutionMode::on_wait,
                              .random_seed = 7, .detect_races = true};
  return {{"compiled", compiled}, {"interpret eager", testing::interpret(eager)},
          {"interpret on_wait", testing::interpret(on_wait)}};
}

template <class F>
void for_each_semaphore_backend(F body) {
  for (const testing::Backend& b : semaphore_backends()) {
    INFO("backend: " << std::string(b.name));
    body(b.options);
    CHECK_FALSE(pl::races_found());
  }
}

pl::Array ramp(Shape shape, float scale = 1.0f) {
  std::vector<float> v(static_cast<size_t>(num_elements(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(i) - 3.0f;
  return pl::Array::from_vector(v, shape);
}

std::vector<int64_t> counts(const pl::Array& sems) { return sems.to_vector<int64_t>(); }

// Pallas's async copy pair: start() copies x into a fresh ANY output and returns x (aliased), the
// output and the copy's DMA semaphore; done() waits for that copy and returns the output (aliased).
struct AsyncCopy {
  pl::PallasCall<std::vector<pl::Array>> start;
  pl::PallasCall<pl::Array> done;
};

AsyncCopy async_copy_pair(const Shape& shape, const pl::CallOptions& backend) {
  pl::CallOptions start_options = backend;
  start_options.input_output_aliases = {{0, 0}};
  auto start_kernel = [](pl::Ref x, pl::Ref /*aliased x*/, pl::Ref o, pl::Ref sem) {
    pl::make_async_copy(x, o, sem).start();
  };
  auto start = pl::pallas_call(start_kernel,
                               pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                                            .out_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::ANY),
                                                          pl::BlockSpec(pl::SEMAPHORE)}},
                               {pl::ShapeDtype(shape, pl::f32), pl::ShapeDtype(shape, pl::f32), pl::SemaphoreType::DMA},
                               start_options);
  pl::CallOptions done_options = backend;
  done_options.input_output_aliases = {{1, 0}};
  auto done_kernel = [](pl::Ref x, pl::Ref o, pl::Ref sem, pl::Ref /*aliased o*/) {
    pl::make_async_copy(x, o, sem).wait();
  };
  auto done = pl::pallas_call(done_kernel,
                              pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::ANY),
                                                        pl::BlockSpec(pl::SEMAPHORE)},
                                           .out_specs = {pl::BlockSpec(pl::ANY)}},
                              pl::ShapeDtype(shape, pl::f32), done_options);
  return {start, done};
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("semaphore outputs: a copy started in one call is waited for in the next") {
    for_each_semaphore_backend([&](const pl::CallOptions& backend) {
      AsyncCopy copy = async_copy_pair({8, 128}, backend);
      const pl::Array x = ramp({8, 128});
      const std::vector<pl::Array> started = copy.start(x);
      REQUIRE(started.size() == 3);
      // The copy was in flight when the kernel returned: it landed before the call did, its bytes in
      // the output and its byte count in the semaphore, which the caller gets.
      CHECK(started[2].dtype() == pl::DType::dma_sem);
      CHECK(started[2].shape().empty());
      CHECK(counts(started[2]) == std::vector<int64_t>{8 * 128 * 4});
      CHECK(pl::allclose(started[1], x, 0, 0));
      const pl::Array y = copy.done(started[0], started[1], started[2]);
      CHECK(pl::allclose(y, x, 0, 0));
      CHECK(counts(started[2]) == std::vector<int64_t>{8 * 128 * 4});  // the caller's array is unchanged
    });
  }

  TEST_CASE("semaphore outputs: staggered copies, each waited for by the next call, as in a loop") {
    for_each_semaphore_backend([&](const pl::CallOptions& backend) {
      AsyncCopy copy = async_copy_pair({4, 8, 128}, backend);
      const pl::Array x = ramp({4, 8, 128}, 0.5f);
      std::vector<pl::Array> future = copy.start(x);
      for (int i = 0; i < 3; ++i) {
        const pl::Array y = copy.done(future[0], future[1], future[2]);
        future = copy.start(y);
      }
      CHECK(pl::allclose(copy.done(future[0], future[1], future[2]), x, 0, 0));
    });
  }

  TEST_CASE("semaphore outputs: a slice copied asynchronously, started and waited in two calls") {
    for_each_semaphore_backend([&](const pl::CallOptions& backend) {
      pl::CallOptions start_options = backend;
      start_options.input_output_aliases = {{1, 0}};
      // The slice's index comes from a scalar-prefetch operand, as in Pallas's async dynamic slice.
      auto start_kernel = [](pl::Ref index, pl::Ref x, pl::Ref, pl::Ref o, pl::Ref sem) {
        pl::make_async_copy(x.at(index[0], pl::all, pl::all), o, sem).start();
      };
      auto start = pl::pallas_call(start_kernel,
                                   pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1,
                                                              .in_specs = {pl::BlockSpec(pl::ANY)},
                                                              .out_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::ANY),
                                                                            pl::BlockSpec(pl::SEMAPHORE)}},
                                   {pl::ShapeDtype({4, 8, 128}, pl::f32), pl::ShapeDtype({8, 128}, pl::f32),
                                    pl::SemaphoreType::DMA},
                                   start_options);
      pl::CallOptions done_options = backend;
      done_options.input_output_aliases = {{1, 0}};
      // The wait's descriptor only has to match in size: slice 0 stands for whichever was copied.
      auto done_kernel = [](pl::Ref x, pl::Ref o, pl::Ref sem, pl::Ref) {
        pl::make_async_copy(x.at(0, pl::all, pl::all), o, sem).wait();
      };
      auto done = pl::pallas_call(done_kernel,
                                  pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::ANY),
                                                            pl::BlockSpec(pl::SEMAPHORE)},
                                               .out_specs = {pl::BlockSpec(pl::ANY)}},
                                  pl::ShapeDtype({8, 128}, pl::f32), done_options);
      const pl::Array x = ramp({4, 8, 128});
      for (int32_t i : {2, 3}) {
        const std::vector<pl::Array> f = start(pl::Array::from_vector(std::vector<int32_t>{i}, {1}), x);
        const pl::Array y = done(f[0], f[1], f[2]);
        const std::vector<float> all = x.to_vector<float>(), got = y.to_vector<float>();
        CHECK(std::equal(got.begin(), got.end(), all.begin() + i * 8 * 128));
      }
    });
  }

  TEST_CASE("semaphore outputs: a semaphore signalled in one call is waited on in the next") {
    for_each_semaphore_backend([&](const pl::CallOptions& backend) {
      // The producer signals semaphore k (k + 1) times; the consumer waits for each count and
      // records what semaphore_read saw before the wait.
      auto produce = [](pl::Ref sems) {
        for (int k = 0; k < 3; ++k) pl::semaphore_signal(sems.at(k), k + 1);
      };
      auto producer = pl::pallas_call(produce, pl::GridSpec{.out_specs = {pl::BlockSpec(pl::SEMAPHORE)}},
                                      pl::SemaphoreType::REGULAR({3}), backend);
      const pl::Array sems = producer();
      CHECK(sems.dtype() == pl::DType::sem);
      CHECK(counts(sems) == std::vector<int64_t>{1, 2, 3});
      auto consume = [](pl::Ref sems, pl::Ref seen) {
        for (int k = 0; k < 3; ++k) {
          seen[k] = pl::semaphore_read(sems.at(k));
          pl::semaphore_wait(sems.at(k), k + 1);
        }
      };
      auto consumer = pl::pallas_call(consume,
                                      pl::GridSpec{.in_specs = {pl::BlockSpec(pl::SEMAPHORE)},
                                                   .out_specs = {pl::BlockSpec(pl::SMEM)}},
                                      pl::ShapeDtype({3}, pl::i32), backend);
      CHECK(consumer(sems).to_vector<int32_t>() == std::vector<int32_t>{1, 2, 3});
      CHECK(counts(sems) == std::vector<int64_t>{1, 2, 3});  // the kernel waited on its own copy
    });
  }

  TEST_CASE("semaphore outputs: a semaphore input aliased to an output hands on what is left") {
    for_each_semaphore_backend([&](const pl::CallOptions& backend) {
      // Each call waits for the copy the call before it started, then starts one of its own and
      // returns with it in flight: the DMA semaphore (input 1 aliased to output 1) carries one copy's
      // bytes from call to call.
      pl::CallOptions options = backend;
      options.input_output_aliases = {{1, 1}};
      auto step = [](pl::Ref x, pl::Ref, pl::Ref o, pl::Ref sem) {
        pl::make_async_copy(x, o, sem).wait();
        pl::make_async_copy(x, o, sem).start();
      };
      auto call = pl::pallas_call(step,
                                  pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::SEMAPHORE)},
                                               .out_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::SEMAPHORE)}},
                                  {pl::ShapeDtype({16}, pl::f32), pl::SemaphoreType::DMA}, options);
      auto last = [](pl::Ref x, pl::Ref sem, pl::Ref o) {
        pl::make_async_copy(x, o, sem).wait();
        o() = x() * 2.0f;
      };
      auto finish = pl::pallas_call(last, pl::GridSpec{.in_specs = {pl::BlockSpec(), pl::BlockSpec(pl::SEMAPHORE)}},
                                    pl::ShapeDtype({16}, pl::f32), backend);
      const pl::Array x = ramp({16});
      const pl::Array first = pl::Array::from_vector(std::vector<int64_t>{64}, {}, pl::DType::dma_sem);
      std::vector<pl::Array> r = call(x, first);
      for (int i = 0; i < 3; ++i) {
        CHECK(counts(r[1]) == std::vector<int64_t>{64});
        CHECK(pl::allclose(r[0], x, 0, 0));
        r = call(x, r[1]);
      }
      CHECK(counts(first) == std::vector<int64_t>{64});  // the caller's array never changes
      const pl::Array doubled = finish(x, r[1]);
      CHECK(pl::allclose(doubled, ramp({16}, 2.0f) - pl::Array::full({16}, 3.0, pl::f32), 0, 0));
    });
  }

  TEST_CASE("semaphore outputs: schedule exploration gives every schedule the same counts and data") {
    pl::InterpretParams params{.dma_execution_mode = pl::DmaExecutionMode::on_wait, .num_schedules = 6};
    AsyncCopy copy = async_copy_pair({8, 16}, testing::interpret(params));
    const pl::Array x = ramp({8, 16});
    const std::vector<pl::Array> started = copy.start(x);
    CHECK(counts(started[2]) == std::vector<int64_t>{8 * 16 * 4});
    CHECK(pl::allclose(copy.done(started[0], started[1], started[2]), x, 0, 0));
  }

  TEST_CASE("semaphore outputs: a semaphore input left non-zero and not returned is an error") {
    for (const testing::Backend& b : semaphore_backends()) {
      INFO("backend: " << std::string(b.name));
      const int line = __LINE__ + 5;
      auto consume = [](pl::Ref sem, pl::Ref o) {
        pl::semaphore_wait(sem, 2);
        o() = pl::full({8}, 1.0, pl::f32);
      };
      auto call = pl::pallas_call(consume, pl::GridSpec{.in_specs = {pl::BlockSpec(pl::SEMAPHORE)}},
                                  pl::ShapeDtype({8}, pl::f32), b.options);
      const pl::Array five = pl::Array::from_vector(std::vector<int64_t>{5}, {}, pl::DType::sem);
      CHECK_THROWS_WITH_AS(call(five), Contains("semaphore `input 0` is 3 when"), RuntimeError);
      CHECK_THROWS_WITH_AS(call(five), Contains("a semaphore passed in and not returned"), RuntimeError);
      CHECK_THROWS_WITH_AS(call(five), Contains("alias it to a semaphore output"), RuntimeError);
      CHECK_THROWS_WITH_AS(call(five), Contains(fmt::format("semaphore_outputs_test.cpp:{}", line).c_str()), RuntimeError);
      // Exactly what it holds: fine.
      CHECK(call(pl::Array::from_vector(std::vector<int64_t>{2}, {}, pl::DType::sem)).to_vector<float>() ==
            std::vector<float>(8, 1.0f));
      // More than it holds, with nothing to signal it: a deadlock, as for any semaphore.
      CHECK_THROWS_WITH_AS(call(pl::Array::from_vector(std::vector<int64_t>{1}, {}, pl::DType::sem)),
                           Contains("deadlock: this semaphore_wait can never return: semaphore `input 0` holds 1 and the "
                                    "wait needs 2"),
                           RuntimeError);
    }
  }

  TEST_CASE("semaphore outputs: misuse is a UserError naming the operand and the line") {
    // A semaphore array with a data BlockSpec.
    const pl::Array sem = pl::Array::zeros({}, pl::DType::dma_sem);
    const pl::Array x = ramp({8});
    auto waits = [](pl::Ref s, pl::Ref o) {
      pl::make_async_copy(o, o, s).wait();
    };
    testing::check_user_error(
        [&] {
          pl::pallas_call(waits, pl::GridSpec{.in_specs = {pl::BlockSpec(pl::VMEM)}}, pl::ShapeDtype({8}, pl::f32))(sem);
        },
        "pallas_call `kernel`: input 0 is an array of semaphores, which a kernel reaches only as semaphores",
        "a () dma_sem array with a BlockSpec in memory space vmem",
        "pass it whole with pl::BlockSpec(pl::SEMAPHORE); read its counts on the host with to_vector<int64_t>()",
        "semaphore_outputs_test.cpp");
    testing::check_user_error(
        [&] {
          pl::pallas_call(waits, pl::GridSpec{.in_specs = {pl::BlockSpec({1}, [](pl::Value) { return 0; })}},
                          pl::ShapeDtype({8}, pl::f32))(pl::Array::zeros({1}, pl::DType::dma_sem));
        },
        "pallas_call `kernel`: input 0 is an array of semaphores, which a kernel reaches only as semaphores",
        "a (1,) dma_sem array with a BlockSpec of blocks",
        "pass it whole with pl::BlockSpec(pl::SEMAPHORE); read its counts on the host with to_vector<int64_t>()",
        "semaphore_outputs_test.cpp");
    // Data with a SEMAPHORE BlockSpec (an input, then an output).
    auto copies = [](pl::Ref a, pl::Ref o) { o() = a(); };
    testing::check_user_error(
        [&] {
          pl::pallas_call(copies, pl::GridSpec{.in_specs = {pl::BlockSpec(pl::SEMAPHORE)}}, pl::ShapeDtype({8}, pl::f32))(x);
        },
        "pallas_call `kernel`: input 0 has a BlockSpec in memory space SEMAPHORE, but it holds data", "a (8,) f32 array",
        "use pl::BlockSpec(pl::SEMAPHORE) for semaphore arrays only (a pallas_call output of a pl::SemaphoreType); pass "
        "data with VMEM blocks or pl::BlockSpec(pl::ANY)",
        "semaphore_outputs_test.cpp");
    testing::check_user_error(
        [&] {
          pl::pallas_call(copies, pl::GridSpec{.out_specs = {pl::BlockSpec(pl::SEMAPHORE)}}, pl::ShapeDtype({8}, pl::f32))(x);
        },
        "pallas_call `kernel`: output 0 has a BlockSpec in memory space SEMAPHORE, but it holds data", "a (8,) f32 array",
        "use pl::BlockSpec(pl::SEMAPHORE) for semaphore arrays only (a pallas_call output of a pl::SemaphoreType); pass "
        "data with VMEM blocks or pl::BlockSpec(pl::ANY)",
        "semaphore_outputs_test.cpp");
    // A semaphore array as a scalar-prefetch operand.
    auto reads = [](pl::Ref, pl::Ref o) { o() = pl::full({8}, 0.0, pl::f32); };
    testing::check_user_error(
        [&] {
          pl::pallas_call(reads, pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1}, pl::ShapeDtype({8}, pl::f32))(sem);
        },
        "pallas_call `kernel`: scalar prefetch 0 is an array of semaphores, which cannot be a scalar-prefetch operand",
        "a () dma_sem array", "pass it after the scalar-prefetch operands, with pl::BlockSpec(pl::SEMAPHORE)",
        "semaphore_outputs_test.cpp");
    // An output shape given as a data memory ref.
    testing::check_user_error([&] { (void)pl::ShapeDtype(pl::VMEM({8}, pl::f32)); },
                              "an output shape given as a memory ref must be a semaphore type",
                              "a (8,) f32 ref in memory space vmem",
                              "give data outputs as pl::ShapeDtype(shape, dtype) (and their memory space in out_specs), "
                              "semaphores as pl::SemaphoreType::DMA / ::REGULAR, optionally with a shape",
                              "semaphore_outputs_test.cpp");
    // Host arithmetic on counts.
    try {
      (void)(sem + sem);
      FAIL("expected a UserError");
    } catch (const UserError& e) {
      CHECK(e.problem() == "array +: an array of semaphores holds counts, not numbers to compute with");
      CHECK(e.given() == "a () dma_sem array");
    }
    // Counts convert to numbers explicitly.
    const pl::Array three = pl::Array::from_vector(std::vector<int64_t>{3}, {}, pl::DType::sem);
    CHECK((three.astype(pl::i64) + three.astype(pl::i64)).item_int() == 6);
    CHECK(three.to_string().find("3") != std::string::npos);
  }

  TEST_CASE("semaphore outputs: a DMA semaphore input aliased to a regular semaphore output is refused") {
    auto k = [](pl::Ref, pl::Ref) {};
    pl::CallOptions options;
    options.input_output_aliases = {{0, 0}};
    auto call = pl::pallas_call(k, pl::GridSpec{}, pl::SemaphoreType::REGULAR, options);
    try {
      call(pl::Array::zeros({}, pl::DType::dma_sem));
      FAIL("expected a UserError");
    } catch (const UserError& e) {
      CHECK(e.problem() == "pallas_call `kernel`: an aliased input and output differ in shape or dtype");
      CHECK(e.given() == "input 0 is () dma_sem, output 0 is () sem");
    }
  }

  TEST_CASE("remote copies: started in one loop iteration, waited in a later one with descriptors made there") {
    // Each of 4 devices pushes its 4 rows one by one to its right neighbour: row c's copy starts in
    // iteration c and is waited for in iteration c + 1 (the last after the loop), with descriptors
    // made anew there. The receive wait uses a stand-in descriptor of the same size (row 0), as
    // Pallas receivers do: only the byte count matters.
    for_each_semaphore_backend([&](const pl::CallOptions& backend) {
      auto kernel = [](pl::Ref x, pl::Ref o, pl::Ref send, pl::Ref recv) {
        const pl::Value right = (pl::axis_index("x") + 1) % 4;
        auto row = [&](const pl::Value& c) {
          return pl::make_async_remote_copy(x.at(c), o.at(c), send.at(c), recv.at(c), pl::DeviceId({right}));
        };
        auto received = [&](const pl::Value& c) {
          pl::make_async_remote_copy(x.at(0), o.at(0), send.at(c), recv.at(c), pl::DeviceId({right})).wait_recv();
        };
        pl::loop(0, 4, [&](pl::Value c) {
          row(c).start();
          pl::when(c > 0, [&] {
            row(c - 1).wait_send();
            received(c - 1);
          });
        });
        row(pl::full({}, 3.0, pl::i32)).wait_send();
        received(pl::full({}, 3.0, pl::i32));
      };
      auto call = pl::pallas_call(kernel,
                                  pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                                               .out_specs = {pl::BlockSpec(pl::ANY)},
                                               .scratch_shapes = {pl::SemaphoreType::DMA({4}), pl::SemaphoreType::DMA({4})}},
                                  pl::ShapeDtype({4, 8}, pl::f32), backend);
      const pl::Mesh mesh({4}, {"x"});
      const pl::Array x = ramp({16, 8});
      const pl::Array out = pl::shard_map([&](const pl::Array& block) { return call(block); }, mesh, {pl::P("x")},
                                          {pl::P("x")})(x);
      for (int64_t d = 0; d < 4; ++d)
        for (int64_t r = 0; r < 4; ++r)
          for (int64_t j = 0; j < 8; j += 7)
            CHECK(out.at<float>({d * 4 + r, j}) == x.at<float>({((d + 3) % 4) * 4 + r, j}));
    });
  }

  TEST_CASE("semaphore outputs: an mpmd_map takes no semaphore arrays") {
    auto k = [](pl::Ref, pl::Ref) {};
    testing::check_user_error(
        [&] { pl::mpmd_map({{pl::CoreMesh("core", 1), k}}, pl::SemaphoreType::DMA, {})(pl::Array::zeros({8}, pl::f32)); },
        "mpmd_map `kernel`: output 0 is an array of semaphores, which an mpmd_map does not take", "a () dma_sem array",
        "share semaphores between the participants as scratch (a pl::SemaphoreType in scratch_shapes); semaphore arrays "
        "pass between pallas_calls",
        "semaphore_outputs_test.cpp");
  }

  TEST_CASE("semaphore outputs: counts that come in are taken first and order nothing (race detection)") {
    // The kernel gets a DMA semaphore holding an earlier copy's 32 bytes, starts a copy of its own
    // toward it and waits twice. The first wait takes the old bytes, so reading the new copy's
    // destination between the waits is a race (on a TPU the old bytes may satisfy it first); after
    // the second wait it is not.
    auto make = [](bool fixed, pl::DmaExecutionMode mode) {
      auto kernel = [fixed](pl::Ref x, pl::Ref sem, pl::Ref o, pl::Ref buf) {
        auto copy = pl::make_async_copy(x, buf, sem);
        copy.start();
        copy.wait();
        if (!fixed) o() = buf();
        copy.wait();
        if (fixed) o() = buf();
      };
      return pl::pallas_call(kernel,
                             pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::SEMAPHORE)},
                                          .scratch_shapes = {pl::VMEM({8}, pl::f32)}},
                             pl::ShapeDtype({8}, pl::f32),
                             testing::interpret({.dma_execution_mode = mode, .detect_races = true}));
    };
    const pl::Array x = ramp({8});
    const pl::Array old_bytes = pl::Array::from_vector(std::vector<int64_t>{32}, {}, pl::DType::dma_sem);
    for (pl::DmaExecutionMode mode : {pl::DmaExecutionMode::eager, pl::DmaExecutionMode::on_wait}) {
      CHECK(pl::allclose(make(true, mode)(x, old_bytes), x, 0, 0));
      CHECK_FALSE(pl::races_found());
      make(false, mode)(x, old_bytes);
      REQUIRE(pl::races_found());
      CHECK(pl::race_reports().at(0).buffer == "scratch 0");
    }
  }

  TEST_CASE("remote signals: a signal to another device without an increment adds 1") {
    // A ring handshake: every device signals its right neighbour (no increment given) and waits for
    // its left neighbour's one signal; a second signal or a missing one would leave the semaphore
    // non-zero or deadlock.
    for_each_semaphore_backend([&](const pl::CallOptions& backend) {
      auto kernel = [](pl::Ref x, pl::Ref o, pl::Ref sem) {
        pl::semaphore_signal(sem, pl::DeviceId({(pl::axis_index("x") + 1) % 4}));
        pl::semaphore_wait(sem, 1);
        o() = x() + 1.0f;
      };
      auto call = pl::pallas_call(kernel, pl::GridSpec{.scratch_shapes = {pl::SemaphoreType::REGULAR}},
                                  pl::ShapeDtype({2, 8}, pl::f32), backend);
      const pl::Array x = ramp({8, 8});
      const pl::Array out = pl::shard_map([&](const pl::Array& block) { return call(block); }, pl::Mesh({4}, {"x"}),
                                          {pl::P("x")}, {pl::P("x")})(x);
      CHECK(pl::allclose(out, x + pl::Array::full({8, 8}, 1.0, pl::f32), 0, 0));
    });
  }

  TEST_CASE("semaphore outputs: a remote copy in flight when its kernel ends lands in the receiver's output") {
    // Pallas's remote copy across calls: each of 4 devices starts a copy of its block into its right
    // neighbour's output and returns without waiting, the copy's send and receive semaphores among its
    // outputs; the next call takes them and waits (which consumes exactly the copy's bytes on both, or
    // fails: a wait for more hangs, bytes left over are a non-zero semaphore) and then reads the
    // output it took, aliased, which must hold the left neighbour's block.
    for_each_semaphore_backend([&](const pl::CallOptions& backend) {
      auto right = [] { return pl::DeviceId({(pl::axis_index("x") + 1) % 4}); };
      auto start_kernel = [&](pl::Ref x, pl::Ref o, pl::Ref send, pl::Ref recv) {
        pl::make_async_remote_copy(x, o, send, recv, right()).start();
      };
      auto start = pl::pallas_call(
          start_kernel,
          pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                       .out_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::SEMAPHORE), pl::BlockSpec(pl::SEMAPHORE)}},
          {pl::ShapeDtype({2, 8}, pl::f32), pl::SemaphoreType::DMA, pl::SemaphoreType::DMA}, backend);
      pl::CallOptions done_options = backend;
      done_options.input_output_aliases = {{0, 0}};
      auto done_kernel = [&](pl::Ref, pl::Ref send, pl::Ref recv, pl::Ref o, pl::Ref y) {
        auto copy = pl::make_async_remote_copy(o, o, send, recv, right());
        copy.wait_send();
        copy.wait_recv();
        pl::sync_copy(o, y);
      };
      auto done = pl::pallas_call(
          done_kernel,
          pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::SEMAPHORE), pl::BlockSpec(pl::SEMAPHORE)},
                       .out_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec()}},
          {pl::ShapeDtype({2, 8}, pl::f32), pl::ShapeDtype({2, 8}, pl::f32)}, done_options);
      const pl::Array x = ramp({8, 8});
      for (int round = 0; round < 3; ++round) {
        const pl::Array out = pl::shard_map(
            [&](const pl::Array& block) {
              const std::vector<pl::Array> started = start(block);
              return done(started[0], started[1], started[2])[1];
            },
            pl::Mesh({4}, {"x"}), {pl::P("x")}, {pl::P("x")})(x);
        for (int64_t d = 0; d < 4; ++d)
          for (int64_t r = 0; r < 2; ++r)
            for (int64_t j = 0; j < 8; j += 7)
              CHECK(out.at<float>({d * 2 + r, j}) == x.at<float>({((d + 3) % 4) * 2 + r, j}));
      }
    });
  }

  TEST_CASE("semaphore outputs: after its kernel ends, a device's scratch is no longer reachable") {
    // Device 0 signals device 1's scratch semaphore, which device 1 never waits for; the kernel
    // returns a semaphore, so device 1 waits at its end for copies toward its outputs, not toward its
    // scratch: the signal is an error, before device 1's end (a non-zero semaphore) or after it.
    for_each_semaphore_backend([&](const pl::CallOptions& backend) {
      auto kernel = [](pl::Ref, pl::Ref, pl::Ref sem) {
        pl::when(pl::axis_index("x") == 0, [&] { pl::semaphore_signal(sem, 1, pl::DeviceId({1})); });
      };
      auto call = pl::pallas_call(kernel,
                                  pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                                               .out_specs = {pl::BlockSpec(pl::SEMAPHORE)},
                                               .scratch_shapes = {pl::SemaphoreType::REGULAR}},
                                  pl::SemaphoreType::REGULAR, backend);
      auto run = [&] {
        pl::shard_map(
            [&](const pl::Array& block) {
              call(block);
              return block;
            },
            pl::Mesh({2}, {"x"}), {pl::P("x")}, {pl::P("x")})(ramp({2}));
      };
      CHECK_THROWS_AS(run(), RuntimeError);
    });
  }

  // A kernel that returns no semaphore has nowhere to put a copy's count once the receiver's kernel
  // ended: a copy or signal from another device that its receiver never waited for fails, whatever the
  // devices' timing. It lands before the receiver's last check (a non-zero semaphore, the receiver's
  // error), or after (the sender's error, toward a kernel that has ended); never in between without a
  // word. Random delays (also between a kernel's last semaphore check and its end) vary the timing.
  TEST_CASE("remote copies: toward a kernel without semaphore outputs that never waits, always an error") {
    const Shape block{2, 8};
    // Device 0 copies into device 1's output, the receive semaphore device 1's scratch (`scratch 1`)
    // or device 1's semaphore input (`input 1`), and waits for its own side; device 1 waits for nothing.
    // The output starts as zeros (an aliased input), so a copy refused leaves the same output in
    // compiled code and in the interpreter that checks it.
    auto to_scratch = [](pl::Ref x, pl::Ref, pl::Ref o, pl::Ref send, pl::Ref recv) {
      pl::when(pl::axis_index("x") == 0, [&] {
        auto copy = pl::make_async_remote_copy(x, o, send, recv, pl::DeviceId({1}));
        copy.start();
        copy.wait_send();
      });
    };
    auto to_input = [](pl::Ref x, pl::Ref recv, pl::Ref, pl::Ref o, pl::Ref send) {
      pl::when(pl::axis_index("x") == 0, [&] {
        auto copy = pl::make_async_remote_copy(x, o, send, recv, pl::DeviceId({1}));
        copy.start();
        copy.wait_send();
      });
    };
    // A signal toward device 1's scratch semaphore, which it never waits on.
    auto signal = [](pl::Ref, pl::Ref o, pl::Ref sem) {
      pl::when(pl::axis_index("x") == 0, [&] { pl::semaphore_signal(sem, 1, pl::DeviceId({1})); });
      o() = pl::zeros_like(o);
    };
    pl::set_random_delays(200, 11);
    for (const testing::Backend& b : semaphore_backends()) {
      INFO("backend: " << std::string(b.name));
      pl::CallOptions alias_1 = b.options, alias_2 = b.options;
      alias_1.input_output_aliases = {{1, 0}};
      alias_2.input_output_aliases = {{2, 0}};
      auto scratch_call = pl::pallas_call(
          to_scratch,
          pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::ANY)},
                       .out_specs = {pl::BlockSpec(pl::ANY)},
                       .scratch_shapes = {pl::SemaphoreType::DMA, pl::SemaphoreType::DMA}},
          pl::ShapeDtype(block, pl::f32), alias_1);
      auto input_call = pl::pallas_call(
          to_input,
          pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::SEMAPHORE), pl::BlockSpec(pl::ANY)},
                       .out_specs = {pl::BlockSpec(pl::ANY)}, .scratch_shapes = {pl::SemaphoreType::DMA}},
          pl::ShapeDtype(block, pl::f32), alias_2);
      auto signal_call = pl::pallas_call(
          signal, pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)}, .scratch_shapes = {pl::SemaphoreType::REGULAR}},
          pl::ShapeDtype({1}, pl::f32), b.options);
      const pl::Array x = ramp({4, 8});
      auto run = [&](int which) {
        pl::shard_map(
            [&](const pl::Array& blk) {
              const pl::Array zeros = pl::Array::zeros(block, pl::f32);
              if (which == 0) return scratch_call(blk, zeros);
              if (which == 1) return input_call(blk, pl::Array::zeros({}, pl::DType::dma_sem), zeros);
              signal_call(blk);
              return blk;
            },
            pl::Mesh({2}, {"x"}), {pl::P("x")}, {pl::P("x")})(x);
      };
      for (int which = 0; which < 3; ++which) {
        INFO("case " << which);
        for (int round = 0; round < 6; ++round) {
          std::string message;
          try {
            run(which);
          } catch (const RuntimeError& e) {
            message = e.what();
          }
          INFO(message);
          REQUIRE_FALSE(message.empty());  // never lost without a word
          // Either the receiver's semaphore, not back at zero when its kernel (or launch) ended ...
          const bool receiver = message.find(which == 1 ? "`input 1` is" : "`scratch ") != std::string::npos &&
                                message.find("must be back at zero") != std::string::npos;
          // ... or the sender's copy or signal toward a kernel that had ended.
          const bool sender = message.find(which == 2 ? "a remote semaphore_signal toward device 1"
                                                      : "a remote copy toward device 1") != std::string::npos &&
                              message.find("ended") != std::string::npos &&
                              message.find("Make the receiver wait for it") != std::string::npos;
          CHECK((receiver || sender));
          CHECK(message.find(receiver ? "where: device 1, core 0" : "where: device 0, core 0") != std::string::npos);
          CHECK(message.find("semaphore_outputs_test.cpp:") != std::string::npos);  // the copy's or the call's line
        }
      }
    }
    pl::set_random_delays(0);
  }

  // A run_scoped region's semaphore may receive a signal for its next run before that run begins, but
  // one that lands after the region's last run is for a run that never comes: the receiver's error at
  // its kernel's end, never lost. Device 1 runs its region, lets device 0 go, and waits until device 0
  // has signalled device 1's region semaphore (after the region ended) and acknowledged it.
  TEST_CASE("remote copies: a signal toward a run_scoped semaphore after the region's last run is an error") {
    auto kernel = [](pl::Ref, pl::Ref o, pl::Ref go, pl::Ref ack) {
      const pl::Value x = pl::axis_index("x");
      pl::when(x == 1, [&] {
        pl::run_scoped([&](pl::Ref) { o() = pl::zeros_like(o); }, pl::SemaphoreType::REGULAR);
        pl::semaphore_signal(go, 1, pl::DeviceId({0}));
        pl::semaphore_wait(ack, 1);
      });
      pl::when(x == 0, [&] {
        pl::semaphore_wait(go, 1);
        pl::run_scoped([&](pl::Ref sem) { pl::semaphore_signal(sem, 1, pl::DeviceId({1})); },
                       pl::SemaphoreType::REGULAR);
        pl::semaphore_signal(ack, 1, pl::DeviceId({1}));
        o() = pl::zeros_like(o);
      });
    };
    const pl::Array x = ramp({4, 8});
    for (const testing::Backend& b : semaphore_backends()) {
      INFO("backend: " << std::string(b.name));
      auto call = pl::pallas_call(
          kernel,
          pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                       .scratch_shapes = {pl::SemaphoreType::REGULAR, pl::SemaphoreType::REGULAR}},
          pl::ShapeDtype({2, 8}, pl::f32), b.options);
      auto run = [&] {
        pl::shard_map([&](const pl::Array& blk) { return call(blk); }, pl::Mesh({2}, {"x"}), {pl::P("x")},
                      {pl::P("x")})(x);
      };
      std::string message;
      try {
        run();
      } catch (const RuntimeError& e) {
        message = e.what();
      }
      INFO(message);
      CHECK(message.find("semaphore `run_scoped 0` is 1 when the kernel ends") != std::string::npos);
      CHECK(message.find("after the last run of its run_scoped region ended") != std::string::npos);
      CHECK(message.find("where: device 1, core 0") != std::string::npos);
      // The next call in the process works.
      auto fine = pl::pallas_call(
          [](pl::Ref, pl::Ref o) { o() = pl::zeros_like(o); }, pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)}},
          pl::ShapeDtype({2, 8}, pl::f32), b.options);
      CHECK(pl::shard_map([&](const pl::Array& blk) { return fine(blk); }, pl::Mesh({2}, {"x"}), {pl::P("x")},
                          {pl::P("x")})(x).gather().to_vector<float>() ==
            std::vector<float>(32, 0.0f));
    }
  }
}
