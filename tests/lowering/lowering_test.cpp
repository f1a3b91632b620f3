// The pass pipeline (passes::lower): its order, the VMEM budget and the IR dumps, on the traced IR of
// a kernel that copies its input block (golden copy.traced.ir, at several block sizes).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "jit/ir/parser.h"
#include "jit/ir/printer.h"
#include "jit/lowering/lowering.h"
#include "jit/lowering/memory_budget.h"
#include "runtime/config.h"
#include "tests/support/capture.h"
#include "tests/support/golden.h"

using namespace tessera;

namespace {

// The kernel writes its input block, so the pipeline copies it into VMEM (three VMEM buffers of
// block x block f32: the input's, the output's and the scratch). The golden text has block 8.
ir::Function copy_kernel(int64_t block) {
  std::string text = testing::golden_text("copy.traced.ir");
  auto replace_all = [&](const std::string& from, const std::string& to) {
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
      text.replace(at, from.size(), to);
  };
  replace_all("8x8x", fmt::format("{}x{}x", block, block));
  replace_all("block=[8, 8]", fmt::format("block=[{}, {}]", block, block));
  return ir::parse(text);
}

ir::Function lower(int64_t block, int64_t vmem_limit = passes::LoweringOptions{}.vmem_limit_bytes) {
  return passes::lower(copy_kernel(block), passes::LoweringOptions{.vmem_limit_bytes = vmem_limit});
}

}  // namespace

TEST_SUITE("passes") {
  TEST_CASE("lowering: passes run in the documented order") {
    CHECK(passes::pass_names() ==
          std::vector<std::string>{"canonicalize", "expand_pipelines", "canonicalize", "fuse_dot_accumulate",
                                   "check_vmem_budget"});
  }

  TEST_CASE("lowering: VMEM use is counted per core and checked against the limit") {
    CHECK(ir::print(copy_kernel(8)) == testing::golden_text("copy.traced.ir"));
    CHECK(passes::vmem_bytes(lower(256)) == 3 * 256 * 256 * 4);
    const int64_t small = 512 * 1024;
    CHECK_THROWS_WITH_AS(lower(256, small), doctest::Contains("kernel `copy` needs more VMEM per core than it may use"),
                         UserError);
    CHECK_THROWS_WITH_AS(lower(256, small), doctest::Contains("0.75 MiB of VMEM buffers against a limit of 0.50 MiB"),
                         UserError);
    CHECK_THROWS_WITH_AS(lower(256, small), doctest::Contains("0.25 MiB  scratch 0 (ref<256x256xf32, vmem>"), UserError);
    CHECK_THROWS_WITH_AS(lower(256, small), doctest::Contains("0.25 MiB  input 0 block"), UserError);
    CHECK_THROWS_WITH_AS(lower(256, small), doctest::Contains("raise CompilerParams::vmem_limit_bytes"), UserError);
    // The default limit is 64 MiB: a 4096 x 4096 f32 block (64 MiB) plus its scratch does not fit.
    CHECK_THROWS_WITH_AS(lower(4096), doctest::Contains("against a limit of 64.00 MiB"), UserError);
  }

  TEST_CASE("lowering: TESSERA_DUMP_IR prints the traced IR, or the IR after a named pass") {
    setenv("TESSERA_DUMP_IR", "1", 1);
    std::string traced = testing::capture_stderr([&] { lower(8); });
    setenv("TESSERA_DUMP_IR", "expand_pipelines", 1);
    std::string expanded = testing::capture_stderr([&] { lower(8); });
    setenv("TESSERA_DUMP_IR", "all", 1);
    std::string all = testing::capture_stderr([&] { lower(8); });
    unsetenv("TESSERA_DUMP_IR");
    setenv("TESSERA_TIME_PASSES", "1", 1);
    std::string times = testing::capture_stderr([&] { lower(8); });
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

  TEST_CASE("lowering: TESSERA_DUMP_IR accepts the passes' names, and an unknown one fails the call") {
    // The configuration declares the pass names itself (the runtime cannot see the passes): they must
    // agree. A pass may run twice (canonicalize does).
    std::set<std::string> declared;
    for (std::string_view v : config::variable(config::Var::dump_ir).choices)
      if (v != "0" && v != "1" && v != "all") declared.emplace(v);
    const std::vector<std::string>& names = passes::pass_names();
    CHECK(declared == std::set<std::string>(names.begin(), names.end()));

    setenv("TESSERA_DUMP_IR", "expand", 1);
    CHECK_THROWS_WITH_AS(lower(8), doctest::Contains("TESSERA_DUMP_IR=expand"), UserError);
    unsetenv("TESSERA_DUMP_IR");
    CHECK_NOTHROW(lower(8));
  }
}
