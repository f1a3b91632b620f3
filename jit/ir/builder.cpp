#include "jit/ir/builder.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "jit/ir/printer.h"

namespace tessera::ir {

Builder::Builder(Function& fn, std::string name) : fn_(fn) {
  fn_ = Function{};
  fn_.name = std::move(name);
  fn_.body = create_region({});
  scopes_.push_back(fn_.body);
}

ValueId Builder::add_param(Type type, std::string name) {
  ValueId v = static_cast<ValueId>(fn_.values.size());
  fn_.values.push_back(ValueInfo{std::move(type), kNone, fn_.body, std::move(name)});
  fn_.regions[fn_.body].args.push_back(v);
  return v;
}

RegionId Builder::create_region(const std::vector<Type>& arg_types, const std::vector<std::string>& arg_names) {
  RegionId r = static_cast<RegionId>(fn_.regions.size());
  fn_.regions.push_back(Region{});
  for (size_t i = 0; i < arg_types.size(); ++i) {
    ValueId v = static_cast<ValueId>(fn_.values.size());
    fn_.values.push_back(ValueInfo{arg_types[i], kNone, r, i < arg_names.size() ? arg_names[i] : std::string()});
    fn_.regions[r].args.push_back(v);
  }
  return r;
}

static std::string cse_key(OpKind kind, const std::vector<ValueId>& operands, const std::vector<Type>& types,
                           const Attr& attr) {
  std::string key = fmt::format("{}|{}|", static_cast<int>(kind), fmt::join(operands, ","));
  for (const Type& t : types) key += type_str(t) + ",";
  key += "|" + attr_str(attr);
  return key;
}

OpId Builder::create(OpKind kind, std::vector<ValueId> operands, std::vector<Type> result_types, Attr attr,
                     SourceLoc loc, std::vector<RegionId> regions) {
  const bool cse = has_flag(kind, kCSE) && regions.empty();
  // Constants depend on nothing, so they all live at the top of the function (before any op that
  // is still being built) and every region shares them.
  const RegionId target = kind == OpKind::Constant ? fn_.body : insertion_region();
  std::string key;
  if (cse) {
    key = cse_key(kind, operands, result_types, attr);
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s) {
      auto table = cse_.find(*s);
      if (table == cse_.end()) continue;
      auto hit = table->second.find(key);
      if (hit != table->second.end()) return hit->second;
    }
  }
  OpId id = static_cast<OpId>(fn_.ops.size());
  Op op{kind, std::move(operands), {}, std::move(regions), std::move(attr), loc, target};
  for (Type& t : result_types) {
    ValueId v = static_cast<ValueId>(fn_.values.size());
    fn_.values.push_back(ValueInfo{std::move(t), id, kNone, {}});
    op.results.push_back(v);
  }
  for (RegionId r : op.regions) fn_.regions.at(r).parent_op = id;
  fn_.ops.push_back(std::move(op));
  fn_.regions.at(target).ops.push_back(id);
  if (cse) cse_[target].emplace(std::move(key), id);
  return id;
}

ValueId Builder::create_value(OpKind kind, std::vector<ValueId> operands, Type result_type, Attr attr,
                              SourceLoc loc) {
  OpId id = create(kind, std::move(operands), {std::move(result_type)}, std::move(attr), loc);
  return fn_.ops[id].results.at(0);
}

}  // namespace tessera::ir
