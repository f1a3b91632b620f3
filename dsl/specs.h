// What a pallas_call is told about its operands and its grid, spelled as in Pallas:
//
//   pl::BlockSpec({bm, bk}, [](pl::Value i, pl::Value j, pl::Value k) { return pl::idx(i, k); })
//   pl::BlockSpec({pl::squeezed, 128}, map)       a squeezed dim: size 1, gone from the kernel's ref
//   pl::BlockSpec()                               the whole array as one block (VMEM)
//   pl::BlockSpec(pl::ANY)                        the whole array, unwindowed, reachable by DMA only
//   pl::BlockSpec({bm, bk}, map, pl::Buffered(3)) three block buffers: two blocks fetched ahead
//   pl::Buffered(3, true)                         lookahead: the next distinct blocks fetched ahead
//   pl::BlockSpec({pl::Element(10, {1, 1})}, [](pl::Value i) { return pl::idx(i * 8); })
//                                                 an element offset into the array padded by (1, 1)
//   pl::BlockSpec({pl::BoundedSlice(8), 4}, [&](pl::Value g) { return pl::idx(pl::ds(s[g], n[g]), 0); })
//                                                 a run-time slice of at most 8 rows
//   pl::VMEM({bm, bn}, pl::f32), pl::SMEM(...)    scratch shapes
//   pl::SemaphoreType::DMA, ::REGULAR, DMA({n})   semaphores as scratch
//   pl::GridSpec{.grid, .in_specs, .out_specs, .scratch_shapes}
//   .grid = {pl::axis("i", 2), pl::axis("j", 4)}   named grid dims (pl::axis_index("i") in the kernel)
//   pl::PrefetchScalarGridSpec{.num_scalar_prefetch, .grid, ...}
//   pl::CompilerParams{.dimension_semantics = {pl::parallel, pl::arbitrary}, .vmem_limit_bytes}
//   pl::InterpretParams{...}, pl::CostEstimate{...}, pl::CallOptions{...}, pl::ShapeDtype(shape, dtype)
//
// Index maps take the grid indices (pl::Value), then the scalar-prefetch refs (pl::Ref), and return
// block indices with pl::idx(...) (or one Value for rank-1 arrays). Their arity is found at compile
// time; a map that takes no pl::Value/pl::Ref parameters is a static_assert.
//
// Front-end layer (dsl/).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "dsl/grid_dim.h"
#include "dsl/ref.h"
#include "dsl/signature.h"
#include "dsl/value.h"
#include "runtime/differential.h"

namespace tessera {

// ---- memory spaces and scratch shapes ----

// A buffer type: a shape and dtype in a memory space (pltpu.VMEM((8, 128), f32)).
struct MemoryRef {
  Shape shape;
  DType dtype;
  MemorySpace space;
};

// pl::VMEM, pl::SMEM, pl::ANY, pl::HBM: a memory space, callable to make a MemoryRef.
struct MemorySpaceTag {
  MemorySpace space;
  MemoryRef operator()(Shape shape, DType dtype) const { return MemoryRef{std::move(shape), dtype, space}; }
};
inline constexpr MemorySpaceTag ANY{MemorySpace::ANY};
inline constexpr MemorySpaceTag HBM{MemorySpace::HBM};
inline constexpr MemorySpaceTag VMEM{MemorySpace::VMEM};
inline constexpr MemorySpaceTag SMEM{MemorySpace::SMEM};
// pltpu.SEMAPHORE: a BlockSpec(pl::SEMAPHORE) passes a semaphore array (a pallas_call input or output
// of a semaphore dtype) to the kernel whole, as semaphores (docs/design.md §4.9).
inline constexpr MemorySpaceTag SEMAPHORE{MemorySpace::SEMAPHORE};

// pl::SemaphoreType::DMA / ::REGULAR: one semaphore, as a scratch or run_scoped type; called with a
// shape, an array of them (pltpu.SemaphoreType.DMA((2,))): pl::SemaphoreType::DMA({2}).
struct SemaphoreKind {
  DType dtype;
  MemoryRef operator()(Shape shape) const { return MemoryRef{std::move(shape), dtype, MemorySpace::SEMAPHORE}; }
  operator MemoryRef() const { return MemoryRef{{}, dtype, MemorySpace::SEMAPHORE}; }
};
struct SemaphoreType {
  static constexpr SemaphoreKind DMA{DType::dma_sem};      // counts the bytes of finished copies
  static constexpr SemaphoreKind REGULAR{DType::sem};      // counts signals
};

// An entry of scratch_shapes or a run_scoped type. Scratch is allocated once per call and core,
// uninitialised (semaphores: zero) and persistent across steps.
class ScratchShape {
 public:
  ScratchShape(const MemoryRef& m, std::source_location loc = std::source_location::current()) : ref_(m), loc_(loc) {}
  ScratchShape(SemaphoreKind k, std::source_location loc = std::source_location::current()) : ref_(k), loc_(loc) {}
  const MemoryRef& memory() const { return ref_; }
  SourceLoc loc() const { return loc_; }

