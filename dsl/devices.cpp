#include "dsl/devices.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dsl/async_copy.h"
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

}  // namespace

DeviceId::DeviceId(std::initializer_list<Operand> coords, std::source_location loc) : coords_(coords), loc_(loc) {}
DeviceId::DeviceId(std::initializer_list<std::pair<const char*, Operand>> axes, std::source_location loc)
    : by_axis_(true), loc_(loc) {
  for (const auto& [name, v] : axes) axes_.emplace_back(name, v);
}
DeviceId::DeviceId(const Operand& id, std::source_location loc) : coords_{id}, single_(true), loc_(loc) {}

std::vector<Value> DeviceId::resolve(DeviceIdType type, const char* api) const {
  const Mesh& mesh = current_mesh(api, loc_);
  std::vector<Value> out;
  if (type == DeviceIdType::LOGICAL) {
    if (by_axis_ || coords_.size() != 1)
      throw UserError(fmt::format("{}: a LOGICAL device id is one integer", api),
                      by_axis_ ? "a per-axis map" : fmt::format("{} coordinates", coords_.size()),
                      "pass pl::DeviceId(id) with DeviceIdType::LOGICAL, or use DeviceIdType::MESH for coordinates", loc_);
    out.push_back(as_i32(coords_[0], api, loc_));
    return out;
  }
  if (by_axis_) {
    std::vector<std::optional<Value>> per_axis(static_cast<size_t>(mesh.rank()));
    for (const auto& [name, v] : axes_) {
      const int64_t a = mesh.axis(name, loc_);
      if (per_axis[a])
        throw UserError(fmt::format("{}: axis `{}` is named twice in the device id", api, name), mesh.str(),
                        "name every axis at most once", loc_);
      per_axis[a] = as_i32(v, api, loc_);
    }
    for (size_t a = 0; a < per_axis.size(); ++a)
      out.push_back(per_axis[a] ? *per_axis[a] : axis_index(mesh.axis_names()[a], std::source_location()));
    return out;
  }
  if (static_cast<int64_t>(coords_.size()) != mesh.rank())
    throw UserError(fmt::format("{}: the device id has {} coordinate(s) for a mesh of {} axes", api, coords_.size(),
                                mesh.rank()),
                    mesh.str(),
                    fmt::format("give one coordinate per axis ({}), a per-axis map such as pl::DeviceId({{{{\"{}\", j}}}}), "
                                "or a logical id with DeviceIdType::LOGICAL",
                                fmt::join(mesh.axis_names(), ", "), mesh.axis_names().back()),
                    loc_);
  for (const Operand& c : coords_) out.push_back(as_i32(c, api, loc_));
  return out;
}

Value axis_index(const std::string& name, std::source_location loc) {
  const Mesh& mesh = current_mesh("pl::axis_index", loc);
  const int64_t a = mesh.axis(name, loc);
  auto& ctx = detail::TraceContext::current("pl::axis_index (in a kernel; host code uses pl::host_axis_index)", loc);
  return Value::wrap(ctx, ctx.emit_value(OpKind::AxisIndex, {}, Type::scalar(DType::i32), a, loc));
}

int64_t axis_size(const std::string& name, std::source_location loc) {
  return current_mesh("pl::axis_size", loc).axis_size(name, loc);
}

Value device_id(std::source_location loc) {
  const Mesh& mesh = current_mesh("pl::device_id", loc);
  Value id = axis_index(mesh.axis_names()[0], loc);
  for (int64_t a = 1; a < mesh.rank(); ++a)
    id = id * static_cast<int32_t>(mesh.shape()[a]) + axis_index(mesh.axis_names()[a], loc);
  return id;
}

int64_t host_axis_index(const std::string& name, std::source_location loc) {
  const Mesh& mesh = current_mesh("pl::host_axis_index", loc);
  return rt::current_device()->coords[mesh.axis(name, loc)];
}

RemoteCopyDescriptor make_async_remote_copy(const Ref& src, const Ref& dst, const Ref& send_sem, const Ref& recv_sem,
                                            const DeviceId& device, DeviceIdType type, std::source_location loc) {
  const char* api = "pl::make_async_remote_copy";
  detail::check_copy(src, dst, api, loc);
  detail::check_semaphore(send_sem, DType::dma_sem, api, loc);
  detail::check_semaphore(recv_sem, DType::dma_sem, api, loc);
  return RemoteCopyDescriptor(src, dst, send_sem, recv_sem, device.resolve(type, api), type == DeviceIdType::LOGICAL);
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

void semaphore_signal(const Ref& sem, const Operand& inc, const DeviceId& device, DeviceIdType type,
                      std::source_location loc) {
  const char* api = "pl::semaphore_signal";
  detail::check_semaphore(sem, DType::sem, api, loc);
  std::vector<Value> target = device.resolve(type, api);
  auto& ctx = detail::TraceContext::current(api, loc);
  Value amount = detail::i32_scalar(inc, api, "the amount", "a count of signals", loc);
  std::vector<ir::ValueId> operands{sem.id(), amount.id()};
  for (const Value& v : target) operands.push_back(v.id());
  for (ir::ValueId v : operands) ctx.check_visible(v, api, loc);
  ctx.emit(OpKind::RemoteSemaphoreSignal, operands, {}, ir::DeviceAttr{type == DeviceIdType::LOGICAL}, loc);
}

Ref get_barrier_semaphore(std::source_location loc) {
  auto& ctx = detail::TraceContext::current("pl::get_barrier_semaphore", loc);
  if (!ctx.collective_id)
    throw UserError("pl::get_barrier_semaphore needs the kernel's collective_id", "CompilerParams without a collective_id",
                    "give the pallas_call CompilerParams{.collective_id = k}, with k unique to this communication "
                    "pattern",
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
