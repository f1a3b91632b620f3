#include "jit/lowering/fuse_dot_accumulate.h"

#include <algorithm>
#include <map>
#include <set>

#include "jit/ir/operands.h"
#include "jit/ir/rewriter.h"

namespace tessera::passes {

using namespace ir;

namespace {

// The position of each op in its region's op list.
std::vector<size_t> positions(const Function& fn) {
  std::vector<size_t> pos(fn.ops.size(), 0);
  for (const Region& r : fn.regions)
    for (size_t i = 0; i < r.ops.size(); ++i) pos[r.ops[i]] = i;
  return pos;
}

class Fuser {
 public:
  explicit Fuser(const Function& src) : src_(src), uses_(src.values.size(), 0), pos_(positions(src)),
                                        dst_(out_, src.name), rw_(src, dst_, [this](Rewriter&, OpId id) { return hook(id); }) {
    for (const Op& op : src.ops)
      for (ValueId v : op.operands) ++uses_[v];
    for (OpId id = 0; id < src.ops.size(); ++id) match(id);
  }

  Function run() {
    rw_.clone_params();
    rw_.inline_region(src_.body, dst_.function().params());
    return std::move(out_);
  }

 private:
  // An op defining `v` with one use, in `region`.
  const Op* single_use_def(ValueId v, RegionId region, OpKind kind) const {
    const Op* d = src_.def(v);
    return d && d->kind == kind && d->parent == region && uses_[v] == 1 ? d : nullptr;
  }

  void match(OpId id) {
    const Op& store = src_.ops[id];
    if (store.kind != OpKind::Store) return;
    const StoreOperands stored = store_operands(store);
    if (stored.mask != kNone) return;
    const Op* add = single_use_def(stored.value, store.parent, OpKind::Add);
    if (!add) return;
    for (int s = 0; s < 2; ++s) {
      const Op* load = single_use_def(add->operands[s], store.parent, OpKind::Load);
      const Op* dot = single_use_def(add->operands[1 - s], store.parent, OpKind::DotGeneral);
      if (!load || !dot || load_operands(*load).mask != kNone || load_operands(*load).ref != stored.ref) continue;
      // Between the load and the store only pure ops: the accumulator still holds what was loaded.
      const Region& region = src_.regions[store.parent];
      const OpId load_id = src_.values[add->operands[s]].def;
      const bool untouched = std::all_of(region.ops.begin() + static_cast<std::ptrdiff_t>(pos_[load_id]) + 1,
                                         region.ops.begin() + static_cast<std::ptrdiff_t>(pos_[id]),
                                         [&](OpId o) { return has_flag(src_.ops[o].kind, kPure); });
      if (!untouched) continue;
      const OpId dot_id = src_.values[add->operands[1 - s]].def;
      dot_of_.emplace(id, dot_id);
      absorbed_.insert({load_id, dot_id, src_.values[stored.value].def});
      return;
    }
  }

  bool hook(OpId id) {
    if (absorbed_.count(id)) return true;  // emitted as part of its dot_accumulate
    auto it = dot_of_.find(id);
    if (it == dot_of_.end()) return false;
    const Op& store = src_.ops[id];
    const Op& dot = src_.ops[it->second];
    const DotOperands factors = dot_operands(dot);
    dst_.create(OpKind::DotAccumulate, {rw_.map(store_operands(store).ref), rw_.map(factors.lhs), rw_.map(factors.rhs)}, {},
                dot.attr, store.loc);
    return true;
  }

  const Function& src_;
  std::vector<int> uses_;
  std::vector<size_t> pos_;
  std::map<OpId, OpId> dot_of_;  // fused store -> its dot_general
  std::set<OpId> absorbed_;      // the loads, dots and adds the fused stores replace
  Function out_;
  Builder dst_;
  Rewriter rw_;
};

}  // namespace

Function fuse_dot_accumulate(const Function& fn) { return Fuser(fn).run(); }

}  // namespace tessera::passes