 private:
  MemoryRef ref_;
  SourceLoc loc_;
};

// ---- block specs ----

struct Squeezed {};
inline constexpr Squeezed squeezed{};

// pl::Element(n, {lo, hi}): a window of n elements whose index map value is the offset of its first
// element (not a block index), into the array padded by lo elements before and hi after (padding
// reads as uninitialised memory; writes to it are dropped). For overlapping windows: convolutions,
// ragged offsets.
struct Element {
  int64_t block_size;
  std::pair<int64_t, int64_t> padding{0, 0};
  Element(int64_t n, std::pair<int64_t, int64_t> pad = {0, 0}) : block_size(n), padding(pad) {}
};

// pl::BoundedSlice(n): the index map returns pl::ds(start, size) for the dim, size <= n known only
// when the kernel runs; the kernel's ref has n elements there, of which the first `size` are the
// slice (the rest is not copied in or out).
struct BoundedSlice {
  int64_t block_size;
  explicit BoundedSlice(int64_t n) : block_size(n) {}
};

// One dim of a block shape: a size, pl::squeezed, pl::Element or pl::BoundedSlice.
struct BlockDim {
  int64_t size = 1;
  bool is_squeezed = false;
  ir::BlockDimKind kind = ir::BlockDimKind::Blocked;
  std::pair<int64_t, int64_t> padding{0, 0};  // pl::Element's
  BlockDim(int64_t s) : size(s) {}
  BlockDim(int s) : size(s) {}
  BlockDim(Squeezed) : size(1), is_squeezed(true) {}
  BlockDim(Element e) : size(e.block_size), kind(ir::BlockDimKind::Element), padding(e.padding) {}
  BlockDim(BoundedSlice b) : size(b.block_size), kind(ir::BlockDimKind::Bounded) {}
};

// pl::Buffered(n), a BlockSpec's pipeline mode: n block buffers, so the next n - 1 blocks are fetched
// while the body runs (outputs: at most 2). emit_pipeline's default is 2; pallas_call's own blocks
// are copied synchronously (1) unless a spec asks for more. pl::Buffered(n, true) (Pallas's
// use_lookahead=True, inputs only) fetches the next *distinct* blocks, however many steps ahead,
// as soon as a buffer is free, instead of the blocks of the next n - 1 steps.
struct Buffered {
  int64_t buffer_count;
  bool use_lookahead = false;
  explicit Buffered(int64_t n, bool lookahead = false) : buffer_count(n), use_lookahead(lookahead) {}
};

// An index-map argument: a grid index (converts to pl::Value) or a scalar-prefetch ref (pl::Ref).
class IndexArg {
 public:
  IndexArg(Value v, int position, SourceLoc spec) : arg_(v), position_(position), spec_(spec) {}
  IndexArg(Ref r, int position, SourceLoc spec) : arg_(r), position_(position), spec_(spec) {}
  operator Value() const;
  operator Ref() const;

