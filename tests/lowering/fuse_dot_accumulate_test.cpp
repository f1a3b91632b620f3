#include <doctest/doctest.h>

#include "jit/ir/builder.h"
#include "jit/ir/printer.h"
#include "jit/ir/verifier.h"
#include "jit/lowering/fuse_dot_accumulate.h"

using namespace tessera;
using namespace tessera::ir;

namespace {

// acc[8x8] = acc + x . y, optionally with another op between the load of acc and the store.
Function accumulate_kernel(bool store_between, bool load_used_twice) {
  Function fn;
  Builder b(fn, "k");
  const Type block = Type::tensor(DType::f32, {8, 8});
  ValueId x = b.add_param(Type::ref(DType::f32, {8, 8}, MemorySpace::VMEM));
  ValueId acc = b.add_param(Type::ref(DType::f32, {8, 8}, MemorySpace::VMEM));
  ValueId other = b.add_param(Type::ref(DType::f32, {8, 8}, MemorySpace::VMEM));
  ValueId xv = b.create_value(OpKind::Load, {x}, block, {}, {});
  ValueId d = b.create_value(OpKind::DotGeneral, {xv, xv}, block, DotAttr{{1}, {0}, {}, {}}, {});
  ValueId a = b.create_value(OpKind::Load, {acc}, block, {}, {});
  if (store_between) b.create(OpKind::Store, {acc, xv}, {}, {}, {});
  if (load_used_twice) b.create(OpKind::Store, {other, a}, {}, {}, {});
  ValueId sum = b.create_value(OpKind::Add, {a, d}, block, {}, {});
  b.create(OpKind::Store, {acc, sum}, {}, {}, {});
  verify(fn);
  return fn;
}

}  // namespace

TEST_SUITE("passes") {
  TEST_CASE("fuse_dot_accumulate: store(acc, add(load(acc), dot)) becomes one dot_accumulate") {
    Function out = passes::fuse_dot_accumulate(accumulate_kernel(false, false));
    verify(out);
    CHECK(print(out) ==
          "kernel @k(%0: ref<8x8xf32, vmem>, %1: ref<8x8xf32, vmem>, %2: ref<8x8xf32, vmem>) {\n"
          "  %3 = load %0 : 8x8xf32\n"
          "  dot_accumulate %1 += %3, %3 contract=[1]x[0] batch=[]x[]\n"
          "}\n");
  }

  TEST_CASE("fuse_dot_accumulate: not when the accumulator changes after its load, or its load has other uses") {
    for (auto [store_between, load_used_twice] : {std::pair{true, false}, std::pair{false, true}}) {
      Function in = accumulate_kernel(store_between, load_used_twice);
      Function out = passes::fuse_dot_accumulate(in);
      CHECK(print(out) == print(in));
    }
  }
}
