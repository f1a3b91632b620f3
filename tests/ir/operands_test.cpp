#include <doctest/doctest.h>

#include "jit/ir/builder.h"
#include "jit/ir/operands.h"

using namespace tessera;
using namespace tessera::ir;

TEST_SUITE("ir") {
  TEST_CASE("operands: structured operand lists decode by name") {
    Function fn;
    Builder b(fn, "k");
    ValueId array = b.add_param(Type::ref(DType::f32, {16, 8}, MemorySpace::ANY));
    ValueId block = b.create_value(OpKind::Alloc, {}, Type::ref(DType::f32, {8, 8}, MemorySpace::VMEM), std::string("block"), {});
    ValueId sem = b.create_value(OpKind::Alloc, {}, Type::ref(DType::dma_sem, {}, MemorySpace::SEMAPHORE), std::string("sem"), {});
    ValueId i = b.create_value(OpKind::Constant, {}, Type::scalar(DType::i32), Literal::of_int(1), {});
    ValueId j = b.create_value(OpKind::Constant, {}, Type::scalar(DType::i32), Literal::of_int(0), {});
    const Op& wb = fn.ops[b.create(OpKind::WritebackBlock, {block, array, i, j, sem}, {}, BlockCopyAttr{}, {})];
    const BlockCopyOperands copy = block_copy_operands(fn, wb);
    CHECK_FALSE(copy.fetch);
    CHECK(copy.array == array);
    CHECK(copy.block == block);
    CHECK(copy.src() == block);
    CHECK(copy.dst() == array);
    CHECK(std::vector<ValueId>(copy.starts.begin(), copy.starts.end()) == std::vector<ValueId>{i, j});
    CHECK(copy.sem == sem);
    const Op& fetch = fn.ops[b.create(OpKind::FetchBlock, {array, block, i, j}, {}, BlockCopyAttr{}, {})];
    CHECK(block_copy_operands(fn, fetch).sem == kNone);
    CHECK(block_copy_operands(fn, fetch).src() == array);

    const Op& remote = fn.ops[b.create(OpKind::RemoteDmaStart, {block, block, sem, sem, i, j}, {}, DeviceAttr{}, {})];
    const DmaOperands dma = dma_operands(remote);
    CHECK(dma.recv_sem == sem);
    CHECK(dma.device.size() == 2);
    CHECK(dma.device[1] == j);

    ValueId v = b.create_value(OpKind::Load, {block}, Type::tensor(DType::f32, {8, 8}), {}, {});
    const LoadOperands load = load_operands(*fn.def(v));
    CHECK(load.ref == block);
    CHECK(load.mask == kNone);
    CHECK(load.other == kNone);
    CHECK_THROWS_AS(store_operands(*fn.def(v)), InternalError);
  }
}