 private:
  std::variant<Value, Ref> arg_;
  int position_;
  SourceLoc spec_;
};

// pl::ds(start, size) with a size known only when the kernel runs: an index map's value for a
// pl::BoundedSlice dim (a ref cannot be indexed with it).
struct BoundedDs {
  Operand start;
  Operand size;
};
inline BoundedDs ds(const Operand& start, const Value& size) { return BoundedDs{start, Operand(size, SourceLoc{})}; }

// One value of an index map: an index, or a slice (pl::ds) for a pl::BoundedSlice dim.
struct MapIndex {
  Operand index;
  std::optional<Operand> size;  // set for a slice
  int64_t stride = 1;
  MapIndex(Operand i) : index(std::move(i)) {}
  MapIndex(const Slice& s) : index(s.start), size(Operand(s.size)), stride(s.stride) {}
  MapIndex(const BoundedDs& s) : index(s.start), size(s.size) {}
};

// The block indices an index map returns.
class Idx {
 public:
  Idx(std::vector<MapIndex> indices) : indices_(std::move(indices)) {}
  const std::vector<MapIndex>& indices() const { return indices_; }

 private:
  std::vector<MapIndex> indices_;
};
namespace detail {
template <class I>
MapIndex map_index(const I& i) {
  if constexpr (std::is_same_v<I, Slice> || std::is_same_v<I, BoundedDs>) return MapIndex(i);
  else return MapIndex(Operand(i));
}
}  // namespace detail
template <class... I>
Idx idx(const I&... indices) {
  return Idx(std::vector<MapIndex>{detail::map_index(indices)...});
}

namespace detail {
inline std::vector<MapIndex> index_map_result(const Idx& i) { return i.indices(); }
inline std::vector<MapIndex> index_map_result(const Value& v) { return {Operand(v, SourceLoc{})}; }
inline std::vector<MapIndex> index_map_result(const std::vector<Value>& vs) {
  std::vector<MapIndex> out;
  for (const Value& v : vs) out.emplace_back(Operand(v, SourceLoc{}));
  return out;
}
inline std::vector<MapIndex> index_map_result(const Slice& s) { return {MapIndex(s)}; }
inline std::vector<MapIndex> index_map_result(const BoundedDs& s) { return {MapIndex(s)}; }
template <class T>
  requires std::is_integral_v<T>
std::vector<MapIndex> index_map_result(T v) {
  return {Operand(static_cast<int64_t>(v))};
}
}  // namespace detail

// A type-erased index map with its arity.
struct IndexMap {
  int arity = 0;
  std::function<std::vector<MapIndex>(std::span<IndexArg>)> fn;
};

class BlockSpec {
 public:
  // The whole array as one block, in VMEM.
  BlockSpec(std::source_location loc = std::source_location::current()) : loc_(loc) {}
  // The whole array in `space`: ANY/HBM hand the kernel the array itself (DMA only), VMEM/SMEM one block.
  BlockSpec(MemorySpaceTag space, std::source_location loc = std::source_location::current())
      : space_(space.space), loc_(loc) {}
  // Blocks of `block_shape` at the block indices `index_map` returns.
  template <class F>
  BlockSpec(std::vector<BlockDim> block_shape, F index_map, std::source_location loc = std::source_location::current())
      : block_shape_(std::move(block_shape)), index_map_(wrap(std::move(index_map))), loc_(loc) {}
  template <class F>
  BlockSpec(std::vector<BlockDim> block_shape, F index_map, MemorySpaceTag space,
            std::source_location loc = std::source_location::current())
      : block_shape_(std::move(block_shape)), index_map_(wrap(std::move(index_map))), space_(space.space), loc_(loc) {}
  // Blocks with a pipeline mode: pl::BlockSpec({bm, bk}, map, pl::Buffered(3)).
  template <class F>
  BlockSpec(std::vector<BlockDim> block_shape, F index_map, Buffered mode,
            std::source_location loc = std::source_location::current())
      : block_shape_(std::move(block_shape)), index_map_(wrap(std::move(index_map))), buffers_(mode.buffer_count),
        lookahead_(mode.use_lookahead), loc_(loc) {}
  // Blocks of `block_shape` always at block index 0.
  BlockSpec(std::vector<BlockDim> block_shape, std::source_location loc = std::source_location::current())
      : block_shape_(std::move(block_shape)), loc_(loc) {}

