// Devices in kernels (docs/design.md §4.8-10): where this device sits in the mesh, and copies and signals
// to other devices of the same collective launch. Spelled as in Pallas:
//
//   pl::Value x = pl::axis_index("x");                 this device's coordinate on axis x (a traced i32)
//   int64_t n = pl::axis_size("x");                    the axis' size (static)
//   auto copy = pl::make_async_remote_copy(src, dst, send_sem, recv_sem,
//                                          pl::DeviceId({(x + 1) % n, y}), pl::DeviceIdType::MESH);
//   copy.start(); ... copy.wait_send(); copy.wait_recv();      (or copy.wait(): both)
//   pl::semaphore_signal(sem, 1, pl::DeviceId({{"y", j}}));   a remote signal (other axes: this device's)
//   pl::semaphore_signal(sem, pl::DeviceId({j, k}));          the same, adding 1
//   pl::Ref barrier = pl::get_barrier_semaphore();          needs CompilerParams{.collective_id = k}
//   pl::semaphore_signal(sem, 1, pl::CoreIndex(k));          core k of the kernel's pl::CoreMesh (mpmd_map)
//   pl::semaphore_signal(sem, 1, pl::DeviceId({j}), pl::CoreIndex(k));   core k of device j (an mpmd_map
//                                                            pair over {pl::Mesh(...), pl::CoreMesh(...)})
//
// A remote copy pushes the local window `src` into the window `dst` of the target device's instance
// of the same kernel: `dst` names this device's ref, and the copy lands in the target's
// corresponding buffer. send_sem (here) and recv_sem (there) each gain the byte count.
//
// Host code inside pl::shard_map asks for its coordinate with pl::host_axis_index (a C++ integer):
// pl::axis_index is a value of the kernel being traced.
//
// Axis names (pl::AxisNames) are one name or several: pl::axis_index({"y", "x"}) is the joint index
// over mesh axes y and x, row-major in the order given (y * size(x) + x), and pl::axis_size({"y", "x"})
// their product; a device id may name a joint axis too: pl::DeviceId({{{"y", "x"}, j}}).
// A pallas_call whose grid has named dims (.grid = {pl::axis("i", 2), ...}) reads them by name:
// pl::axis_index("i") is pl::program_id of that dim, pl::axis_size("i") / pl::num_programs("i") its size.
// A name that is both a grid dim and an axis of the current mesh is an error (rename one of them):
// neither silently shadows the other.
//
// Front-end layer (dsl/).
#pragma once

#include <initializer_list>
#include <optional>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "dsl/ref.h"
#include "dsl/value.h"

namespace tessera {

enum class DeviceIdType { MESH, LOGICAL };

// One axis name ("x"), or several for a joint axis ({"y", "x"}: row-major in that order).
class AxisNames {
 public:
  AxisNames(const char* name) : names_{name} {}
  AxisNames(std::string name) : names_{std::move(name)} {}
  AxisNames(std::initializer_list<std::string> names) : names_(names) {}
  const std::vector<std::string>& names() const { return names_; }
  // "x", or ("y", "x") for a joint axis: as the user wrote it, for messages.
  std::string str() const;

 private:
  std::vector<std::string> names_;
};

// A target device: mesh coordinates (one per axis), a per-axis map (axes not named keep this
// device's coordinate), or one logical id (with DeviceIdType::LOGICAL).
class DeviceId {
 public:
  DeviceId(std::initializer_list<Operand> coords, std::source_location loc = std::source_location::current());
  DeviceId(std::initializer_list<std::pair<AxisNames, Operand>> axes,
           std::source_location loc = std::source_location::current());
  DeviceId(const Operand& id, std::source_location loc = std::source_location::current());

  // The participant it names. On the cores of several devices (an mpmd_map pair over a device mesh
  // and a pl::CoreMesh) the id names a device and `core` its core (this core's when absent); the target
  // is then always mesh coordinates, a logical id split over the device axes.
  struct Target {
    std::vector<Value> coords;  // one i32 per mesh axis, or one logical id
    bool logical = false;
  };
  // Checks the form against the mesh and `type`.
  Target resolve(DeviceIdType type, const char* api, const std::optional<Value>& core = std::nullopt) const;

