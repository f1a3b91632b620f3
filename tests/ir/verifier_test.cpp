#include <doctest/doctest.h>

#include "jit/ir/builder.h"
#include "jit/ir/verifier.h"

using namespace tessera;
using namespace tessera::ir;

namespace {
Type s(DType t) { return Type::scalar(t); }
}  // namespace

TEST_SUITE("ir") {
  TEST_CASE("verifier: binary operands must share one type") {
    Function fn;
    Builder b(fn, "k");
    ValueId x = b.add_param(s(DType::i32));
    ValueId y = b.add_param(s(DType::f32));
    b.create_value(OpKind::Add, {x, y}, s(DType::i32), {}, {});
    CHECK_THROWS_WITH_AS(verify(fn, "my_pass"), doctest::Contains("internal error in my_pass: invalid `add` op"), InternalError);
    CHECK_THROWS_WITH_AS(verify(fn), doctest::Contains("operands must be tensors of one type, got i32 and f32"), InternalError);
  }

  TEST_CASE("verifier: a value used outside its region is rejected") {
    Function fn;
    Builder b(fn, "k");
    ValueId x = b.add_param(s(DType::i32));
    RegionId inner = b.create_region({});
    ValueId hidden;
    {
      Builder::RegionScope scope(b, inner);
      hidden = b.create_value(OpKind::Neg, {x}, s(DType::i32), {}, {});
      b.create(OpKind::Yield, {}, {}, {}, {});
    }
    RegionId other = b.create_region({});
    {
      Builder::RegionScope scope(b, other);
      b.create(OpKind::Yield, {}, {}, {}, {});
    }
    ValueId c = b.add_param(s(DType::i1));
    b.create(OpKind::If, {c}, {}, {}, {}, {inner, other});
    b.create_value(OpKind::Neg, {hidden}, s(DType::i32), {}, {});
    CHECK_THROWS_WITH_AS(verify(fn), doctest::Contains("used where it is not defined"), InternalError);
  }

  TEST_CASE("verifier: if branches must yield the results") {
    Function fn;
    Builder b(fn, "k");
    ValueId c = b.add_param(s(DType::i1));
    RegionId t = b.create_region({}), e = b.create_region({});
    {
      Builder::RegionScope scope(b, t);
      b.create(OpKind::Yield, {}, {}, {}, {});
    }
    {
      Builder::RegionScope scope(b, e);
      b.create(OpKind::Yield, {}, {}, {}, {});
    }
    b.create(OpKind::If, {c}, {s(DType::f32)}, {}, {}, {t, e});
    CHECK_THROWS_WITH_AS(verify(fn), doctest::Contains("each branch must yield one value per result"), InternalError);
  }

  TEST_CASE("verifier: loads from ANY and stores of the wrong type are rejected") {
    Function fn;
    Builder b(fn, "k");
    ValueId any = b.add_param(Type::ref(DType::f32, {4}, MemorySpace::ANY));
    b.create_value(OpKind::Load, {any}, Type::tensor(DType::f32, {4}), {}, {});
    CHECK_THROWS_WITH_AS(verify(fn), doctest::Contains("ANY/HBM refs and semaphores cannot be loaded"), InternalError);

    Function fn2;
    Builder b2(fn2, "k");
    ValueId v = b2.add_param(Type::ref(DType::f32, {4}, MemorySpace::VMEM));
    ValueId val = b2.add_param(Type::tensor(DType::f32, {5}));
    b2.create(OpKind::Store, {v, val}, {}, {}, {});
    CHECK_THROWS_WITH_AS(verify(fn2), doctest::Contains("value must have the ref's value type"), InternalError);
  }

  TEST_CASE("verifier: grid queries outside a pipeline are rejected") {
    Function fn;
    Builder b(fn, "k");
    b.create_value(OpKind::ProgramId, {}, s(DType::i32), int64_t{0}, {});
    CHECK_THROWS_WITH_AS(verify(fn), doctest::Contains("grid queries must be inside a pipeline"), InternalError);
  }

  TEST_CASE("verifier: shape rules of layout ops and dot_general") {
    Function fn;
    Builder b(fn, "k");
    ValueId x = b.add_param(Type::tensor(DType::f32, {2, 3}));
    b.create_value(OpKind::Transpose, {x}, Type::tensor(DType::f32, {2, 3}), std::vector<int64_t>{1, 0}, {});
    CHECK_THROWS_WITH_AS(verify(fn), doctest::Contains("result shape must be the permuted shape"), InternalError);

    Function fn2;
    Builder b2(fn2, "k");
    ValueId a = b2.add_param(Type::tensor(DType::f32, {2, 3}));
    b2.create_value(OpKind::DotGeneral, {a, a}, Type::tensor(DType::f32, {2, 2}), DotAttr{{1}, {0}, {}, {}}, {});
    CHECK_THROWS_WITH_AS(verify(fn2), doctest::Contains("contracting dims differ"), InternalError);

    Function fn3;
    Builder b3(fn3, "k");
    ValueId r = b3.add_param(Type::tensor(DType::f32, {2, 3}));
    b3.create_value(OpKind::Reshape, {r}, Type::tensor(DType::f32, {5}), {}, {});
    CHECK_THROWS_WITH_AS(verify(fn3), doctest::Contains("reshape keeps dtype and element count"), InternalError);

    // slice: the window must fit the value, and the result is its type.
    Function fn4;
    Builder b4(fn4, "k");
    ValueId v = b4.add_param(Type::tensor(DType::f32, {4, 8}));
    ValueId i = b4.add_param(s(DType::i32));
    b4.create_value(OpKind::Slice, {v, i, i}, Type::tensor(DType::f32, {5}), ViewAttr{{ViewDim{true, 1, 1}, ViewDim{false, 5, 2}}},
                    {});
    CHECK_THROWS_WITH_AS(verify(fn4), doctest::Contains("the window must fit in the value"), InternalError);
    Function fn5;
    Builder b5(fn5, "k");
    ValueId w = b5.add_param(Type::tensor(DType::f32, {4, 8}));
    ValueId j = b5.add_param(s(DType::i32));
    b5.create_value(OpKind::Slice, {w, j, j}, Type::tensor(DType::f32, {1, 4}), ViewAttr{{ViewDim{true, 1, 1}, ViewDim{false, 4, 1}}},
                    {});
    CHECK_THROWS_WITH_AS(verify(fn5), doctest::Contains("result must be the window's type"), InternalError);

    // concatenate: every dim but the axis agrees.
    Function fn6;
    Builder b6(fn6, "k");
    ValueId c0 = b6.add_param(Type::tensor(DType::f32, {4, 8}));
    ValueId c1 = b6.add_param(Type::tensor(DType::f32, {3, 8}));
    b6.create_value(OpKind::Concatenate, {c0, c1}, Type::tensor(DType::f32, {4, 16}), int64_t{1}, {});
    CHECK_THROWS_WITH_AS(verify(fn6), doctest::Contains("the values must agree on every dim but the axis"), InternalError);

    // bitcast: to a narrower dtype adds the trailing dim of parts, to a wider one consumes it.
    Function fn7;
    Builder b7(fn7, "k");
    ValueId f = b7.add_param(Type::tensor(DType::f32, {4}));
    b7.create_value(OpKind::Bitcast, {f}, Type::tensor(DType::u8, {4}), {}, {});
    CHECK_THROWS_WITH_AS(verify(fn7), doctest::Contains("bitcast 4xf32 -> 4xu8: the result shape must be (4, 4)"), InternalError);
    Function fn8;
    Builder b8(fn8, "k");
    ValueId h = b8.add_param(Type::tensor(DType::u16, {4, 3}));
    b8.create_value(OpKind::Bitcast, {h}, Type::tensor(DType::f32, {4}), {}, {});
    CHECK_THROWS_WITH_AS(verify(fn8), doctest::Contains("bitcast 4x3xu16 -> 4xf32: the last dim is 3, not the 2 u16 parts of one f32"),
                         InternalError);
    Function fn9;
    Builder b9(fn9, "k");
    ValueId p = b9.add_param(Type::tensor(DType::i1, {4}));
    b9.create_value(OpKind::Bitcast, {p}, Type::tensor(DType::u8, {4}), {}, {});
    CHECK_THROWS_WITH_AS(verify(fn9), doctest::Contains("i1 has no bits to read"), InternalError);
  }

  TEST_CASE("verifier: the message carries the op's source line and the IR") {
    Function fn;
    Builder b(fn, "k");
    ValueId x = b.add_param(s(DType::f32));
    SourceLoc here = std::source_location::current();
    b.create_value(OpKind::Not, {x}, s(DType::f32), {}, here);
    CHECK_THROWS_WITH_AS(verify(fn), doctest::Contains(here.str().c_str()), InternalError);
    CHECK_THROWS_WITH_AS(verify(fn), doctest::Contains("kernel @k("), InternalError);
  }
}

