#include "jit/ir/printer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <vector>

#include "jit/ir/operands.h"
#include "runtime/element_rules.h"

namespace tessera::ir {

std::string literal_str(const Literal& lit, DType dtype) {
  if (is_float(dtype)) {
    double f = lit.as_double();
    if (std::isnan(f)) return "nan";
    if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
    std::string s = fmt::format("{}", f);
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return s;
  }
  if (dtype == DType::i1) return lit.i ? "true" : "false";
  // A u64 prints its unsigned value, the one the constant holds (its bits past 2^63 would print negative).
  if (dtype == DType::u64)
    return fmt::format("{}", lit.is_float ? rules::float_to_int<uint64_t>(lit.f) : static_cast<uint64_t>(lit.i));
  return fmt::format("{}", lit.is_float ? static_cast<int64_t>(lit.f) : lit.i);
}

static std::string ints_str(const std::vector<int64_t>& v) { return fmt::format("[{}]", fmt::join(v, ", ")); }

std::string attr_str(const Attr& attr) {
  struct Visitor {
    std::string operator()(std::monostate) const { return ""; }
    std::string operator()(const Literal& l) const {
      return l.is_float ? literal_str(l, DType::f64) : fmt::format("{}", l.i);
    }
    std::string operator()(int64_t axis) const { return fmt::format("{}", axis); }
    std::string operator()(const std::vector<int64_t>& v) const { return ints_str(v); }
    std::string operator()(const std::string& s) const { return fmt::format("\"{}\"", s); }
    std::string operator()(const ViewAttr& v) const {
      std::vector<std::string> dims;
      for (const ViewDim& d : v.dims)
        dims.push_back(d.squeeze ? "i" : d.stride == 1 ? fmt::format("{}", d.size) : fmt::format("{}:{}", d.size, d.stride));
      return fmt::format("[{}]", fmt::join(dims, ", "));
    }
    std::string operator()(const DotAttr& d) const {
      return fmt::format("contract={}x{} batch={}x{}", ints_str(d.lhs_contract), ints_str(d.rhs_contract),
                         ints_str(d.lhs_batch), ints_str(d.rhs_batch));
    }
    std::string operator()(const PipelineAttr& p) const {
      std::vector<std::string_view> sem;
      for (DimSemantics s : p.semantics) sem.push_back(dim_semantics_name(s));
      std::string s = p.id > 0 ? fmt::format("#{} ", p.id) : std::string();
      std::vector<std::string> grid;
      for (int64_t g : p.grid) grid.push_back(g == kDynamicDim ? std::string("?") : fmt::format("{}", g));
      s += fmt::format("grid=[{}] semantics=[{}]", fmt::join(grid, ", "), fmt::join(sem, ", "));
      for (const PipelineOperand& o : p.operands) {
        s += fmt::format(" {{\"{}\"", o.name);
        if (o.windowed) {
          std::vector<std::string> dims;
          for (size_t i = 0; i < o.block.size(); ++i) {
            const bool padded = !o.pad_lo.empty() && (o.pad_lo[i] != 0 || o.pad_hi[i] != 0);
            switch (o.kind(i)) {
              case BlockDimKind::Blocked:
                dims.push_back(o.squeezed[i] ? std::string("squeezed") : fmt::format("{}", o.block[i]));
                break;
              case BlockDimKind::Element:
                dims.push_back(padded ? fmt::format("element({}, {}:{})", o.block[i], o.pad_lo[i], o.pad_hi[i])
                                      : fmt::format("element({})", o.block[i]));
                break;
              case BlockDimKind::Bounded: dims.push_back(fmt::format("bounded({})", o.block[i])); break;
            }
          }
          s += fmt::format(" block=[{}] {}", fmt::join(dims, ", "), memory_space_name(o.space));
          if (o.buffers > 1) s += fmt::format(" buffers={}", o.buffers);
          if (o.lookahead) s += " lookahead";
        } else {
          s += " whole";
        }
        if (o.aliased) s += " aliased";
        s += "}";
      }
      return s;
    }
    std::string operator()(const DeviceAttr& d) const { return d.logical ? "logical" : "mesh"; }
    std::string operator()(const BlockCopyAttr& b) const {
      std::string s = fmt::format("\"{}\"{}{}", b.name, b.pipeline > 0 ? fmt::format(" #{}", b.pipeline) : "",
                                  b.aliased ? " aliased" : "");
      if (!b.pad_lo.empty()) {
        std::vector<std::string> pads;
        for (size_t d = 0; d < b.pad_lo.size(); ++d) pads.push_back(fmt::format("{}:{}", b.pad_lo[d], b.pad_hi[d]));
        s += fmt::format(" pad=[{}]", fmt::join(pads, ", "));
      }
      if (!b.kinds.empty()) {
        std::vector<std::string_view> kinds;
        for (BlockDimKind k : b.kinds) kinds.push_back(block_dim_kind_name(k));
        s += fmt::format(" dims=[{}]", fmt::join(kinds, ", "));
      }
      return s;
    }
  };
  return std::visit(Visitor{}, attr);
}

namespace {

class Printer {
 public:
  Printer(const Function& fn, PrintOptions opts) : fn_(fn), opts_(opts), number_(fn.values.size(), -1) {}

