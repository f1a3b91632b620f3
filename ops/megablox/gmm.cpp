#include "ops/megablox/gmm.h"

#include <fmt/format.h>

#include <numeric>

#include "dsl/control.h"
#include "dsl/host_ops.h"
#include "dsl/pallas_call.h"
#include "dsl/profile.h"
#include "dsl/ref.h"
#include "dsl/value.h"
#include "ops/library_call.h"
#include "ops/megablox/group_metadata.h"

namespace tessera::megablox {

namespace {

// ---- argument checks (the seed's _validate_args and friends) ----

std::string shape_text(const Shape& s) { return fmt::format("({})", fmt::join(s, ", ")); }

void check_rank(const Array& a, int64_t rank, const char* api, const char* name, SourceLoc loc) {
  if (a.rank() != rank)
    throw UserError(fmt::format("{}: expected a {}-tensor for '{}' but got a {}-tensor", api, rank, name, a.rank()),
                    fmt::format("'{}' of shape {}", name, shape_text(a.shape())),
                    fmt::format("pass '{}' with {} dims", name, rank), loc);
}

void check_supported_dtype(const Array& a, const char* api, const char* name, SourceLoc loc) {
  if (a.dtype() != DType::f32 && a.dtype() != DType::bf16)
    throw UserError(fmt::format("{}: '{}' must be f32 or bf16", api, name), fmt::format("dtype {}", dtype_name(a.dtype())),
                    fmt::format("convert it first: {}.astype(pl::bf16)", name), loc);
}

// lhs is 2-D, rhs `rhs_rank`-D, both f32 or bf16 (the seed's _validate_args).
void check_operands(const Array& lhs, const Array& rhs, int64_t rhs_rank, const char* api, SourceLoc loc) {
  check_rank(lhs, 2, api, "lhs", loc);
  check_supported_dtype(lhs, api, "lhs", loc);
  check_rank(rhs, rhs_rank, api, "rhs", loc);
  check_supported_dtype(rhs, api, "rhs", loc);
}

// The dtype the dot runs in: bf16 when both operands are, else f32.
DType input_dtype(const Array& lhs, const Array& rhs) {
  return lhs.dtype() == DType::bf16 && rhs.dtype() == DType::bf16 ? DType::bf16 : DType::f32;
}

std::vector<int32_t> checked_group_sizes(const Array& group_sizes, int64_t m, const char* api, SourceLoc loc) {
  if (group_sizes.dtype() != DType::i32 || group_sizes.rank() != 1)
    throw UserError(fmt::format("{}: 'group_sizes' must be a 1-D i32 array", api),
                    fmt::format("dtype {}, shape {}", dtype_name(group_sizes.dtype()), shape_text(group_sizes.shape())),
                    "pass pl::Array::from_vector(std::vector<int32_t>{...}, {num_groups})", loc);
  std::vector<int32_t> sizes = group_sizes.to_vector<int32_t>();
  if (sizes.empty())
    throw UserError(fmt::format("{}: 'group_sizes' is empty", api), "0 groups", "pass at least one group", loc);
  int64_t total = 0;
  for (size_t g = 0; g < sizes.size(); ++g) {
    if (sizes[g] < 0)
      throw UserError(fmt::format("{}: group {} has a negative size", api, g), fmt::format("{}", sizes[g]),
                      "pass a row count of 0 or more for every group", loc);
    total += sizes[g];
  }
  if (total > m)
    throw UserError(fmt::format("{}: the group sizes add up to more rows than there are", api),
                    fmt::format("sum(group_sizes) = {} for m = {}", total, m),
                    "make the groups cover at most the m rows", loc);
  return sizes;
}

Tiling resolve_tiling(const std::variant<Tiling, TilingFn>& tiling, int64_t m, int64_t k, int64_t n, const char* api,
                      SourceLoc loc) {
  Tiling t;
  if (const auto* fixed = std::get_if<Tiling>(&tiling)) {
    t = *fixed;
  } else {
    std::optional<Tiling> tuned = std::get<TilingFn>(tiling)(m, k, n);
    if (!tuned)
      throw UserError(fmt::format("{}: no tuned tiling found for (m, k, n) = ({}, {}, {})", api, m, k, n),
                      "a tiling function that returned nullopt", "add the problem to the table or pass a Tiling", loc);
    t = *tuned;
  }
  if (t.tm < 1 || t.tk < 1 || t.tn < 1)
    throw UserError(fmt::format("{}: tile sizes must be positive", api), fmt::format("(tm, tk, tn) = ({}, {}, {})", t.tm, t.tk, t.tn),
                    "pass e.g. {.tm = 128, .tk = 128, .tn = 128}", loc);
  if (m % t.tm != 0)
    throw UserError(fmt::format("{}: m = {} must be divisible by the m tile size ({})", api, m, t.tm),
                    fmt::format("(tm, tk, tn) = ({}, {}, {})", t.tm, t.tk, t.tn), "pick a tm that divides m", loc);
  return t;
}

int64_t checked_group_offset(const std::optional<int64_t>& offset, int64_t local_groups, int64_t num_groups,
                             const char* api, const char* local_what, SourceLoc loc) {
  const int64_t start = offset.value_or(0);
  if (start < 0 || local_groups < 1 || start + local_groups > num_groups)
    throw UserError(fmt::format("{}: the local groups do not fit in group_sizes", api),
                    fmt::format("group_offset = {}, {} = {}, {} groups in group_sizes", start, local_what, local_groups,
                                num_groups),
                    "keep group_offset + local groups <= the number of groups", loc);
  return start;
}

void check_existing_out(const std::optional<Array>& existing, const Shape& shape, DType preferred, const char* api,
                        SourceLoc loc) {
  if (!existing) return;
  if (existing->dtype() != preferred)
    throw UserError(fmt::format("{}: existing output dtype must match preferred_element_type", api),
                    fmt::format("existing_out is {}, preferred_element_type is {}", dtype_name(existing->dtype()), dtype_name(preferred)),
                    "pass existing_out.astype(preferred_element_type), or change preferred_element_type", loc);
  if (existing->shape() != shape)
    throw UserError(fmt::format("{}: existing output has the wrong shape", api),
                    fmt::format("existing_out {} for an output of shape {}", shape_text(existing->shape()), shape_text(shape)),
                    "pass an existing output of the result's shape", loc);
}

Array i32_array(const std::vector<int32_t>& v) { return Array::from_vector(v, {static_cast<int64_t>(v.size())}); }

// ---- the kernels ----

// What a kernel is specialised on (everything else arrives as arrays).
struct KernelConfig {
  Tiling t;
  int64_t tiles_k = 0, k_rem = 0;
  bool transpose_rhs = false, existing = false;
  DType input = DType::f32, out = DType::f32;
};

// The rows of a grid step: its m-tile's rows [row0, row0 + tm) and its group's [start, end).
struct StepRows {
  Value row0, start, end;
  StepRows(Ref offsets, Ref group_ids, Ref m_tile_ids, const Value& grid_id, int64_t tm) {
    Value group = group_ids[grid_id];
    row0 = m_tile_ids[grid_id] * static_cast<int32_t>(tm);
    start = offsets[group];
    end = offsets[group + 1];
  }
  // The group's rows among rows [first, first + shape[dim]) as a mask of `shape`, rows along `dim`.
  Value mask(const Operand& first, const Shape& shape, int dim) const {
    Value rows = iota(shape, dim) + first;
    return (rows >= start) && (rows < end);
  }
};

// gmm: where an m-tile crosses a group boundary it is visited once per group it holds, and each
// visit computes about its group's rows only, in chunks of the micro-kernel's 8 rows (the whole
// tile when tm is not a multiple of 8): the chunks holding a row of the group, a chunk shared with
// another group computed for each.
constexpr int64_t kChunk = 8;

struct TileSpan {
  int64_t tm = 0, unit = 0;
  Value lo, hi;  // the group's rows of the tile, as tile rows (lo >= hi: none)
  TileSpan(const StepRows& rows, int64_t tm_) : tm(tm_), unit(tm_ % kChunk == 0 ? kChunk : tm_) {
    lo = maximum(rows.start - rows.row0, 0);
    hi = minimum(rows.end - rows.row0, static_cast<int32_t>(tm));
  }
  int32_t u() const { return static_cast<int32_t>(unit); }
  Value any() const { return lo < hi; }
  // Chunk indices: the first holding a row of the group and the first holding only rows past it.
  Value first_chunk() const { return lo / u(); }
  Value past_chunk() const { return (hi + (u() - 1)) / u(); }
  Value inside() const { return lo == 0 && hi == static_cast<int32_t>(tm); }
  // gmm's rows are its dot's free dim, so a chunk's dot costs per row what the whole tile's does, and
  // one chunk at a time wastes least. body(first, n) for each chunk holding rows of the group (first
  // a tile row, n its static row count), or once for the whole tile when it lies inside the group.
  // Pieces of 2^j chunks (up to five dots a visit) measured 5% slower here.
  template <class F>
  void chunk_loop(F&& body) const {
    cond(
        inside(), [&] { body(Operand(0), tm); },
        [&] {
          loop(0, static_cast<int32_t>(tm / unit), [&](Value i) {
            when(any() && i >= first_chunk() && i < past_chunk(), [&] { body(i * u(), unit); });
          });
        });
  }
};

void gmm_kernel(const KernelConfig& c, Ref offsets, Ref group_ids, Ref m_tile_ids, Ref lhs, Ref rhs,
                const std::optional<Ref>& existing, Ref out, Ref acc) {
  const Value grid_id = program_id(1), k_i = program_id(2);
  when(k_i == 0, [&] { acc() = zeros_like(acc); });
  if (existing) {
    // The first step on an output tile starts it from existing_out; later groups merge into it.
    Value prev = where(grid_id > 0, grid_id - 1, 0);
    Value first_visit = (grid_id == 0) || (m_tile_ids[grid_id] != m_tile_ids[prev]);
    when(first_visit, [&] { out() = (*existing)(); });
  }
  const StepRows rows(offsets, group_ids, m_tile_ids, grid_id, c.t.tm);
  const TileSpan span(rows, c.t.tm);
  // The partial last k tile reads past k: zero those columns (rows of a transposed rhs), in both
  // operands alike, which the compiled dot takes as a span of k and sums over [0, k_rem) alone.
  auto mask_k_rem = [&](const Value& x, int dim) {
    return select(iota(x.shape(), dim) < static_cast<int32_t>(c.k_rem), x, zeros(x.shape(), x.dtype()));
  };
  // gmm's rows are its dot's free dim: rows of acc outside the group are computed where they share a
  // chunk with the group's, and never stored.
  auto accumulate = [&](bool mask_k) {
    span.chunk_loop([&](const Operand& first, int64_t n) {
      Value l = lhs.at(ds(first, n), all)(), r = rhs();
      if (mask_k) {
        l = mask_k_rem(l, 1);
        r = mask_k_rem(r, c.transpose_rhs ? 1 : 0);
      }
      DotDimensionNumbers dims{{{1}, {c.transpose_rhs ? 1 : 0}}, {}};
      named_scope("dot", [&] {
        acc.at(ds(first, n), all)() += dot_general(l.astype(c.input), r.astype(c.input), dims, DType::f32);
      });
    });
  };
  const Value last_k = k_i == static_cast<int32_t>(c.tiles_k - 1);
  if (c.k_rem == 0) accumulate(false);
  else cond(last_k, [&] { accumulate(true); }, [&] { accumulate(false); });
  // A tile inside the group stores acc as it is; a boundary visit stores its group's rows [lo, hi)
  // one row at a time, leaving the other rows of the block to the visits of their groups. Neither
  // reads the block back: a masked select of the whole tile against the block read it (fresh
  // output memory, from DRAM) and an iota mask for every element, 3.5% of gmm's time with a
  // boundary in every tile; storing whole 8-row chunks tripled the kernel's compile time.
  when(last_k, [&] {
    named_scope("store", [&] {
      cond(
          span.inside(), [&] { out() = acc().astype(c.out); },
          [&] {
            loop(span.lo, span.hi, [&](Value r) { out.at(ds(r, 1), all)() = acc.at(ds(r, 1), all)().astype(c.out); });
          });
    });
  });
}

// lhs arrives as (k, m) blocks, rhs as (m, n): the tiles' m is the contracted dim.
void tgmm_kernel(const KernelConfig& c, Ref offsets, Ref group_ids, Ref m_tile_ids, Ref lhs, Ref rhs,
                 const std::optional<Ref>& existing, Ref out, Ref acc) {
  const Value grid_id = program_id(2);
  Value group = group_ids[grid_id];
  Value prev = where(grid_id > 0, grid_id - 1, 0);
  Value prev_group = group_ids[prev];
  const Value group_starts = (grid_id == 0) || (prev_group != group);
  Value is_end = grid_id == num_programs(2) - 1;
  Value next = where(is_end, grid_id, grid_id + 1);
  Value next_group = group_ids[next];
  const Value group_ends = is_end || (group != next_group);
  const StepRows rows(offsets, group_ids, m_tile_ids, grid_id, c.t.tm);
  // tgmm's rows are its dot's contracted dim: a visit's dot reads the whole tile with the other
  // groups' rows zeroed in both operands, as the seed does. The compiled dot recognises the masks
  // and sums over the group's rows alone (docs/design.md §8): one pass over the accumulator a visit,
  // where pieces of static length (8-row chunks at the group's ends, whole chunks between) took up
  // to three (tgmm f32 0.85x -> 0.97x the dense matmul on uneven groups, compiled in a seventh of the
  // time). Empty groups get a step only so that their output is written: their dot is zeros.
  // Operands are read inside each branch: a block read before a branch would be copied to cross it.
  auto product = [&] {
    Value l = lhs(), r = rhs();
    l = select(rows.mask(rows.row0, l.shape(), 1), l, zeros(l.shape(), l.dtype()));
    r = select(rows.mask(rows.row0, r.shape(), 0), r, zeros(r.shape(), r.dtype()));
    return dot(l.astype(c.input), r.astype(c.input), DType::f32);
  };
  // The sum is kept in the VMEM scratch, started by the group's first dot and written out once per
  // group. Accumulating straight into an f32 output block instead measured slower: tgmm's output
  // (groups x k x n) is large enough to be written with non-temporal stores, so the block the next
  // dot then reads has left the caches (tgmm f32 0.74x against 0.89x the dense matmul).
  // An f32 output without existing_out is written by the group's last dot itself, `out = acc +
  // dot`: each micro-tile stores its part as it finishes, so the output's stores (non-temporal,
  // past the caches) drain under the arithmetic of the next, where a pass over the accumulator
  // after the dot waited on them (docs/design.md §8).
  const bool store_by_dot = !existing && c.out == DType::f32;
  auto into_acc = [&] { cond(group_starts, [&] { acc() = product(); }, [&] { acc() += product(); }); };
  named_scope("dot", [&] {
    if (!store_by_dot) into_acc();
    else
      cond(
          group_ends, [&] { cond(group_starts, [&] { out() = product(); }, [&] { out() = acc() + product(); }); },
          into_acc);
  });
  if (store_by_dot) return;
  when(group_ends, [&] {
    Value to_store = acc();
    if (existing) to_store = to_store + (*existing)().astype(DType::f32);
    out() = to_store.astype(c.out);
  });
}

// The kernel as a pallas_call-able function of exactly its refs: without existing_out (8 refs) or
// with it (9). The group_offset prefetch ref is read by the index maps only.
using KernelBody = void (*)(const KernelConfig&, Ref, Ref, Ref, Ref, Ref, const std::optional<Ref>&, Ref, Ref);

template <KernelBody Body>
auto kernel_without_existing(const KernelConfig& c) {
  return [c](Ref offs, Ref ids, Ref tiles, Ref, Ref lhs, Ref rhs, Ref out, Ref acc) {
    Body(c, offs, ids, tiles, lhs, rhs, std::nullopt, out, acc);
  };
}
template <KernelBody Body>
auto kernel_with_existing(const KernelConfig& c) {
  return [c](Ref offs, Ref ids, Ref tiles, Ref, Ref lhs, Ref rhs, Ref ex, Ref out, Ref acc) {
    Body(c, offs, ids, tiles, lhs, rhs, ex, out, acc);
  };
}

std::string config_key(const char* api, const KernelConfig& c, const std::vector<int64_t>& grid) {
  return fmt::format("{} t=({},{},{}) k_rem={} T={} ex={} in={} out={} grid=({})", api, c.t.tm, c.t.tk, c.t.tn, c.k_rem,
                     c.transpose_rhs, c.existing, dtype_name(c.input), dtype_name(c.out), fmt::join(grid, ","));
}

// Everything gmm / tgmm compute on the host before their kernel.
struct Plan {
  int64_t m = 0, k = 0, n = 0, tiles_k = 0, tiles_n = 0, start_group = 0, local_groups = 0;
  Tiling t;
  GroupMetadata md;

