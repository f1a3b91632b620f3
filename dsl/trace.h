// The tracing context: while pallas_call traces a kernel, DSL calls append ops to the IR through the
// thread-local active TraceContext, at the innermost open region (docs/design.md §2). There is no other
// global state in the front end.
//
// Front-end layer (dsl/), internal: users reach it only through Value, Ref and the DSL functions.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "jit/ir/builder.h"
#include "jit/ir/diagnostics.h"

namespace tessera::detail {

class TraceContext {
 public:
  TraceContext(ir::Function& fn, std::string name);
  ~TraceContext();
  TraceContext(const TraceContext&) = delete;
  TraceContext& operator=(const TraceContext&) = delete;

  // The active context of this thread; a UserError naming `api` when no kernel is being traced.
  static TraceContext& current(std::string_view api, SourceLoc loc);
  static TraceContext* active();

  // A number no other trace in this process has: handles remember it, so a handle kept from an
  // earlier trace is recognised even when a new context reuses the old one's address.
  uint64_t serial() const { return serial_; }

  ir::Builder& builder() { return builder_; }
  const Type& type(ir::ValueId v) const { return builder_.type(v); }

  // Appends an op; operands must be visible here (a value made inside a closed region is not).
  ir::OpId emit(ir::OpKind kind, std::vector<ir::ValueId> operands, std::vector<Type> result_types, ir::Attr attr,
                SourceLoc loc, std::vector<ir::RegionId> regions = {});
  ir::ValueId emit_value(ir::OpKind kind, std::vector<ir::ValueId> operands, Type result_type, ir::Attr attr,
                         SourceLoc loc);

  // Checks that `v` may be used at the insertion point; `api` names the DSL call for the message.
  void check_visible(ir::ValueId v, std::string_view api, SourceLoc loc) const;

  // Opens `region` for tracing until the scope ends. `what` names the construct ("pl::when") for errors.
  class Scope {
   public:
    Scope(TraceContext& ctx, ir::RegionId region, std::string what);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    TraceContext& ctx_;
    ir::Builder::RegionScope builder_scope_;
  };

  // The grids of the pipelines being traced (innermost last): program_id's axis is checked against
  // `sizes`. `offsets` is empty, or one per dim: where this core's part of a grid split over cores
  // starts (pl::emit_pipeline's core_axis), added to the dim's index (ir::kNone: nothing to add).
  struct GridScope {
    std::vector<int64_t> sizes;
    std::vector<ir::ValueId> offsets;
  };
  std::vector<GridScope> grids;
  // Refs of arrays the kernel may not write (inputs not aliased to an output).
  std::set<ir::ValueId> read_only;
  // Numbers emit_pipeline's nested pipelines (the kernel's own grid is 0).
  int64_t pipelines = 0;
  // The names of the kernel's own grid dims (pl::axis), empty when unnamed: pl::axis_index(name) reads
  // their program ids.
  std::vector<std::string> grid_names;
  // What traces the kernel ("pallas_call", "mpmd_map"), for messages that tell the user what to change.
  std::string call = "pallas_call";
  // Whether the kernel runs on the cores of a pl::CoreMesh (an mpmd_map pair): pl::CoreIndex names them.
  bool core_mesh = false;
  // On the cores of several devices (an mpmd_map pair of a device mesh and a pl::CoreMesh): the mesh
  // axis of the cores, the last; the others are devices. -1 otherwise.
  int64_t core_axis = -1;
  // The call's collective_id, and the barrier semaphore once a kernel asked for it.
  std::optional<int64_t> collective_id;
  ir::ValueId barrier_semaphore = ir::kNone;

 private:
  struct OpenRegion {
    ir::RegionId region;
    std::string what;
  };
  ir::Builder builder_;
  uint64_t serial_;
  std::vector<OpenRegion> open_;
  std::vector<std::string> closed_what_;  // by region id: the construct a closed region belonged to
  TraceContext* previous_;
};

}  // namespace tessera::detail