  std::string function() {
    std::vector<std::string> params;
    for (ValueId p : fn_.params()) {
      const std::string& n = fn_.values[p].name;
      params.push_back(fmt::format("{}{}: {}", def(p), n.empty() ? "" : fmt::format(" \"{}\"", n), type_str(fn_.type(p))));
    }
    out_ += fmt::format("kernel @{}({}) {{\n", fn_.name, fmt::join(params, ", "));
    region_body(fn_.body, 1);
    out_ += "}\n";
    return std::move(out_);
  }

  std::string single_op(OpId id) {
    // Number everything in definition order first so the op's values get the names print() gives them.
    for (ValueId p : fn_.params()) def(p);
    number_region(fn_.body);
    op(id, 0);
    return std::move(out_);
  }

 private:
  void number_region(RegionId r) {
    for (ValueId a : fn_.regions[r].args) def(a);
    for (OpId o : fn_.regions[r].ops) {
      for (RegionId sub : fn_.ops[o].regions) number_region(sub);
      for (ValueId v : fn_.ops[o].results) def(v);
    }
  }

  std::string def(ValueId v) {
    if (number_[v] < 0) number_[v] = next_++;
    return fmt::format("%{}", number_[v]);
  }
  std::string use(ValueId v) const {
    if (v >= number_.size() || number_[v] < 0) return fmt::format("%<undefined {}>", v);
    return fmt::format("%{}", number_[v]);
  }
  std::string uses(const std::vector<ValueId>& vs, size_t from = 0, size_t to = SIZE_MAX) const {
    std::vector<std::string> s;
    for (size_t i = from; i < vs.size() && i < to; ++i) s.push_back(use(vs[i]));
    return fmt::format("{}", fmt::join(s, ", "));
  }
  std::string uses(OperandSpan vs) const {
    std::vector<std::string> s;
    for (ValueId v : vs) s.push_back(use(v));
    return fmt::format("{}", fmt::join(s, ", "));
  }
  std::string types(const std::vector<ValueId>& vs) const {
    std::vector<std::string> s;
    for (ValueId v : vs) s.push_back(type_str(fn_.type(v)));
    return fmt::format("{}", fmt::join(s, ", "));
  }
  std::string region_args(RegionId r) {
    std::vector<std::string> s;
    for (ValueId a : fn_.regions[r].args) s.push_back(fmt::format("{}: {}", def(a), type_str(fn_.type(a))));
    return fmt::format("({})", fmt::join(s, ", "));
  }
  void indent(int depth) { out_.append(static_cast<size_t>(depth) * 2, ' '); }

  // A region's ops; a trailing yield without values is implied and not printed.
  void region_body(RegionId r, int depth) {
    const auto& ops = fn_.regions[r].ops;
    for (size_t i = 0; i < ops.size(); ++i) {
      const Op& o = fn_.ops[ops[i]];
      if (i + 1 == ops.size() && o.kind == OpKind::Yield && o.operands.empty()) break;
      op(ops[i], depth);
    }
  }

  void end_line(const Op& o) {
    if (opts_.locations && o.loc.known()) out_ += fmt::format("  // {}", o.loc.str());
    out_ += "\n";
  }

