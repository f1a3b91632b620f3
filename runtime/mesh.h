// Meshes of simulated devices (docs/design.md §4b): named axes of any rank, device coordinates and logical
// ids, and the device a thread is working for.
//
//   pl::Mesh mesh({2, 2}, {"x", "y"});      // 4 devices; logical id = row-major coordinates
//
// Runtime layer; users reach Mesh as pl::Mesh.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jit/ir/diagnostics.h"

namespace tessera {

class Mesh {
 public:
  Mesh(std::vector<int64_t> shape, std::vector<std::string> axis_names,
       std::source_location loc = std::source_location::current());

  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<std::string>& axis_names() const { return names_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size() const { return size_; }
  // The index of the axis called `name`; a UserError naming the mesh's axes if there is none.
  int64_t axis(std::string_view name, SourceLoc loc = {}) const;
  int64_t axis_size(std::string_view name, SourceLoc loc = {}) const { return shape_[axis(name, loc)]; }

  std::vector<int64_t> coords(int64_t logical) const;
  int64_t logical(std::span<const int64_t> coords) const;
  // "Mesh('x': 2, 'y': 2)"
  std::string str() const;
  // "device 3 (x=1, y=1)"
  std::string device_str(int64_t logical) const;

  bool operator==(const Mesh& o) const { return shape_ == o.shape_ && names_ == o.names_; }

 private:
  std::vector<int64_t> shape_;
  std::vector<std::string> names_;
  int64_t size_ = 1;
};

namespace rt {

class MeshRun;
class RaceRegistry;

// The device a thread works for, inside pl::shard_map.
struct DeviceContext {
  std::shared_ptr<const Mesh> mesh;
  int64_t logical = 0;
  std::vector<int64_t> coords;
  MeshRun* run = nullptr;              // the shard_map call the device takes part in
  int64_t collective_launches = 0;     // collective kernels it has launched so far in that call
  // The launch-group member that is device 0 of `mesh` (mpmd_map puts several meshes in one group).
  int64_t first_member = 0;
  RaceRegistry* races = nullptr;  // the shard_map's race reports and collective detectors
  // While an mpmd_map called inside pl::shard_map is traced: the shard_map's device it runs on, whose
  // mesh axes its kernels read (core_map under shard_map). Null otherwise.
  const DeviceContext* outer = nullptr;
};

// The current thread's device, or null outside shard_map.
DeviceContext* current_device();

// Makes `device` the current thread's device while alive.
class DeviceScope {
 public:
  explicit DeviceScope(DeviceContext* device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  DeviceContext* previous_;
};

}  // namespace rt
}  // namespace tessera
