// Builder: appends ops to a Function at an insertion point, creates regions and their arguments,
// and hash-conses pure ops (an identical kCSE op already visible from the insertion point is reused).
//
// Used by the tracer (dsl/) and by passes (jit/) that build new IR. Part of the IR layer.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "jit/ir/ir.h"

namespace tessera::ir {

class Builder {
 public:
  // Starts a new function `name` whose body region is empty.
  Builder(Function& fn, std::string name);

  Function& function() { return fn_; }
  const Function& function() const { return fn_; }
  const Type& type(ValueId v) const { return fn_.type(v); }

  // Adds a parameter (an argument of the body region).
  ValueId add_param(Type type, std::string name = {});

  // A new region with arguments of these types, not yet owned by an op: trace into it with a
  // RegionScope, then pass it to create().
  RegionId create_region(const std::vector<Type>& arg_types, const std::vector<std::string>& arg_names = {});

  // Appends an op at the insertion point. For kCSE ops without regions, returns an identical op
  // already visible from the insertion point instead (its source location is the first one's).
  OpId create(OpKind kind, std::vector<ValueId> operands, std::vector<Type> result_types, Attr attr, SourceLoc loc,
              std::vector<RegionId> regions = {});
  // create() for ops with exactly one result; returns the result.
  ValueId create_value(OpKind kind, std::vector<ValueId> operands, Type result_type, Attr attr, SourceLoc loc);

  RegionId insertion_region() const { return scopes_.back(); }
  void set_name(ValueId v, std::string name) { fn_.values.at(v).name = std::move(name); }

  // Makes `r` the insertion region until destroyed. Scopes nest: a value created in an inner scope
  // is never reused in an outer one.
  class RegionScope {
   public:
    RegionScope(Builder& b, RegionId r) : b_(b) { b_.scopes_.push_back(r); }
    ~RegionScope() { b_.scopes_.pop_back(); }
    RegionScope(const RegionScope&) = delete;
    RegionScope& operator=(const RegionScope&) = delete;

   private:
    Builder& b_;
  };

 private:
  Function& fn_;
  std::vector<RegionId> scopes_;
  // Per region: CSE key -> op.
  std::unordered_map<RegionId, std::unordered_map<std::string, OpId>> cse_;
};

}  // namespace tessera::ir
