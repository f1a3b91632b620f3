#include "jit/ir/verifier.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>
#include <set>

#include "jit/ir/bitcast.h"
#include "jit/ir/printer.h"

namespace tessera::ir {
namespace {

class Verifier {
 public:
  Verifier(const Function& fn, std::string_view who) : fn_(fn), who_(who), visible_(fn.values.size(), 0) {}

  void run() {
    if (fn_.body >= fn_.regions.size()) fail_general("function has no body region");
    for (ValueId p : fn_.params()) visible_.at(p) = 1;
    region(fn_.body, /*needs_yield=*/false);
  }

 private:
  [[noreturn]] void fail_general(const std::string& what) { throw InternalError(std::string(who_), what, print(fn_)); }

  [[noreturn]] void fail(OpId id, const std::string& what) {
    const Op& o = fn_.ops[id];
    throw InternalError(std::string(who_),
                        fmt::format("invalid `{}` op ({}): {}\n  op: {}", mnemonic(o.kind), o.loc.str(), what,
                                    print_op(fn_, id)),
                        print(fn_));
  }
  void check(bool ok, OpId id, const std::string& what) {
    if (!ok) fail(id, what);
  }

  const Type& t(ValueId v) const { return fn_.type(v); }

  void region(RegionId r, bool needs_yield) {
    const Region& reg = fn_.regions.at(r);
    std::vector<ValueId> added;
    for (ValueId a : reg.args) {
      visible_.at(a) = 1;
      added.push_back(a);
    }
    for (size_t i = 0; i < reg.ops.size(); ++i) {
      OpId id = reg.ops[i];
      const Op& o = fn_.ops.at(id);
      for (ValueId v : o.operands) {
        if (v >= fn_.values.size()) fail(id, fmt::format("operand id {} does not exist", v));
        if (!visible_[v]) fail(id, "an operand is used where it is not defined (before its definition or outside its region)");
      }
      bool last = i + 1 == reg.ops.size();
      if (o.kind == OpKind::Yield && !last) fail(id, "yield must be the last op of its region");
      if (o.kind == OpKind::Pipeline) ++pipeline_depth_;
      for (RegionId sub : o.regions) region(sub, o.kind != OpKind::Pipeline || sub != o.regions.back());
      if (o.kind == OpKind::Pipeline) --pipeline_depth_;
      op(id);
      for (ValueId v : o.results) {
        visible_.at(v) = 1;
        added.push_back(v);
      }
    }
    if (needs_yield && (reg.ops.empty() || fn_.ops[reg.ops.back()].kind != OpKind::Yield))
      fail_general(fmt::format("a region of `{}` does not end with yield",
                               reg.parent_op == kNone ? "kernel" : mnemonic(fn_.ops[reg.parent_op].kind)));
    for (ValueId v : added) visible_[v] = 0;
  }

  const Op* yield_of(RegionId r) const {
    const Region& reg = fn_.regions.at(r);
    if (reg.ops.empty()) return nullptr;
    const Op& last = fn_.ops[reg.ops.back()];
    return last.kind == OpKind::Yield ? &last : nullptr;
  }

  // The shape of dot_general(lhs, rhs) with op `id`'s DotAttr (batch, lhs free, rhs free dims).
  Shape dot_shape(OpId id, ValueId lhs, ValueId rhs) {
    const Op& o = fn_.ops[id];
    const Type& a = t(lhs);
    const Type& b = t(rhs);
    const auto* d = std::get_if<DotAttr>(&o.attr);
    check(d && a.is_tensor() && b.is_tensor(), id, "needs two tensors and dimension numbers");
    check(d->lhs_contract.size() == d->rhs_contract.size() && d->lhs_batch.size() == d->rhs_batch.size(), id,
          "dimension lists must pair up");
    Shape s;
    for (size_t i = 0; i < d->lhs_batch.size(); ++i) {
      check(a.shape.at(d->lhs_batch[i]) == b.shape.at(d->rhs_batch[i]), id, "batch dims differ");
      s.push_back(a.shape[d->lhs_batch[i]]);
    }
    for (size_t i = 0; i < d->lhs_contract.size(); ++i)
      check(a.shape.at(d->lhs_contract[i]) == b.shape.at(d->rhs_contract[i]), id, "contracting dims differ");
    auto free_dims = [&](const Type& x, const std::vector<int64_t>& c, const std::vector<int64_t>& bt) {
      for (int64_t i = 0; i < x.rank(); ++i)
        if (std::find(c.begin(), c.end(), i) == c.end() && std::find(bt.begin(), bt.end(), i) == bt.end())
          s.push_back(x.shape[i]);
    };
    free_dims(a, d->lhs_contract, d->lhs_batch);
    free_dims(b, d->rhs_contract, d->rhs_batch);
    return s;
  }

