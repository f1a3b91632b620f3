// pl::emit_pipeline: a pipeline over HBM refs inside a kernel (pltpu.emit_pipeline).
//
//   pl::emit_pipeline(
//       [&](pl::Ref x, pl::Ref w, pl::Ref o) { o() = ...; },
//       {.grid = {m / bm, n / bn}, .in_specs = {...}, .out_specs = {...}})(x_hbm, w_hbm, o_hbm);
//
// The body runs once per step of the inner grid with VMEM blocks of the refs, exactly as a
// pallas_call body runs over its grid: inputs are fetched when their block index changes, outputs
// written back when it changes next (or at the last step), and program_id / num_programs in the body
// and in the index maps refer to the inner grid. Each input has two block buffers by default, so the
// next block is fetched while the body works on the current one; pl::Buffered(n) in a BlockSpec asks
// for n (outputs: at most 2). It shares pallas_call's pipeline implementation.
//
// A grid dim may be a traced integer scalar (pl::GridDim), e.g. the number of blocks of a group read
// from a scalar-prefetch ref: the pipeline then runs that many steps when the kernel runs (0 runs no
// step; a negative one is a RuntimeError), and num_programs in the body gives it. A static dim of 0
// is rejected as in Pallas.
//
// Split over cores (Pallas's megacore partition): with `.core_axis = k` (a grid axis of the enclosing
// pallas_call, program_id(k) the core) or `.core_axis_name = "core"` (a pl::CoreMesh or mesh axis,
// axis_index the core), each core runs a contiguous part of one parallel grid dim
// (`.dimension_semantics`): the first parallel dim the core count divides, each core size / cores
// steps; else the largest static parallel dim (or the one traced parallel dim), core c taking
// size / cores steps plus one more while c < size % cores. Index maps and program_id see the whole
// grid's index (the part's start added); num_programs gives this core's step count, as in Pallas.
//
// Front-end layer (dsl/).
#pragma once

#include <functional>
#include <optional>
#include <source_location>
#include <type_traits>
#include <vector>

#include "dsl/devices.h"
#include "dsl/grid_dim.h"
#include "dsl/signature.h"
#include "dsl/specs.h"

namespace tessera {

// What emit_pipeline is given (its Python keyword arguments).
struct PipelineSpec {
  std::vector<GridDim> grid;  // numbers and traced integer scalars
  std::vector<BlockSpec> in_specs;
  std::vector<BlockSpec> out_specs;
  // One per grid dim (default: all arbitrary). The inner grid runs in order on its core; with a core
  // axis below, a parallel dim is the one split over the cores.
  std::vector<DimensionSemantics> dimension_semantics;
  // At most one: the axis whose index is the core and whose size the core count (see above).
  std::optional<int> core_axis;                 // a grid axis of the enclosing pallas_call
  std::optional<AxisNames> core_axis_name;      // a pl::CoreMesh or mesh axis, or several (joint)
  // Pallas's no_pipelining, for debugging multiple-buffering mistakes: one block buffer per operand
  // whatever its pl::Buffered, each block copied in when its step needs it and nothing fetched ahead.
  bool no_pipelining = false;
};

namespace detail {
void emit_pipeline_impl(const PipelineSpec& spec, int body_arity, const std::function<void(std::vector<Ref>&)>& body,
                        const std::vector<Ref>& refs, std::source_location loc);
}  // namespace detail

// The pipeline emit_pipeline returns; calling it with the refs (inputs, then outputs) traces it.
class EmittedPipeline {
 public:
  EmittedPipeline(PipelineSpec spec, int arity, std::function<void(std::vector<Ref>&)> body, std::source_location loc)
      : spec_(std::move(spec)), arity_(arity), body_(std::move(body)), loc_(loc) {}

  template <class... R>
    requires(std::is_convertible_v<const R&, const Ref&> && ...)
  void operator()(const R&... refs) const {
    detail::emit_pipeline_impl(spec_, arity_, body_, {refs...}, loc_);
  }
  void operator()(const std::vector<Ref>& refs) const { detail::emit_pipeline_impl(spec_, arity_, body_, refs, loc_); }

 private:
  PipelineSpec spec_;
  int arity_;
  std::function<void(std::vector<Ref>&)> body_;
  std::source_location loc_;
};

template <class F>
EmittedPipeline emit_pipeline(F&& body, PipelineSpec spec, std::source_location loc = std::source_location::current()) {
  using B = std::decay_t<F>;
  constexpr int n = detail::arity_of<B, Ref>();
  static_assert(n >= 0, "tessera: an emit_pipeline body takes one pl::Ref per input and output block: "
                        "[&](pl::Ref x, pl::Ref o) { ... }");
  if constexpr (n >= 0) {
    using R = decltype(detail::invoke_n<n>(std::declval<B&>(), std::declval<std::vector<Ref>&>()));
    static_assert(std::is_void_v<R>, "tessera: an emit_pipeline body returns void: it writes its output blocks");
    return EmittedPipeline(std::move(spec), n,
                           [b = B(std::forward<F>(body))](std::vector<Ref>& refs) mutable { detail::invoke_n<n>(b, refs); },
                           loc);
  } else {
    return EmittedPipeline(std::move(spec), -1, {}, loc);
  }
}

}  // namespace tessera
