#include "jit/ir/rewriter.h"

#include <fmt/format.h>

#include "jit/ir/printer.h"

namespace tessera::ir {

ValueId Rewriter::map(ValueId src) const {
  ValueId v = map_.at(src);
  if (v == kNone)
    throw InternalError("rewriter", fmt::format("value %{} is used before it was mapped", src), print(src_));
  return v;
}

std::vector<ValueId> Rewriter::map(const std::vector<ValueId>& src) const {
  std::vector<ValueId> out;
  out.reserve(src.size());
  for (ValueId v : src) out.push_back(map(v));
  return out;
}

void Rewriter::clone_params() {
  for (ValueId p : src_.params()) set(p, dst_.add_param(src_.type(p), src_.values[p].name));
}

std::vector<ValueId> Rewriter::inline_region(RegionId region, const std::vector<ValueId>& args) {
  const Region& r = src_.regions.at(region);
  for (size_t i = 0; i < r.args.size(); ++i) set(r.args[i], args.at(i));
  for (OpId id : r.ops) {
    const Op& op = src_.ops[id];
    if (op.kind == OpKind::Yield) return map(op.operands);
    clone_op(id);
  }
  return {};
}

RegionId Rewriter::clone_region(RegionId region) {
  const Region& r = src_.regions.at(region);
  std::vector<Type> types;
  std::vector<std::string> names;
  for (ValueId a : r.args) {
    types.push_back(src_.type(a));
    names.push_back(src_.values[a].name);
  }
  RegionId out = dst_.create_region(types, names);
  for (size_t i = 0; i < r.args.size(); ++i) set(r.args[i], dst_.function().regions[out].args[i]);
  Builder::RegionScope scope(dst_, out);
  for (OpId id : r.ops) clone_op(id);
  return out;
}

void Rewriter::clone_op(OpId id) {
  if (hook_ && hook_(*this, id)) return;
  clone_op_verbatim(id);
}

void Rewriter::clone_op_verbatim(OpId id) {
  const Op& op = src_.ops[id];
  std::vector<RegionId> regions;
  for (RegionId r : op.regions) regions.push_back(clone_region(r));
  std::vector<Type> types;
  for (ValueId v : op.results) types.push_back(src_.type(v));
  OpId out = dst_.create(op.kind, map(op.operands), types, op.attr, op.loc, regions);
  const Op& created = dst_.function().ops[out];
  for (size_t i = 0; i < op.results.size(); ++i) set(op.results[i], created.results[i]);
}

}  // namespace tessera::ir
