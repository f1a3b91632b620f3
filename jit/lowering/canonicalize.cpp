#include "jit/lowering/canonicalize.h"

#include "jit/ir/operands.h"
#include "jit/ir/rewriter.h"
#include "runtime/block_ops.h"

namespace tessera::passes {

using namespace ir;

namespace {

// Ops that must stay: side effects, or a use by an op that stays. Regions of kept ops are walked.
std::vector<char> live_ops(const Function& fn) {
  std::vector<char> live(fn.ops.size(), 0);
  std::vector<OpId> work;
  for (OpId id = 0; id < fn.ops.size(); ++id)
    if (!has_flag(fn.ops[id].kind, kPure)) {
      live[id] = 1;
      work.push_back(id);
    }
  while (!work.empty()) {
    OpId id = work.back();
    work.pop_back();
    for (ValueId v : fn.ops[id].operands) {
      OpId d = fn.values[v].def;
      if (d != kNone && !live[d]) {
        live[d] = 1;
        work.push_back(d);
      }
    }
  }
  return live;
}

// A constant's literal, when `v` is defined by a constant op.
const Literal* constant_of(const Builder& b, ValueId v) {
  const Op* d = b.function().def(v);
  return d && d->kind == OpKind::Constant ? &std::get<Literal>(d->attr) : nullptr;
}

Literal literal_of_scalar(const Array& a) {
  return is_float(a.dtype()) ? Literal::of_float(a.item()) : Literal::of_int(a.item_int());
}

class Canonicalizer {
 public:
  Canonicalizer(const Function& src, bool fold)
      : src_(src), live_(live_ops(src)), fold_(fold), dst_(out_, src.name),
        rw_(src, dst_, [this](Rewriter&, OpId id) { return hook(id); }) {}

  Function run() {
    rw_.clone_params();
    rw_.inline_region(src_.body, dst_.function().params());
    return std::move(out_);
  }

 private:
  bool hook(OpId id) {
    const Op& op = src_.ops[id];
    if (!live_[id]) return true;  // dead: emit nothing
    if (!fold_) return false;
    if (op.kind == OpKind::If) return fold_if(op);
    if (op.kind == OpKind::Select) {
      const SelectOperands operands = select_operands(op);
      const Literal* c = constant_of(dst_, rw_.map(operands.cond));
      if (c) {
        rw_.set(op.results[0], rw_.map(c->i ? operands.on_true : operands.on_false));
        return true;
      }
    }
    if (op.results.size() != 1) return false;
    if (fold_identity(op)) return true;
    const bool foldable = has_flag(op.kind, kElementwise) || op.kind == OpKind::BroadcastTo || op.kind == OpKind::Reshape;
    if (!foldable) return false;
    // Every operand a constant: a constant op is a splat, and an element-wise op of splats is the
    // splat of the op on one element, so fold on scalars, with the interpreter's block ops (the
    // rules of runtime/element_rules.h), so a folded constant is what either backend would compute.
    std::vector<Array> scalars;
    for (ValueId v : op.operands) {
      ValueId mv = rw_.map(v);
      const Literal* lit = constant_of(dst_, mv);
      if (!lit) return false;
      scalars.push_back(rt::splat(*lit, dst_.type(mv).dtype, {}));
    }
    const Type& rt = src_.type(op.results[0]);
    Array r;
    switch (op.kind) {
      case OpKind::BroadcastTo:
      case OpKind::Reshape: r = scalars[0]; break;
      case OpKind::Cast: r = scalars[0].astype(rt.dtype); break;
      case OpKind::Select: r = rt::select(scalars[0], scalars[1], scalars[2]); break;
      default:
        r = scalars.size() == 1 ? rt::unary(op.kind, scalars[0]) : rt::binary(op.kind, scalars[0], scalars[1]);
        break;
    }
    rw_.set(op.results[0], dst_.create_value(OpKind::Constant, {}, rt, literal_of_scalar(r), op.loc));
    return true;
  }

  // Boolean identities with one constant operand: x | false = x, x | true = true, x & true = x,
  // x & false = false. (The pipeline's change tests produce them for dims whose index is constant.)
  bool fold_identity(const Op& op) {
    if ((op.kind != OpKind::Or && op.kind != OpKind::And) || src_.type(op.results[0]) != Type::scalar(DType::i1))
      return false;
    for (int c = 0; c < 2; ++c) {
      const ValueId lit_v = rw_.map(op.operands[c]);
      const Literal* lit = constant_of(dst_, lit_v);
      if (!lit) continue;
      const bool absorbing = (op.kind == OpKind::Or) == (lit->i != 0);
      rw_.set(op.results[0], absorbing ? lit_v : rw_.map(op.operands[1 - c]));
      return true;
    }
    return false;
  }

  bool fold_if(const Op& op) {
    const Literal* c = constant_of(dst_, rw_.map(op.operands[0]));
    if (!c) return false;
    std::vector<ValueId> results = rw_.inline_region(op.regions[c->i ? 0 : 1], {});
    for (size_t i = 0; i < op.results.size(); ++i) rw_.set(op.results[i], results[i]);
    return true;
  }

  const Function& src_;
  std::vector<char> live_;
  bool fold_;
  Function out_;
  Builder dst_;
  Rewriter rw_;
};

}  // namespace

Function remove_dead_code(const Function& fn) { return Canonicalizer(fn, false).run(); }

Function canonicalize(const Function& fn) {
  Function cur = Canonicalizer(fn, true).run();
  for (int i = 0; i < 4; ++i) {
    Function next = Canonicalizer(cur, true).run();
    const bool unchanged = next.ops.size() == cur.ops.size();
    cur = std::move(next);
    if (unchanged) break;
  }
  return cur;
}

}  // namespace tessera::passes