  const std::optional<std::vector<BlockDim>>& block_shape() const { return block_shape_; }
  const std::optional<IndexMap>& index_map() const { return index_map_; }
  std::optional<MemorySpace> memory_space() const { return space_; }
  std::optional<int64_t> buffer_count() const { return buffers_; }
  bool lookahead() const { return lookahead_; }
  SourceLoc loc() const { return loc_; }

 private:
  template <class F>
  static IndexMap wrap(F f) {
    constexpr int n = detail::arity_of<F, IndexArg>();
    static_assert(n >= 0,
                  "tessera: an index map must take the grid indices as pl::Value (then the scalar-prefetch refs as "
                  "pl::Ref) and return pl::idx(...): [](pl::Value i, pl::Value j) { return pl::idx(i, j); }");
    return IndexMap{n, [f = std::move(f)](std::span<IndexArg> args) mutable {
                      return detail::index_map_result(detail::invoke_n<n>(f, args));
                    }};
  }

  std::optional<std::vector<BlockDim>> block_shape_;
  std::optional<IndexMap> index_map_;
  std::optional<MemorySpace> space_;
  std::optional<int64_t> buffers_;
  bool lookahead_ = false;
  SourceLoc loc_;
};

// ---- grid specs ----

// A named grid dim (Pallas grid=(("foo", 2), ("bar", 4))): pl::axis("foo", 2). The kernel reads its
// program id with pl::axis_index("foo") and its size with pl::axis_size("foo") / pl::num_programs("foo").
struct GridAxis {
  std::string name;
  int64_t size;
  // In a grid with dims sized at call time: `{pl::GridDim("rows", pl::from_prefetch(0)), pl::axis("j", 4)}`.
  operator GridDim() const { return GridDim(name, size); }  // NOLINT: implicit, as a plain number
};
inline GridAxis axis(std::string name, int64_t size) { return GridAxis{std::move(name), size}; }

// A grid: its dims' sizes, `.grid = {m / bm, n / bn}`, or named dims, `.grid = {pl::axis("i", 2),
// pl::axis("j", 4)}` (then every dim has a unique, non-empty name; a UserError at that line otherwise).
// A dim may be sized at call time by a scalar-prefetch argument, `.grid = {pl::from_prefetch(0), 4}`
// (pl::from_prefetch, dsl/grid_dim.h); dims() then holds ir::kDynamicDim there. Such a dim may be
// named too: `.grid = {pl::GridDim("rows", pl::from_prefetch(0)), pl::axis("cols", 4)}`.
class Grid {
 public:
  // A dim sized by scalar-prefetch argument `operand` when the call runs, written at `loc`.
  struct PrefetchDim {
    size_t dim;
    int operand;
    SourceLoc loc;
  };

  Grid() = default;
  Grid(std::initializer_list<int64_t> dims) : dims_(dims) {}
  Grid(std::vector<int64_t> dims) : dims_(std::move(dims)) {}
  Grid(std::initializer_list<GridDim> dims, std::source_location loc = std::source_location::current());
  Grid(std::initializer_list<GridAxis> axes, std::source_location loc = std::source_location::current());

  const std::vector<int64_t>& dims() const { return dims_; }
  // Empty for an unnamed grid, else one per dim.
  const std::vector<std::string>& names() const { return names_; }
  // The dims sized at call time, in order.
  const std::vector<PrefetchDim>& prefetch_dims() const { return prefetch_dims_; }
  operator const std::vector<int64_t>&() const { return dims_; }
  size_t size() const { return dims_.size(); }

