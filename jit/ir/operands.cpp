#include "jit/ir/operands.h"

#include <fmt/format.h>

#include <initializer_list>

namespace tessera::ir {

namespace {

void expect(const Op& op, std::initializer_list<OpKind> kinds, size_t min_operands) {
  bool ok = false;
  for (OpKind k : kinds) ok |= op.kind == k;
  if (!ok || op.operands.size() < min_operands)
    throw InternalError("ir", fmt::format("the operands of a `{}` op with {} operands read as another op's",
                                          mnemonic(op.kind), op.operands.size()));
}

ValueId at_or_none(const Op& op, size_t i) { return i < op.operands.size() ? op.operands[i] : kNone; }

OperandSpan from(const Op& op, size_t first, size_t end) {
  return OperandSpan(op.operands).subspan(first, end - first);
}

}  // namespace

LoadOperands load_operands(const Op& op) {
  expect(op, {OpKind::Load}, 1);
  return {op.operands[0], at_or_none(op, 1), at_or_none(op, 2)};
}

StoreOperands store_operands(const Op& op) {
  expect(op, {OpKind::Store}, 2);
  return {op.operands[0], op.operands[1], at_or_none(op, 2)};
}

DotOperands dot_operands(const Op& op) {
  expect(op, {OpKind::DotGeneral, OpKind::DotAccumulate}, 2);
  if (op.kind == OpKind::DotGeneral) return {kNone, op.operands[0], op.operands[1]};
  expect(op, {OpKind::DotAccumulate}, 3);
  return {op.operands[0], op.operands[1], op.operands[2]};
}

SelectOperands select_operands(const Op& op) {
  expect(op, {OpKind::Select}, 3);
  return {op.operands[0], op.operands[1], op.operands[2]};
}

WindowOperands window_operands(const Op& op) {
  expect(op, {OpKind::View, OpKind::BlockView, OpKind::Slice}, 1);
  return {op.operands[0], from(op, 1, op.operands.size())};
}

BlockCopyOperands block_copy_operands(const Function& fn, const Op& op) {
  expect(op, {OpKind::FetchBlock, OpKind::WritebackBlock}, 2);
  const bool fetch = op.kind == OpKind::FetchBlock;
  const size_t starts_end = 2 + fn.type(op.operands[0]).shape.size();
  const size_t sizes_end = starts_end + bounded_dims(std::get<BlockCopyAttr>(op.attr).kinds);
  expect(op, {op.kind}, sizes_end);
  return {fetch,
          op.operands[fetch ? 0 : 1],
          op.operands[fetch ? 1 : 0],
          from(op, 2, starts_end),
          from(op, starts_end, sizes_end),
          at_or_none(op, sizes_end)};
}

DmaOperands dma_operands(const Op& op) {
  expect(op, {OpKind::DmaStart, OpKind::RemoteDmaStart}, 3);
  if (op.kind == OpKind::DmaStart) return {op.operands[0], op.operands[1], op.operands[2], kNone, {}};
  expect(op, {OpKind::RemoteDmaStart}, 4);
  return {op.operands[0], op.operands[1], op.operands[2], op.operands[3], from(op, 4, op.operands.size())};
}

SemaphoreOperands semaphore_operands(const Op& op) {
  expect(op, {OpKind::DmaWait, OpKind::SemaphoreSignal, OpKind::SemaphoreWait, OpKind::SemaphoreRead,
              OpKind::RemoteSemaphoreSignal},
         1);
  switch (op.kind) {
    case OpKind::DmaWait:
    case OpKind::SemaphoreRead: return {op.operands[0], kNone, {}};
    case OpKind::RemoteSemaphoreSignal:
      expect(op, {op.kind}, 2);
      return {op.operands[0], op.operands[1], from(op, 2, op.operands.size())};
    default: expect(op, {op.kind}, 2); return {op.operands[0], op.operands[1], {}};
  }
}

ForOperands for_operands(const Op& op) {
  expect(op, {OpKind::For}, 3);
  return {op.operands[0], op.operands[1], op.operands[2], from(op, 3, op.operands.size())};
}

PipelineOperands pipeline_operands(const Op& op) {
  expect(op, {OpKind::Pipeline}, 2);
  const size_t sizes = 2 + std::get<PipelineAttr>(op.attr).dynamic_dims();
  return {op.operands[0], op.operands[1], from(op, 2, sizes), from(op, sizes, op.operands.size())};
}

}  // namespace tessera::ir
