// The IR text parser: every golden file and the every-op kernel read back to the same text, the
// pieces the text leaves implicit come back as the front end makes them, and malformed text fails
// with the line, column and what was expected.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "jit/ir/parser.h"
#include "jit/ir/printer.h"
#include "jit/ir/verifier.h"
#include "tests/ir/sample_kernel.h"

using namespace tessera;
using namespace tessera::ir;
namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string parse_error(std::string_view text) {
  try {
    parse(text);
  } catch (const UserError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_SUITE("ir") {
  TEST_CASE("parser: every golden IR file reads back to the same text and verifies") {
    int files = 0;
    for (const auto& entry : fs::directory_iterator(TESSERA_GOLDEN_DIR)) {
      if (entry.path().extension() != ".ir") continue;
      ++files;
      INFO("golden file: " << entry.path().string());
      const std::string text = read_text(entry.path());
      Function fn = parse(text);
      CHECK_NOTHROW(verify(fn, "parser"));
      CHECK(print(fn) == text);
    }
    CHECK(files >= 9);
  }

  TEST_CASE("parser: the kernel using every op reads back to the same text, with and without locations") {
    const Function built = testing::kernel_with_every_op();
    const std::string text = print(built);
    Function fn = parse(text);
    CHECK_NOTHROW(verify(fn, "parser"));
    CHECK(print(fn) == text);
    // The same ops, regions and values, and the attributes the printer spells out.
    CHECK(fn.ops.size() == built.ops.size());
    CHECK(fn.regions.size() == built.regions.size());
    CHECK(fn.values.size() == built.values.size());

    Function located = built;
    static const char* file = "kernels/every_op.cpp";
    uint32_t line = 10;
    for (Op& op : located.ops) op.loc = SourceLoc{}, op.loc.file = file, op.loc.line = line++;
    const std::string with_locations = print(located, {.locations = true});
    Function back = parse(with_locations);
    CHECK(print(back, {.locations = true}) == with_locations);
    CHECK(print(back) == text);
  }

  TEST_CASE("parser: what the text leaves implicit comes back as the front end makes it") {
    Function fn = parse(read_text(fs::path(TESSERA_GOLDEN_DIR) / "every_op.ir"));
    const Function built = testing::kernel_with_every_op();
    auto first = [](const Function& f, OpKind k) -> const Op& {
      for (const Op& op : f.ops)
        if (op.kind == k) return op;
      FAIL("no op " << mnemonic(k));
      return f.ops.front();
    };
    // Outputs of a pipeline are named as such; whole operands are arrays reached by copies.
    CHECK(std::get<PipelineAttr>(first(fn, OpKind::Pipeline).attr) ==
          std::get<PipelineAttr>(first(built, OpKind::Pipeline).attr));
    // Every attribute kind reads back equal to the builder's.
    for (OpKind k : {OpKind::Constant, OpKind::ProgramId, OpKind::Transpose, OpKind::DotGeneral, OpKind::View,
                     OpKind::Alloc, OpKind::DmaWait, OpKind::RemoteDmaStart, OpKind::RemoteSemaphoreSignal,
                     OpKind::GridPoint, OpKind::PipelineBegin, OpKind::DebugPrint}) {
      INFO("op " << mnemonic(k));
      CHECK(first(fn, k).attr == first(built, k).attr);
    }
    // An if without an else branch gets one that only yields; regions end with their yield.
    Function m = parse(read_text(fs::path(TESSERA_GOLDEN_DIR) / "matmul.traced.ir"));
    const Op& iff = first(m, OpKind::If);
    REQUIRE(iff.regions.size() == 2);
    CHECK(m.region(iff.regions[1]).ops.size() == 1);
    CHECK(m.op(m.region(iff.regions[0]).ops.back()).kind == OpKind::Yield);
    const auto& pa = std::get<PipelineAttr>(first(m, OpKind::Pipeline).attr);
    REQUIRE(pa.operands.size() == 3);
    CHECK(!pa.operands[0].is_output);
    CHECK(!pa.operands[1].is_output);
    CHECK(pa.operands[2].is_output);
    CHECK(m.values[m.params()[0]].name == "input 0");
    // Block copies of different operands stay distinguishable (the runtime's revisit check keys on it).
    Function ring = parse(read_text(fs::path(TESSERA_GOLDEN_DIR) / "ring.lowered.ir"));
    const auto& fetch = std::get<BlockCopyAttr>(first(ring, OpKind::FetchBlock).attr);
    const auto& writeback = std::get<BlockCopyAttr>(first(ring, OpKind::WritebackBlock).attr);
    CHECK(fetch.pipeline == 1);
    CHECK(fetch.operand != writeback.operand);
  }

  TEST_CASE("parser: literals of every dtype read back exactly") {
    const std::string text =
        "kernel @k(%0: ref<f64, smem>) {\n"
        "  %1 = constant 0.1 : f64\n"
        "  %2 = constant -3.5e-07 : f32\n"
        "  %3 = constant 1e+20 : bf16\n"
        "  %4 = constant nan : f32\n"
        "  %5 = constant -inf : f16\n"
        "  %6 = constant -9223372036854775807 : i64\n"
        "  %7 = constant false : 2x3xi1\n"
        "  %8 = constant 7 : 4xi8\n"
        "  %9 = constant 12 : index\n"
        "  %10 = constant -32768 : 2xi16\n"
        "  %11 = constant 255 : u8\n"
        "  %12 = constant 65535 : 3x4xu16\n"
        "  %13 = constant 4294967295 : u32\n"
        "  %14 = constant 18446744073709551615 : 2xu64\n"
        "}\n";
    CHECK(print(parse(text)) == text);
  }

  TEST_CASE("parser: malformed text names the line, the column and what was expected") {
    CHECK(parse_error("kernel k() {\n}\n").find("line 1, column 8: expected `@`") != std::string::npos);
    CHECK(parse_error("kernel @k() {\n  %1 = frobnicate %0 : f32\n}\n")
              .find("line 2, column 8: expected an op mnemonic (ops.def)") != std::string::npos);
    CHECK(parse_error("kernel @k(%0: f32) {\n  %1 = add %0, %2 : f32\n}\n")
              .find("line 2, column 16: expected a value defined before this use (%2 is not)") != std::string::npos);
    CHECK(parse_error("kernel @k(%0: ref<4xf33, vmem>) {\n}\n")
              .find("line 1, column 21: expected a dtype") != std::string::npos);
    CHECK(parse_error("kernel @k(%0: ref<4xf32, dram>) {\n}\n")
              .find("line 1, column 26: expected a memory space") != std::string::npos);
    CHECK(parse_error("kernel @k(%0: f32) {\n  %1 = add %0, %0\n}\n")
              .find("line 2, column 8: expected one result type per result (0 types for 1 results)") != std::string::npos);
    CHECK(parse_error("kernel @k(%0: f32) {\n  %0 = neg %0 : f32\n}\n")
              .find("expected a new value name (%0 is defined twice)") != std::string::npos);
    CHECK(parse_error("kernel @k() {\n  %1 = constant 1.5 : i32\n}\n")
              .find("line 2, column 17: expected an integer literal") != std::string::npos);
    CHECK(parse_error("kernel @k() {\n  %1 = program_id speed=2 : i32\n}\n")
              .find("line 2, column 19: expected an attribute key") != std::string::npos);
    CHECK(parse_error("kernel @k() {\n").find("line 2, column 1: expected `}` closing a region") != std::string::npos);
    CHECK(parse_error("kernel @k() {\n}\nkernel @j() {\n}\n")
              .find("line 3, column 1: expected the end of the text") != std::string::npos);
    // The message shows the offending line.
    CHECK(parse_error("kernel @k(%0: f32) {\n  %1 = add %0, %2 : f32\n}\n").find("in line 2:   %1 = add %0, %2 : f32") !=
          std::string::npos);
  }
}
