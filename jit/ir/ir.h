// The IR: SSA values, ops with structured regions, and the kernel function that owns them.
//
// Ops are data (docs/design.md §3): an OpKind generated from ops.def, operand and result value ids, nested
// regions, one typed attribute and the user's source location. A Function owns everything in flat
// vectors and refers to it by 32-bit ids, so copying, hashing and printing are simple. Part of the
// innermost layer; depends on nothing but fmt.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "jit/ir/diagnostics.h"
#include "jit/ir/dtype.h"
#include "jit/ir/type.h"

namespace tessera::ir {

enum class OpKind : uint16_t {
#define TESSERA_OP(name, mnemonic, flags) name,
#include "jit/ir/ops.def"
#undef TESSERA_OP
};

// The element-wise op groups that the verifier, the interpreter and the code generator each treat
// as one (ops.def lists them under the same headings), as X-macros over the op names. With
// TESSERA_OP_CASE they give an exhaustive switch one line per group, and the compiler still flags an
// op that neither a group nor a case covers:
//   switch (op.kind) {
//     TESSERA_UNARY_OPS(TESSERA_OP_CASE) return unary(op);
//     ...
// Arithmetic, logical and bitwise: (a, b) -> the operand type.
#define TESSERA_ARITHMETIC_OPS(X) X(Add) X(Sub) X(Mul) X(Div) X(Rem) X(Pow) X(Max) X(Min) X(And) X(Or) X(Xor)
// Comparisons: (a, b) -> i1.
#define TESSERA_COMPARISON_OPS(X) X(Eq) X(Ne) X(Lt) X(Le) X(Gt) X(Ge)
// Unary: (a) -> the operand type.
#define TESSERA_UNARY_OPS(X) \
  X(Neg) X(Abs) X(Not) X(Exp) X(Log) X(Tanh) X(Sqrt) X(Rsqrt) X(Logistic) X(Sin) X(Cos) X(Erf) X(Erfc) X(Floor) X(Ceil)
#define TESSERA_OP_CASE(name) case ::tessera::ir::OpKind::name:

enum OpFlags : uint32_t {
  kPure = 1u << 0,         // no side effects: removable when its results are unused
  kCSE = 1u << 1,          // identical ops may be merged into one (hash-consed while tracing)
  kReadsMemory = 1u << 2,  // reads memory, so two of them are not interchangeable
  kTerminator = 1u << 3,   // ends a region
  kElementwise = 1u << 4,  // applies independently to every element
};

struct OpTraits {
  std::string_view mnemonic;
  uint32_t flags;
};

const OpTraits& traits(OpKind k);
inline std::string_view mnemonic(OpKind k) { return traits(k).mnemonic; }
inline bool has_flag(OpKind k, OpFlags f) { return (traits(k).flags & f) != 0; }

// Every op kind, in ops.def order (for tests that must cover all of them).
std::vector<OpKind> all_op_kinds();

using ValueId = uint32_t;
using OpId = uint32_t;
using RegionId = uint32_t;
inline constexpr uint32_t kNone = UINT32_MAX;

// ---- attributes ---------------------------------------------------------------------------------

// A scalar literal: integers and bools keep their exact value, floats their double value.
struct Literal {
  bool is_float = false;
  int64_t i = 0;
  double f = 0;
  static Literal of_int(int64_t v) { return Literal{false, v, static_cast<double>(v)}; }
  static Literal of_float(double v) { return Literal{true, static_cast<int64_t>(v), v}; }
  double as_double() const { return is_float ? f : static_cast<double>(i); }
  bool operator==(const Literal&) const = default;
};

// One dimension of a view: an integer index (the dim disappears) or a slice of `size` elements
// taken every `stride` elements from the dynamic start.
struct ViewDim {
  bool squeeze = false;
  int64_t size = 1;
  int64_t stride = 1;
  bool operator==(const ViewDim&) const = default;
};
struct ViewAttr {
  std::vector<ViewDim> dims;  // one per dim of the source ref
  bool operator==(const ViewAttr&) const = default;
};

// lax.dot_general dimension numbers.
struct DotAttr {
  std::vector<int64_t> lhs_contract, rhs_contract, lhs_batch, rhs_batch;
  bool operator==(const DotAttr&) const = default;
};

enum class DimSemantics : uint8_t { Parallel, Arbitrary };
std::string_view dim_semantics_name(DimSemantics s);

// How a pipeline presents one operand to its body.
// How an index map's value for one dim places a block window (docs/design.md §4.1).
enum class BlockDimKind : uint8_t {
  Blocked,  // a block index: the window starts at index * block size
  Element,  // pl::Element: an element offset into the array padded by (pad_lo, pad_hi)
  Bounded,  // pl::BoundedSlice: a pl::ds(start, size), size <= the block size known when the kernel runs
};

std::string_view block_dim_kind_name(BlockDimKind k);  // "blocked", "element", "bounded"
// How many dims are Bounded: an index map yields their sizes after its rank indices, a block copy
// takes them after its starts, both in dim order.
size_t bounded_dims(const std::vector<BlockDimKind>& kinds);

struct PipelineOperand {
  std::string name;            // "input 0", "output 1": used in errors
  bool windowed = true;        // false: the body gets the whole array ref (memory space ANY)
  std::vector<int64_t> block;  // the window (full rank); squeezed dims have size 1
  std::vector<bool> squeezed;  // dims whose index map value is an element offset and that the body doesn't see
  MemorySpace space = MemorySpace::VMEM;  // where the window lives
  bool is_output = false;
  bool aliased = false;        // in an input_output_aliases pair (an output may then be revisited)
  SourceLoc loc;               // where its BlockSpec was written: blamed for its block copies
  int64_t buffers = 1;         // block buffers: 1 copies synchronously; n > 1 prefetches n - 1 blocks ahead
  bool lookahead = false;      // a ring input that fetches the next distinct blocks as soon as a slot is free
  std::vector<BlockDimKind> kinds;      // empty (every dim Blocked) or one per dim
  std::vector<int64_t> pad_lo, pad_hi;  // empty or one per dim: pl::Element padding before and after the array
  BlockDimKind kind(size_t d) const { return kinds.empty() ? BlockDimKind::Blocked : kinds[d]; }
  bool operator==(const PipelineOperand&) const = default;
};
// A grid dim whose size is known only when the kernel runs: the pipeline op takes it as an operand
// (docs/design.md §4.1). Printed `?`.
inline constexpr int64_t kDynamicDim = INT64_MIN;
struct PipelineAttr {
  int64_t id = 0;              // 0: the kernel's grid; a nested pipeline (emit_pipeline) has its own number > 0
  std::vector<int64_t> grid;   // sizes >= 0, or kDynamicDim for a dim given by an operand
  std::vector<DimSemantics> semantics;
  std::vector<PipelineOperand> operands;  // inputs first, then outputs
  // How many grid dims are kDynamicDim (the pipeline op's size operands).
  size_t dynamic_dims() const;
  bool operator==(const PipelineAttr&) const = default;
};

// fetch_block / writeback_block: which pipeline operand a copy serves.
struct BlockCopyAttr {
  std::string name;       // "input 0", ...
  int64_t operand = 0;    // index among the pipeline's operands
  bool aliased = false;   // writeback: revisits are allowed
  int64_t pipeline = 0;   // the pipeline's id (PipelineAttr::id)
  // Empty or one per dim: the window may start up to pad_lo before the array and up to pad_hi after
  // its end (pl::Element padding: fetches read poison there, write-backs drop it).
  std::vector<int64_t> pad_lo, pad_hi;
  // Empty (every dim Blocked) or the operand's kind of each dim. A Bounded dim's copied extent is a
  // run-time size operand, given after the starts in dim order (pl::BoundedSlice); the rest of the
  // block in that dim is not copied.
  std::vector<BlockDimKind> kinds;
  bool operator==(const BlockCopyAttr&) const = default;
};

// How a remote op names its target device: by mesh coordinates (one operand per mesh axis) or by a
// logical id (one operand).
struct DeviceAttr {
  bool logical = false;
  bool operator==(const DeviceAttr&) const = default;
};

using Attr = std::variant<std::monostate,
                          Literal,                // constant
                          int64_t,                // program_id, num_programs, iota: axis; dma_wait: bytes; ...
                          std::vector<int64_t>,   // transpose: perm; reductions: axes
                          std::string,            // alloc: purpose; debug_print: format
                          ViewAttr, DotAttr, PipelineAttr, BlockCopyAttr, DeviceAttr>;

// ---- ops, regions, values -----------------------------------------------------------------------

struct Op {
  OpKind kind;
  std::vector<ValueId> operands;
  std::vector<ValueId> results;
  std::vector<RegionId> regions;
  Attr attr;
  SourceLoc loc;
  RegionId parent = kNone;  // the region this op is in
};

struct Region {
  std::vector<ValueId> args;
  std::vector<OpId> ops;
  OpId parent_op = kNone;  // kNone for the function body
};

struct ValueInfo {
  Type type;
  OpId def = kNone;          // the defining op, or kNone for region arguments
  RegionId region = kNone;   // for region arguments: the region
  std::string name;          // optional hint for messages and printing ("input 0")
};

// A traced kernel: its parameters are the arguments of the body region.
struct Function {
  std::string name;
  RegionId body = kNone;
  std::vector<Op> ops;
  std::vector<Region> regions;
  std::vector<ValueInfo> values;

  const Type& type(ValueId v) const { return values.at(v).type; }
  const Op& op(OpId id) const { return ops.at(id); }
  const Region& region(RegionId id) const { return regions.at(id); }
  const std::vector<ValueId>& params() const { return regions.at(body).args; }
  // The op defining `v`, or nullptr for region arguments.
  const Op* def(ValueId v) const {
    OpId d = values.at(v).def;
    return d == kNone ? nullptr : &ops.at(d);
  }
};

// Whether the kernel talks to other devices (remote copies or signals): its launches on a mesh are
// collective.
bool communicates(const Function& fn);

}  // namespace tessera::ir
