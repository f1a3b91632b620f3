#include <doctest/doctest.h>

#include "jit/ir/dtype.h"
#include "jit/ir/type.h"

using namespace tessera;

TEST_SUITE("ir") {
  TEST_CASE("dtype: sizes and names round-trip") {
    CHECK(dtype_size(DType::i1) == 1);
    CHECK(dtype_size(DType::i8) == 1);
    CHECK(dtype_size(DType::bf16) == 2);
    CHECK(dtype_size(DType::f16) == 2);
    CHECK(dtype_size(DType::i32) == 4);
    CHECK(dtype_size(DType::f32) == 4);
    CHECK(dtype_size(DType::i64) == 8);
    CHECK(dtype_size(DType::index) == 8);
    CHECK(dtype_size(DType::f64) == 8);
    CHECK(dtype_size(DType::i16) == 2);
    CHECK(dtype_size(DType::u8) == 1);
    CHECK(dtype_size(DType::u16) == 2);
    CHECK(dtype_size(DType::u32) == 4);
    CHECK(dtype_name(DType::i16) == "i16");
    CHECK(dtype_name(DType::u8) == "u8");
    CHECK(dtype_name(DType::u16) == "u16");
    CHECK(dtype_name(DType::u32) == "u32");
    for (DType t : kAllDTypes) CHECK(dtype_from_name(dtype_name(t)) == t);
    CHECK(dtype_from_name("bool") == DType::i1);
    CHECK_FALSE(dtype_from_name("f8").has_value());
  }

  TEST_CASE("dtype: promotion follows JAX's lattice") {
    CHECK(promote(DType::i1, DType::i32) == DType::i32);
    CHECK(promote(DType::i8, DType::i32) == DType::i32);
    CHECK(promote(DType::i32, DType::f32) == DType::f32);
    CHECK(promote(DType::bf16, DType::f32) == DType::f32);
    CHECK(promote(DType::bf16, DType::f16) == DType::f32);
    CHECK(promote(DType::bf16, DType::i32) == DType::bf16);
    CHECK(promote(DType::f32, DType::f64) == DType::f64);
    CHECK(promote(DType::i64, DType::index) == DType::index);
    CHECK(promote(DType::bf16, DType::bf16) == DType::bf16);
  }

  TEST_CASE("dtype: unsigned and 16-bit integers promote as in JAX's lattice, in either order") {
    struct Row {
      DType a, b, want;
    };
    // JAX's promotion table (jax.numpy.promote_types) for the integer pairs that involve the new
    // types; unsigned with signed gives the narrowest signed type holding both.
    const Row rows[] = {
        {DType::u8, DType::i8, DType::i16},    {DType::u8, DType::i16, DType::i16},   {DType::u8, DType::i32, DType::i32},
        {DType::u8, DType::i64, DType::i64},   {DType::u16, DType::i8, DType::i32},   {DType::u16, DType::i16, DType::i32},
        {DType::u16, DType::i32, DType::i32},  {DType::u16, DType::i64, DType::i64},  {DType::u32, DType::i8, DType::i64},
        {DType::u32, DType::i16, DType::i64},  {DType::u32, DType::i32, DType::i64},  {DType::u32, DType::i64, DType::i64},
        {DType::u8, DType::u16, DType::u16},   {DType::u8, DType::u32, DType::u32},   {DType::u16, DType::u32, DType::u32},
        {DType::i8, DType::i16, DType::i16},   {DType::i16, DType::i32, DType::i32},  {DType::i1, DType::u8, DType::u8},
        {DType::i1, DType::i16, DType::i16},   {DType::u8, DType::bf16, DType::bf16}, {DType::u32, DType::f16, DType::f16},
        {DType::i16, DType::f32, DType::f32},  {DType::u32, DType::index, DType::index}, {DType::u16, DType::u16, DType::u16}};
    for (const Row& r : rows) {
      INFO(dtype_name(r.a) << " with " << dtype_name(r.b));
      CHECK(promote(r.a, r.b) == r.want);
      CHECK(promote(r.b, r.a) == r.want);
    }
    CHECK(is_unsigned(DType::u8));
    CHECK_FALSE(is_unsigned(DType::i16));
    CHECK_FALSE(is_unsigned(DType::i1));
    for (DType t : {DType::i16, DType::u8, DType::u16, DType::u32}) CHECK(is_int(t));
    CHECK(weak_literal_type(false, DType::u16) == DType::u16);
    CHECK(weak_literal_type(true, DType::u8) == DType::f32);
  }

  TEST_CASE("dtype: literals adopt the other operand's type") {
    CHECK(weak_literal_type(false, DType::bf16) == DType::bf16);
    CHECK(weak_literal_type(false, DType::i8) == DType::i8);
    CHECK(weak_literal_type(true, DType::i32) == DType::f32);
    CHECK(weak_literal_type(true, DType::bf16) == DType::bf16);
    CHECK(weak_literal_type(true, DType::i1) == DType::f32);
  }

  TEST_CASE("type: printing and properties") {
    CHECK(type_str(Type::scalar(DType::i32)) == "i32");
    CHECK(type_str(Type::tensor(DType::bf16, {128, 64})) == "128x64xbf16");
    CHECK(type_str(Type::ref(DType::f32, {8, 128}, MemorySpace::VMEM)) == "ref<8x128xf32, vmem>");
    CHECK(type_str(Type::ref(DType::i32, {}, MemorySpace::SMEM)) == "ref<i32, smem>");
    Type r = Type::ref(DType::f32, {4, 5}, MemorySpace::ANY);
    CHECK(r.is_ref());
    CHECK(r.num_elements() == 20);
    CHECK(r.value_type() == Type::tensor(DType::f32, {4, 5}));
    CHECK(Type::scalar(DType::f32).is_scalar());
    CHECK(Type::tensor(DType::f32, {1}).is_block());
    CHECK(is_dma_only(MemorySpace::ANY));
    CHECK(is_dma_only(MemorySpace::HBM));
    CHECK_FALSE(is_dma_only(MemorySpace::VMEM));
    CHECK(shape_tuple_str({3}) == "(3,)");
    CHECK(shape_tuple_str({2, 3}) == "(2, 3)");
  }
}
