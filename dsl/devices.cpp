#include "dsl/devices.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>

#include "dsl/async_copy.h"
#include "dsl/control.h"
#include "dsl/trace.h"
#include "runtime/mesh.h"

namespace tessera {

using ir::OpKind;

namespace {

// The mesh of the shard_map this thread works in; a UserError naming `api` outside one.
const Mesh& current_mesh(const char* api, SourceLoc loc) {
  const rt::DeviceContext* d = rt::current_device();
  if (!d)
    throw UserError(fmt::format("{} needs a mesh, and none is current", api), "a call outside pl::shard_map",
                    "call the kernel (or this host code) inside pl::shard_map(f, mesh, in_specs, out_specs)", loc);
  return *d->mesh;
}

Value as_i32(const Operand& o, const char* api, SourceLoc loc) {
  return detail::i32_scalar(o, api, "a device coordinate", "(pl::axis_index(\"x\") + 1) % pl::axis_size(\"x\")", loc);
}

// This device's coordinate along mesh axis `a`, traced.
Value mesh_axis_index(int64_t a, SourceLoc loc) {
  auto& ctx = detail::TraceContext::current("pl::axis_index (in a kernel; host code uses pl::host_axis_index)", loc);
  return Value::wrap(ctx, ctx.emit_value(OpKind::AxisIndex, {}, Type::scalar(DType::i32), a, loc));
}

const std::vector<std::string>& checked_names(const AxisNames& names, const char* api, SourceLoc loc) {
  if (names.names().empty())
    throw UserError(fmt::format("{} needs at least one axis name", api), "an empty list of axis names",
                    "name an axis, pl::axis_index(\"x\"), or several for a joint axis, pl::axis_index({\"y\", \"x\"})",
                    loc);
  return names.names();
}

// Where one axis name points: a dim of the traced kernel's named grid, or an axis of the current mesh.
struct AxisRef {
  std::optional<int> grid_dim;
  int64_t grid_size = 0;
  const Mesh* mesh = nullptr;
  int64_t mesh_axis = -1;
  // An axis of the shard_map's mesh around an mpmd_map (DeviceContext::outer): this device's
  // coordinate, a number of the trace (the mpmd_map traces its kernels for each device).
  std::optional<int64_t> outer_coord;
};

// The axis `name` of the mesh of the shard_map an mpmd_map being traced was called in, if any.
std::optional<AxisRef> outer_axis(const rt::DeviceContext* device, const std::string& name) {
  const rt::DeviceContext* outer = device ? device->outer : nullptr;
  if (!outer) return std::nullopt;
  const std::vector<std::string>& names = outer->mesh->axis_names();
  const auto it = std::find(names.begin(), names.end(), name);
  if (it == names.end()) return std::nullopt;
  const int64_t a = it - names.begin();
  return AxisRef{std::nullopt, 0, outer->mesh.get(), a, outer->coords[static_cast<size_t>(a)]};
}

// Grid dims are looked up in the kernel being traced (when one is), mesh axes in the current mesh. A
// name that is both is an error: which one the user meant cannot be guessed.
AxisRef resolve_axis(const std::string& name, const char* api, SourceLoc loc) {
  const detail::TraceContext* ctx = detail::TraceContext::active();
  const rt::DeviceContext* device = rt::current_device();
  const std::vector<std::string> none;
  const std::vector<std::string>& grid = ctx ? ctx->grid_names : none;
  const auto g = std::find(grid.begin(), grid.end(), name);
  const Mesh* mesh = device ? device->mesh.get() : nullptr;
  const bool on_mesh = mesh && std::find(mesh->axis_names().begin(), mesh->axis_names().end(), name) !=
                                   mesh->axis_names().end();
  if (g == grid.end()) {
    if (!on_mesh)
      if (std::optional<AxisRef> r = outer_axis(device, name)) return *r;
    if (!grid.empty() && !on_mesh)
      throw UserError(fmt::format("{}: there is no axis `{}`", api, name),
                      mesh ? fmt::format("the grid's axes {} and the axes of {}", fmt::join(grid, ", "), mesh->str())
                           : fmt::format("the grid's axes {} (no mesh is current)", fmt::join(grid, ", ")),
                      "use the name of a grid dim (pl::axis) or, inside pl::shard_map, of a mesh axis", loc);
    const Mesh& m = current_mesh(api, loc);
    return AxisRef{std::nullopt, 0, &m, m.axis(name, loc)};
  }
  if (on_mesh)
    throw UserError(fmt::format("{}: `{}` names both a grid dim and a mesh axis", api, name),
                    fmt::format("the grid's axes {} and {}", fmt::join(grid, ", "), mesh->str()),
                    "rename the grid dim (pl::axis) or the mesh axis so that every name means one axis", loc);
  if (ctx->grids.size() != 1)
    throw UserError(fmt::format("{}: grid axis `{}` is read inside a nested pipeline", api, name),
                    "a named dim of the pallas_call's grid used inside an emit_pipeline body or index map",
                    "read it in the kernel body, outside the emit_pipeline, and use the value inside", loc);
  const int dim = static_cast<int>(g - grid.begin());
  return AxisRef{dim, ctx->grids.back().sizes.at(static_cast<size_t>(dim)), nullptr, -1};
}

int64_t size_of(const AxisRef& r) { return r.grid_dim ? r.grid_size : r.mesh->shape()[r.mesh_axis]; }

// A grid dim sized when the call runs (pl::GridDim("rows", pl::from_prefetch(k))): its size is a value
// of each call, not a number of the trace.
bool sized_at_call(const AxisRef& r) { return r.grid_dim && r.grid_size == ir::kDynamicDim; }

// The sizes of the axes a joint name spans, in its order.
std::vector<int64_t> joint_sizes(const AxisNames& names, const char* api, SourceLoc loc) {
  const std::vector<std::string>& all = checked_names(names, api, loc);
  std::vector<int64_t> sizes;
  for (const std::string& n : all) {
    const AxisRef r = resolve_axis(n, api, loc);
    if (sized_at_call(r)) {
      // A joint name's size is then a product of traced and static sizes: spell it out.
      std::vector<std::string> factors;
      for (const std::string& f : all)
        factors.push_back(sized_at_call(resolve_axis(f, api, loc)) ? fmt::format("pl::num_programs(\"{}\")", f)
                                                                   : fmt::format("pl::axis_size(\"{}\")", f));
      throw UserError(fmt::format("{}: grid axis `{}` is sized when the call runs, so its size is no number", api, n),
                      fmt::format("`{}` sized by pl::from_prefetch in the pallas_call's grid", n),
                      fmt::format("read the call's size as a traced value with {}", fmt::join(factors, " * ")), loc);
    }
    sizes.push_back(size_of(r));
  }
  return sizes;
}

}  // namespace

std::string AxisNames::str() const {
  if (names_.size() == 1) return names_[0];
  return fmt::format("({})", fmt::join(names_, ", "));
}

DeviceId::DeviceId(std::initializer_list<Operand> coords, std::source_location loc) : coords_(coords), loc_(loc) {}
DeviceId::DeviceId(std::initializer_list<std::pair<AxisNames, Operand>> axes, std::source_location loc)
    : axes_(axes), by_axis_(true), loc_(loc) {}
DeviceId::DeviceId(const Operand& id, std::source_location loc) : coords_{id}, single_(true), loc_(loc) {}

namespace {

// The mesh axis of the cores when the kernel being traced runs on the cores of several devices, else -1.
int64_t core_axis() {
  const detail::TraceContext* ctx = detail::TraceContext::active();
  return ctx ? ctx->core_axis : -1;
}

}  // namespace

DeviceId::Target DeviceId::resolve(DeviceIdType type, const char* api, const std::optional<Value>& core) const {
  const Mesh& mesh = current_mesh(api, loc_);
  // On devices × cores the id names a device: the device axes are all but the cores' (the last).
  const int64_t cores = core_axis();
  const int64_t device_rank = cores < 0 ? mesh.rank() : cores;
  auto with_core = [&](std::vector<Value> out) {
    if (cores >= 0) out.push_back(core ? *core : mesh_axis_index(cores, loc_));
    return Target{std::move(out), false};
  };
  if (type == DeviceIdType::LOGICAL) {
    if (by_axis_ || coords_.size() != 1)
      throw UserError(fmt::format("{}: a LOGICAL device id is one integer", api),
                      by_axis_ ? "a per-axis map" : fmt::format("{} coordinates", coords_.size()),
                      "pass pl::DeviceId(id) with DeviceIdType::LOGICAL, or use DeviceIdType::MESH for coordinates", loc_);
    const Value id = as_i32(coords_[0], api, loc_);
    if (cores < 0) return Target{{id}, true};
    // Split row-major over the device axes; the first is not reduced, so an id past the mesh is a
    // coordinate past it, reported when the signal runs.
    std::vector<Value> out(static_cast<size_t>(device_rank), id);
    int64_t stride = 1;
    for (int64_t a = device_rank; a-- > 0;) {
      Value c = stride == 1 ? id : id / static_cast<int32_t>(stride);
      out[static_cast<size_t>(a)] = a == 0 ? c : c % static_cast<int32_t>(mesh.shape()[a]);
      stride *= mesh.shape()[a];
    }
    return with_core(std::move(out));
  }
  if (by_axis_) {
    std::vector<std::optional<Value>> per_axis(static_cast<size_t>(mesh.rank()));
    for (const auto& [names, v] : axes_) {
      // A joint axis (y, x) takes a linear index j: y = j / size(x), x = j % size(x).
      const std::vector<std::string>& joint = checked_names(names, api, loc_);
      const Value linear = as_i32(v, api, loc_);
      int64_t stride = 1;
      for (size_t k = joint.size(); k-- > 0;) {
        const auto& names_here = mesh.axis_names();
        if (std::find(names_here.begin(), names_here.end(), joint[k]) == names_here.end() &&
            outer_axis(rt::current_device(), joint[k]))
          throw UserError(fmt::format("{}: axis `{}` is an axis of the shard_map's mesh, which an mpmd_map inside it "
                                      "does not reach",
                                      api, joint[k]),
                          fmt::format("a device id over {} in a kernel of {}", joint[k], mesh.str()),
                          "a kernel of an mpmd_map called inside pl::shard_map signals and copies to the cores of its "
                          "own device; to reach another device's cores, run every device's cores as one mpmd_map pair "
                          "{pl::Mesh(...), pl::CoreMesh(...), kernel}",
                          loc_);
        const int64_t a = mesh.axis(joint[k], loc_);
        if (per_axis[a] || (a == cores && core))
          throw UserError(fmt::format("{}: axis `{}` is named twice in the device id", api, joint[k]), mesh.str(),
                          a == cores ? "name the core either in the device id or with pl::CoreIndex, not both"
                                     : "name every axis at most once",
                          loc_);
        Value c = stride == 1 ? linear : linear / static_cast<int32_t>(stride);
        per_axis[a] = k == 0 ? c : c % static_cast<int32_t>(mesh.shape()[a]);
        stride *= mesh.shape()[a];
      }
    }
    if (cores >= 0 && core) per_axis[static_cast<size_t>(cores)] = *core;
    std::vector<Value> out;
    for (size_t a = 0; a < per_axis.size(); ++a)
      out.push_back(per_axis[a] ? *per_axis[a] : mesh_axis_index(static_cast<int64_t>(a), loc_));
    return Target{std::move(out), false};
  }
  if (static_cast<int64_t>(coords_.size()) != device_rank) {
    std::vector<std::string> device_axes(mesh.axis_names().begin(), mesh.axis_names().begin() + device_rank);
    throw UserError(fmt::format("{}: the device id has {} coordinate(s) for a mesh of {} {}axes", api, coords_.size(),
                                device_rank, cores < 0 ? "" : "device "),
                    mesh.str(),
                    fmt::format("give one coordinate per {}axis ({}), a per-axis map such as pl::DeviceId({{{{\"{}\", j}}}}), "
                                "or a logical id with DeviceIdType::LOGICAL",
                                cores < 0 ? "" : "device ", fmt::join(device_axes, ", "), device_axes.back()),
                    loc_);
  }
  std::vector<Value> out;
  for (const Operand& c : coords_) out.push_back(as_i32(c, api, loc_));
  return with_core(std::move(out));
}

Value axis_index(const AxisNames& names, std::source_location loc) {
  const char* api = "pl::axis_index";
  std::optional<Value> linear;
  for (const std::string& n : checked_names(names, api, loc)) {
    const AxisRef r = resolve_axis(n, api, loc);
    const Value v = r.grid_dim      ? program_id(*r.grid_dim, loc)
                    : r.outer_coord ? Operand(static_cast<int32_t>(*r.outer_coord), loc).materialize()
                                    : mesh_axis_index(r.mesh_axis, loc);
    if (!linear)
      linear = v;
    else if (sized_at_call(r))
      linear = *linear * num_programs(*r.grid_dim, loc) + v;  // the call's size
    else
      linear = *linear * static_cast<int32_t>(size_of(r)) + v;
  }
  return *linear;
}

int64_t axis_size(const AxisNames& names, std::source_location loc) {
  int64_t product = 1;
  for (int64_t s : joint_sizes(names, "pl::axis_size", loc)) product *= s;
  return product;
}

Value num_programs(const std::string& name, std::source_location loc) {
  const AxisRef r = resolve_axis(name, "pl::num_programs", loc);
  if (!r.grid_dim)
    throw UserError(fmt::format("pl::num_programs: `{}` is a mesh axis, not a grid dim", name), r.mesh->str(),
                    fmt::format("use pl::axis_size(\"{}\") for a mesh axis' size", name), loc);
  return num_programs(*r.grid_dim, loc);
}

Value device_id(std::source_location loc) {
  const Mesh& mesh = current_mesh("pl::device_id", loc);
  // On devices × cores, the device's id: the cores' axis (the last) is left out.
  const int64_t rank = core_axis() < 0 ? mesh.rank() : core_axis();
  Value id = mesh_axis_index(0, loc);
  for (int64_t a = 1; a < rank; ++a) id = id * static_cast<int32_t>(mesh.shape()[a]) + mesh_axis_index(a, loc);
  return id;
}

int64_t host_axis_index(const AxisNames& names, std::source_location loc) {
  const Mesh& mesh = current_mesh("pl::host_axis_index", loc);
  int64_t linear = 0;
  for (const std::string& n : checked_names(names, "pl::host_axis_index", loc)) {
    const int64_t a = mesh.axis(n, loc);
    linear = linear * mesh.shape()[a] + rt::current_device()->coords[a];
  }
  return linear;
}

RemoteCopyDescriptor make_async_remote_copy(const Ref& src, const Ref& dst, const Ref& send_sem, const Ref& recv_sem,
                                            const DeviceId& device, DeviceIdType type, std::source_location loc) {
  const char* api = "pl::make_async_remote_copy";
  detail::check_copy(src, dst, api, loc);
  detail::check_semaphore(send_sem, DType::dma_sem, api, loc);
  detail::check_semaphore(recv_sem, DType::dma_sem, api, loc);
  DeviceId::Target target = device.resolve(type, api);
  return RemoteCopyDescriptor(src, dst, send_sem, recv_sem, std::move(target.coords), target.logical);
}

void RemoteCopyDescriptor::start(std::source_location loc) const {
  auto& ctx = detail::TraceContext::current("RemoteCopyDescriptor::start", loc);
  std::vector<ir::ValueId> operands{src_.id(), dst_.id(), send_.id(), recv_.id()};
  for (const Value& v : device_) operands.push_back(v.id());
  for (ir::ValueId v : operands) ctx.check_visible(v, "a remote copy's start()", loc);
  ctx.emit(OpKind::RemoteDmaStart, operands, {}, ir::DeviceAttr{logical_}, loc);
}

void RemoteCopyDescriptor::wait_send(std::source_location loc) const {
  auto& ctx = detail::TraceContext::current("RemoteCopyDescriptor::wait_send", loc);
  ctx.check_visible(send_.id(), "a remote copy's wait_send()", loc);
  ctx.emit(OpKind::DmaWait, {send_.id()}, {}, num_elements(src_.shape()) * dtype_size(src_.dtype()), loc);
}

void RemoteCopyDescriptor::wait_recv(std::source_location loc) const {
  auto& ctx = detail::TraceContext::current("RemoteCopyDescriptor::wait_recv", loc);
  ctx.check_visible(recv_.id(), "a remote copy's wait_recv()", loc);
  ctx.emit(OpKind::DmaWait, {recv_.id()}, {}, num_elements(dst_.shape()) * dtype_size(dst_.dtype()), loc);
}

void RemoteCopyDescriptor::wait(std::source_location loc) const {
  wait_send(loc);
  wait_recv(loc);
}

namespace {

// A signal to the participant `target` names (mesh coordinates, or one logical id).
void emit_remote_signal(const Ref& sem, const Operand& inc, const std::vector<Value>& target, bool logical,
                        const char* api, SourceLoc loc) {
  auto& ctx = detail::TraceContext::current(api, loc);
  Value amount = detail::i32_scalar(inc, api, "the amount", "a count of signals", loc);
  std::vector<ir::ValueId> operands{sem.id(), amount.id()};
  for (const Value& v : target) operands.push_back(v.id());
  for (ir::ValueId v : operands) ctx.check_visible(v, api, loc);
  ctx.emit(OpKind::RemoteSemaphoreSignal, operands, {}, ir::DeviceAttr{logical}, loc);
}

}  // namespace

void semaphore_signal(const Ref& sem, const Operand& inc, const DeviceId& device, DeviceIdType type,
                      std::source_location loc) {
  const char* api = "pl::semaphore_signal";
  detail::check_semaphore(sem, DType::sem, api, loc);
  const DeviceId::Target target = device.resolve(type, api);
  emit_remote_signal(sem, inc, target.coords, target.logical, api, loc);
}

void semaphore_signal(const Ref& sem, const DeviceId& device, DeviceIdType type, std::source_location loc) {
  semaphore_signal(sem, Operand(1, loc), device, type, loc);
}

namespace {

// The core `core` names, an i32, checked against the kernel's cores: a UserError outside a CoreMesh
// or, for a number, outside [0, cores). (A traced index is checked when the signal runs, as a
// coordinate of the kernel's mesh.)
Value checked_core(const CoreIndex& core, const char* api, SourceLoc loc) {
  auto& ctx = detail::TraceContext::current(api, loc);
  if (!ctx.core_mesh)
    throw UserError("pl::semaphore_signal: core_index names a core of a pl::CoreMesh, and this kernel runs on none",
                    fmt::format("pl::CoreIndex in a kernel of a {}", ctx.call == "mpmd_map" ? "mpmd_map over a device mesh" : ctx.call),
                    "run the kernel on the cores of a pl::CoreMesh in pl::mpmd_map, or signal another device with "
                    "pl::DeviceId",
                    core.loc);
  // The kernel's mesh is its CoreMesh, or devices × cores: a core is a point of the cores' axis.
  const Mesh& mesh = current_mesh(api, loc);
  const int64_t axis = ctx.core_axis < 0 ? 0 : ctx.core_axis;
  const int64_t cores = mesh.shape()[axis];
  if (core.index.is_literal()) {
    const int64_t k = static_cast<int64_t>(core.index.literal().as_double());
    if (k < 0 || k >= cores)
      throw UserError(fmt::format("pl::semaphore_signal: core_index {} is out of range", k),
                      fmt::format("a kernel on {} cores (pl::CoreMesh(\"{}\", {}))", cores, mesh.axis_names()[axis],
                                  cores),
                      fmt::format("name a core in [0, {})", cores), core.loc);
  }
  return as_i32(core.index, api, core.loc);
}

}  // namespace

void semaphore_signal(const Ref& sem, const Operand& inc, const CoreIndex& core, std::source_location loc) {
  const char* api = "pl::semaphore_signal";
  detail::check_semaphore(sem, DType::sem, api, loc);
  const Value k = checked_core(core, api, loc);
  auto& ctx = detail::TraceContext::current(api, loc);
  if (ctx.core_axis < 0) {
    emit_remote_signal(sem, inc, {k}, false, api, loc);
    return;
  }
  // Devices × cores: core k of this device.
  std::vector<Value> target;
  for (int64_t a = 0; a < ctx.core_axis; ++a) target.push_back(mesh_axis_index(a, loc));
  target.push_back(k);
  emit_remote_signal(sem, inc, target, false, api, loc);
}

void semaphore_signal(const Ref& sem, const Operand& inc, const DeviceId& device, const CoreIndex& core,
                      DeviceIdType type, std::source_location loc) {
  const char* api = "pl::semaphore_signal";
  detail::check_semaphore(sem, DType::sem, api, loc);
  const Value k = checked_core(core, api, loc);
  auto& ctx = detail::TraceContext::current(api, loc);
  if (ctx.core_axis < 0)
    throw UserError("pl::semaphore_signal: a signal naming a device and a core needs a kernel on the cores of several "
                    "devices",
                    "pl::DeviceId and pl::CoreIndex in a kernel on the cores of one device (an mpmd_map pair over a "
                    "pl::CoreMesh)",
                    "run the kernel on the cores of several devices, pl::mpmd_map({{pl::Mesh({n}, {\"x\"}), pl::CoreMesh(\"core\", c), "
                    "kernel}}, ...), or name only the core with pl::CoreIndex",
                    loc);
  const DeviceId::Target target = device.resolve(type, api, k);
  emit_remote_signal(sem, inc, target.coords, target.logical, api, loc);
}

Ref get_barrier_semaphore(std::source_location loc) {
  auto& ctx = detail::TraceContext::current("pl::get_barrier_semaphore", loc);
  if (!ctx.collective_id)
    throw UserError("pl::get_barrier_semaphore needs the kernel's collective_id",
                    fmt::format("the {}'s CompilerParams have no collective_id", ctx.call),
                    fmt::format("give the {} CompilerParams{{.collective_id = k}}, with k unique to this communication "
                                "pattern",
                                ctx.call),
                    loc);
  if (ctx.barrier_semaphore == ir::kNone) {
    // One per launch, allocated with the kernel's scratch (outside the grid loop).
    ir::Builder& b = ctx.builder();
    ir::Builder::RegionScope scope(b, b.function().body);
    ctx.barrier_semaphore = b.create_value(OpKind::Alloc, {}, Type::ref(DType::sem, {}, MemorySpace::SEMAPHORE),
                                           std::string("barrier semaphore"), loc);
    b.set_name(ctx.barrier_semaphore, "barrier semaphore");
  }
  return Ref::wrap(ctx, ctx.barrier_semaphore);
}

}  // namespace tessera