 private:
  std::vector<int64_t> dims_;
  std::vector<std::string> names_;
  std::vector<PrefetchDim> prefetch_dims_;
};

struct GridSpec {
  Grid grid;
  std::vector<BlockSpec> in_specs;    // empty: every input is one whole-array block
  std::vector<BlockSpec> out_specs;   // empty: every output is one whole-array block
  std::vector<ScratchShape> scratch_shapes;
};

// A GridSpec whose first `num_scalar_prefetch` call arguments are placed whole in SMEM and passed
// to every index map and (first) to the kernel.
struct PrefetchScalarGridSpec {
  int num_scalar_prefetch = 0;
  Grid grid;
  std::vector<BlockSpec> in_specs;
  std::vector<BlockSpec> out_specs;
  std::vector<ScratchShape> scratch_shapes;
};

// ---- options ----

using DimensionSemantics = ir::DimSemantics;
inline constexpr DimensionSemantics parallel = DimensionSemantics::Parallel;
inline constexpr DimensionSemantics arbitrary = DimensionSemantics::Arbitrary;

struct CompilerParams {
  // One per grid dim; parallel dims must come first. Default: all arbitrary.
  std::vector<DimensionSemantics> dimension_semantics;
  // Per-core VMEM capacity (default 64 MiB).
  std::optional<int64_t> vmem_limit_bytes;
  // Names a collective kernel's communication pattern: it gets a barrier semaphore
  // (pl::get_barrier_semaphore) instead of the implicit barrier at entry. Every device must launch
  // its collective kernels with the same ids in the same order.
  std::optional<int64_t> collective_id;
  // The CPU the compiled kernel is generated for: "native" (this host, every feature it has),
  // "avx2", "avx512", "avx512_bf16" or "amx". Empty: TESSERA_TARGET, else native. A target this CPU
  // cannot run is a UserError when the kernel is compiled (jit/llvm/target.h). The interpreter
  // ignores it.
  std::string target;
};

enum class UninitializedMemory { nan, zero };

// When the interpreter performs a started copy: at once (eager), or only when something waits on
// its semaphore, in a seeded random order (on_wait) — so a read of a copy's destination before its
// wait sees stale or poisoned data instead of silently working.
enum class DmaExecutionMode { eager, on_wait };

// What a load through an out-of-bounds slice or index does in the interpreter: fail (raise), or give
// the poison of memory nobody wrote for the elements outside the ref (uninitialized). Stores and
// copies out of bounds fail either way.
enum class OutOfBoundsReads { raise, uninitialized };

// Which bounds the interpreter checks loads and stores against (pltpu.InterpretParams.buffer_bounds):
// a ref's own shape (logical, also spelled exact), or the shape a TPU lays its buffer out in (padded:
// the last dim rounded up to 128 lanes, the one before it to 8 rows of 32 bits — 16 of a 16-bit dtype,
// 32 of an 8-bit one; SMEM is not padded). Padded, the part of a load past the ref but inside the
// padding reads the poison of uninitialized_memory, and that part of a store is dropped; past the
// padding is out of bounds as before. Copies (DMAs) always check the logical shape.
enum class BufferBounds { logical, exact = logical, padded };

// Selects the interpreter and sets its checks (pltpu.InterpretParams).
struct InterpretParams {
  // Uninitialised memory (scratch, outputs, edge padding) holds NaN / max-int / true, or zeros.
  UninitializedMemory uninitialized_memory = UninitializedMemory::nan;
  // Cores of the simulated device; parallel grid dims are split over them.
  int num_cores_or_threads = 1;
  DmaExecutionMode dma_execution_mode = DmaExecutionMode::eager;
  // Seeds the schedule under on_wait copies: the order in which copies complete and the interleaving
  // of the launch's cores and devices, which then take turns at every DMA and semaphore point (one
  // runs at a time, the seed picks who runs next; docs/design.md §4.15).
  uint64_t random_seed = 0;
  // Schedule exploration: runs the call under this many schedules, seeds random_seed, random_seed + 1,
  // ... (so it needs dma_execution_mode = on_wait), and fails when one errs or deadlocks or when two
  // give different outputs, naming the seed: `.random_seed = K, .num_schedules = 1` replays that
  // schedule exactly, the interleaving of cores and devices included. The outputs are those of the
  // first schedule. An mpmd_map runs one schedule (vary random_seed there).
  int64_t num_schedules = 1;
  // Float computations (arithmetic, casts, reductions, dots, shape ops on float values) are skipped
  // and give +inf, to run a kernel's copies and synchronisation quickly.
  bool skip_floating_point_ops = false;
  // Called at the start of every grid step with its grid point and core, one call at a time.
  std::function<void(std::vector<int64_t> grid_point, int64_t core)> grid_point_recorder;
  // Exact happens-before race detection over every core, copy and device of the call: two accesses
  // to the same bytes, at least one a write, that no wait or signal orders are reported (printed to
  // stderr, and pl::races_found() / pl::race_reports() after the call). Results are unchanged.
  bool detect_races = false;
  // A load whose slice or index reaches past its ref: a RuntimeError (raise), or the in-bounds
  // elements with the poison of uninitialized_memory elsewhere (uninitialized).
  OutOfBoundsReads out_of_bounds_reads = OutOfBoundsReads::raise;
  // pl::run_scoped may allocate ANY/HBM buffers (reachable by copies only), which a TPU cannot; each
  // simulated core gets its own. Without it such a run_scoped is a UserError.
  bool allow_hbm_allocation_in_run_scoped = false;
  // Each core visits the points of its `parallel` grid dims in an order drawn from random_seed (and
  // the core; under num_schedules, each schedule's seed) instead of row-major; the steps of the
  // arbitrary dims under a point keep their order. Each point then runs as a chunk of its own (its
  // first step fetches every input, its last writes every output back), so a kernel whose result
  // depends on the order of a parallel dim, or that carries state across it, shows it.
  bool random_parallel_order = false;
  // Loads and stores are checked against the ref's shape (logical) or its buffer's TPU layout
  // (padded; see BufferBounds).
  BufferBounds buffer_bounds = BufferBounds::logical;
};

// How closely differential mode's compiled and interpreted outputs must agree: finite values within
// atol + rtol * |interpreted|; NaN matches NaN, an infinity the same infinity.
using Tolerance = rt::Tolerance;

// pl.CostEstimate: carried with the call for tools that schedule around it.
struct CostEstimate {
  int64_t flops = 0;
  int64_t transcendentals = 0;
  int64_t bytes_accessed = 0;
  int64_t remote_bytes_transferred = 0;
};

struct CallOptions {
  CompilerParams compiler_params;
  std::optional<InterpretParams> interpret;
  // {input index, output index}: the output starts as the input and shares its buffer. Inputs are
  // counted with the scalar-prefetch operands first, as in Pallas.
  std::map<int, int> input_output_aliases;
  std::optional<CostEstimate> cost_estimate;
  std::string name;
  bool debug = false;  // print the traced and lowered IR when compiling
  // Differential mode: a compiled call also runs in the interpreter and throws tessera::MismatchError
  // when an output differs beyond `check_tolerance` (unset: the dtype's default, docs/design.md
  // §4.14). TESSERA_CHECK_AGAINST_INTERPRETER=1 turns it on for every call. No effect on interpreted calls.
  bool check_against_interpreter = false;
  std::optional<Tolerance> check_tolerance;
  // Differential mode reports an output element no step wrote (the interpreter's poison; compiled code
  // leaves whatever the memory held) as a difference, which finds a forgotten store. false: the call
  // leaves such elements unspecified on purpose and its caller overwrites them (megablox's gmm zeroes
  // the rows outside its shard after the call, as JAX's does), so they are not compared.
  bool check_unwritten = true;
};

// An output's shape and dtype (jax.ShapeDtypeStruct), with the line that wrote it: a shape no array
// can have (a negative dim, a size past int64) is reported there when the call is made.
// A semaphore type (pl::SemaphoreType::DMA, ::REGULAR, DMA({2})) is an output too: the kernel gets
// the semaphores (with a BlockSpec(pl::SEMAPHORE)) and the caller an array of their counts at the
// kernel's end, to pass to a later call (docs/design.md §4.9).
struct ShapeDtype {
  Shape shape;
  DType dtype;
  SourceLoc loc;
  ShapeDtype(Shape s, DType d, std::source_location at = std::source_location::current())
      : shape(std::move(s)), dtype(d), loc(at) {}
  ShapeDtype(SemaphoreKind k, std::source_location at = std::source_location::current())
      : shape{}, dtype(k.dtype), loc(at) {}
  // A semaphore array, pl::SemaphoreType::DMA({2}); a memory ref of another space is a UserError here.
  ShapeDtype(const MemoryRef& m, std::source_location at = std::source_location::current());
};

}  // namespace tessera