  void op(OpId id, int depth) {
    const Op& o = fn_.ops[id];
    indent(depth);
    std::string results;
    if (!o.results.empty() && o.kind != OpKind::For && o.kind != OpKind::If &&
        o.kind != OpKind::While) {
      std::vector<std::string> rs;
      for (ValueId v : o.results) rs.push_back(def(v));
      results = fmt::format("{} = ", fmt::join(rs, ", "));
    }
    switch (o.kind) {
      case OpKind::Constant:
        out_ += fmt::format("{}constant {} : {}", results,
                            literal_str(std::get<Literal>(o.attr), fn_.type(o.results[0]).dtype),
                            type_str(fn_.type(o.results[0])));
        end_line(o);
        return;
      case OpKind::View:
      case OpKind::Slice: {
        const auto& va = std::get<ViewAttr>(o.attr);
        const WindowOperands operands = window_operands(o);
        std::vector<std::string> dims;
        for (size_t i = 0; i < va.dims.size(); ++i) {
          std::string start = use(operands.starts[i]);
          const ViewDim& d = va.dims[i];
          if (d.squeeze) dims.push_back(start);
          else if (d.stride == 1) dims.push_back(fmt::format("ds({}, {})", start, d.size));
          else dims.push_back(fmt::format("ds({}, {}, {})", start, d.size, d.stride));
        }
        out_ += fmt::format("{}{} {}[{}] : {}", results, mnemonic(o.kind), use(operands.ref), fmt::join(dims, ", "),
                            type_str(fn_.type(o.results[0])));
        end_line(o);
        return;
      }
      case OpKind::Load: {
        const LoadOperands operands = load_operands(o);
        out_ += fmt::format("{}load {}", results, use(operands.ref));
        if (operands.mask != kNone) out_ += fmt::format(", mask {}", use(operands.mask));
        if (operands.other != kNone) out_ += fmt::format(", other {}", use(operands.other));
        out_ += fmt::format(" : {}", type_str(fn_.type(o.results[0])));
        end_line(o);
        return;
      }
      case OpKind::Store: {
        const StoreOperands operands = store_operands(o);
        out_ += fmt::format("store {}, {}", use(operands.ref), use(operands.value));
        if (operands.mask != kNone) out_ += fmt::format(", mask {}", use(operands.mask));
        end_line(o);
        return;
      }
      case OpKind::DotAccumulate: {
        const DotOperands operands = dot_operands(o);
        out_ += fmt::format("dot_accumulate {} += {}, {} {}", use(operands.acc), use(operands.lhs), use(operands.rhs),
                            attr_str(o.attr));
        end_line(o);
        return;
      }
      case OpKind::If: {
        std::vector<std::string> rs;
        for (ValueId v : o.results) rs.push_back(def(v));
        if (!rs.empty()) out_ += fmt::format("{} = ", fmt::join(rs, ", "));
        out_ += fmt::format("if {}", use(o.operands[0]));
        if (!o.results.empty()) out_ += fmt::format(" -> ({})", types(o.results));
        out_ += " {";
        end_line(o);
        region_body(o.regions[0], depth + 1);
        const Region& else_region = fn_.regions[o.regions[1]];
        bool trivial_else = else_region.ops.size() == 1 && fn_.ops[else_region.ops[0]].operands.empty();
        if (!trivial_else) {
          indent(depth);
          out_ += "} else {\n";
          region_body(o.regions[1], depth + 1);
        }
        indent(depth);
        out_ += "}\n";
        return;
      }
      case OpKind::For: {
        const Region& body = fn_.regions[o.regions[0]];
        std::vector<std::string> rs;
        for (ValueId v : o.results) rs.push_back(def(v));
        if (!rs.empty()) out_ += fmt::format("{} = ", fmt::join(rs, ", "));
        const ForOperands operands = for_operands(o);
        out_ += fmt::format("for {}: {} = {} to {} step {}", def(body.args[0]), type_str(fn_.type(body.args[0])),
                            use(operands.lb), use(operands.ub), use(operands.step));
        if (!operands.inits.empty()) {
          std::vector<std::string> it;
          for (size_t i = 0; i < operands.inits.size(); ++i)
            it.push_back(fmt::format("{}: {} = {}", def(body.args[i + 1]), type_str(fn_.type(body.args[i + 1])),
                                     use(operands.inits[i])));
          out_ += fmt::format(" iter({})", fmt::join(it, ", "));
        }
        out_ += " {";
        end_line(o);
        region_body(o.regions[0], depth + 1);
        indent(depth);
        out_ += "}\n";
        return;
      }
      case OpKind::While: {
        // %r = while (%a: T = %init, ...) { condition } do (%b: T, ...) { body }
        std::vector<std::string> rs;
        for (ValueId v : o.results) rs.push_back(def(v));
        if (!rs.empty()) out_ += fmt::format("{} = ", fmt::join(rs, ", "));
        const Region& cond = fn_.regions[o.regions[0]];
        std::vector<std::string> it;
        for (size_t i = 0; i < o.operands.size(); ++i)
          it.push_back(fmt::format("{}: {} = {}", def(cond.args[i]), type_str(fn_.type(cond.args[i])), use(o.operands[i])));
        out_ += fmt::format("while ({}) {{", fmt::join(it, ", "));
        end_line(o);
        region_body(o.regions[0], depth + 1);
        indent(depth);
        out_ += fmt::format("}} do {} {{\n", region_args(o.regions[1]));
        region_body(o.regions[1], depth + 1);
        indent(depth);
        out_ += "}\n";
        return;
      }
      case OpKind::Pipeline: {
        const auto& pa = std::get<PipelineAttr>(o.attr);
        const PipelineOperands operands = pipeline_operands(o);
        // Only a grid with dynamic dims has sizes(...), so static pipelines print as they always did.
        out_ += fmt::format("pipeline {} steps({}, {}){} operands({}) {{", attr_str(o.attr), use(operands.lo),
                            use(operands.hi), operands.sizes.empty() ? "" : fmt::format(" sizes({})", uses(operands.sizes)),
                            uses(operands.refs));
        end_line(o);
        size_t r = 0;
        for (const PipelineOperand& po : pa.operands) {
          if (!po.windowed) continue;
          indent(depth + 1);
          out_ += fmt::format("index_map \"{}\" {} {{\n", po.name, region_args(o.regions[r]));
          region_body(o.regions[r], depth + 2);
          indent(depth + 1);
          out_ += "}\n";
          ++r;
        }
        indent(depth + 1);
        out_ += fmt::format("body {} {{\n", region_args(o.regions[r]));
        region_body(o.regions[r], depth + 2);
        indent(depth + 1);
        out_ += "}\n";
        indent(depth);
        out_ += "}\n";
        return;
      }
      case OpKind::FetchBlock:
      case OpKind::WritebackBlock:
      {
        const BlockCopyOperands operands = block_copy_operands(fn_, o);
        out_ += fmt::format("{} {} {} -> {} at [{}]", mnemonic(o.kind), attr_str(o.attr), use(operands.src()),
                            use(operands.dst()), uses(operands.starts));
        if (!operands.sizes.empty()) out_ += fmt::format(" size [{}]", uses(operands.sizes));
        if (operands.sem != kNone) out_ += fmt::format(" signal {}", use(operands.sem));
        end_line(o);
        return;
      }
      case OpKind::GridPoint: {
        const int64_t depth = std::get<int64_t>(o.attr);
        out_ += "grid_point";
        if (!o.operands.empty()) out_ += " " + uses(o.operands);
        if (depth > 0) out_ += fmt::format(" depth={}", depth);
        end_line(o);
        return;
      }
      case OpKind::BlockView: {
        const WindowOperands operands = window_operands(o);
        out_ += fmt::format("{}block_view {} {} at [{}] : {}", results, attr_str(o.attr), use(operands.ref),
                            uses(operands.starts), type_str(fn_.type(o.results[0])));
        end_line(o);
        return;
      }
      default: break;
    }
    // Generic form: %r = mnemonic %a, %b attr : result types
    out_ += fmt::format("{}{}", results, mnemonic(o.kind));
    if (!o.operands.empty()) out_ += " " + uses(o.operands);
    std::string a = attr_str(o.attr);
    if (!a.empty()) {
      const char* key = "";
      switch (o.kind) {
        case OpKind::ProgramId:
        case OpKind::NumPrograms:
        case OpKind::Iota:
        case OpKind::Concatenate: key = "axis="; break;
        case OpKind::Transpose: key = "perm="; break;
        case OpKind::DmaWait: key = "bytes="; break;
        case OpKind::MultipleOf: key = "n="; break;
        case OpKind::AxisIndex: key = "axis="; break;
        case OpKind::RemoteDmaStart:
        case OpKind::RemoteSemaphoreSignal: key = "device="; break;
        case OpKind::PipelineBegin: key = "#"; break;
        case OpKind::ReduceSum:
        case OpKind::ReduceMax:
        case OpKind::ReduceMin: key = "axes="; break;
        default: break;
      }
      out_ += fmt::format("{}{}{}", o.operands.empty() ? " " : " ", key, a);
    }
    if (!o.results.empty()) out_ += fmt::format(" : {}", types(o.results));
    end_line(o);
    for (RegionId r : o.regions) {
      indent(depth);
      out_ += fmt::format("{} {{\n", region_args(r));
      region_body(r, depth + 1);
      indent(depth);
      out_ += "}\n";
    }
  }

  const Function& fn_;
  PrintOptions opts_;
  std::vector<int> number_;
  int next_ = 0;
  std::string out_;
};

}  // namespace

std::string print(const Function& fn, PrintOptions options) { return Printer(fn, options).function(); }

std::string print_op(const Function& fn, OpId op) { return Printer(fn, {}).single_op(op); }

}  // namespace tessera::ir
