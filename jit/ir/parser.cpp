#include "jit/ir/parser.h"

#include <fmt/format.h>

#include <cctype>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

namespace tessera::ir {

namespace {

std::optional<OpKind> op_by_mnemonic(std::string_view m) {
  static const std::unordered_map<std::string_view, OpKind> table = [] {
    std::unordered_map<std::string_view, OpKind> t;
    for (OpKind k : all_op_kinds()) t.emplace(mnemonic(k), k);
    return t;
  }();
  auto it = table.find(m);
  if (it == table.end()) return std::nullopt;
  return it->second;
}

std::optional<MemorySpace> space_by_name(std::string_view name) {
  for (MemorySpace s : {MemorySpace::ANY, MemorySpace::HBM, MemorySpace::VMEM, MemorySpace::SMEM, MemorySpace::SEMAPHORE})
    if (memory_space_name(s) == name) return s;
  return std::nullopt;
}

std::optional<DType> dtype_by_name(std::string_view name) {
  // dtype_from_name knows the value dtypes only; refs also hold semaphores.
  for (DType t : {DType::sem, DType::dma_sem})
    if (dtype_name(t) == name) return t;
  return dtype_from_name(name);
}

bool is_word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Function function() {
    skip_blank_lines();
    expect("kernel");
    expect("@");
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] != '(' && text_[pos_] != '\n') ++pos_;
    fn_.name = std::string(text_.substr(start, pos_ - start));
    if (fn_.name.empty()) fail("a kernel name after `@`");
    fn_.body = new_region(kNone);
    expect("(");
    if (!accept(")")) {
      do {
        const std::string name = value_name();
        std::string hint;
        if (peek_is('"')) hint = string();
        expect(":");
        define(name, type(), kNone, fn_.body);
        fn_.values.back().name = std::move(hint);
        fn_.regions[fn_.body].args.push_back(static_cast<ValueId>(fn_.values.size() - 1));
      } while (accept(","));
      expect(")");
    }
    expect("{");
    end_line(nullptr);
    region_body(fn_.body);
    expect("}");
    skip_blank_lines();
    if (pos_ < text_.size()) fail("the end of the text after the kernel's closing `}`");
    return std::move(fn_);
  }

 private:
  // ---- errors and positions ---------------------------------------------------------------------

  [[noreturn]] void fail(const std::string& expected) const {
    size_t line = 1, line_start = 0;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i)
      if (text_[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    size_t line_end = text_.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = text_.size();
    const std::string_view line_text = text_.substr(line_start, line_end - line_start);
    const size_t column = pos_ - line_start + 1;
    std::string found = pos_ >= text_.size() ? "the end of the text"
                        : text_[pos_] == '\n' ? "the end of the line"
                                              : fmt::format("`{}`", text_.substr(pos_, std::min<size_t>(16, line_end - pos_)));
    throw UserError(fmt::format("IR text, line {}, column {}: expected {}", line, column, expected),
                    fmt::format("{} in line {}: {}", found, line, line_text),
                    "write the IR as ir::print prints it", SourceLoc{});
  }

  // ---- characters and tokens --------------------------------------------------------------------

  void skip_spaces() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\r')) ++pos_;
  }
  // Empty lines and whole-line comments (dump headers) between statements.
  void skip_blank_lines() {
    for (;;) {
      skip_spaces();
      if (pos_ < text_.size() && text_[pos_] == '\n') {
        ++pos_;
      } else if (text_.substr(pos_, 2) == "//") {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        return;
      }
    }
  }
  bool peek_is(char c) {
    skip_spaces();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  bool accept(std::string_view s) {
    skip_spaces();
    if (text_.substr(pos_, s.size()) != s) return false;
    // A keyword must not be the start of a longer word ("in" in "input").
    if (is_word_char(s.back()) && pos_ + s.size() < text_.size() && is_word_char(text_[pos_ + s.size()])) return false;
    pos_ += s.size();
    return true;
  }
  void expect(std::string_view s) {
    if (!accept(s)) fail(fmt::format("`{}`", s));
  }
  std::string_view word() {
    skip_spaces();
    const size_t start = pos_;
    while (pos_ < text_.size() && is_word_char(text_[pos_])) ++pos_;
    return text_.substr(start, pos_ - start);
  }
  // A memory space by name; on anything else the error points at the word and says `expected`.
  MemorySpace memory_space(const std::string& expected) {
    const size_t at = (skip_spaces(), pos_);
    const auto space = space_by_name(word());
    if (!space) {
      pos_ = at;
      fail(expected);
    }
    return *space;
  }
  int64_t integer() {
    skip_spaces();
    const size_t start = pos_;
    if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
    const size_t digits = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    if (pos_ == digits) {
      pos_ = start;
      fail("an integer");
    }
    return std::strtoll(std::string(text_.substr(start, pos_ - start)).c_str(), nullptr, 10);
  }
  std::string string() {
    skip_spaces();
    if (pos_ >= text_.size() || text_[pos_] != '"') fail("a string in double quotes");
    const size_t end = text_.find('"', pos_ + 1);
    if (end == std::string_view::npos || text_.substr(pos_, end - pos_).find('\n') != std::string_view::npos)
      fail("a string closed on the same line");
    std::string s(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return s;
  }
  // [1, 2, 3]
  std::vector<int64_t> ints() {
    std::vector<int64_t> v;
    expect("[");
    if (accept("]")) return v;
    do v.push_back(integer());
    while (accept(","));
    expect("]");
    return v;
  }

  // The end of an op's line: an optional "// file:line" location, then a newline (or the text's end).
  void end_line(Op* op) {
    skip_spaces();
    if (text_.substr(pos_, 2) == "//") {
      pos_ += 2;
      skip_spaces();
      const size_t start = pos_;
      while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      std::string_view loc = text_.substr(start, pos_ - start);
      while (!loc.empty() && (loc.back() == ' ' || loc.back() == '\r')) loc.remove_suffix(1);
      const size_t colon = loc.rfind(':');
      if (op && colon != std::string_view::npos && colon > 0) {
        const std::string line(loc.substr(colon + 1));
        char* end = nullptr;
        const unsigned long n = std::strtoul(line.c_str(), &end, 10);
        if (!line.empty() && *end == '\0' && n > 0) {
          op->loc.file = interned_file_name(loc.substr(0, colon));
          op->loc.line = static_cast<uint32_t>(n);
        }
      }
    }
    if (pos_ < text_.size()) {
      if (text_[pos_] != '\n') fail("the end of the line");
      ++pos_;
    }
  }

  // ---- types --------------------------------------------------------------------------------------

  // "f32", "8x8xbf16": dims, each followed by `x`, then the dtype.
  std::pair<DType, Shape> tensor_type() {
    skip_spaces();
    Shape shape;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      shape.push_back(integer());
      if (pos_ >= text_.size() || text_[pos_] != 'x') fail("`x` after a dimension");
      ++pos_;
    }
    const size_t at = pos_;
    const std::string_view name = word();
    const auto dtype = dtype_by_name(name);
    if (!dtype) {
      pos_ = at;
      fail("a dtype (f32, bf16, i32, index, dma_sem, ...)");
    }
    return {*dtype, std::move(shape)};
  }
  Type type() {
    if (accept("ref")) {
      expect("<");
      auto [dtype, shape] = tensor_type();
      expect(",");
      const MemorySpace space = memory_space("a memory space (any, hbm, vmem, smem, semaphore)");
      expect(">");
      return Type::ref(dtype, std::move(shape), space);
    }
    auto [dtype, shape] = tensor_type();
    return Type::tensor(dtype, std::move(shape));
  }
  std::vector<Type> types() {
    std::vector<Type> ts;
    do ts.push_back(type());
    while (accept(","));
    return ts;
  }

  // ---- values -------------------------------------------------------------------------------------

  std::string value_name() {
    skip_spaces();
    if (pos_ >= text_.size() || text_[pos_] != '%') fail("a value (`%n`)");
    const size_t start = pos_++;
    while (pos_ < text_.size() && is_word_char(text_[pos_])) ++pos_;
    if (pos_ == start + 1) {
      pos_ = start;
      fail("a value (`%n`)");
    }
    return std::string(text_.substr(start, pos_ - start));
  }
  ValueId use() {
    const size_t at = (skip_spaces(), pos_);
    const std::string name = value_name();
    auto it = names_.find(name);
    if (it == names_.end()) {
      pos_ = at;
      fail(fmt::format("a value defined before this use ({} is not)", name));
    }
    return it->second;
  }
  std::vector<ValueId> uses() {
    std::vector<ValueId> vs;
    do vs.push_back(use());
    while (accept(","));
    return vs;
  }
  // Operands up to the first token that is not a value.
  std::vector<ValueId> optional_uses() { return peek_is('%') ? uses() : std::vector<ValueId>{}; }

  ValueId define(const std::string& name, Type t, OpId def, RegionId region) {
    if (names_.count(name)) fail(fmt::format("a new value name ({} is defined twice)", name));
    const auto v = static_cast<ValueId>(fn_.values.size());
    fn_.values.push_back(ValueInfo{std::move(t), def, region, {}});
    names_.emplace(name, v);
    return v;
  }

  // ---- regions ------------------------------------------------------------------------------------

  RegionId new_region(OpId parent) {
    fn_.regions.push_back(Region{});
    fn_.regions.back().parent_op = parent;
    return static_cast<RegionId>(fn_.regions.size() - 1);
  }
  // "(%a: T, %b: U)" for region `r`.
  void region_args(RegionId r) {
    expect("(");
    if (accept(")")) return;
    do {
      const std::string name = value_name();
      expect(":");
      fn_.regions[r].args.push_back(define(name, type(), kNone, r));
    } while (accept(","));
    expect(")");
  }
  // Ops up to the closing `}` (not consumed).
  void region_body(RegionId r) {
    for (;;) {
      skip_blank_lines();
      if (pos_ >= text_.size()) fail("`}` closing a region");
      if (text_[pos_] == '}') return;
      op(r);
    }
  }
  // "{" newline, ops, "}" newline; the op's line (with the `{`) was read up to the `{`.
  void braced_region(RegionId r) {
    region_body(r);
    expect("}");
    end_line(nullptr);
  }
  // A region of op `id` printed with its arguments: "(%a: T, ...) {" newline, ops, "}" newline.
  RegionId region_with_args(OpId id, bool implied_yield) {
    const RegionId r = new_region(id);
    fn_.ops[id].regions.push_back(r);
    region_args(r);
    expect("{");
    end_line(nullptr);
    braced_region(r);
    if (implied_yield) add_implied_yield(r);
    return r;
  }
  // The printer leaves out a trailing yield without values; every region of an op has one, except
  // a pipeline's body (as the verifier requires).
  void add_implied_yield(RegionId r) {
    const auto& ops = fn_.regions[r].ops;
    if (!ops.empty() && fn_.ops[ops.back()].kind == OpKind::Yield) return;
    const auto id = static_cast<OpId>(fn_.ops.size());
    fn_.ops.push_back(Op{OpKind::Yield, {}, {}, {}, {}, {}, r});
    fn_.regions[r].ops.push_back(id);
  }

  // A loop's carried values "(%a: T = %init, ...)": the inits become operands of `loop`; returns the
  // arguments' names and types, defined by the caller once the results are.
  std::vector<std::pair<std::string, Type>> carried_values(Op& loop) {
    std::vector<std::pair<std::string, Type>> carried;
    expect("(");
    if (accept(")")) return carried;
    do {
      std::string name = value_name();
      expect(":");
      Type t = type();
      expect("=");
      loop.operands.push_back(use());
      carried.emplace_back(std::move(name), std::move(t));
    } while (accept(","));
    expect(")");
    return carried;
  }

  // ---- ops ----------------------------------------------------------------------------------------

  void op(RegionId parent) {
    std::vector<std::string> results;
    if (peek_is('%')) {
      do results.push_back(value_name());
      while (accept(","));
      expect("=");
    }
    const size_t at = (skip_spaces(), pos_);
    const std::string_view m = word();
    const auto kind = op_by_mnemonic(m);
    if (!kind) {
      pos_ = at;
      fail("an op mnemonic (ops.def)");
    }
    const auto id = static_cast<OpId>(fn_.ops.size());
    fn_.ops.push_back(Op{*kind, {}, {}, {}, {}, {}, parent});
    fn_.regions[parent].ops.push_back(id);
    // fn_.ops grows while regions are parsed: reach the op through its id.
    auto self = [&]() -> Op& { return fn_.ops[id]; };
    auto add_results = [&](const std::vector<Type>& ts) {
      if (ts.size() != results.size()) {
        pos_ = at;
        fail(fmt::format("one result type per result ({} types for {} results)", ts.size(), results.size()));
      }
      for (size_t i = 0; i < ts.size(); ++i) self().results.push_back(define(results[i], ts[i], id, kNone));
    };
    auto one_result = [&](Type t) {
      if (results.size() != 1) {
        pos_ = at;
        fail(fmt::format("one result for `{}`", m));
      }
      add_results({std::move(t)});
    };
    auto no_results = [&] {
      if (!results.empty()) {
        pos_ = at;
        fail(fmt::format("no results for `{}`", m));
      }
    };

    switch (*kind) {
      case OpKind::Constant: {
        // The literal's text depends on the result dtype, which follows it.
        skip_spaces();
        const size_t start = pos_;
        while (pos_ < text_.size() && (is_word_char(text_[pos_]) || text_[pos_] == '.' || text_[pos_] == '-' ||
                                       text_[pos_] == '+'))
          ++pos_;
        const std::string lit(text_.substr(start, pos_ - start));
        expect(":");
        Type t = type();
        char* end = nullptr;
        if (is_float(t.dtype)) {
          const double v = std::strtod(lit.c_str(), &end);
          if (lit.empty() || *end != '\0') {
            pos_ = start;
            fail("a float literal");
          }
          self().attr = Literal::of_float(v);
        } else if (t.dtype == DType::i1) {
          if (lit != "true" && lit != "false") {
            pos_ = start;
            fail("`true` or `false`");
          }
          self().attr = Literal::of_int(lit == "true" ? 1 : 0);
        } else {
          // u64 constants print their unsigned value, which may pass INT64_MAX; the bits are the same.
          const long long v = t.dtype == DType::u64 ? static_cast<long long>(std::strtoull(lit.c_str(), &end, 10))
                                                    : std::strtoll(lit.c_str(), &end, 10);
          if (lit.empty() || *end != '\0') {
            pos_ = start;
            fail("an integer literal");
          }
          self().attr = Literal::of_int(v);
        }
        one_result(std::move(t));
        end_line(&self());
        return;
      }
      case OpKind::View:
      case OpKind::Slice: {
        // view %ref[%i, ds(%s, size), ds(%s, size, stride)] : type (slice %value[...] alike)
        self().operands.push_back(use());
        expect("[");
        ViewAttr va;
        if (!accept("]")) {
          do {
            if (accept("ds")) {
              expect("(");
              self().operands.push_back(use());
              expect(",");
              ViewDim d{false, integer(), 1};
              if (accept(",")) d.stride = integer();
              expect(")");
              va.dims.push_back(d);
            } else {
              self().operands.push_back(use());
              va.dims.push_back(ViewDim{true, 1, 1});
            }
          } while (accept(","));
          expect("]");
        }
        self().attr = std::move(va);
        expect(":");
        one_result(type());
        end_line(&self());
        return;
      }
      case OpKind::Load:
        self().operands.push_back(use());
        if (accept(",")) {
          expect("mask");
          self().operands.push_back(use());
          if (accept(",")) {
            expect("other");
            self().operands.push_back(use());
          }
        }
        expect(":");
        one_result(type());
        end_line(&self());
        return;
      case OpKind::Store:
        no_results();
        self().operands.push_back(use());
        expect(",");
        self().operands.push_back(use());
        if (accept(",")) {
          expect("mask");
          self().operands.push_back(use());
        }
        end_line(&self());
        return;
      case OpKind::If: {
        // if %c [-> (types)] { ... } [else { ... }]
        self().operands.push_back(use());
        std::vector<Type> ts;
        if (accept("->")) {
          expect("(");
          ts = types();
          expect(")");
        }
        add_results(ts);
        expect("{");
        end_line(&self());
        const RegionId then_r = new_region(id), else_r = new_region(id);
        self().regions = {then_r, else_r};
        region_body(then_r);
        expect("}");
        if (accept("else")) {
          expect("{");
          end_line(nullptr);
          braced_region(else_r);
        } else {
          end_line(nullptr);
        }
        add_implied_yield(then_r);
        add_implied_yield(else_r);
        return;
      }
      case OpKind::For: {
        // for %iv: T = %lb to %ub step %s [iter(%a: T = %init, ...)] { ... }
        const RegionId body = new_region(id);
        self().regions = {body};
        const std::string iv = value_name();
        expect(":");
        Type iv_type = type();
        expect("=");
        self().operands.push_back(use());
        expect("to");
        self().operands.push_back(use());
        expect("step");
        self().operands.push_back(use());
        std::vector<std::pair<std::string, Type>> carried;
        if (accept("iter")) carried = carried_values(self());
        std::vector<Type> ts;
        for (const auto& c : carried) ts.push_back(c.second);
        add_results(ts);
        // The printer numbers the results before the body's arguments.
        fn_.regions[body].args.push_back(define(iv, std::move(iv_type), kNone, body));
        for (auto& c : carried) fn_.regions[body].args.push_back(define(c.first, std::move(c.second), kNone, body));
        expect("{");
        end_line(&self());
        braced_region(body);
        add_implied_yield(body);
        return;
      }
      case OpKind::While: {
        // while (%a: T = %init, ...) { condition } do (%b: T, ...) { body }
        const RegionId cond = new_region(id);
        self().regions = {cond};
        std::vector<std::pair<std::string, Type>> carried = carried_values(self());
        std::vector<Type> ts;
        for (const auto& c : carried) ts.push_back(c.second);
        add_results(ts);
        // The printer numbers the results before the condition's arguments.
        for (auto& c : carried) fn_.regions[cond].args.push_back(define(c.first, std::move(c.second), kNone, cond));
        expect("{");
        end_line(&self());
        region_body(cond);
        expect("}");
        expect("do");
        region_with_args(id, /*implied_yield=*/true);
        add_implied_yield(cond);
        return;
      }
      case OpKind::Pipeline: {
        no_results();
        PipelineAttr pa = pipeline_attr();
        expect("steps");
        expect("(");
        self().operands.push_back(use());
        expect(",");
        self().operands.push_back(use());
        expect(")");
        if (accept("sizes")) {
          expect("(");
          for (ValueId v : uses()) self().operands.push_back(v);
          expect(")");
        }
        if (self().operands.size() != pa.dynamic_dims() + 2) {
          pos_ = at;
          fail(fmt::format("one size per dynamic grid dim ({})", pa.dynamic_dims()));
        }
        expect("operands");
        expect("(");
        if (!accept(")")) {
          for (ValueId v : uses()) self().operands.push_back(v);
          expect(")");
        }
        if (self().operands.size() != pa.operands.size() + pa.dynamic_dims() + 2) {
          pos_ = at;
          fail(fmt::format("one operand per pipeline operand attribute ({})", pa.operands.size()));
        }
        expect("{");
        end_line(&self());
        for (const PipelineOperand& po : pa.operands) {
          if (!po.windowed) continue;
          skip_blank_lines();
          expect("index_map");
          const size_t name_at = pos_;
          if (string() != po.name) {
            pos_ = name_at;
            fail(fmt::format("the index map of \"{}\"", po.name));
          }
          region_with_args(id, /*implied_yield=*/true);
        }
        skip_blank_lines();
        expect("body");
        region_with_args(id, /*implied_yield=*/false);  // a pipeline's body ends without a yield
        skip_blank_lines();
        expect("}");
        end_line(nullptr);
        self().attr = std::move(pa);
        return;
      }
      case OpKind::FetchBlock:
      case OpKind::WritebackBlock: {
        // fetch_block "name" [#p] [aliased] [pad=[lo:hi, ...]] [dims=[kind, ...]] %src -> %dst at [starts]
        //   [size [sizes]] [signal %sem]
        no_results();
        self().attr = block_copy_attr();
        self().operands.push_back(use());
        expect("->");
        self().operands.push_back(use());
        block_starts(self());
        if (accept("size")) {  // [size [sizes]]: one per bounded dim
          expect("[");
          for (ValueId v : uses()) self().operands.push_back(v);
          expect("]");
        }
        if (accept("signal")) self().operands.push_back(use());
        end_line(&self());
        return;
      }
      case OpKind::BlockView: {
        // %r = block_view "name" [#p] [aliased] %array at [starts] : type
        self().attr = block_copy_attr();
        self().operands.push_back(use());
        block_starts(self());
        expect(":");
        one_result(type());
        end_line(&self());
        return;
      }
      case OpKind::DotAccumulate:  // dot_accumulate %acc += %lhs, %rhs contract=... batch=...
        no_results();
        self().operands.push_back(use());
        expect("+=");
        self().operands.push_back(use());
        expect(",");
        self().operands.push_back(use());
        self().attr = generic_attr();
        end_line(&self());
        return;
      case OpKind::GridPoint:
        no_results();
        self().operands = optional_uses();
        self().attr = int64_t{accept("depth") ? (expect("="), integer()) : 0};
        end_line(&self());
        return;
      default: break;
    }

    // Generic form: [results =] mnemonic [operands] [attr] [: types], then its regions, each
    // "(args) {" ... "}" on lines of their own.
    self().operands = optional_uses();
    self().attr = generic_attr();
    std::vector<Type> ts;
    if (accept(":")) ts = types();
    add_results(ts);
    end_line(&self());
    for (;;) {
      skip_blank_lines();
      if (!peek_is('(')) break;
      region_with_args(id, /*implied_yield=*/true);
    }
  }

  // ---- attributes ---------------------------------------------------------------------------------

  // The attribute of an op in generic form; its spelling tells its kind (printer.cpp, attr_str and
  // the keys it puts in front).
  Attr generic_attr() {
    skip_spaces();
    if (pos_ >= text_.size() || text_[pos_] == ':' || text_[pos_] == '\n' || text_.substr(pos_, 2) == "//")
      return std::monostate{};
    const char c = text_[pos_];
    if (c == '"') return string();
    if (c == '[') return ints();
    if (c == '#') {
      ++pos_;
      return integer();
    }
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) return integer();
    const size_t at = pos_;
    const std::string_view key = word();
    if (pos_ >= text_.size() || text_[pos_] != '=') {
      pos_ = at;
      fail("an attribute, a `:` before the result types, or the end of the line");
    }
    ++pos_;
    if (key == "axis" || key == "bytes" || key == "depth" || key == "n") return integer();
    if (key == "perm" || key == "axes") return ints();
    if (key == "device") {
      const size_t v = pos_;
      const std::string_view d = word();
      if (d != "mesh" && d != "logical") {
        pos_ = v;
        fail("`mesh` or `logical`");
      }
      return DeviceAttr{d == "logical"};
    }
    if (key == "contract") {
      // contract=[l]x[r] batch=[l]x[r]
      DotAttr d;
      d.lhs_contract = ints();
      expect("x");
      d.rhs_contract = ints();
      expect("batch");
      expect("=");
      d.lhs_batch = ints();
      expect("x");
      d.rhs_batch = ints();
      return d;
    }
    pos_ = at;
    fail("an attribute key (axis=, bytes=, n=, perm=, axes=, device=, contract=)");
  }

  // [#id] grid=[..] semantics=[..] {operand}...
  PipelineAttr pipeline_attr() {
    PipelineAttr pa;
    if (accept("#")) pa.id = integer();
    expect("grid");
    expect("=");
    expect("[");  // sizes, `?` for a dynamic dim
    if (!accept("]")) {
      do pa.grid.push_back(accept("?") ? kDynamicDim : integer());
      while (accept(","));
      expect("]");
    }
    expect("semantics");
    expect("=");
    expect("[");
    if (!accept("]")) {
      do {
        if (accept("parallel")) pa.semantics.push_back(DimSemantics::Parallel);
        else if (accept("arbitrary")) pa.semantics.push_back(DimSemantics::Arbitrary);
        else fail("`parallel` or `arbitrary`");
      } while (accept(","));
      expect("]");
    }
    // {"name" block=[8, squeezed] vmem [buffers=n] [aliased]} or {"name" whole [aliased]}
    while (accept("{")) {
      PipelineOperand po;
      po.name = string();
      // The text does not say which operands are outputs; the front end names them "... output n".
      const size_t sp = po.name.rfind(' ');
      const std::string_view before = sp == std::string::npos ? std::string_view() : std::string_view(po.name).substr(0, sp);
      po.is_output = before == "output" || (before.size() > 7 && before.substr(before.size() - 7) == " output");
      if (accept("whole")) {
        po.windowed = false;
        po.space = MemorySpace::ANY;  // unwindowed operands are ANY or HBM arrays, reached by copies
      } else {
        expect("block");
        expect("=");
        expect("[");
        // A dim: 8, squeezed, element(8), element(8, lo:hi) or bounded(8).
        do {
          BlockDimKind kind = BlockDimKind::Blocked;
          int64_t lo = 0, hi = 0;
          po.squeezed.push_back(false);
          if (accept("squeezed")) {
            po.block.push_back(1);
            po.squeezed.back() = true;
          } else if (accept("element") || accept("bounded")) {
            kind = text_[pos_ - 1] == 't' ? BlockDimKind::Element : BlockDimKind::Bounded;
            expect("(");
            po.block.push_back(integer());
            if (kind == BlockDimKind::Element && accept(",")) {
              lo = integer();
              expect(":");
              hi = integer();
            }
            expect(")");
          } else {
            po.block.push_back(integer());
          }
          po.kinds.push_back(kind);
          po.pad_lo.push_back(lo);
          po.pad_hi.push_back(hi);
        } while (accept(","));
        expect("]");
        // As the front end makes them: no per-dim vectors when every dim is a plain block.
        bool plain = true, padded = false;
        for (size_t d = 0; d < po.kinds.size(); ++d) {
          plain &= po.kinds[d] == BlockDimKind::Blocked;
          padded |= po.pad_lo[d] != 0 || po.pad_hi[d] != 0;
        }
        if (plain) po.kinds.clear();
        if (!padded) po.pad_lo.clear(), po.pad_hi.clear();
        po.space = memory_space("the block's memory space (vmem, smem, ...)");
        if (accept("buffers")) {
          expect("=");
          po.buffers = integer();
        }
        po.lookahead = accept("lookahead");
      }
      po.aliased = accept("aliased");
      expect("}");
      pa.operands.push_back(std::move(po));
    }
    return pa;
  }

  // " at [%s, ...]": a block copy's element offsets, appended to the op's operands.
  void block_starts(Op& op) {
    expect("at");
    expect("[");
    if (accept("]")) return;
    for (ValueId v : uses()) op.operands.push_back(v);
    expect("]");
  }

  // "name" [#p] [aliased]
  BlockCopyAttr block_copy_attr() {
    BlockCopyAttr b;
    b.name = string();
    if (accept("#")) b.pipeline = integer();
    b.aliased = accept("aliased");
    if (accept("pad")) {  // pad=[lo:hi, ...]
      expect("=");
      expect("[");
      do {
        b.pad_lo.push_back(integer());
        expect(":");
        b.pad_hi.push_back(integer());
      } while (accept(","));
      expect("]");
    }
    if (accept("dims")) {  // dims=[blocked|element|bounded, ...]
      expect("=");
      expect("[");
      do {
        if (accept("blocked")) b.kinds.push_back(BlockDimKind::Blocked);
        else if (accept("element")) b.kinds.push_back(BlockDimKind::Element);
        else if (accept("bounded")) b.kinds.push_back(BlockDimKind::Bounded);
        else fail("`blocked`, `element` or `bounded`");
      } while (accept(","));
      expect("]");
    }
    auto& numbers = operand_numbers_[b.pipeline];
    b.operand = numbers.emplace(b.name, static_cast<int64_t>(numbers.size())).first->second;
    return b;
  }

  std::string_view text_;
  size_t pos_ = 0;
  Function fn_;
  std::unordered_map<std::string, ValueId> names_;
  // Per pipeline id: operand name -> the number given to it (BlockCopyAttr::operand).
  std::map<int64_t, std::map<std::string, int64_t>> operand_numbers_;
};

}  // namespace

Function parse(std::string_view text) { return Parser(text).function(); }

}  // namespace tessera::ir
