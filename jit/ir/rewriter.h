// Rewriter: copies IR from one Function into a Builder, mapping values, so that passes can be
// written as "rebuild the function, handling the ops you care about". Ops a pass does not handle are
// cloned as they are (regions recursively); hash-consing in the Builder merges duplicates on the way.
//
// Part of the IR layer.
#pragma once

#include <functional>
#include <vector>

#include "jit/ir/builder.h"

namespace tessera::ir {

class Rewriter {
 public:
  // A hook sees every op before it is cloned; returning true means it emitted the op's replacement
  // (and mapped its results) itself.
  using Hook = std::function<bool(Rewriter&, OpId)>;

  Rewriter(const Function& src, Builder& dst, Hook hook = {}) : src_(src), dst_(dst), hook_(std::move(hook)),
                                                                  map_(src.values.size(), kNone) {}

  const Function& src() const { return src_; }
  Builder& dst() { return dst_; }

  void set(ValueId src, ValueId dst) { map_.at(src) = dst; }
  ValueId map(ValueId src) const;
  std::vector<ValueId> map(const std::vector<ValueId>& src) const;

  // Adds one parameter per source parameter, same types and names, and maps them.
  void clone_params();
  // Clones the ops of `region` at the insertion point, with its arguments mapped to `args`. A
  // trailing yield is not cloned: its mapped operands are returned.
  std::vector<ValueId> inline_region(RegionId region, const std::vector<ValueId>& args);
  // Clones `region` into a new region (same argument types, yield included) and returns it.
  RegionId clone_region(RegionId region);
  // Clones one op: through the hook, or as it is.
  void clone_op(OpId op);
  // Clones one op as it is, regions recursively, without consulting the hook.
  void clone_op_verbatim(OpId op);

 private:
  const Function& src_;
  Builder& dst_;
  Hook hook_;
  std::vector<ValueId> map_;
};

}  // namespace tessera::ir
