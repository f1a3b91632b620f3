// mpmd_map: several kernels, each over its own mesh, running at the same time and sharing memory.
//
//   auto call = pl::mpmd_map({{pl::CoreMesh("producer", 2), produce},    // 2 cores run produce
//                             {pl::CoreMesh("consumer", 1), consume}},   // 1 core runs consume
//                            {pl::ShapeDtype({m, n}, pl::f32)},          // out_shapes
//                            {pl::HBM({2, bm, n}, pl::f32),              // scratch_shapes
//                             pl::SemaphoreType::REGULAR({2})});
//   std::vector<pl::Array> out = call(x);
//
// Every point of every mesh is a participant: one simulated core running its mesh's kernel once (the
// grid is the mesh; pl::axis_index(name) gives the participant's coordinate along an axis of its own
// mesh). All participants run concurrently, on threads of their own, and may block on each other.
// Each kernel takes pl::Ref parameters: the inputs, the outputs, then the scratch, and returns void.
//
// Memory, as on a TPU chip whose cores share HBM:
//   inputs and outputs     whole arrays in ANY (reach them with async copies), shared by everyone;
//   ANY / HBM scratch      one buffer every participant shares (hand blocks over through it);
//   semaphore scratch      one set of semaphores every participant shares: a copy or a signal on one
//                          core wakes a wait on another;
//   VMEM / SMEM scratch    each participant's own (a core's local memory), as is run_scoped memory.
// Shared semaphores must be back at zero when the whole mpmd_map ends; each participant's own ones
// when its kernel ends. A wait nothing can satisfy any more fails every participant with a report of
// who waits for what (the deadlock report), instead of hanging.
//
// A mesh is a pl::CoreMesh (the cores of one device, pltpu.create_tensorcore_mesh) or a pl::Mesh of
// devices (each point a device, named by its mesh coordinates in errors and timelines). Axes with the
// same name in several meshes are the same axis and must have the same size. Remote copies and
// signals (pl::DeviceId over the kernel's own mesh) reach the participants of the same mesh.
//
// A pair may also run on the cores of several devices, {pl::Mesh({2}, {"x"}), pl::CoreMesh("core", 2),
// kernel}: its participants are every core of every device (the kernel's mesh is the device axes
// and then the cores' axis; pl::axis_index("core") is the core). A pl::DeviceId then names a device
// and reaches the same core of it; pl::CoreIndex(k) core k of this device; both together
// (pl::semaphore_signal(sem, 1, pl::DeviceId({j}), pl::CoreIndex(k))) core k of device j, as Pallas'
// semaphore_signal(..., device_id=..., core_index=...) does.
//
// Front-end layer (dsl/).
#pragma once

#include <memory>
#include <source_location>
#include <string>
#include <variant>
#include <vector>

#include "dsl/pallas_call.h"
#include "runtime/mesh.h"

namespace tessera {

// The cores of one device along one named axis (pltpu.create_tensorcore_mesh(axis_name, num_cores)).
struct CoreMesh {
  CoreMesh(std::string axis_name, int64_t num_cores, std::source_location loc = std::source_location::current());
  std::string axis_name;
  int64_t num_cores;
  std::source_location loc;
};

// One (mesh, kernel) pair of an mpmd_map.
struct MeshKernel {
  template <class K>
  MeshKernel(Mesh mesh, K&& kernel, std::source_location loc = std::source_location::current())
      : mesh(std::move(mesh)), kernel(detail::wrap_kernel(std::forward<K>(kernel))), loc(loc) {}
  template <class K>
  MeshKernel(const CoreMesh& cores, K&& kernel, std::source_location loc = std::source_location::current())
      : mesh(Mesh({cores.num_cores}, {cores.axis_name}, cores.loc)),
        of_cores(true),
        kernel(detail::wrap_kernel(std::forward<K>(kernel))),
        loc(loc) {}

