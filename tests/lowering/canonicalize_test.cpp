#include <doctest/doctest.h>

#include "jit/ir/builder.h"
#include "jit/ir/printer.h"
#include "jit/ir/verifier.h"
#include "jit/lowering/canonicalize.h"

using namespace tessera;
using namespace tessera::ir;

namespace {
Type s(DType t) { return Type::scalar(t); }
ValueId cst(Builder& b, int64_t v, DType t = DType::i32) {
  return b.create_value(OpKind::Constant, {}, s(t), Literal::of_int(v), {});
}
// The canonicalized function, checked by the verifier, as text.
std::string canonicalized(const Function& fn) {
  Function out = passes::canonicalize(fn);
  verify(out);
  return print(out);
}
}  // namespace

TEST_SUITE("passes") {
  TEST_CASE("canonicalize: folds constant arithmetic with the runtime's numerics") {
    Function fn;
    Builder b(fn, "k");
    ValueId r = b.add_param(Type::ref(DType::i32, {}, MemorySpace::SMEM));
    ValueId sum = b.create_value(OpKind::Add, {cst(b, 2), cst(b, 3)}, s(DType::i32), {}, {});
    ValueId q = b.create_value(OpKind::Div, {sum, cst(b, 0)}, s(DType::i32), {}, {});  // defined: x / 0 = -1
    b.create(OpKind::Store, {r, q}, {}, {}, {});
    CHECK(canonicalized(fn) ==
          "kernel @k(%0: ref<i32, smem>) {\n"
          "  %1 = constant -1 : i32\n"
          "  store %0, %1\n"
          "}\n");
  }

  TEST_CASE("canonicalize: folds casts, broadcasts of constants and selects") {
    Function fn;
    Builder b(fn, "k");
    ValueId r = b.add_param(Type::ref(DType::f32, {4}, MemorySpace::VMEM));
    ValueId c = b.create_value(OpKind::Cast, {cst(b, 3)}, s(DType::f32), {}, {});
    ValueId bc = b.create_value(OpKind::BroadcastTo, {c}, Type::tensor(DType::f32, {4}), {}, {});
    ValueId t = b.create_value(OpKind::Constant, {}, s(DType::i1), Literal::of_int(1), {});
    ValueId other = b.create_value(OpKind::Constant, {}, Type::tensor(DType::f32, {4}), Literal::of_float(9), {});
    ValueId sel = b.create_value(OpKind::Select, {t, bc, other}, Type::tensor(DType::f32, {4}), {}, {});
    b.create(OpKind::Store, {r, sel}, {}, {}, {});
    std::string text = canonicalized(fn);
    CHECK(text.find("constant 3.0 : 4xf32") != std::string::npos);
    CHECK(text.find("select") == std::string::npos);
    CHECK(text.find("cast") == std::string::npos);
  }

  TEST_CASE("canonicalize: boolean identities with a constant operand") {
    Function fn;
    Builder b(fn, "k");
    ValueId r = b.add_param(Type::ref(DType::i1, {}, MemorySpace::SMEM));
    ValueId x = b.add_param(s(DType::i1));
    ValueId t = b.create_value(OpKind::Constant, {}, s(DType::i1), Literal::of_int(1), {});
    ValueId f = b.create_value(OpKind::Constant, {}, s(DType::i1), Literal::of_int(0), {});
    ValueId a = b.create_value(OpKind::Or, {x, f}, s(DType::i1), {}, {});   // x
    ValueId c = b.create_value(OpKind::And, {t, a}, s(DType::i1), {}, {});  // x
    ValueId d = b.create_value(OpKind::Or, {c, t}, s(DType::i1), {}, {});   // true
    ValueId e = b.create_value(OpKind::And, {d, c}, s(DType::i1), {}, {});  // x
    b.create(OpKind::Store, {r, e}, {}, {}, {});
    CHECK(canonicalized(fn) ==
          "kernel @k(%0: ref<i1, smem>, %1: i1) {\n"
          "  store %0, %1\n"
          "}\n");
  }

  TEST_CASE("canonicalize: an if with a constant condition is replaced by its branch") {
    Function fn;
    Builder b(fn, "k");
    ValueId r = b.add_param(Type::ref(DType::i32, {}, MemorySpace::SMEM));
    RegionId t = b.create_region({}), e = b.create_region({});
    {
      Builder::RegionScope scope(b, t);
      b.create(OpKind::Store, {r, cst(b, 1)}, {}, {}, {});
      b.create(OpKind::Yield, {}, {}, {}, {});
    }
    {
      Builder::RegionScope scope(b, e);
      b.create(OpKind::Store, {r, cst(b, 2)}, {}, {}, {});
      b.create(OpKind::Yield, {}, {}, {}, {});
    }
    ValueId f = b.create_value(OpKind::Constant, {}, s(DType::i1), Literal::of_int(0), {});
    b.create(OpKind::If, {f}, {}, {}, {}, {t, e});
    CHECK(canonicalized(fn) ==
          "kernel @k(%0: ref<i32, smem>) {\n"
          "  %1 = constant 2 : i32\n"
          "  store %0, %1\n"
          "}\n");
  }

  TEST_CASE("canonicalize: unused pure ops and loads go, side effects stay") {
    Function fn;
    Builder b(fn, "k");
    ValueId r = b.add_param(Type::ref(DType::f32, {8}, MemorySpace::VMEM));
    ValueId x = b.add_param(s(DType::f32));
    ValueId dead_load = b.create_value(OpKind::Load, {r}, Type::tensor(DType::f32, {8}), {}, {});
    b.create_value(OpKind::Exp, {dead_load}, Type::tensor(DType::f32, {8}), {}, {});
    b.create(OpKind::DebugPrint, {x}, {}, std::string("x={}"), {});
    Function out = passes::remove_dead_code(fn);
    CHECK(print(out) ==
          "kernel @k(%0: ref<8xf32, vmem>, %1: f32) {\n"
          "  debug_print %1 \"x={}\"\n"
          "}\n");
  }
}