 private:
  std::vector<Operand> coords_;
  std::vector<std::pair<AxisNames, Operand>> axes_;
  bool by_axis_ = false;
  bool single_ = false;
  SourceLoc loc_;
};

// This device's coordinate along mesh axis `name` (a traced i32; inside pl::shard_map), or the program
// id of the grid dim called `name`; a joint axis gives the row-major linear index.
Value axis_index(const AxisNames& name, std::source_location loc = std::source_location::current());
// The size of mesh axis (or named grid dim) `name`; of a joint axis, the product (inside pl::shard_map;
// mesh axes also on the host).
int64_t axis_size(const AxisNames& name, std::source_location loc = std::source_location::current());
// The size of the grid dim called `name` (i32), as pl::num_programs(dim) gives it.
Value num_programs(const std::string& name, std::source_location loc = std::source_location::current());
// This device's logical id (row-major over the mesh's axes), traced.
Value device_id(std::source_location loc = std::source_location::current());
// Host code inside pl::shard_map: this device's coordinate along `name` (joint: row-major linear index).
int64_t host_axis_index(const AxisNames& name, std::source_location loc = std::source_location::current());

class RemoteCopyDescriptor {
 public:
  RemoteCopyDescriptor(Ref src, Ref dst, Ref send_sem, Ref recv_sem, std::vector<Value> device, bool logical)
      : src_(src), dst_(dst), send_(send_sem), recv_(recv_sem), device_(std::move(device)), logical_(logical) {}

  void start(std::source_location loc = std::source_location::current()) const;
  // Waits until the data has left this device (send_sem).
  void wait_send(std::source_location loc = std::source_location::current()) const;
  // Waits until data of dst's size has arrived here (recv_sem): the copy another device sent.
  void wait_recv(std::source_location loc = std::source_location::current()) const;
  // wait_send, then wait_recv.
  void wait(std::source_location loc = std::source_location::current()) const;

 private:
  Ref src_, dst_, send_, recv_;
  std::vector<Value> device_;
  bool logical_;
};

RemoteCopyDescriptor make_async_remote_copy(const Ref& src, const Ref& dst, const Ref& send_sem, const Ref& recv_sem,
                                            const DeviceId& device, DeviceIdType type = DeviceIdType::MESH,
                                            std::source_location loc = std::source_location::current());

// Adds `inc` to the semaphore of the target device that corresponds to `sem` here.
void semaphore_signal(const Ref& sem, const Operand& inc, const DeviceId& device, DeviceIdType type = DeviceIdType::MESH,
                      std::source_location loc = std::source_location::current());
// Adds 1 there (Pallas's pl.semaphore_signal(sem, device_id=...), whose increment defaults to 1).
void semaphore_signal(const Ref& sem, const DeviceId& device, DeviceIdType type = DeviceIdType::MESH,
                      std::source_location loc = std::source_location::current());

// A core to signal (Pallas' core_index=k): core k of the pl::CoreMesh the kernel runs on in an mpmd_map
// (of this device, or of the device a pl::DeviceId names beside it).
struct CoreIndex {
  CoreIndex(const Operand& k, std::source_location loc = std::source_location::current()) : index(k), loc(loc) {}
  Operand index;
  SourceLoc loc;
};

// pl::semaphore_signal(sem, inc, pl::CoreIndex(k)): adds `inc` to core k's semaphore that corresponds
// to `sem` here (its own run_scoped or barrier semaphore; shared scratch semaphores are one for all
// cores). Only the cores of a pl::CoreMesh are addressable: a pallas_call's cores are threads the
// compiled backend picks by machine, so a kernel naming one would not mean the same everywhere.
void semaphore_signal(const Ref& sem, const Operand& inc, const CoreIndex& core,
                      std::source_location loc = std::source_location::current());

// pl::semaphore_signal(sem, inc, pl::DeviceId(...), pl::CoreIndex(k)) (Pallas' device_id=..., core_index=k):
// adds `inc` to the semaphore of core k of that device. The kernel runs on the cores of several devices,
// an mpmd_map pair {pl::Mesh(devices), pl::CoreMesh("core", n), kernel}: its participants are the
// devices × cores, one launch group. A core outside [0, n) or a device outside the mesh is an error
// (a UserError when tracing for a number, a RuntimeError naming the coordinates when it runs).
void semaphore_signal(const Ref& sem, const Operand& inc, const DeviceId& device, const CoreIndex& core,
                      DeviceIdType type = DeviceIdType::MESH, std::source_location loc = std::source_location::current());

// The kernel's barrier semaphore (a regular semaphore of the collective launch; it must be back at zero
// when the kernel ends). Needs CompilerParams{.collective_id = k}.
Ref get_barrier_semaphore(std::source_location loc = std::source_location::current());

}  // namespace tessera