  void expect_counts(OpId id, size_t operands, size_t results) {
    const Op& o = fn_.ops[id];
    check(o.operands.size() == operands, id, fmt::format("expected {} operands, got {}", operands, o.operands.size()));
    check(o.results.size() == results, id, fmt::format("expected {} results, got {}", results, o.results.size()));
  }
  void expect_index_scalars(OpId id, size_t from, size_t to) {
    const Op& o = fn_.ops[id];
    for (size_t i = from; i < to; ++i) {
      const Type& ty = t(o.operands[i]);
      check(ty.is_scalar() && is_int(ty.dtype), id, fmt::format("operand {} must be an integer scalar, got {}", i, type_str(ty)));
    }
  }

  // view and slice: operand 0 (a ref or a value of `source`'s shape) windowed by one start per dim;
  // returns the window's shape (squeezed dims dropped).
  Shape window_shape(OpId id, const Type& source, const char* what) {
    const Op& o = fn_.ops[id];
    const auto* va = std::get_if<ViewAttr>(&o.attr);
    check(va && static_cast<int64_t>(va->dims.size()) == source.rank(), id, fmt::format("{} needs one index per dim", what));
    check(o.operands.size() == 1 + va->dims.size() && o.results.size() == 1, id, fmt::format("{} needs one start per dim", what));
    expect_index_scalars(id, 1, o.operands.size());
    Shape s;
    for (const ViewDim& d : va->dims) {
      if (!d.squeeze) s.push_back(d.size);
      check(d.size >= 0 && d.stride >= 1, id, "slice size must be >= 0 and stride >= 1");
    }
    return s;
  }

  // Operands 0 and 1 are a copy's source and destination: data refs of one shape and dtype.
  void expect_copy(OpId id) {
    const Op& o = fn_.ops[id];
    const Type& src = t(o.operands[0]);
    const Type& dst = t(o.operands[1]);
    check(src.is_ref() && dst.is_ref() && src.shape == dst.shape && src.dtype == dst.dtype, id,
          "source and destination must be refs of one shape and dtype");
    check(src.space != MemorySpace::SEMAPHORE && dst.space != MemorySpace::SEMAPHORE, id, "semaphores are not copied");
  }

  // Operands from `first` on name a device: i32 scalars, one logical id or one coordinate per mesh axis.
  void expect_device(OpId id, size_t first) {
    const Op& o = fn_.ops[id];
    const auto* d = std::get_if<DeviceAttr>(&o.attr);
    check(d != nullptr, id, "needs a device attribute");
    check(!d->logical || o.operands.size() == first + 1, id, "a logical device id is one operand");
    for (size_t i = first; i < o.operands.size(); ++i)
      check(t(o.operands[i]) == Type::scalar(DType::i32), id, "device coordinates are i32 scalars");
  }

  // Operand i must be one semaphore (a rank-0 ref in SEMAPHORE) of `kind` (either kind when unset).
  void expect_semaphore(OpId id, size_t i, std::optional<DType> kind) {
    const Type& s = t(fn_.ops[id].operands.at(i));
    check(s.is_ref() && s.space == MemorySpace::SEMAPHORE && s.shape.empty() && is_semaphore(s.dtype), id,
          fmt::format("operand {} must be one semaphore, got {}", i, type_str(s)));
    if (kind) check(s.dtype == *kind, id, fmt::format("operand {} must be a {} semaphore", i, dtype_name(*kind)));
  }