namespace {
// A while over one f32 carry whose condition yields `cond_type` and whose body yields `body_type`.
Function while_kernel(DType cond_type, DType body_type) {
  Function fn;
  Builder b(fn, "k");
  ValueId x = b.add_param(s(DType::f32));
  RegionId cond = b.create_region({s(DType::f32)});
  {
    Builder::RegionScope scope(b, cond);
    ValueId c = b.create_value(OpKind::Cast, {fn.regions[cond].args[0]}, s(cond_type), {}, {});
    b.create(OpKind::Yield, {c}, {}, {}, {});
  }
  RegionId body = b.create_region({s(DType::f32)});
  {
    Builder::RegionScope scope(b, body);
    ValueId next = b.create_value(OpKind::Cast, {fn.regions[body].args[0]}, s(body_type), {}, {});
    b.create(OpKind::Yield, {next}, {}, {}, {});
  }
  b.create(OpKind::While, {x}, {s(DType::f32)}, {}, {}, {cond, body});
  return fn;
}
}  // namespace

TEST_SUITE("ir") {
  TEST_CASE("verifier: a while's condition is one i1 scalar and its body keeps the carried types") {
    CHECK_NOTHROW(verify(while_kernel(DType::i1, DType::f32)));
    CHECK_THROWS_WITH_AS(verify(while_kernel(DType::i32, DType::f32)),
                         doctest::Contains("the condition must yield one i1 scalar"), InternalError);
    CHECK_THROWS_WITH_AS(verify(while_kernel(DType::i1, DType::bf16)), doctest::Contains("carried value types must agree"),
                         InternalError);
  }
}
