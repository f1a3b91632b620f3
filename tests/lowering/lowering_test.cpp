#include <doctest/doctest.h>

#include <cstdlib>

#include "jit/ir/printer.h"
#include "jit/lowering/lowering.h"
#include "jit/lowering/memory_budget.h"
#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;

namespace {
// The kernel writes its input block, so the pipeline copies it into VMEM (three VMEM buffers).
void copy_kernel(pl::Ref x, pl::Ref o, pl::Ref scratch) {
  x() = x() * 2.0f;
  scratch() = x();
  o() = scratch();
}

auto copy_call(int64_t block, std::optional<int64_t> vmem_limit = std::nullopt) {
  auto spec = pl::BlockSpec({block, block}, [](pl::Value i) { return pl::idx(i, 0); });
  pl::CallOptions options;
  options.compiler_params.vmem_limit_bytes = vmem_limit;
  options.name = "copy";
  return pl::pallas_call(copy_kernel,
                         pl::GridSpec{.grid = {1}, .in_specs = {spec}, .out_specs = {spec},
                                      .scratch_shapes = {pl::VMEM({block, block}, pl::f32)}},
                         pl::ShapeDtype({block, block}, pl::f32), options);
}
}  // namespace

TEST_SUITE("passes") {
  TEST_CASE("lowering: passes run in the documented order") {
    CHECK(passes::pass_names() ==
          std::vector<std::string>{"canonicalize", "expand_pipelines", "canonicalize", "fuse_dot_accumulate",
                                   "check_vmem_budget"});
  }

  TEST_CASE("lowering: VMEM use is counted per core and checked against the limit") {
    auto call = copy_call(256);
    pl::Array x = pl::Array::zeros({256, 256}, pl::f32);
    CHECK(passes::vmem_bytes(call.lowered({x})) == 3 * 256 * 256 * 4);
    auto small = copy_call(256, /*vmem_limit=*/512 * 1024);
    CHECK_THROWS_WITH_AS(small(x), doctest::Contains("kernel `copy` needs more VMEM per core than it may use"), UserError);
    CHECK_THROWS_WITH_AS(small(x), doctest::Contains("0.75 MiB of VMEM buffers against a limit of 0.50 MiB"), UserError);
    CHECK_THROWS_WITH_AS(small(x), doctest::Contains("0.25 MiB  scratch 0 (ref<256x256xf32, vmem>"), UserError);
    CHECK_THROWS_WITH_AS(small(x), doctest::Contains("0.25 MiB  input 0 block"), UserError);
    CHECK_THROWS_WITH_AS(small(x), doctest::Contains("raise CompilerParams::vmem_limit_bytes"), UserError);
    // The default limit is 64 MiB: a 4096 x 4096 f32 block (64 MiB) plus its scratch does not fit.
    auto big = copy_call(4096);
    CHECK_THROWS_WITH_AS(big(pl::Array::zeros({4096, 4096}, pl::f32)), doctest::Contains("against a limit of 64.00 MiB"),
                         UserError);
  }

  TEST_CASE("lowering: TESSERA_DUMP_IR prints the traced IR, or the IR after a named pass") {
    pl::Array x = pl::Array::zeros({8, 8}, pl::f32);
    setenv("TESSERA_DUMP_IR", "1", 1);
    std::string traced = testing::capture_stderr([&] { copy_call(8)(x); });
    setenv("TESSERA_DUMP_IR", "expand_pipelines", 1);
    std::string expanded = testing::capture_stderr([&] { copy_call(8)(x); });
    setenv("TESSERA_DUMP_IR", "all", 1);
    std::string all = testing::capture_stderr([&] { copy_call(8)(x); });
    unsetenv("TESSERA_DUMP_IR");
    setenv("TESSERA_TIME_PASSES", "1", 1);
    std::string times = testing::capture_stderr([&] { copy_call(8)(x); });
    unsetenv("TESSERA_TIME_PASSES");
    CHECK(traced.find("// ---- tessera IR of `copy` as traced ----") != std::string::npos);
    CHECK(traced.find("pipeline grid=[1]") != std::string::npos);
    CHECK(expanded.find("as traced") == std::string::npos);
    CHECK(expanded.find("after expand_pipelines") != std::string::npos);
    CHECK(expanded.find("fetch_block") != std::string::npos);
    CHECK(all.find("after check_vmem_budget") != std::string::npos);
    CHECK(times.find("tessera pass times for `copy`") != std::string::npos);
    CHECK(times.find("expand_pipelines") != std::string::npos);
  }
}
