// expand_pipelines and the pass pipeline as IR in, IR out: each test parses the traced golden IR of
// a kernel (which dsl_tests checks the front end still produces), runs the pass and compares with
// the golden output.
#include <doctest/doctest.h>

#include "jit/ir/parser.h"
#include "jit/ir/printer.h"
#include "jit/ir/verifier.h"
#include "jit/lowering/canonicalize.h"
#include "jit/lowering/expand_pipelines.h"
#include "jit/lowering/lowering.h"
#include "jit/lowering/memory_budget.h"
#include "tests/support/golden.h"

using namespace tessera;

namespace {

ir::Function traced(const std::string& golden) { return ir::parse(testing::golden_text(golden)); }

std::string lowered(const std::string& traced_golden) {
  return ir::print(passes::lower(traced(traced_golden), passes::LoweringOptions{}));
}

}  // namespace

TEST_SUITE("passes") {
  TEST_CASE("expand_pipelines: the tiled matmul (traced -> expanded golden IR)") {
    ir::Function expanded = passes::expand_pipelines(traced("matmul.traced.ir"));
    CHECK_NOTHROW(ir::verify(expanded));
    testing::check_golden("matmul.expanded.ir", ir::print(expanded));
    // After expansion no pipeline or grid query is left.
    for (const ir::Op& op : expanded.ops) {
      CHECK(op.kind != ir::OpKind::Pipeline);
      CHECK(op.kind != ir::OpKind::ProgramId);
      CHECK(op.kind != ir::OpKind::NumPrograms);
    }
  }

  TEST_CASE("expand_pipelines: scalar prefetch, squeezed dims and ANY operands (golden IR)") {
    ir::Function expanded = passes::canonicalize(passes::expand_pipelines(traced("gather.traced.ir")));
    CHECK_NOTHROW(ir::verify(expanded));
    testing::check_golden("gather.lowered.ir", ir::print(expanded));
  }

  TEST_CASE("expand_pipelines: inputs that are written or have edge blocks are copied, read-only ones read in place") {
    // x's blocks overhang its edge (10 rows, blocks of 4) and y is written by the kernel: both are
    // fetched into VMEM when their block index changes. z is only read and divides evenly: a view.
    const std::string text = lowered("copies.traced.ir");
    testing::check_golden("copies.lowered.ir", text);
    CHECK(text.find("fetch_block \"input 0\"") != std::string::npos);
    CHECK(text.find("fetch_block \"input 1\"") != std::string::npos);
    CHECK(text.find("block_view \"input 2\"") != std::string::npos);
  }

  TEST_CASE("expand_pipelines: the lowered IR is what the pass pipeline produces") {
    const std::string text = lowered("matmul.traced.ir");
    testing::check_golden("matmul.lowered.ir", text);
    CHECK(text.find("block_view \"input 0\"") != std::string::npos);
    CHECK(text.find("writeback_block \"output 0\"") != std::string::npos);
  }

  TEST_CASE("expand_pipelines: an emit_pipeline with a ring of block buffers (golden IR)") {
    // The input is written by the body, so it is copied through a ring of pl::Buffered(3) buffers
    // fetched two steps ahead; the output has two buffers written back asynchronously.
    const std::string text = lowered("ring.traced.ir");
    testing::check_golden("ring.lowered.ir", text);
    CHECK(text.find("alloc \"emit_pipeline input 0 blocks\" : ref<3x8xf32, vmem>") != std::string::npos);
    CHECK(text.find("alloc \"emit_pipeline output 0 copies\" : ref<2xdma_sem, semaphore>") != std::string::npos);
    CHECK(text.find("pipeline_begin #1") != std::string::npos);
    CHECK(text.find("grid_point %") != std::string::npos);
  }

  TEST_CASE("expand_pipelines: an emit_pipeline input nothing writes is read in place, one written elsewhere is copied") {
    // Two emit_pipelines: the first reads the kernel's input x into tmp, the second tmp into o.
    const std::string text = lowered("in_place.traced.ir");
    CHECK(text.find("block_view \"emit_pipeline input 0\" #1") != std::string::npos);
    CHECK(text.find("fetch_block \"emit_pipeline input 0\" #2") != std::string::npos);
  }
}

namespace {

// copies.traced.ir with every `from` replaced by `to`, lowered with or without in-place outputs.
std::string lowered_copies(const std::vector<std::pair<std::string, std::string>>& edits, bool outputs_in_place) {
  std::string text = testing::golden_text("copies.traced.ir");
  for (const auto& [from, to] : edits)
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
      text.replace(at, from.size(), to);
  return ir::print(passes::lower(ir::parse(text), passes::LoweringOptions{.outputs_in_place = outputs_in_place}));
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_SUITE("passes") {
  TEST_CASE("expand_pipelines: an output block is written in place only where no copy could be told from it") {
    // copies.traced.ir's output (and input 0) have 10 elements in blocks of 4; with 12 they tile.
    const std::vector<std::pair<std::string, std::string>> tiled{{"ref<10xf32", "ref<12xf32"}};
    SUBCASE("blocks that tile the kernel's own output: a view of the array, written back from itself") {
      const std::string text = lowered_copies(tiled, true);
      CHECK(has(text, "block_view \"output 0\" %3 at ["));
      CHECK_FALSE(has(text, "alloc \"output 0 block\""));
      // The write-back stays, from the view onto its own array, so a revisit is still checked.
      const size_t view = text.find(" = block_view \"output 0\"");
      REQUIRE(view != std::string::npos);
      const std::string id = text.substr(text.rfind('%', view), view - text.rfind('%', view));
      CHECK(has(text, "writeback_block \"output 0\" " + id + " -> %3 at ["));
    }
    SUBCASE("the interpreter's lowering keeps the buffer") {
      const std::string text = lowered_copies(tiled, false);
      CHECK(has(text, "alloc \"output 0 block\" : ref<4xf32, vmem>"));
      CHECK_FALSE(has(text, "block_view \"output 0\""));
    }
    SUBCASE("partial edge blocks are copied: writes past the edge must be dropped") {
      const std::string text = lowered_copies({}, true);
      CHECK(has(text, "alloc \"output 0 block\" : ref<4xf32, vmem>"));
      CHECK_FALSE(has(text, "block_view \"output 0\""));
    }
    SUBCASE("an output aliased to an input is copied: fetches of the input read the array it writes") {
      const std::string text = lowered_copies({{"ref<10xf32", "ref<12xf32"}, {"\"output 0\" block=[4] vmem}", "\"output 0\" block=[4] vmem aliased}"}}, true);
      CHECK(has(text, "alloc \"output 0 block\" : ref<4xf32, vmem>"));
      CHECK_FALSE(has(text, "block_view \"output 0\""));
    }
    SUBCASE("an in-place output block still counts against the VMEM budget, as its buffer does") {
      CHECK(passes::vmem_bytes(ir::parse(lowered_copies(tiled, true))) ==
            passes::vmem_bytes(ir::parse(lowered_copies(tiled, false))));
      CHECK(passes::vmem_bytes(ir::parse(lowered_copies(tiled, true))) == 2 * 4 * 4);  // input 1's block and the output's
    }
  }

  TEST_CASE("expand_pipelines: the outputs of an emit_pipeline keep their buffers") {
    // The inner pipelines' output arrays are the kernel's own refs, which its body may reach otherwise.
    const std::string text = lowered("in_place.traced.ir");
    CHECK(has(text, "alloc \"emit_pipeline output 0 blocks\""));
    CHECK_FALSE(has(text, "block_view \"emit_pipeline output 0\""));
  }
}
