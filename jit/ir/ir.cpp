#include "jit/ir/ir.h"

namespace tessera::ir {

static const OpTraits kTraits[] = {
#define TESSERA_OP(name, mnemonic, flags) {mnemonic, flags},
#include "jit/ir/ops.def"
#undef TESSERA_OP
};

const OpTraits& traits(OpKind k) { return kTraits[static_cast<size_t>(k)]; }

std::vector<OpKind> all_op_kinds() {
  return {
#define TESSERA_OP(name, mnemonic, flags) OpKind::name,
#include "jit/ir/ops.def"
#undef TESSERA_OP
  };
}

std::string_view dim_semantics_name(DimSemantics s) {
  switch (s) {
    case DimSemantics::Parallel: return "parallel";
    case DimSemantics::Arbitrary: return "arbitrary";
  }
  return "?";
}

std::string_view block_dim_kind_name(BlockDimKind k) {
  switch (k) {
    case BlockDimKind::Blocked: return "blocked";
    case BlockDimKind::Element: return "element";
    case BlockDimKind::Bounded: return "bounded";
  }
  return "?";
}

size_t bounded_dims(const std::vector<BlockDimKind>& kinds) {
  size_t n = 0;
  for (BlockDimKind k : kinds) n += k == BlockDimKind::Bounded;
  return n;
}

size_t PipelineAttr::dynamic_dims() const {
  size_t n = 0;
  for (int64_t g : grid) n += g == kDynamicDim;
  return n;
}

bool communicates(const Function& fn) {
  for (const Op& op : fn.ops)
    if (op.kind == OpKind::RemoteDmaStart || op.kind == OpKind::RemoteSemaphoreSignal) return true;
  return false;
}

}  // namespace tessera::ir
