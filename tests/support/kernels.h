// What only the tests that go through the front end need (dsl_tests, ops_tests): the backends a
// semantic test runs in and a capture of debug_print lines. Helpers that do not need the front end
// live beside it (capture.h, cache_dir.h, golden.h) and are included by the suites of lower layers.
#pragma once

#include <tessera/tessera.hpp>

#include <functional>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "tests/support/capture.h"

namespace tessera::testing {

namespace pl = tessera;

// An m x n f32 array of small distinct steps (exact in f32, so results compare bit for bit).
inline pl::Array ramp(int64_t m, int64_t n) {
  std::vector<float> v(static_cast<size_t>(m * n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 251) * 0.25f;
  return pl::Array::from_vector(v, {m, n});
}

// Options selecting the interpreter.
inline pl::CallOptions interpret(pl::InterpretParams params = {}) {
  pl::CallOptions o;
  o.interpret = params;
  return o;
}

// A backend a semantic test runs in.
struct Backend {
  const char* name;
  pl::CallOptions options;
};
// Compiled (the default) and interpreted (with `params`).
inline std::vector<Backend> backends(pl::InterpretParams params = {}) {
  return {{"compiled", pl::CallOptions{}}, {"interpret", interpret(params)}};
}
// Runs body(options) once per backend; failures name the backend.
template <class F>
void for_each_backend(F body, pl::InterpretParams params = {}) {
  for (const Backend& b : backends(params)) {
    INFO("backend: " << std::string(b.name));
    body(b.options);
  }
}
// Runs body(options) compiled, with every output compared against the interpreter's, then
// interpreted with `params` and race detection; a race reported after either fails the test.
template <class F>
void for_each_checked_backend(F body, pl::InterpretParams params) {
  params.detect_races = true;
  for (const Backend& b : {Backend{"compiled", pl::CallOptions{.check_against_interpreter = true}},
                           Backend{"interpret", interpret(params)}}) {
    INFO("backend: " << std::string(b.name));
    body(b.options);
    for (const pl::RaceReport& r : pl::race_reports()) FAIL_CHECK(r.message);
  }
}
// The same, interpreted with copies completed at their waits in the schedule of `seed` (so a
// missing wait shows).
template <class F>
void for_each_checked_backend(F body, uint64_t seed) {
  pl::InterpretParams p;
  p.dma_execution_mode = pl::DmaExecutionMode::on_wait;
  p.random_seed = seed;
  for_each_checked_backend(body, p);
}
// The same options with `other` fields taken from `base` (for calls that set their own fields).
inline pl::CallOptions with_backend(pl::CallOptions options, const pl::CallOptions& backend) {
  options.interpret = backend.interpret;
  return options;
}

// o = 2 * the sum over k of x's blocks (i, k), on a grid (row_blocks, k_blocks) of br x bc blocks:
// output block (i, 0) stays while the arbitrary axis k runs and accumulates; the rows are parallel.
inline auto accumulate_over_k(int64_t br, int64_t bc, int64_t row_blocks, int64_t k_blocks, const pl::CallOptions& backend) {
  pl::CallOptions options = backend;
  options.compiler_params.dimension_semantics = {pl::parallel, pl::arbitrary};
  return pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        pl::when(pl::program_id(1) == 0, [&] { o() = pl::zeros_like(o); });
        o() += x() * 2.0f;
      },
      pl::GridSpec{.grid = {row_blocks, k_blocks},
                   .in_specs = {pl::BlockSpec({br, bc}, [](pl::Value i, pl::Value k) { return pl::idx(i, k); })},
                   .out_specs = {pl::BlockSpec({br, bc}, [](pl::Value i, pl::Value) { return pl::idx(i, 0); })}},
      std::vector<pl::ShapeDtype>{pl::ShapeDtype({br * row_blocks, bc}, pl::f32)}, options);
}

// A kernel that talks to other devices, as a function over the whole array that runs it at every
// device of `mesh` on that device's shard (`spec` for the input and the output alike). Its one input
// and one output stay in HBM (pl::ANY), where remote copies reach them; `scratch` is usually
// semaphores.
template <class K>
auto on_every_device(K kernel, const pl::Mesh& mesh, const pl::P& spec, std::vector<pl::ScratchShape> scratch,
                     const pl::CallOptions& options) {
  return pl::shard_map(
      [=](const pl::Array& block) {
        return pl::pallas_call(kernel,
                               pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                                            .out_specs = {pl::BlockSpec(pl::ANY)},
                                            .scratch_shapes = scratch},
                               pl::ShapeDtype(block.shape(), block.dtype()), options)(block);
      },
      mesh, {spec}, {spec});
}

// A sanitizer's operator new aborts the process on a request it cannot serve instead of throwing
// std::bad_alloc: tests of allocations the machine refuses run only without one.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kRefusedAllocationsThrow = false;
#else
inline constexpr bool kRefusedAllocationsThrow = true;
#endif

// Under ThreadSanitizer: a kernel whose cores or devices race by construction (the race detector's
// tests) makes the simulating threads race on its memory, which TSan rightly reports; such runs are
// left out there (every other build checks what the race detector says of them).
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif

// Collects debug_print lines while alive.
class PrintCapture {
 public:
  PrintCapture() {
    pl::rt::set_debug_print_sink([this](std::string_view line) { lines.emplace_back(line); });
  }
  ~PrintCapture() { pl::rt::set_debug_print_sink(nullptr); }
  std::vector<std::string> lines;
};

// The text (what()) of the RuntimeError `run` throws; fails the test when it throws none.
inline std::string runtime_error_of(const std::function<void()>& run) {
  try {
    run();
  } catch (const RuntimeError& e) {
    return e.what();
  }
  FAIL("no RuntimeError");
  return {};
}

// An mpmd_map of two cores over an output that starts as `x` (aliased, 2 * rows rows): core 0 moves
// the second half of the rows into the first, core 1 copies the first half into the second. With
// `ordered`, core 1 waits on a shared semaphore until core 0 is done (every schedule gives the
// second half twice); without, core 1 reads the first half before or after core 0's copy, as the
// schedule has it.
inline pl::Array core_handoff(const pl::Array& x, int64_t rows, pl::CallOptions options, bool ordered) {
  options.input_output_aliases = {{0, 0}};
  auto kernel = [rows, ordered](pl::Ref, pl::Ref out, pl::Ref done) {
    const pl::Value c = pl::axis_index("core");
    pl::when(c == 0, [&] {
      pl::sync_copy(out.at(pl::ds(rows, rows)), out.at(pl::ds(0, rows)));
      if (ordered) pl::semaphore_signal(done);
    });
    pl::when(c == 1, [&] {
      if (ordered) pl::semaphore_wait(done);
      pl::sync_copy(out.at(pl::ds(0, rows)), out.at(pl::ds(rows, rows)));
    });
  };
  return pl::mpmd_map({{pl::CoreMesh("core", 2), kernel}}, pl::ShapeDtype(x.shape(), x.dtype()),
                      {pl::SemaphoreType::REGULAR}, options)(x);
}

}  // namespace tessera::testing
