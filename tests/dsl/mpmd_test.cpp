// mpmd_map: kernels over their own meshes, running at once, sharing inputs, outputs, scratch and
// semaphores; private VMEM per participant; the seed's validation errors; failures and deadlocks
// across participants. Every case runs compiled and interpreted (eager and on_wait copies).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "jit/ir/printer.h"
#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;
using doctest::Contains;

namespace {

constexpr int64_t kBlock = 8, kCols = 128;

pl::Array iota_rows(int64_t m, int64_t n) {
  std::vector<float> v(static_cast<size_t>(m * n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 1000) * 0.5f;
  return pl::Array::from_vector(v, {m, n});
}

std::vector<testing::Backend> mpmd_backends() {
  auto all = testing::backends();
  pl::InterpretParams on_wait;
  on_wait.dma_execution_mode = pl::DmaExecutionMode::on_wait;
  on_wait.random_seed = 7;
  all.push_back({"interpret on_wait", testing::interpret(on_wait)});
  return all;
}

// Two producer cores hand blocks of 2 * x to one consumer core through shared HBM slots (two per
// producer); the consumer writes 2 * x + 1. A shared semaphore per slot says a block is in it, another
// that the consumer is done with it. Each core's VMEM buffer is its own.
pl::MpmdCall<pl::Array> producer_consumer(int64_t blocks, const pl::CallOptions& options) {
  const int64_t uses0 = (blocks + 1) / 2;  // blocks of producer 0 (even ones); producer 1 has the odd ones
  auto produce = [=](pl::Ref x, pl::Ref, pl::Ref slots, pl::Ref full, pl::Ref empty, pl::Ref buf) {
    const pl::Value p = pl::axis_index("producer");
    pl::loop(0, uses0, [&](pl::Value t) {
      const pl::Value b = t * 2 + p;
      pl::when(b < blocks, [&] {
        const pl::Value slot = p * 2 + t % 2;
        pl::sync_copy(x.at(pl::ds(b * kBlock, kBlock)), buf);
        buf() = buf() * 2.0f;
        pl::when(t >= 2, [&] { pl::semaphore_wait(empty.at(slot)); });  // its last block was taken
        pl::sync_copy(buf, slots.at(slot));
        pl::semaphore_signal(full.at(slot));
      });
    });
  };
  auto consume = [=](pl::Ref, pl::Ref o, pl::Ref slots, pl::Ref full, pl::Ref empty, pl::Ref buf) {
    pl::loop(0, blocks, [&](pl::Value b) {
      const pl::Value p = b % 2, t = b / 2;
      const pl::Value slot = p * 2 + t % 2;
      pl::semaphore_wait(full.at(slot));
      pl::sync_copy(slots.at(slot), buf);
      // Free the slot only when its producer will use it again: every semaphore ends at zero.
      const pl::Value producer_uses = (blocks - p + 1) / 2;
      pl::when(t + 2 < producer_uses, [&] { pl::semaphore_signal(empty.at(slot)); });
      buf() = buf() + 1.0f;
      pl::sync_copy(buf, o.at(pl::ds(b * kBlock, kBlock)));
    });
  };
  pl::CallOptions o = options;
  o.name = "producer_consumer";
  return pl::mpmd_map({{pl::CoreMesh("producer", 2), produce}, {pl::CoreMesh("consumer", 1), consume}},
                      pl::ShapeDtype({blocks * kBlock, kCols}, pl::f32),
                      {pl::HBM({4, kBlock, kCols}, pl::f32), pl::SemaphoreType::REGULAR({4}),
                       pl::SemaphoreType::REGULAR({4}), pl::VMEM({kBlock, kCols}, pl::f32)},
                      o);
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("mpmd_map: two producer cores hand blocks to a consumer core through shared scratch") {
    for (const auto& backend : mpmd_backends()) {
      INFO("backend: " << std::string(backend.name));
      for (int64_t blocks : {1, 2, 7, 12}) {
        INFO("blocks: " << blocks);
        auto call = producer_consumer(blocks, backend.options);
        const pl::Array x = iota_rows(blocks * kBlock, kCols);
        const pl::Array out = call(x);
        bool all = true;
        for (int64_t i = 0; i < blocks * kBlock && all; ++i)
          for (int64_t j = 0; j < kCols && all; ++j) all = out.at<float>({i, j}) == 2.0f * x.at<float>({i, j}) + 1.0f;
        CHECK(all);
        CHECK(call.interpreted() == backend.options.interpret.has_value());
      }
    }
  }

  TEST_CASE("mpmd_map: a copy started on one core wakes a wait on another, in both directions") {
    // `send` copies x into shared scratch, signalling a shared DMA semaphore, and waits for `recv` to
    // say it is done; `recv` waits on the DMA semaphore with a descriptor of the same copy (its byte
    // count), then copies the scratch out. With on_wait copies, the pending copy lands when `send`
    // blocks.
    for (const auto& backend : mpmd_backends()) {
      INFO("backend: " << std::string(backend.name));
      auto send = [](pl::Ref x, pl::Ref, pl::Ref stage, pl::Ref landed, pl::Ref done) {
        pl::async_copy(x, stage, landed);
        pl::semaphore_wait(done);
      };
      auto recv = [](pl::Ref x, pl::Ref o, pl::Ref stage, pl::Ref landed, pl::Ref done) {
        pl::make_async_copy(x, stage, landed).wait();
        pl::sync_copy(stage, o);
        pl::semaphore_signal(done);
      };
      auto call = pl::mpmd_map({{pl::CoreMesh("s", 1), send}, {pl::CoreMesh("r", 1), recv}},
                               pl::ShapeDtype({16, kCols}, pl::f32),
                               {pl::ANY({16, kCols}, pl::f32), pl::SemaphoreType::DMA, pl::SemaphoreType::REGULAR},
                               backend.options);
      const pl::Array x = iota_rows(16, kCols);
      CHECK(call(x).to_vector<float>() == x.to_vector<float>());
    }
  }

  TEST_CASE("mpmd_map: every point of every mesh runs once, with axis_index over its own mesh") {
    // Function 0 on a 2x2 mesh of devices, function 1 on 3 cores; each writes its coordinates into
    // its own rows of the shared output from a VMEM buffer of its own.
    for (const auto& backend : mpmd_backends()) {
      INFO("backend: " << std::string(backend.name));
      auto on_devices = [](pl::Ref o, pl::Ref buf) {
        const pl::Value x = pl::axis_index("x"), y = pl::axis_index("y");
        buf() = pl::broadcast_to((x * 10 + y).astype(pl::f32), {kBlock, kCols});
        pl::sync_copy(buf, o.at(pl::ds((x * 2 + y) * kBlock, kBlock)));
      };
      auto on_cores = [](pl::Ref o, pl::Ref buf) {
        const pl::Value c = pl::axis_index("core");
        buf() = pl::broadcast_to((c + 100).astype(pl::f32), {kBlock, kCols});
        pl::sync_copy(buf, o.at(pl::ds((c + 4) * kBlock, kBlock)));
      };
      auto call = pl::mpmd_map({{pl::Mesh({2, 2}, {"x", "y"}), on_devices}, {pl::CoreMesh("core", 3), on_cores}},
                               pl::ShapeDtype({7 * kBlock, kCols}, pl::f32), {pl::VMEM({kBlock, kCols}, pl::f32)},
                               backend.options);
      const pl::Array out = call();
      const float expected[] = {0, 1, 10, 11, 100, 101, 102};
      for (int64_t r = 0; r < 7; ++r) {
        CHECK(out.at<float>({r * kBlock, 0}) == expected[r]);
        CHECK(out.at<float>({r * kBlock + kBlock - 1, kCols - 1}) == expected[r]);
      }
    }
  }

  TEST_CASE("mpmd_map: core_map-style remote copies into another core's own VMEM") {
    // Each of 4 cores pushes its row block of x into the next core's VMEM inbox (a remote copy over
    // the core axis) and writes what it received: a rotation of the blocks. Semaphores are shared,
    // so each core uses its own entry of the arrays.
    for (const auto& backend : mpmd_backends()) {
      INFO("backend: " << std::string(backend.name));
      auto ring = [](pl::Ref x, pl::Ref o, pl::Ref outbox, pl::Ref inbox, pl::Ref sent, pl::Ref received) {
        const pl::Value c = pl::axis_index("core");
        const pl::Value next = (c + 1) % 4;
        pl::sync_copy(x.at(pl::ds(c * kBlock, kBlock)), outbox);
        auto copy = pl::make_async_remote_copy(outbox, inbox, sent.at(c), received.at(next), pl::DeviceId({{"core", next}}));
        copy.start();
        copy.wait_send();
        pl::make_async_copy(outbox, inbox, received.at(c)).wait();  // this core's inbox is full
        pl::sync_copy(inbox, o.at(pl::ds(c * kBlock, kBlock)));
      };
      auto call = pl::mpmd_map({{pl::CoreMesh("core", 4), ring}}, pl::ShapeDtype({4 * kBlock, kCols}, pl::f32),
                               {pl::VMEM({kBlock, kCols}, pl::f32), pl::VMEM({kBlock, kCols}, pl::f32),
                                pl::SemaphoreType::DMA({4}), pl::SemaphoreType::DMA({4})},
                               backend.options);
      const pl::Array x = iota_rows(4 * kBlock, kCols);
      const pl::Array out = call(x);
      for (int64_t c = 0; c < 4; ++c) {
        const int64_t from = (c + 3) % 4;
        CHECK(out.at<float>({c * kBlock, 0}) == x.at<float>({from * kBlock, 0}));
        CHECK(out.at<float>({c * kBlock + 5, 77}) == x.at<float>({from * kBlock + 5, 77}));
      }
    }
  }

  TEST_CASE("mpmd_map: input_output_aliases, and calls with new shapes trace again") {
    for (const auto& backend : mpmd_backends()) {
      INFO("backend: " << std::string(backend.name));
      // Two cores each add one to their half of an aliased array, in place.
      auto add_one = [](pl::Ref, pl::Ref o, pl::Ref buf) {
        const pl::Value c = pl::axis_index("core");
        const int64_t half = o.shape()[0] / 2;
        pl::sync_copy(o.at(pl::ds(c * half, half)), buf.at(pl::ds(0, half)));
        buf.at(pl::ds(0, half))() = buf.at(pl::ds(0, half))() + 1.0f;
        pl::sync_copy(buf.at(pl::ds(0, half)), o.at(pl::ds(c * half, half)));
      };
      pl::CallOptions options = backend.options;
      options.input_output_aliases = {{0, 0}};
      auto call = pl::mpmd_map({{pl::CoreMesh("core", 2), add_one}}, pl::ShapeDtype({16, kCols}, pl::f32),
                               {pl::VMEM({16, kCols}, pl::f32)}, options);
      const pl::Array x = iota_rows(16, kCols);
      const std::vector<float> before = x.to_vector<float>();
      const pl::Array out = call(x);
      CHECK(x.to_vector<float>() == before);  // the caller's array is not modified
      CHECK(out.at<float>({0, 3}) == before[3] + 1.0f);
      CHECK(out.at<float>({15, 127}) == before[15 * kCols + 127] + 1.0f);
    }
  }

  TEST_CASE("mpmd_map: each core runs an emit_pipeline over its half of the rows") {
    // The usual core_map pattern: the mesh splits the work, emit_pipeline streams each core's part
    // through VMEM blocks.
    for (const auto& backend : mpmd_backends()) {
      INFO("backend: " << std::string(backend.name));
      auto kernel = [](pl::Ref x, pl::Ref o) {
        const pl::Value c = pl::axis_index("core");
        auto rows = [&](pl::Value i) { return pl::idx(c * 4 + i, 0); };
        pl::emit_pipeline([](pl::Ref xb, pl::Ref ob) { ob() = xb() * 3.0f; },
                          {.grid = {4},
                           .in_specs = {pl::BlockSpec({kBlock, kCols}, rows)},
                           .out_specs = {pl::BlockSpec({kBlock, kCols}, rows)}})(x, o);
      };
      auto call = pl::mpmd_map({{pl::CoreMesh("core", 2), kernel}}, pl::ShapeDtype({8 * kBlock, kCols}, pl::f32), {},
                               backend.options);
      const pl::Array x = iota_rows(8 * kBlock, kCols);
      const pl::Array out = call(x);
      std::vector<float> want = x.to_vector<float>();
      for (float& v : want) v *= 3.0f;
      CHECK(out.to_vector<float>() == want);
    }
  }

  TEST_CASE("mpmd_map: a core_map inside shard_map reads the device mesh's axes and its own") {
    // JAX's shard_map(core_map(...)): each device of the mesh runs an mpmd_map over its cores; the
    // kernel's axis_index reads the device's coordinate on the shard_map's mesh and the core's.
    for (const auto& backend : mpmd_backends()) {
      INFO("backend: " << std::string(backend.name));
      auto kernel = [](pl::Ref x, pl::Ref o) {
        const pl::Value c = pl::axis_index("core");
        const pl::Value tag = (pl::axis_index("x") * 10 + c + pl::axis_size("x") * 100).astype(pl::f32);
        pl::run_scoped(
            [&](pl::Ref buf) {
              pl::sync_copy(x.at(pl::ds(c * kBlock, kBlock)), buf);
              buf() = buf() + tag;
              pl::sync_copy(buf, o.at(pl::ds(c * kBlock, kBlock)));
            },
            pl::VMEM({kBlock, kCols}, pl::f32));
      };
      auto per_device = pl::mpmd_map({{pl::CoreMesh("core", 2), kernel}}, pl::ShapeDtype({2 * kBlock, kCols}, pl::f32),
                                     {}, backend.options);
      auto f = pl::shard_map([&](const pl::Array& blk) { return per_device(blk); }, pl::Mesh({3}, {"x"}), {pl::P("x")},
                             {pl::P("x")});
      const pl::Array x = iota_rows(6 * kBlock, kCols);
      const pl::Array out = f(x);
      for (int64_t d = 0; d < 3; ++d)
        for (int64_t c = 0; c < 2; ++c) {
          const int64_t row = (2 * d + c) * kBlock + 3;
          CHECK(out.at<float>({row, 5}) == x.at<float>({row, 5}) + static_cast<float>(300 + 10 * d + c));
        }
    }
  }

  TEST_CASE("mpmd_map: the traced kernel takes the shared memory as parameters and allocates its own") {
    auto k = [](pl::Ref x, pl::Ref o, pl::Ref stage, pl::Ref sems, pl::Ref mine) {
      pl::sync_copy(x, mine);
      pl::sync_copy(mine, stage);
      pl::semaphore_signal(sems.at(0));
      pl::semaphore_wait(sems.at(0));
      pl::sync_copy(stage, o);
    };
    auto call = pl::mpmd_map({{pl::CoreMesh("core", 1), k}}, pl::ShapeDtype({8, kCols}, pl::f32),
                             {pl::HBM({8, kCols}, pl::f32), pl::SemaphoreType::REGULAR({2}), pl::VMEM({8, kCols}, pl::f32)});
    const std::vector<pl::Array> args{iota_rows(8, kCols)};
    const std::string ir = ir::print(call.traced(args, 0));
    CHECK(ir.find("(%0 \"input 0\": ref<8x128xf32, any>, %1 \"output 0\": ref<8x128xf32, any>, %2 \"scratch 0\": "
                  "ref<8x128xf32, hbm>, %3 \"scratch 1\": ref<2xsem, semaphore>)") != std::string::npos);
    CHECK(ir.find("alloc \"scratch 2\" : ref<8x128xf32, vmem>") != std::string::npos);
  }
}

TEST_SUITE("errors") {
  TEST_CASE("errors: mpmd_map's validation (the seed's: no pairs, conflicting axis sizes) and misuse") {
    auto k2 = [](pl::Ref, pl::Ref) {};
    int line = __LINE__ + 1;
    CHECK_THROWS_WITH_AS(pl::mpmd_map({}, pl::ShapeDtype({8}, pl::f32)),
                         Contains("mpmd_map `kernel`: at least one mesh/function pair is required"), UserError);
    try {
      line = __LINE__ + 1;
      pl::mpmd_map({{pl::CoreMesh("core", 2), k2}, {pl::Mesh({4, 2}, {"core", "sub"}), k2}},
                   pl::ShapeDtype({8}, pl::f32));
      FAIL("no error");
    } catch (const UserError& e) {
      CHECK(e.problem() == "mpmd_map `kernel`: conflicting size for axis `core`");
      CHECK(e.given() == "function 0's mesh CoreMesh(\"core\", 2) gives it 2, function 1's mesh Mesh('core': 4, 'sub': 2) gives it 4");
      CHECK(e.loc().line == static_cast<uint32_t>(line));
    }
    // The same axis in several meshes is fine when it has one size.
    CHECK_NOTHROW(pl::mpmd_map({{pl::CoreMesh("core", 2), k2}, {pl::Mesh({2, 4}, {"core", "sub"}), k2}},
                               pl::ShapeDtype({8}, pl::f32)));
    CHECK_THROWS_WITH_AS(pl::CoreMesh("core", 0), Contains("a CoreMesh needs a non-empty axis name and at least one core"),
                         UserError);
    pl::CallOptions semantics;
    semantics.compiler_params.dimension_semantics = {pl::parallel};
    CHECK_THROWS_WITH_AS(pl::mpmd_map({{pl::CoreMesh("core", 2), k2}}, pl::ShapeDtype({8}, pl::f32), {}, semantics),
                         Contains("dimension_semantics must be empty"), UserError);
    // A kernel of the wrong arity, found at the first call (the inputs count).
    auto call = pl::mpmd_map({{pl::CoreMesh("core", 1), k2}}, pl::ShapeDtype({8}, pl::f32), {pl::SemaphoreType::REGULAR});
    CHECK_THROWS_WITH_AS(call(pl::Array::zeros({8}, pl::f32)),
                         Contains("a kernel of 2 pl::Ref parameter(s); the mpmd_map provides 3 = 1 input(s) + 1 output(s) + 1 "
                                  "scratch"),
                         UserError);
    // The grid is the mesh: program_id has no grid to ask.
    auto with_program_id = [](pl::Ref o) { o[0] = pl::program_id(0); };
    CHECK_THROWS_WITH_AS(pl::mpmd_map({{pl::CoreMesh("core", 1), with_program_id}}, pl::ShapeDtype({8}, pl::i32))(),
                         Contains("pl::program_id in a kernel without a grid"), UserError);
    // Axes of another pair's mesh are not this kernel's.
    auto other_axis = [](pl::Ref o, pl::Ref buf) {
      buf() = pl::broadcast_to(pl::axis_index("sub"), {8});
      pl::sync_copy(buf, o);
    };
    CHECK_THROWS_WITH_AS(pl::mpmd_map({{pl::CoreMesh("core", 1), other_axis}}, pl::ShapeDtype({8}, pl::i32),
                                      {pl::VMEM({8}, pl::i32)})(),
                         Contains("the mesh has no axis `sub`"), UserError);
    // Output refs are whole arrays in ANY: reached by copies, not loads.
    auto loads_any = [](pl::Ref x, pl::Ref o) { o() = x(); };
    CHECK_THROWS_AS(pl::mpmd_map({{pl::CoreMesh("core", 1), loads_any}}, pl::ShapeDtype({8}, pl::f32))(
                        pl::Array::zeros({8}, pl::f32)),
                    UserError);
    // A kernel that returns a value (the seed's "should return None") does not compile: the
    // static_assert says "a kernel must return void: it writes its results through its output refs".
    // Here, the check it asserts on.
    auto returns_value = [](pl::Ref x, pl::Ref) { return x(); };
    auto not_over_refs = [](int) {};
    static_assert(pl::detail::kernel_form<decltype(returns_value)>() == pl::detail::KernelForm::returns_value);
    static_assert(pl::detail::kernel_form<decltype(not_over_refs)>() == pl::detail::KernelForm::not_over_refs);
    static_assert(pl::detail::kernel_form<decltype(k2)>() == pl::detail::KernelForm::ok);
  }

  TEST_CASE("errors: a core_map inside shard_map reaches only its own device, and shares no axis name with it") {
    // A signal toward another device's core needs every device's cores in one mpmd_map pair.
    auto signal_x = [](pl::Ref, pl::Ref, pl::Ref sem) {
      pl::semaphore_signal(sem, 1, pl::DeviceId({{"x", 0}}));
      pl::semaphore_wait(sem, 1);
    };
    const int line = __LINE__ - 3;
    auto inner = pl::mpmd_map({{pl::CoreMesh("core", 2), signal_x}}, pl::ShapeDtype({kBlock, kCols}, pl::f32),
                              {pl::SemaphoreType::REGULAR});
    auto outer = pl::shard_map([&](const pl::Array& blk) { return inner(blk); }, pl::Mesh({2}, {"x"}), {pl::P("x")},
                               {pl::P("x")});
    try {
      outer(iota_rows(2 * kBlock, kCols));
      FAIL("no error");
    } catch (const UserError& e) {
      CHECK(e.problem() ==
            "pl::semaphore_signal: axis `x` is an axis of the shard_map's mesh, which an mpmd_map inside it does not reach");
      CHECK(e.fix().find("{pl::Mesh(...), pl::CoreMesh(...), kernel}") != std::string::npos);
      CHECK(e.loc().line == static_cast<uint32_t>(line));
    }
    // The cores' axis may not reuse a name of the shard_map's mesh.
    auto copy = [](pl::Ref x, pl::Ref o) { pl::sync_copy(x, o); };
    auto same_name = pl::mpmd_map({{pl::CoreMesh("x", 1), copy}}, pl::ShapeDtype({kBlock, kCols}, pl::f32));
    CHECK_THROWS_WITH_AS(
        pl::shard_map([&](const pl::Array& blk) { return same_name(blk); }, pl::Mesh({2}, {"x"}), {pl::P("x")},
                      {pl::P("x")})(iota_rows(2 * kBlock, kCols)),
        Contains("axis `x` of function 0's mesh is also an axis of the shard_map's mesh"), UserError);
    // The next call works.
    auto fine = pl::mpmd_map({{pl::CoreMesh("core", 1), copy}}, pl::ShapeDtype({kBlock, kCols}, pl::f32));
    const pl::Array x = iota_rows(2 * kBlock, kCols);
    CHECK(pl::shard_map([&](const pl::Array& blk) { return fine(blk); }, pl::Mesh({2}, {"x"}), {pl::P("x")},
                        {pl::P("x")})(x).gather().to_vector<float>() == x.to_vector<float>());
  }

  TEST_CASE("errors: mpmd_map failures name the participant, deadlocks and shared semaphores left non-zero") {
    for (const auto& backend : mpmd_backends()) {
      INFO("backend: " << std::string(backend.name));
      pl::CallOptions options = backend.options;
      options.name = "pc";
      // The consumer waits for two signals; the producer sends one, then ends.
      auto producer = [](pl::Ref, pl::Ref ready) { pl::semaphore_signal(ready); };
      auto consumer = [](pl::Ref, pl::Ref ready) { pl::semaphore_wait(ready, 2); };
      auto deadlocked = pl::mpmd_map({{pl::CoreMesh("p", 1), producer}, {pl::CoreMesh("c", 1), consumer}},
                                     pl::ShapeDtype({8}, pl::f32), {pl::SemaphoreType::REGULAR}, options);
      try {
        deadlocked();
        FAIL("no error");
      } catch (const RuntimeError& e) {
        const std::string m = e.what();
        CHECK(m.find("deadlock: nothing can make progress in mpmd_map `pc`") != std::string::npos);
        CHECK(m.find("function 1 (CoreMesh(\"c\", 1)) at c=0: semaphore_wait on semaphore `scratch 0`") != std::string::npos);
        CHECK(m.find("holds 1 of 2") != std::string::npos);
        CHECK(m.find("function 0 (CoreMesh(\"p\", 1)) at p=0: finished the kernel") != std::string::npos);
      }
      // Signalled twice, waited once: the shared semaphore is 1 when everything ended.
      auto twice = [](pl::Ref, pl::Ref ready) { pl::semaphore_signal(ready, 2); };
      auto once = [](pl::Ref, pl::Ref ready) { pl::semaphore_wait(ready); };
      auto left = pl::mpmd_map({{pl::CoreMesh("p", 1), twice}, {pl::CoreMesh("c", 1), once}}, pl::ShapeDtype({8}, pl::f32),
                               {pl::SemaphoreType::REGULAR}, options);
      CHECK_THROWS_WITH_AS(left(),
                           Contains("semaphore `scratch 0` is 1 when mpmd_map `pc` ends: a semaphore the participants share "
                                    "must be back at zero by then (1 signalled that no semaphore_wait took)"),
                           RuntimeError);
      // An out-of-bounds copy on core 1 of the producers: the error names it; the consumer left
      // waiting fails too, as a consequence, and is not what the caller sees.
      auto bad = [](pl::Ref x, pl::Ref, pl::Ref ready, pl::Ref buf) {
        const pl::Value p = pl::axis_index("p");
        pl::sync_copy(x.at(pl::ds(p * 12, 8)), buf);
        pl::semaphore_signal(ready);
      };
      auto waits = [](pl::Ref, pl::Ref, pl::Ref ready, pl::Ref) { pl::semaphore_wait(ready, 2); };
      auto failing = pl::mpmd_map({{pl::CoreMesh("p", 2), bad}, {pl::CoreMesh("c", 1), waits}},
                                  pl::ShapeDtype({8}, pl::f32), {pl::SemaphoreType::REGULAR, pl::VMEM({8}, pl::f32)},
                                  options);
      try {
        failing(pl::Array::zeros({16}, pl::f32));
        FAIL("no error");
      } catch (const RuntimeError& e) {
        const std::string m = e.what();
        CHECK(m.find("mpmd_map `pc`, function 0 (CoreMesh(\"p\", 2)) at p=1:") == 0);
        CHECK(m.find("out-of-bounds slice of `input 0`: ds(12, 8)") != std::string::npos);
        CHECK(e.where().grid_point == std::vector<int64_t>{1});
      }
      // Nothing is poisoned: the working call runs after the failures.
      auto call = producer_consumer(3, backend.options);
      const pl::Array x = iota_rows(3 * kBlock, kCols);
      CHECK(call(x).at<float>({17, 5}) == 2.0f * x.at<float>({17, 5}) + 1.0f);
    }
  }
}
