#include <doctest/doctest.h>
#include <fmt/format.h>

#include <limits>

#include "jit/ir/printer.h"
#include "jit/ir/verifier.h"
#include "tests/ir/sample_kernel.h"
#include "tests/support/golden.h"

using namespace tessera;
using namespace tessera::ir;

TEST_SUITE("ir") {
  TEST_CASE("printer: a kernel using every op prints as the golden text and verifies") {
    Function fn = testing::kernel_with_every_op();
    CHECK_NOTHROW(verify(fn));
    std::string text = print(fn);
    testing::check_golden("every_op.ir", text);
    for (OpKind k : all_op_kinds()) {
      INFO("op " << mnemonic(k));
      CHECK(text.find(std::string(mnemonic(k))) != std::string::npos);
    }
  }

  TEST_CASE("printer: output is deterministic and independent of value ids") {
    Function a = testing::kernel_with_every_op();
    Function b = testing::kernel_with_every_op();
    CHECK(print(a) == print(b));
  }

  TEST_CASE("printer: literals print by dtype") {
    CHECK(literal_str(Literal::of_int(3), DType::f32) == "3.0");
    CHECK(literal_str(Literal::of_float(0.5), DType::bf16) == "0.5");
    CHECK(literal_str(Literal::of_int(1), DType::i1) == "true");
    CHECK(literal_str(Literal::of_int(-7), DType::i32) == "-7");
    CHECK(literal_str(Literal::of_float(std::numeric_limits<double>::quiet_NaN()), DType::f32) == "nan");
    CHECK(literal_str(Literal::of_float(-std::numeric_limits<double>::infinity()), DType::f32) == "-inf");
  }

  TEST_CASE("printer: source locations are printed on request") {
    Function fn;
    Builder b(fn, "k");
    SourceLoc here = std::source_location::current();
    b.create_value(OpKind::Constant, {}, Type::scalar(DType::i32), Literal::of_int(1), here);
    std::string with = print(fn, {.locations = true});
    CHECK(with.find(fmt::format("// {}", here.str())) != std::string::npos);
    CHECK(print(fn).find("//") == std::string::npos);
  }
}
