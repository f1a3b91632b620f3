// The state of the code generator while it emits one kernel (class Emitter), shared by the files
// that emit each concern: codegen.cpp (setup, values, regions, the op dispatch), codegen_control.cpp
// (for / if / scope), codegen_memory.cpp (refs, loads and stores, block copies, allocations),
// codegen_elements.cpp (element-wise ops, casts, reductions), codegen_dot.cpp (dot_general and the
// accumulating GEMM) and codegen_sync.cpp (DMAs, semaphores, devices). One class keeps the values
// table, the deferred tensors and the runtime declarations in one place, whichever file reads them.
//
// jit/llvm internal: included by jit/llvm/codegen*.cpp only.
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "jit/ir/ir.h"
#include "jit/ir/operands.h"
#include "jit/llvm/codegen_support.h"
#include "jit/llvm/gemm.h"

namespace tessera::jit::cg {

using ir::OpKind;
using ir::ValueId;

using Index = std::vector<llvm::Value*>;  // one i64 per dim

// A ref while generating code: a strided window starting at `base`.
// A lane-checked view's window (rt::lane_checked_views): where its lanes lie in the ref it views,
// for its masked accesses to check lane by lane.
struct LaneBounds {
  std::vector<llvm::Value*> starts;  // i64, one per dim of the viewed ref
  Shape extents;                     // the viewed ref's shape
  std::vector<ir::ViewDim> dims;
};

struct RefCg {
  llvm::Value* base = nullptr;
  DType dtype = DType::f32;
  Shape shape;
  std::vector<int64_t> strides;  // in elements
  ValueId root = ir::kNone;      // the alloc or parameter it points into
  std::shared_ptr<const LaneBounds> lanes;  // a lane-checked view's; null for every other ref
};

// A tensor in memory: element i at ptr[sum i[d] * strides[d]] (elements of dtype).
struct StridedTensor {
  llvm::Value* ptr = nullptr;
  DType dtype = DType::f32;
  std::vector<int64_t> strides;
};

// A tensor while generating code.
struct TensorCg {
  enum class Kind {
    Scalar,  // `scalar` holds the compute value
    Buffer,  // contiguous elements of the storage dtype at `buffer`
    Lazy,    // `gen` computes an element from its index where it is used
    Dot,     // a dot_general not yet computed (it may fuse into an accumulating store)
  };
  Kind kind = Kind::Scalar;
  DType dtype = DType::f32;
  Shape shape;
  llvm::Value* scalar = nullptr;
  llvm::Value* buffer = nullptr;
  std::function<llvm::Value*(const Index&)> gen;
  std::vector<ValueId> deps;  // tensors `gen` reads (lazy ones are prepared before a loop nest)
  std::set<ValueId> roots;    // memory (allocs, parameters) `gen` reads, transitively
  std::set<ValueId> views;    // the ref values it loads from
  ir::OpId dot = ir::kNone;
};

using Cg = std::variant<std::monostate, RefCg, TensorCg>;

inline std::vector<int64_t> row_major(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int64_t d = static_cast<int64_t>(s.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * s[d + 1];
  return st;
}

inline bool is_comparison(OpKind k) {
  return k == OpKind::Eq || k == OpKind::Ne || k == OpKind::Lt || k == OpKind::Le || k == OpKind::Gt || k == OpKind::Ge;
}

class Emitter {
 public:
  Emitter(const ir::Function& fn, llvm::Module& module, const std::string& symbol, const CpuTarget& target);
  void run();

 private:
  // ---- setup (codegen.cpp) ----
  void count_uses();
  void declare_runtime();
  void bind_params();

  // ---- values (codegen.cpp) ----
  void set_scalar(ValueId v, DType t, llvm::Value* x);
  TensorCg& tensor(ValueId v) { return std::get<TensorCg>(values_.at(v)); }
  RefCg& ref(ValueId v) { return std::get<RefCg>(values_.at(v)); }
  llvm::Value* linear(const Index& idx, const Shape& shape);
  llvm::Value* ref_address(const RefCg& r, const Index& idx);
  // The address masked access `access` of `r` (a lane-checked view) reaches at `idx`, whose mask
  // element is `selected`: faults when a selected lane lies outside the viewed ref; a lane left out
  // there reaches a stack slot instead, so nothing outside is touched (codegen_memory.cpp).
  llvm::Value* lane_address(const RefCg& r, const Index& idx, llvm::Value* selected, ir::OpId access);
  // The element of tensor `v` at `idx` (a scalar ignores the index).
  llvm::Value* elem(ValueId v, const Index& idx);
  // A lazy tensor of `type` whose elements come from `gen`, reading the given operand tensors.
  void set_lazy(ValueId v, const Type& type, std::vector<ValueId> deps, std::function<llvm::Value*(const Index&)> gen);
  // Remembers a tensor that reads memory, so that a later store can put it in a temporary first.
  void track(ValueId v);
  // Scratch of `bytes`, allocated once when the kernel starts.
  llvm::Value* temp(int64_t bytes);
  llvm::Value* entry_alloca(llvm::Type* t, int64_t n);
  // Emits a loop nest over `shape`; body(idx) at the innermost level.
  void loop_nest(const Shape& shape, const std::function<void(const Index&)>& body, Index idx = {});
  // Computes everything a lazy tensor needs (dots, reductions) before a loop nest reads it.
  void prepare(ValueId v);
  // Puts a lazy or deferred tensor into a temporary buffer; afterwards it is a Buffer.
  void materialize(ValueId v);
  // Before an op that writes memory of `root` (or any memory when root is kNone): tensors still to
  // be used that read it are computed now, so they see the memory as it was when they were made.
  void flush_readers(ValueId root, const std::set<ValueId>& except = {});
  // The tensors a value's lazy computation consists of (itself included).
  void tree(ValueId v, std::set<ValueId>& out);
  void used(const ir::Op& op);
  // A constant array of i64 in the module (strides the runtime needs).
  llvm::Value* i64_array(const std::vector<int64_t>& values);
  // The integer scalars `starts` sign-extended into an i64 array on the stack: block offsets are
  // 64-bit at the runtime boundary, whatever width the IR computed each one in.
  llvm::Value* i64_starts(ir::OperandSpan starts);
  // Lazy tensors that are cheap to recompute at every use (`depth`: the index arithmetic above v).
  bool cheap(ValueId v, int depth = 0) const;

  // ---- regions, the op dispatch and runtime hooks (codegen.cpp) ----
  // Emits a region's ops; returns the yielded values' ids (the region's arguments are bound by the caller).
  std::vector<ValueId> emit_region(ir::RegionId r);
  // The allocations of a region end with it: the copies touching them complete and their semaphores
  // must be back at zero (the storage itself stays, allocated once when the kernel starts).
  void release_allocations(ir::RegionId r);
  void emit_op(ir::OpId id);
  // Branches to the kernel's exit when a runtime call reported a failure.
  void check(llvm::Value* status);
  void check(llvm::IRBuilderBase& b, llvm::Value* status, llvm::BasicBlock* ok);
  void emit_grid_point(ir::OpId id);
  void emit_check_grid(ir::OpId id);
  llvm::Value* operand_array(const ir::Op& op, llvm::Type* ty);
  void emit_pipeline_begin(ir::OpId id);
  void emit_trace_scope(ir::OpId id);
  void emit_debug_print(ir::OpId id);

  // ---- element-wise ops (codegen_elements.cpp; the runtime's rules, see ops.def) ----
  llvm::Value* nan_of(llvm::Type* t) { return llvm::ConstantFP::getNaN(t); }
  llvm::Value* libm(const char* f32_name, const char* f64_name, DType t, std::vector<llvm::Value*> args);
  llvm::Value* intrinsic(llvm::Intrinsic::ID id, std::vector<llvm::Value*> args);
  llvm::Value* binary(OpKind k, DType t, llvm::Value* x, llvm::Value* y);
  llvm::Value* unary(OpKind k, DType t, llvm::Value* x);
  // astype: the runtime's conversion rules (saturating float -> int, x != 0 -> bool, RNE rounding).
  llvm::Value* convert(DType from, DType to, llvm::Value* x);
  llvm::Value* f32_round_to_odd(llvm::Value* d);
  llvm::Value* constant(const ir::Literal& lit, DType t);
  // An element-wise op: a scalar when every operand is one, else a lazy tensor.
  void elementwise(const ir::Op& op, std::function<llvm::Value*(const Index&)> gen);
  void emit_constant(const ir::Op& op);
  void emit_binary(const ir::Op& op);
  void emit_unary(const ir::Op& op);
  void emit_cast(const ir::Op& op);
  void emit_select(const ir::Op& op);
  void emit_iota(const ir::Op& op);
  void emit_broadcast(const ir::Op& op);
  void emit_transpose(const ir::Op& op);
  void emit_reshape(const ir::Op& op);
  void emit_slice(const ir::Op& op);
  void emit_concatenate(const ir::Op& op);
  void emit_bitcast(const ir::Op& op);
  void emit_multiple_of(const ir::Op& op);
  void reduce(const ir::Op& op);

  // ---- memory: refs, loads and stores, block copies, allocations (codegen_memory.cpp) ----
  void emit_alloc(ir::OpId id);
  void view(ir::OpId id);
  void load(const ir::Op& op);
  void store(ir::OpId id);
  // Whether `r` is a window of an output array large enough to be written past the caches; whether
  // a store into it is written so, and that store, one line-wide non-temporal vector at a time
  // (codegen_memory.cpp says when and why).
  bool past_caches(const RefCg& r) const;
  bool streams_past_caches(const RefCg& r) const;
  void store_streaming(const RefCg& r, ValueId value, const std::function<void(const Index&)>& store_at);
  void emit_block_copy(ir::OpId id);
  void emit_block_view(ir::OpId id);

  // ---- dot_general (codegen_dot.cpp) ----
  void defer_dot(ir::OpId id);
  // store(r, dot) or store(r, load(acc) + dot) of f32 (i32 on the int8 tiles) into a row-major
  // matrix: the GEMM writes the ref directly, its sums starting from acc where it is.
  bool store_dot(const ir::Op& op);
  // ref += dot_general(lhs, rhs).
  void emit_dot_accumulate(ir::OpId id);
  // A tensor as strided memory: in place when it is a plain load of a ref window, or a transpose of
  // one (its strides permuted), else from a temporary.
  StridedTensor strided(ValueId v);
  // The matrices of a dot operand: one per index of its `batch` dims (row-major), rows along dim
  // `row` and columns along dim `col` (-1: a single row or column), strided views of strided(v).
  std::vector<MatrixOperand> matrices(ValueId v, const std::vector<int64_t>& batch, int64_t row, int64_t col);
  // `layout` names what `pack` makes of the block (its form and the dtypes it depends on): dots that
  // pack blocks of the same parameter alike share one cache.
  // With `spread` (the runs of x's block, jit/llvm/gemm.h), a packing starts the cache's prefetch
  // queue over the block `next` bytes on and its slot, and *spread is set to that queue.
  llvm::Value* cached_pack(ValueId v, const MatrixOperand& x, int64_t rows, int64_t cols, int64_t bytes,
                           const std::string& layout, const std::function<void(llvm::Value*)>& pack,
                           SpreadPrefetch* spread = nullptr, int64_t next = 0);
  // When both dot operands are selects that zero them outside the same range of rows along their
  // contracted dims (iota + offset compared with scalars), that range clamped to [0, k) as a KSpan
  // (emitted here), and lhs and rhs replaced by the selects' kept operands.
  std::optional<KSpan> contracted_span(ValueId& lhs, ValueId& rhs, int64_t lhs_dim, int64_t rhs_dim, int64_t k);
  // Computes a deferred dot_general into a temporary that the tensor then holds.
  void compute_dot(ValueId v);
  // dot_general(lhs, rhs) of result type `t`: into `into` (a 2-D ref the micro-kernels write, or
  // null: a temporary returned as a Buffer), with `accumulate` adding it to `into`'s contents or,
  // given `from`, to that ref's; `streaming`: non-temporal stores (CMatrix).
  TensorCg gemm(ValueId lhs, ValueId rhs, const ir::DotAttr& dims, const Type& t, const RefCg* into, bool accumulate,
                const RefCg* from = nullptr, bool streaming = false);

  // ---- control flow (codegen_control.cpp) ----
  // Block values crossing a control-flow boundary live in buffers allocated once.
  llvm::Value* block_slot(const Type& t) { return temp(t.num_elements() * dtype_size(t.dtype)); }
  void copy_into(ValueId v, llvm::Value* slot);
  void bind_buffer(ValueId v, const Type& t, llvm::Value* slot);
  void emit_if(const ir::Op& op);
  // run_scoped: the body inline; block results are copied out of memory the scope may reuse.
  void emit_scope(const ir::Op& op);
  void emit_for(const ir::Op& op);
  // lax.while_loop: the condition region in the loop header, the body in the loop.
  void emit_while(const ir::Op& op);
  // Carried values of a loop (for, while): scalars in registers, blocks in a buffer each. The
  // initial values: block inits are copied into their slots (one per init, null for scalars) and
  // the scalars returned.
  std::vector<llvm::Value*> carry_in(ir::OperandSpan inits, std::vector<llvm::Value*>& slots);
  // Binds a region's carried arguments (or the loop's results) to the slots and the scalars in registers.
  void bind_carried(ir::OperandSpan args, const std::vector<llvm::Value*>& slots, const std::vector<llvm::Value*>& scalars);
  // At the end of an iteration: the yielded blocks go into their slots; returns the yielded scalars.
  std::vector<llvm::Value*> carry_out(const std::vector<ValueId>& yielded, const std::vector<llvm::Value*>& slots);

  // ---- DMAs, semaphores and devices (codegen_sync.cpp) ----
  // The device operands of a remote op as an i32 array on the stack.
  llvm::Value* device_operands(ir::OperandSpan device);
  void emit_dma_start(ir::OpId id);
  void emit_wait(ir::OpId id);
  void emit_semaphore_signal(ir::OpId id);
  void emit_semaphore_read(const ir::Op& op);
  void emit_remote_dma_start(ir::OpId id);
  void emit_remote_signal(ir::OpId id);
  void emit_axis_index(const ir::Op& op);

  const ir::Function& fn_;
  const CpuTarget& target_;  // what the dot micro-kernels may use (vector width, AVX-512, bf16)
  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  llvm::IRBuilder<> entry_b_;  // allocations and stack slots, made once when the kernel starts
  llvm::Function* f_ = nullptr;
  llvm::Value* core_ = nullptr;
  llvm::BasicBlock* entry_ = nullptr;
  llvm::BasicBlock* body_ = nullptr;
  llvm::BasicBlock* abort_ = nullptr;
  std::vector<Cg> values_;
  std::vector<int> uses_;           // uses not yet emitted
  std::vector<int> static_uses_;    // uses in the IR
  std::vector<bool> nonlocal_use_;  // used in a region other than its own
  std::vector<std::vector<ValueId>> pending_;  // per open region: tensors that read memory
  bool tracks_copies_ = false;  // the kernel has DMAs or semaphores: allocations are released at region ends
  llvm::FunctionCallee rt_trace_scope_, rt_grid_point_, rt_check_grid_, rt_failed_, rt_alloc_, rt_release_, rt_temp_, rt_ipow_, rt_fetch_, rt_writeback_,
      rt_dma_start_, rt_dma_wait_, rt_sem_signal_, rt_sem_wait_, rt_sem_read_, rt_pipeline_begin_, rt_ready_,
      rt_remote_dma_, rt_remote_signal_, rt_axis_index_, rt_view_fault_, rt_lane_fault_, rt_block_view_fault_, rt_print_;
  // View ops checked lane by lane at their masked accesses (rt::lane_checked_views), and the stack
  // slot a lane outside its ref reads and writes instead (made on first use).
  std::vector<bool> lane_checked_;
  llvm::Value* lane_slot_ = nullptr;
  // The packed-block caches of cached_pack (keys and buffers, made once when the kernel starts), one
  // per parameter and way of packing its blocks: (parameter, layout, strides, block shape) -> cache.
  struct PackCache {
    llvm::Value* keys;
    llvm::Value* buffers;
    int64_t slots;
    llvm::Value* prefetch = nullptr;  // its SpreadPrefetch queue, made on first use
  };
  std::map<std::tuple<ValueId, std::string, int64_t, int64_t, int64_t, int64_t, int64_t>, PackCache> pack_caches_;
};

}  // namespace tessera::jit::cg