  // The cores of every device of `devices`.
  template <class K>
  MeshKernel(const Mesh& devices, const CoreMesh& cores, K&& kernel,
             std::source_location loc = std::source_location::current())
      : mesh(devices_and_cores(devices, cores)),
        core_axis(devices.rank()),
        kernel(detail::wrap_kernel(std::forward<K>(kernel))),
        loc(loc) {}

  // The devices' axes, then the cores' (a UserError if a device axis has the cores' name).
  static Mesh devices_and_cores(const Mesh& devices, const CoreMesh& cores);

  Mesh mesh;
  bool of_cores = false;  // a CoreMesh: its points are cores of the current device, not devices
  int64_t core_axis = -1;  // devices × cores: the mesh axis of the cores (the last), else -1
  detail::KernelFn kernel;
  SourceLoc loc;
};

namespace detail {

struct MpmdSpec {
  std::vector<MeshKernel> pairs;
  std::vector<ShapeDtype> out_shapes;
  std::vector<ScratchShape> scratch_shapes;
  CallOptions options;
  SourceLoc loc;
};

class MpmdImpl;
std::shared_ptr<MpmdImpl> make_mpmd(MpmdSpec spec);
std::vector<Array> run_mpmd(MpmdImpl& call, std::span<const Array> args, SourceLoc loc);
// The traced IR of pair `pair`'s kernel for these arguments.
const ir::Function& mpmd_ir(MpmdImpl& call, std::span<const Array> args, size_t pair, SourceLoc loc);
bool mpmd_interpreted(const MpmdImpl& call);

}  // namespace detail

template <class Result>
class MpmdCall : public detail::ArrayCall<MpmdCall<Result>, Result> {
 public:
  explicit MpmdCall(std::shared_ptr<detail::MpmdImpl> impl) : impl_(std::move(impl)) {}

  // The IR traced from the kernel of pair `pair` for these arguments (print it with ir::print).
  const ir::Function& traced(const std::vector<Array>& args, size_t pair,
                             std::source_location loc = std::source_location::current()) const {
    return detail::mpmd_ir(*impl_, args, pair, loc);
  }
  // Whether it runs in the interpreter (CallOptions::interpret, or TESSERA_INTERPRET when made).
  bool interpreted() const { return detail::mpmd_interpreted(*impl_); }

 private:
  friend class detail::ArrayCall<MpmdCall<Result>, Result>;
  std::vector<Array> launch(const std::vector<Array>& args, SourceLoc loc) const {
    return detail::run_mpmd(*impl_, args, loc);
  }
  std::shared_ptr<detail::MpmdImpl> impl_;
};

// options: name, interpret (InterpretParams: uninitialized_memory, dma_execution_mode, random_seed,
// num_schedules: with on_wait copies, N seeded interleavings of the participants, as a pallas_call's),
// input_output_aliases, cost_estimate, debug. compiler_params.dimension_semantics must stay empty:
// the grid is the mesh. compiler_params.collective_id gives every participant a barrier semaphore of
// its own (pl::get_barrier_semaphore), which the others of its mesh signal with pl::semaphore_signal
// and a pl::DeviceId, as in a pallas_call.
inline MpmdCall<std::vector<Array>> mpmd_map(std::vector<MeshKernel> pairs, std::vector<ShapeDtype> out_shapes,
                                             std::vector<ScratchShape> scratch_shapes = {}, CallOptions options = {},
                                             std::source_location loc = std::source_location::current()) {
  return MpmdCall<std::vector<Array>>(detail::make_mpmd(
      {std::move(pairs), std::move(out_shapes), std::move(scratch_shapes), std::move(options), loc}));
}
inline MpmdCall<Array> mpmd_map(std::vector<MeshKernel> pairs, const ShapeDtype& out_shape,
                                std::vector<ScratchShape> scratch_shapes = {}, CallOptions options = {},
                                std::source_location loc = std::source_location::current()) {
  return MpmdCall<Array>(
      detail::make_mpmd({std::move(pairs), {out_shape}, std::move(scratch_shapes), std::move(options), loc}));
}

}  // namespace tessera
