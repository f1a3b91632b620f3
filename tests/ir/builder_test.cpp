#include <doctest/doctest.h>

#include "jit/ir/builder.h"
#include <set>

#include "jit/ir/printer.h"

using namespace tessera;
using namespace tessera::ir;

TEST_SUITE("ir") {
  TEST_CASE("builder: identical pure ops are hash-consed, side effects are not") {
    Function fn;
    Builder b(fn, "k");
    ValueId x = b.add_param(Type::scalar(DType::i32), "x");
    ValueId c1 = b.create_value(OpKind::Constant, {}, Type::scalar(DType::i32), Literal::of_int(2), {});
    ValueId c2 = b.create_value(OpKind::Constant, {}, Type::scalar(DType::i32), Literal::of_int(2), {});
    CHECK(c1 == c2);
    ValueId c3 = b.create_value(OpKind::Constant, {}, Type::scalar(DType::i64), Literal::of_int(2), {});
    CHECK(c3 != c1);
    ValueId a1 = b.create_value(OpKind::Add, {x, c1}, Type::scalar(DType::i32), {}, {});
    ValueId a2 = b.create_value(OpKind::Add, {x, c1}, Type::scalar(DType::i32), {}, {});
    CHECK(a1 == a2);
    ValueId a3 = b.create_value(OpKind::Add, {c1, x}, Type::scalar(DType::i32), {}, {});
    CHECK(a3 != a1);  // operand order matters
    ValueId p1 = b.create_value(OpKind::ProgramId, {}, Type::scalar(DType::i32), int64_t{0}, {});
    ValueId p2 = b.create_value(OpKind::ProgramId, {}, Type::scalar(DType::i32), int64_t{0}, {});
    CHECK(p1 != p2);  // grid queries depend on the enclosing pipeline, so they are not merged
  }

  TEST_CASE("builder: a value made in an inner region is not reused outside it") {
    Function fn;
    Builder b(fn, "k");
    ValueId x = b.add_param(Type::scalar(DType::i32), "x");
    RegionId inner = b.create_region({});
    ValueId in_inner;
    {
      Builder::RegionScope scope(b, inner);
      in_inner = b.create_value(OpKind::Neg, {x}, Type::scalar(DType::i32), {}, {});
      // Inside, an outer value is reused.
    }
    ValueId outer = b.create_value(OpKind::Neg, {x}, Type::scalar(DType::i32), {}, {});
    CHECK(outer != in_inner);
    RegionId inner2 = b.create_region({});
    Builder::RegionScope scope(b, inner2);
    CHECK(b.create_value(OpKind::Neg, {x}, Type::scalar(DType::i32), {}, {}) == outer);
  }

  TEST_CASE("builder: constants are hoisted to the kernel body") {
    Function fn;
    Builder b(fn, "k");
    RegionId inner = b.create_region({});
    ValueId c;
    {
      Builder::RegionScope scope(b, inner);
      c = b.create_value(OpKind::Constant, {}, Type::scalar(DType::f32), Literal::of_float(1.5), {});
    }
    CHECK(fn.ops[fn.values[c].def].parent == fn.body);
    CHECK(fn.regions[inner].ops.empty());
  }

  TEST_CASE("builder: ops keep the source location they were created with") {
    Function fn;
    Builder b(fn, "k");
    SourceLoc here = std::source_location::current();
    ValueId c = b.create_value(OpKind::Constant, {}, Type::scalar(DType::i32), Literal::of_int(7), here);
    CHECK(fn.ops[fn.values[c].def].loc.line == here.line);
    CHECK(std::string(fn.ops[fn.values[c].def].loc.file) == here.file);
  }

  TEST_CASE("ir: every op kind has a distinct mnemonic and traits") {
    std::set<std::string_view> seen;
    for (OpKind k : all_op_kinds()) {
      CHECK(!mnemonic(k).empty());
      CHECK(seen.insert(mnemonic(k)).second);
      if (has_flag(k, kCSE)) CHECK(has_flag(k, kPure));
    }
    CHECK(has_flag(OpKind::Yield, kTerminator));
    CHECK_FALSE(has_flag(OpKind::Store, kPure));
    CHECK(has_flag(OpKind::Load, kReadsMemory));
  }
}