  void op(OpId id) {
    const Op& o = fn_.ops[id];
    auto result = [&](size_t i) -> const Type& { return t(o.results.at(i)); };
    switch (o.kind) {
      case OpKind::Constant:
        expect_counts(id, 0, 1);
        check(std::holds_alternative<Literal>(o.attr), id, "constant needs a literal");
        check(result(0).is_tensor(), id, "constant must be a tensor");
        return;
      case OpKind::ProgramId:
      case OpKind::NumPrograms:
        expect_counts(id, 0, 1);
        check(result(0) == Type::scalar(DType::i32), id, "result must be i32");
        check(std::holds_alternative<int64_t>(o.attr) && std::get<int64_t>(o.attr) >= 0, id, "needs an axis >= 0");
        check(pipeline_depth_ > 0, id, "grid queries must be inside a pipeline");
        return;
      TESSERA_ARITHMETIC_OPS(TESSERA_OP_CASE) {
        expect_counts(id, 2, 1);
        const Type& a = t(o.operands[0]);
        check(a.is_tensor() && a == t(o.operands[1]), id,
              fmt::format("operands must be tensors of one type, got {} and {}", type_str(a), type_str(t(o.operands[1]))));
        check(result(0) == a, id, "result type must equal the operand type");
        if (o.kind == OpKind::And || o.kind == OpKind::Or || o.kind == OpKind::Xor)
          check(!is_float(a.dtype), id, "logical/bitwise ops need bool or integer operands");
        else
          check(!is_bool(a.dtype), id, "arithmetic needs numeric operands, got bool");
        return;
      }
      TESSERA_COMPARISON_OPS(TESSERA_OP_CASE) {
        expect_counts(id, 2, 1);
        const Type& a = t(o.operands[0]);
        check(a.is_tensor() && a == t(o.operands[1]), id, "operands must be tensors of one type");
        check(result(0) == Type::tensor(DType::i1, a.shape), id, "comparisons produce i1 of the operand shape");
        return;
      }
      TESSERA_UNARY_OPS(TESSERA_OP_CASE) {
        expect_counts(id, 1, 1);
        const Type& a = t(o.operands[0]);
        check(a.is_tensor() && result(0) == a, id, "result type must equal the operand type");
        if (o.kind == OpKind::Not) check(!is_float(a.dtype), id, "not needs bool or integer operands");
        else if (o.kind == OpKind::Neg || o.kind == OpKind::Abs) check(!is_bool(a.dtype), id, "needs a numeric operand");
        else check(is_float(a.dtype), id, "needs a floating-point operand");
        return;
      }
      case OpKind::Cast:
        expect_counts(id, 1, 1);
        check(t(o.operands[0]).is_tensor() && result(0).is_tensor() && result(0).shape == t(o.operands[0]).shape, id,
              "cast keeps the shape");
        return;
      case OpKind::Bitcast: {
        expect_counts(id, 1, 1);
        const Type& a = t(o.operands[0]);
        const BitcastShape r = bitcast_shape(a.dtype, result(0).dtype, a.shape);
        check(a.is_tensor() && result(0).is_tensor(), id, "bitcast takes and gives tensors");
        check(r.ok(), id, fmt::format("bitcast {} -> {}: {}", type_str(a), type_str(result(0)), r.error));
        if (r.ok())
          check(r.shape == result(0).shape, id,
                fmt::format("bitcast {} -> {}: the result shape must be {}", type_str(a), type_str(result(0)),
                            shape_tuple_str(r.shape)));
        return;
      }
      case OpKind::MultipleOf: {
        expect_counts(id, 1, 1);
        const Type& a = t(o.operands[0]);
        const auto* n = std::get_if<int64_t>(&o.attr);
        check(a.is_scalar() && is_int(a.dtype) && result(0) == a, id, "multiple_of takes and gives one integer scalar");
        check(n && *n > 0, id, "multiple_of needs a positive n");
        return;
      }
      case OpKind::Select: {
        expect_counts(id, 3, 1);
        const Type& c = t(o.operands[0]);
        const Type& a = t(o.operands[1]);
        check(a.is_tensor() && a == t(o.operands[2]) && result(0) == a, id, "branches and result must have one type");
        check(c == Type::tensor(DType::i1, a.shape), id, "condition must be i1 of the branch shape");
        return;
      }
      case OpKind::Iota: {
        expect_counts(id, 0, 1);
        const Type& r = result(0);
        check(r.is_block() && !is_bool(r.dtype), id, "iota produces a numeric block");
        check(std::holds_alternative<int64_t>(o.attr) && std::get<int64_t>(o.attr) < r.rank(), id, "iota axis out of range");
        return;
      }
      case OpKind::BroadcastTo: {
        expect_counts(id, 1, 1);
        const Type& a = t(o.operands[0]);
        const Type& r = result(0);
        check(a.is_tensor() && r.is_tensor() && a.dtype == r.dtype && a.rank() <= r.rank(), id, "bad broadcast");
        for (int64_t i = 0; i < a.rank(); ++i) {
          int64_t ad = a.shape[a.rank() - 1 - i], rd = r.shape[r.rank() - 1 - i];
          check(ad == rd || ad == 1, id, "broadcast dims must match or be 1");
        }
        return;
      }
      case OpKind::Reshape: {
        expect_counts(id, 1, 1);
        const Type& a = t(o.operands[0]);
        check(a.is_tensor() && result(0).is_tensor() && a.dtype == result(0).dtype &&
                  a.num_elements() == result(0).num_elements(),
              id, "reshape keeps dtype and element count");
        return;
      }
      case OpKind::Transpose: {
        expect_counts(id, 1, 1);
        const Type& a = t(o.operands[0]);
        const auto* perm = std::get_if<std::vector<int64_t>>(&o.attr);
        check(perm && static_cast<int64_t>(perm->size()) == a.rank(), id, "perm must list every dim");
        std::vector<int64_t> sorted = *perm;
        std::sort(sorted.begin(), sorted.end());
        for (int64_t i = 0; i < a.rank(); ++i) check(sorted[i] == i, id, "perm must be a permutation");
        Shape s;
        for (int64_t p : *perm) s.push_back(a.shape[p]);
        check(result(0) == Type::tensor(a.dtype, s), id, "result shape must be the permuted shape");
        return;
      }
      case OpKind::Slice: {
        const Type& a = t(o.operands.at(0));
        check(a.is_tensor(), id, "slice needs a value");
        const Shape s = window_shape(id, a, "slice");
        const auto& va = std::get<ViewAttr>(o.attr);
        for (size_t i = 0; i < va.dims.size(); ++i)
          check(va.dims[i].size == 0 || (va.dims[i].size - 1) * va.dims[i].stride + 1 <= a.shape[i], id,
                "the window must fit in the value");
        check(result(0) == Type::tensor(a.dtype, s), id, "result must be the window's type");
        return;
      }
      case OpKind::Concatenate: {
        check(!o.operands.empty() && o.results.size() == 1, id, "concatenate takes one or more values");
        const Type& first = t(o.operands[0]);
        const auto* axis = std::get_if<int64_t>(&o.attr);
        check(first.is_block() && axis && *axis >= 0 && *axis < first.rank(), id, "concatenate needs blocks and an axis in range");
        Shape s = first.shape;
        s[*axis] = 0;
        for (ValueId v : o.operands) {
          Shape other = t(v).shape;
          check(t(v).is_block() && t(v).dtype == first.dtype && other.size() == s.size(), id,
                "the values must have one dtype and rank");
          s[*axis] += other[*axis];
          other[*axis] = s[*axis];
          check(other == s, id, "the values must agree on every dim but the axis");
        }
        check(result(0) == Type::tensor(first.dtype, s), id, "result must be the joined shape");
        return;
      }
      case OpKind::ReduceSum:
      case OpKind::ReduceMax:
      case OpKind::ReduceMin: {
        expect_counts(id, 1, 1);
        const Type& a = t(o.operands[0]);
        const auto* axes = std::get_if<std::vector<int64_t>>(&o.attr);
        check(axes != nullptr, id, "needs axes");
        std::set<int64_t> ax(axes->begin(), axes->end());
        check(ax.size() == axes->size(), id, "axes must be distinct");
        Shape s;
        for (int64_t i = 0; i < a.rank(); ++i)
          if (!ax.count(i)) s.push_back(a.shape[i]);
        for (int64_t x : ax) check(x >= 0 && x < a.rank(), id, "axis out of range");
        check(result(0) == Type::tensor(a.dtype, s), id, "result must drop the reduced axes");
        return;
      }
      case OpKind::DotGeneral: {
        expect_counts(id, 2, 1);
        const Shape s = dot_shape(id, o.operands[0], o.operands[1]);
        check(result(0).is_tensor() && result(0).shape == s, id,
              fmt::format("result shape must be {}", shape_tuple_str(s)));
        return;
      }
      case OpKind::Alloc:
        expect_counts(id, 0, 1);
        check(result(0).is_ref(), id, "alloc produces a ref");
        check(is_semaphore(result(0).dtype) == (result(0).space == MemorySpace::SEMAPHORE), id,
              "semaphores (and only they) live in memory space SEMAPHORE");
        return;
      case OpKind::Scope: {
        check(o.operands.empty() && o.regions.size() == 1 && fn_.regions[o.regions[0]].args.empty(), id,
              "scope takes no operands and one region without arguments");
        const Op* y = yield_of(o.regions[0]);
        check(y && y->operands.size() == o.results.size(), id, "the body must yield one value per result");
        for (size_t i = 0; i < o.results.size(); ++i)
          check(t(y->operands[i]) == result(i) && result(i).is_tensor(), id, "the body yields a value of the wrong type");
        return;
      }
      case OpKind::DmaStart:
        expect_counts(id, 3, 0);
        expect_copy(id);
        expect_semaphore(id, 2, DType::dma_sem);
        return;
      case OpKind::DmaWait:
        expect_counts(id, 1, 0);
        expect_semaphore(id, 0, DType::dma_sem);
        check(std::holds_alternative<int64_t>(o.attr) && std::get<int64_t>(o.attr) >= 0, id, "needs a byte count >= 0");
        return;
      case OpKind::SemaphoreSignal:
      case OpKind::SemaphoreWait:
        expect_counts(id, 2, 0);
        expect_semaphore(id, 0, DType::sem);
        check(t(o.operands[1]) == Type::scalar(DType::i32), id, "the amount must be an i32 scalar");
        return;
      case OpKind::RemoteDmaStart: {
        check(o.operands.size() >= 5 && o.results.empty(), id, "takes src, dst, send_sem, recv_sem and a device");
        expect_copy(id);
        expect_semaphore(id, 2, DType::dma_sem);
        expect_semaphore(id, 3, DType::dma_sem);
        expect_device(id, 4);
        return;
      }
      case OpKind::RemoteSemaphoreSignal:
        check(o.operands.size() >= 3 && o.results.empty(), id, "takes sem, inc and a device");
        expect_semaphore(id, 0, DType::sem);
        check(t(o.operands[1]) == Type::scalar(DType::i32), id, "the amount must be an i32 scalar");
        expect_device(id, 2);
        return;
      case OpKind::AxisIndex:
        expect_counts(id, 0, 1);
        check(result(0) == Type::scalar(DType::i32), id, "result must be i32");
        check(std::holds_alternative<int64_t>(o.attr) && std::get<int64_t>(o.attr) >= 0, id, "needs an axis >= 0");
        return;
      case OpKind::SemaphoreRead:
        expect_counts(id, 1, 1);
        expect_semaphore(id, 0, std::nullopt);
        check(result(0) == Type::scalar(DType::i32), id, "the result is an i32 scalar");
        return;
      case OpKind::View: {
        const Type& r = t(o.operands.at(0));
        check(r.is_ref(), id, "view needs a ref and one index per dim");
        const Shape s = window_shape(id, r, "view");
        check(result(0) == Type::ref(r.dtype, s, r.space), id, "result must be the window's ref type");
        return;
      }
      case OpKind::Load: {
        check(!o.operands.empty() && o.operands.size() <= 3 && o.results.size() == 1, id, "load takes ref [, mask [, other]]");
        const Type& r = t(o.operands[0]);
        check(r.is_ref() && result(0) == r.value_type(), id, "result must be the ref's value type");
        check(!is_dma_only(r.space) && r.space != MemorySpace::SEMAPHORE, id, "ANY/HBM refs and semaphores cannot be loaded");
        if (o.operands.size() > 1) check(t(o.operands[1]) == Type::tensor(DType::i1, r.shape), id, "mask must be i1 of the ref shape");
        if (o.operands.size() > 2) check(t(o.operands[2]) == r.value_type(), id, "other must have the ref's value type");
        return;
      }
      case OpKind::DotAccumulate: {
        expect_counts(id, 3, 0);
        const Type& r = t(o.operands[0]);
        check(r.is_ref() && !is_dma_only(r.space) && r.space != MemorySpace::SEMAPHORE, id,
              "accumulates into a VMEM or SMEM ref");
        const Shape s = dot_shape(id, o.operands[1], o.operands[2]);
        check(r.shape == s, id, fmt::format("the ref's shape must be the dot's, {}", shape_tuple_str(s)));
        return;
      }
      case OpKind::Store: {
        check(o.operands.size() == 2 || o.operands.size() == 3, id, "store takes ref, value [, mask]");
        check(o.results.empty(), id, "store has no results");
        const Type& r = t(o.operands[0]);
        check(r.is_ref() && t(o.operands[1]) == r.value_type(), id, "value must have the ref's value type");
        check(!is_dma_only(r.space) && r.space != MemorySpace::SEMAPHORE, id, "ANY/HBM refs and semaphores cannot be stored to");
        if (o.operands.size() > 2) check(t(o.operands[2]) == Type::tensor(DType::i1, r.shape), id, "mask must be i1 of the ref shape");
        return;
      }
      case OpKind::If: {
        check(o.operands.size() == 1 && t(o.operands[0]) == Type::scalar(DType::i1), id, "if needs an i1 condition");
        check(o.regions.size() == 2, id, "if has a then and an else region");
        for (RegionId r : o.regions) {
          const Op* y = yield_of(r);
          check(y && y->operands.size() == o.results.size(), id, "each branch must yield one value per result");
          for (size_t i = 0; i < o.results.size(); ++i)
            check(t(y->operands[i]) == result(i), id, "a branch yields a value of the wrong type");
          check(fn_.regions[r].args.empty(), id, "if regions take no arguments");
        }
        return;
      }
      case OpKind::For: {
        check(o.operands.size() >= 3 && o.regions.size() == 1, id, "for takes lb, ub, step, inits and one region");
        const Type& iv = t(o.operands[0]);
        check(iv.is_scalar() && is_int(iv.dtype) && t(o.operands[1]) == iv && t(o.operands[2]) == iv, id,
              "bounds and step must be integer scalars of one type");
        const Region& body = fn_.regions[o.regions[0]];
        size_t carried = o.operands.size() - 3;
        check(body.args.size() == carried + 1 && t(body.args[0]) == iv, id, "body takes the induction variable and the carried values");
        check(o.results.size() == carried, id, "one result per carried value");
        const Op* y = yield_of(o.regions[0]);
        check(y && y->operands.size() == carried, id, "body must yield the carried values");
        for (size_t i = 0; i < carried; ++i) {
          check(t(o.operands[3 + i]) == t(body.args[1 + i]) && t(y->operands[i]) == t(body.args[1 + i]) &&
                    result(i) == t(body.args[1 + i]),
                id, "carried value types must agree");
        }
        return;
      }
      case OpKind::While: {
        check(o.regions.size() == 2, id, "while has a condition and a body region");
        const size_t carried = o.operands.size();
        check(o.results.size() == carried, id, "one result per carried value");
        for (RegionId r : o.regions) {
          const Region& region = fn_.regions[r];
          check(region.args.size() == carried, id, "the condition and the body take the carried values");
          for (size_t i = 0; i < carried; ++i)
            check(t(region.args[i]) == t(o.operands[i]) && result(i) == t(o.operands[i]), id,
                  "carried value types must agree");
        }
        const Op* c = yield_of(o.regions[0]);
        check(c && c->operands.size() == 1 && t(c->operands[0]) == Type::scalar(DType::i1), id,
              "the condition must yield one i1 scalar");
        const Op* y = yield_of(o.regions[1]);
        check(y && y->operands.size() == carried, id, "body must yield the carried values");
        for (size_t i = 0; i < carried; ++i)
          check(t(y->operands[i]) == t(o.operands[i]), id, "carried value types must agree");
        return;
      }
      case OpKind::Yield:
        check(o.results.empty(), id, "yield has no results");
        return;
      case OpKind::Pipeline: {
        const auto* pa = std::get_if<PipelineAttr>(&o.attr);
        check(pa != nullptr, id, "pipeline needs its attribute");
        check(pa->semantics.size() == pa->grid.size(), id, "one semantics entry per grid dim");
        for (int64_t g : pa->grid) check(g >= 0 || g == kDynamicDim, id, "grid dims are >= 0 or dynamic");
        const size_t first = 2 + pa->dynamic_dims();  // lo, hi, then one size per dynamic dim
        check(o.operands.size() == first + pa->operands.size(), id,
              "pipeline takes lo, hi, one size per dynamic grid dim and one ref per operand");
        expect_index_scalars(id, 0, 2);
        for (size_t i = 2; i < first; ++i)
          check(t(o.operands[i]) == Type::scalar(DType::index), id, "dynamic grid sizes are index scalars");
        size_t windowed = 0;
        for (const PipelineOperand& po : pa->operands) windowed += po.windowed;
        check(o.regions.size() == windowed + 1, id, "one index map per windowed operand plus a body");
        const Region& body = fn_.regions[o.regions.back()];
        check(body.args.size() == pa->operands.size(), id, "the body takes one ref per operand");
        size_t r = 0;
        for (size_t k = 0; k < pa->operands.size(); ++k) {
          const PipelineOperand& po = pa->operands[k];
          const Type& arr = t(o.operands[first + k]);
          check(arr.is_ref(), id, "pipeline operands are refs");
          if (!po.windowed) {
            check(t(body.args[k]) == arr, id, "an unwindowed operand is passed as is");
            continue;
          }
          check(po.block.size() == arr.shape.size() && po.squeezed.size() == arr.shape.size(), id,
                "block rank must equal the array rank");
          check(po.buffers >= 1 && (!po.is_output || po.buffers <= 2), id,
                "an operand has 1 or more block buffers, an output at most 2");
          check(!po.lookahead || (!po.is_output && po.buffers >= 2), id, "only an input ring of 2 or more buffers looks ahead");
          check(po.kinds.empty() || po.kinds.size() == arr.shape.size(), id, "no block dim kinds, or one per dim");
          check(po.pad_lo.size() == po.pad_hi.size() && (po.pad_lo.empty() || po.pad_lo.size() == arr.shape.size()), id,
                "no padding, or one (lo, hi) pair per dim");
          for (size_t d = 0; d < po.pad_lo.size(); ++d)
            check(po.pad_lo[d] >= 0 && po.pad_hi[d] >= 0 &&
                      (po.kind(d) == BlockDimKind::Element || (po.pad_lo[d] == 0 && po.pad_hi[d] == 0)),
                  id, "only pl::Element dims are padded, by amounts >= 0");
          Shape visible;
          for (size_t d = 0; d < po.block.size(); ++d)
            if (!po.squeezed[d]) visible.push_back(po.block[d]);
          check(t(body.args[k]) == Type::ref(arr.dtype, visible, po.space), id,
                fmt::format("body argument {} must be the block ref", k));
          const Region& map = fn_.regions[o.regions[r]];
          check(map.args.size() == pa->grid.size(), id, "an index map takes one index per grid dim");
          for (ValueId a : map.args) check(t(a) == Type::scalar(DType::i32), id, "grid indices are i32");
          const Op* y = yield_of(o.regions[r]);
          check(y && y->operands.size() == po.block.size() + bounded_dims(po.kinds), id,
                "an index map yields one index per array dim, then one size per bounded dim");
          for (ValueId v : y->operands) check(t(v) == Type::scalar(DType::i64), id, "block indices and sizes are i64");
          ++r;
        }
        return;
      }
      case OpKind::PipelineBegin:
        expect_counts(id, 0, 0);
        check(std::holds_alternative<int64_t>(o.attr) && std::get<int64_t>(o.attr) > 0, id, "needs a pipeline number > 0");
        return;
      case OpKind::GridPoint:
        check(o.results.empty(), id, "grid_point has no results");
        check(std::holds_alternative<int64_t>(o.attr) && std::get<int64_t>(o.attr) >= 0, id, "needs a depth >= 0");
        expect_index_scalars(id, 0, o.operands.size());
        return;
      case OpKind::FetchBlock:
      case OpKind::WritebackBlock: {
        check(o.operands.size() >= 2 && o.results.empty(), id, "takes a source, a destination and starts");
        const Type& a = t(o.operands[0]);
        const Type& b = t(o.operands[1]);
        check(a.is_ref() && b.is_ref() && a.dtype == b.dtype && a.rank() == b.rank(), id,
              "source and destination must be refs of one dtype and rank");
        check(std::holds_alternative<BlockCopyAttr>(o.attr), id, "needs a block copy attribute");
        const auto& attr = std::get<BlockCopyAttr>(o.attr);
        check(attr.pad_lo.size() == attr.pad_hi.size() && (attr.pad_lo.empty() || attr.pad_lo.size() == static_cast<size_t>(a.rank())),
              id, "no padding, or one (lo, hi) pair per dim");
        check(attr.kinds.empty() || attr.kinds.size() == static_cast<size_t>(a.rank()), id, "no dim kinds, or one per dim");
        const size_t starts_end = 2 + static_cast<size_t>(a.rank());
        const size_t sizes_end = starts_end + bounded_dims(attr.kinds);
        check(o.operands.size() == sizes_end || o.operands.size() == sizes_end + 1, id,
              "one start per dim, one size per bounded dim, then an optional semaphore");
        expect_index_scalars(id, 2, sizes_end);
        if (o.operands.size() > sizes_end) expect_semaphore(id, sizes_end, DType::dma_sem);
        return;
      }
      case OpKind::BlockView: {
        check(!o.operands.empty() && o.results.size() == 1, id, "block_view takes an array and starts");
        const Type& a = t(o.operands[0]);
        const Type& r = result(0);
        check(a.is_ref() && r.is_ref() && a.dtype == r.dtype && a.rank() == r.rank(), id,
              "the block has the array's dtype and rank");
        check(o.operands.size() == 1 + static_cast<size_t>(a.rank()), id, "one start per dim");
        for (int64_t d = 0; d < a.rank(); ++d) check(r.shape[d] <= a.shape[d], id, "the block fits in the array");
        check(std::holds_alternative<BlockCopyAttr>(o.attr), id, "needs a block copy attribute");
        expect_index_scalars(id, 1, o.operands.size());
        return;
      }
      case OpKind::TraceStart:
      case OpKind::TraceStop:
        check(o.operands.empty() && o.results.empty() && std::holds_alternative<std::string>(o.attr), id,
              "a trace scope op takes a name and nothing else");
        return;
      case OpKind::CheckGrid:
        check(o.results.empty() && std::holds_alternative<std::string>(o.attr), id,
              "check_grid takes grid sizes and what the pipeline is");
        for (ValueId v : o.operands) check(t(v) == Type::scalar(DType::index), id, "grid sizes are index scalars");
        return;
      case OpKind::DebugPrint:
        check(o.results.empty() && std::holds_alternative<std::string>(o.attr), id, "debug_print takes a format");
        for (ValueId v : o.operands) check(t(v).is_tensor(), id, "debug_print prints values");
        return;
    }
    fail(id, "unknown op kind");
  }

  const Function& fn_;
  std::string_view who_;
  std::vector<char> visible_;
  int pipeline_depth_ = 0;
};

}  // namespace

void verify(const Function& fn, std::string_view who) { Verifier(fn, who).run(); }

}  // namespace tessera::ir