  // Tile counts (k and n may end in partial tiles) and the schedule.
  void schedule(const std::vector<int32_t>& sizes, bool visit_empty_groups) {
    tiles_k = (k + t.tk - 1) / t.tk;
    tiles_n = (n + t.tn - 1) / t.tn;
    md = make_group_metadata(sizes, m, t.tm, start_group, local_groups, visit_empty_groups);
  }
};

Plan plan_gmm(const Array& lhs, const Array& rhs, const Array& group_sizes, const GmmOptions& o, SourceLoc loc) {
  const char* api = "megablox::gmm";
  check_operands(lhs, rhs, 3, api, loc);
  Plan p;
  p.m = lhs.shape()[0];
  p.k = lhs.shape()[1];
  p.n = o.transpose_rhs ? rhs.shape()[1] : rhs.shape()[2];
  const int64_t rhs_k = o.transpose_rhs ? rhs.shape()[2] : rhs.shape()[1];
  if (rhs_k != p.k)
    throw UserError(fmt::format("{}: lhs and rhs differ in the contracted dim", api),
                    fmt::format("lhs {} and rhs {}{}", shape_text(lhs.shape()), shape_text(rhs.shape()),
                                o.transpose_rhs ? " with transpose_rhs" : ""),
                    o.transpose_rhs ? "rhs is (groups, n, k) with transpose_rhs" : "rhs is (groups, k, n)", loc);
  std::vector<int32_t> sizes = checked_group_sizes(group_sizes, p.m, api, loc);
  p.t = resolve_tiling(o.tiling, p.m, p.k, p.n, api, loc);
  p.local_groups = rhs.shape()[0];
  p.start_group = checked_group_offset(o.group_offset, p.local_groups, static_cast<int64_t>(sizes.size()), api,
                                       "rhs.shape[0]", loc);
  check_existing_out(o.existing_out, {p.m, p.n}, o.preferred_element_type, api, loc);
  p.schedule(sizes, /*visit_empty_groups=*/false);
  return p;
}

Plan plan_tgmm(const Array& lhs, const Array& rhs, const Array& group_sizes, const TgmmOptions& o, SourceLoc loc) {
  const char* api = "megablox::tgmm";
  check_operands(lhs, rhs, 2, api, loc);
  Plan p;
  p.k = lhs.shape()[0];
  p.m = lhs.shape()[1];
  p.n = rhs.shape()[1];
  if (rhs.shape()[0] != p.m)
    throw UserError(fmt::format("{}: lhs and rhs differ in the grouped dim", api),
                    fmt::format("lhs {} and rhs {}", shape_text(lhs.shape()), shape_text(rhs.shape())),
                    "lhs is (k, m) and rhs is (m, n)", loc);
  std::vector<int32_t> sizes = checked_group_sizes(group_sizes, p.m, api, loc);
  const int64_t num_groups = static_cast<int64_t>(sizes.size());
  p.t = resolve_tiling(o.tiling, p.m, p.k, p.n, api, loc);
  p.local_groups = o.num_actual_groups.value_or(num_groups);
  p.start_group = checked_group_offset(o.group_offset, p.local_groups, num_groups, api, "num_actual_groups", loc);
  check_existing_out(o.existing_out, {p.local_groups, p.k, p.n}, o.preferred_element_type, api, loc);
  // tgmm visits empty groups too: their gradient must still be written (zeros).
  p.schedule(sizes, /*visit_empty_groups=*/true);
  return p;
}

CostEstimate gmm_cost(const Plan& p, const Array& lhs, const Array& rhs, DType out) {
  const int64_t rhs_bytes = p.k * p.n * dtype_size(rhs.dtype());  // one group's slab
  const int64_t out_bytes = p.m * p.n * dtype_size(out);
  const int64_t max_active_tiles = static_cast<int64_t>(p.md.group_ids.size());
  return CostEstimate{.flops = 2 * p.m * p.k * p.n,
                      .transcendentals = 0,
                      .bytes_accessed = lhs.nbytes() * p.tiles_n + rhs_bytes * max_active_tiles + out_bytes};
}

CostEstimate tgmm_cost(const Plan& p, const Array& lhs, const Array& rhs, DType out) {
  const int64_t out_bytes = p.local_groups * p.k * p.n * dtype_size(out);
  return CostEstimate{.flops = 2 * p.m * p.k * p.n,
                      .transcendentals = 0,
                      .bytes_accessed = lhs.nbytes() * p.tiles_n + rhs.nbytes() * p.tiles_k + out_bytes};
}

// Launches a grouped kernel: the schedule by scalar prefetch (group offsets, group ids, m-tile ids,
// the shard's first group), then lhs, rhs and existing_out, which is aliased to the output.
template <KernelBody Body>
Array launch(const char* name, const KernelConfig& c, const Plan& p, std::vector<int64_t> grid,
             std::vector<BlockSpec> in_specs, const BlockSpec& out_spec, Shape acc_shape, const ShapeDtype& out_shape,
             const CostEstimate& cost, const std::optional<InterpretParams>& interpret, const Array& lhs,
             const Array& rhs, const std::optional<Array>& existing, std::source_location loc) {
  if (c.existing) in_specs.push_back(out_spec);
  CallOptions opts;
  opts.compiler_params.dimension_semantics = {parallel, arbitrary, arbitrary};
  opts.interpret = interpret;
  opts.cost_estimate = cost;
  opts.name = name;
  if (c.existing) opts.input_output_aliases = {{6, 0}};
  // gmm's kernel leaves the rows outside the local groups unwritten and gmm zeroes them after the
  // call: differential mode must not take them for a difference.
  opts.check_unwritten = c.existing || Body != &gmm_kernel;
  PrefetchScalarGridSpec spec{.num_scalar_prefetch = 4,
                              .grid = grid,
                              .in_specs = std::move(in_specs),
                              .out_specs = {out_spec},
                              .scratch_shapes = {VMEM(std::move(acc_shape), DType::f32)}};
  // Kept per specialisation, so a training loop traces and compiles each shape (and step count) once.
  PallasCall<Array> call = ops::memoised_call<PallasCall<Array>>(
      config_key(name, c, grid), interpret, /*check_against_interpreter=*/false, loc, [&] {
        return c.existing ? pallas_call(kernel_with_existing<Body>(c), spec, out_shape, opts, loc)
                          : pallas_call(kernel_without_existing<Body>(c), spec, out_shape, opts, loc);
      });
  std::vector<Array> args{i32_array(p.md.group_offsets), i32_array(p.md.group_ids), i32_array(p.md.m_tile_ids),
                          i32_array({static_cast<int32_t>(p.start_group)}), lhs, rhs};
  if (c.existing) args.push_back(*existing);
  return call(args, loc);
}

}  // namespace

CostEstimate gmm_cost_estimate(const Array& lhs, const Array& rhs, const Array& group_sizes, const GmmOptions& options,
                               std::source_location loc) {
  return gmm_cost(plan_gmm(lhs, rhs, group_sizes, options, loc), lhs, rhs, options.preferred_element_type);
}

CostEstimate tgmm_cost_estimate(const Array& lhs, const Array& rhs, const Array& group_sizes,
                                const TgmmOptions& options, std::source_location loc) {
  return tgmm_cost(plan_tgmm(lhs, rhs, group_sizes, options, loc), lhs, rhs, options.preferred_element_type);
}

Array gmm(const Array& lhs, const Array& rhs, const Array& group_sizes, const GmmOptions& o, std::source_location loc) {
  const Plan p = plan_gmm(lhs, rhs, group_sizes, o, loc);
  const DType out_dtype = o.preferred_element_type;
  const int32_t row_lo = p.md.group_offsets[static_cast<size_t>(p.start_group)];
  const int32_t row_hi = p.md.group_offsets[static_cast<size_t>(p.start_group + p.local_groups)];

  Array out;
  if (p.md.num_tiles == 0) {
    // Every local group is empty: nothing to compute.
    out = o.existing_out ? *o.existing_out : Array::zeros({p.m, p.n}, out_dtype);  // copy-on-write
  } else {
    KernelConfig c{p.t, p.tiles_k, p.k % p.t.tk, o.transpose_rhs, o.existing_out.has_value(), input_dtype(lhs, rhs),
                   out_dtype};
    const Tiling t = p.t;
    const bool tr = o.transpose_rhs;
    auto lhs_map = [](Value, Value grid_id, Value k_i, Ref, Ref, Ref m_tile_ids, Ref) {
      return idx(m_tile_ids[grid_id], k_i);
    };
    auto rhs_map = [tr](Value n_i, Value grid_id, Value k_i, Ref, Ref group_ids, Ref, Ref group_offset) {
      // group_ids count groups of the whole problem; rhs holds the shard's groups only.
      Value g = group_ids[grid_id] - group_offset[0];
      return tr ? idx(g, n_i, k_i) : idx(g, k_i, n_i);
    };
    auto out_map = [](Value n_i, Value grid_id, Value, Ref, Ref, Ref m_tile_ids, Ref) {
      return idx(m_tile_ids[grid_id], n_i);
    };
    BlockSpec out_spec({t.tm, t.tn}, out_map);
    std::vector<BlockSpec> in_specs{
        BlockSpec({t.tm, t.tk}, lhs_map),
        tr ? BlockSpec({squeezed, t.tn, t.tk}, rhs_map) : BlockSpec({squeezed, t.tk, t.tn}, rhs_map)};
    out = launch<gmm_kernel>("gmm", c, p, {p.tiles_n, p.md.num_tiles, p.tiles_k}, std::move(in_specs), out_spec,
                             {t.tm, t.tn}, ShapeDtype({p.m, p.n}, out_dtype), gmm_cost(p, lhs, rhs, out_dtype),
                             o.interpret, lhs, rhs, o.existing_out, loc);
  }
  if (!o.existing_out) {
    // Rows outside the local groups were never stored: zero them (the seed's
    // _zero_uninitialized_memory, also for rows past the last group).
    if (row_lo > 0) out = dynamic_update_slice(out, Array::zeros({row_lo, p.n}, out_dtype), {0, 0}, loc);
    if (row_hi < p.m) out = dynamic_update_slice(out, Array::zeros({p.m - row_hi, p.n}, out_dtype), {row_hi, 0}, loc);
  }
  return out;
}

Array tgmm(const Array& lhs, const Array& rhs, const Array& group_sizes, const TgmmOptions& o, std::source_location loc) {
  const Plan p = plan_tgmm(lhs, rhs, group_sizes, o, loc);
  const DType out_dtype = o.preferred_element_type;
  KernelConfig c{p.t, p.tiles_k, 0, false, o.existing_out.has_value(), input_dtype(lhs, rhs), out_dtype};
  const Tiling t = p.t;
  auto lhs_map = [](Value, Value k_i, Value grid_id, Ref, Ref, Ref m_tile_ids, Ref) {
    return idx(k_i, m_tile_ids[grid_id]);
  };
  auto rhs_map = [](Value n_i, Value, Value grid_id, Ref, Ref, Ref m_tile_ids, Ref) {
    return idx(m_tile_ids[grid_id], n_i);
  };
  auto out_map = [](Value n_i, Value k_i, Value grid_id, Ref, Ref group_ids, Ref, Ref group_offset) {
    return idx(group_ids[grid_id] - group_offset[0], k_i, n_i);
  };
  BlockSpec out_spec({squeezed, t.tk, t.tn}, out_map);
  std::vector<BlockSpec> in_specs{BlockSpec({t.tk, t.tm}, lhs_map), BlockSpec({t.tm, t.tn}, rhs_map)};
  return launch<tgmm_kernel>("tgmm", c, p, {p.tiles_n, p.tiles_k, p.md.num_tiles}, std::move(in_specs), out_spec,
                             {t.tk, t.tn}, ShapeDtype({p.local_groups, p.k, p.n}, out_dtype),
                             tgmm_cost(p, lhs, rhs, out_dtype), o.interpret, lhs, rhs,
                             o.existing_out, loc);
}

}  // namespace tessera::megablox
