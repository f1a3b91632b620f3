// Arrays spread over the devices of a mesh (docs/design.md §4b), as in JAX:
//
//   pl::NamedSharding s(mesh, pl::P("x", "y"));     dim 0 split over axis x, dim 1 over axis y
//   pl::ShardedArray a = pl::device_put(x, s);      every device gets its block
//   pl::Array full = a.gather();                    (or just pl::Array full = a;)
//   pl::visualize_array_sharding(a);                the box picture of who holds what
//
// A dim of a PartitionSpec names no axis (pl::None: every device holds all of it), one axis, or
// several ({"x", "y"}: split over x then y, x major). Dims past the spec's length are not split; axes
// a spec does not name replicate the array. A split dim must divide evenly.
//
// Runtime layer (host data); users reach these as pl::P, pl::NamedSharding, pl::ShardedArray.
#pragma once

#include <initializer_list>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "runtime/array.h"
#include "runtime/mesh.h"

namespace tessera {

struct NoneTag {};
inline constexpr NoneTag None{};

// What one array dim is split over: no axis, one, or several (major first).
class PartitionDim {
 public:
  PartitionDim(NoneTag) {}
  PartitionDim(const char* axis) : axes_{axis} {}
  PartitionDim(std::string axis) : axes_{std::move(axis)} {}
  PartitionDim(std::initializer_list<std::string> axes) : axes_(axes) {}
  const std::vector<std::string>& axes() const { return axes_; }

 private:
  std::vector<std::string> axes_;
};

// jax.sharding.PartitionSpec.
class P {
 public:
  // One entry per dim (so that a braced {"x", "y"} entry converts): pl::P("x", pl::None, {"x", "y"}).
  P() = default;
  explicit P(PartitionDim d0) : dims_{d0} {}
  P(PartitionDim d0, PartitionDim d1) : dims_{d0, d1} {}
  P(PartitionDim d0, PartitionDim d1, PartitionDim d2) : dims_{d0, d1, d2} {}
  P(PartitionDim d0, PartitionDim d1, PartitionDim d2, PartitionDim d3) : dims_{d0, d1, d2, d3} {}
  P(PartitionDim d0, PartitionDim d1, PartitionDim d2, PartitionDim d3, PartitionDim d4) : dims_{d0, d1, d2, d3, d4} {}
  const std::vector<PartitionDim>& dims() const { return dims_; }
  // "P('x', None, ('x', 'y'))"
  std::string str() const;

 private:
  std::vector<PartitionDim> dims_;
};

class NamedSharding {
 public:
  NamedSharding(const Mesh& mesh, P spec) : mesh_(std::make_shared<Mesh>(mesh)), spec_(std::move(spec)) {}
  NamedSharding(std::shared_ptr<const Mesh> mesh, P spec) : mesh_(std::move(mesh)), spec_(std::move(spec)) {}
  const Mesh& mesh() const { return *mesh_; }
  const std::shared_ptr<const Mesh>& mesh_ptr() const { return mesh_; }
  const P& spec() const { return spec_; }

  // Checks the spec against the mesh and an array of `shape`: axes exist, each is used once, split
  // dims divide evenly. `what` names the array in the message.
  void check(const Shape& shape, const std::string& what, SourceLoc loc) const;
  // How many blocks each dim is split into.
  std::vector<int64_t> blocks(size_t rank) const;
  // The block (per dim) device `device` holds.
  std::vector<int64_t> block_of(int64_t device, size_t rank) const;
  // The shape of a device's block of an array of `shape`.
  Shape shard_shape(const Shape& shape) const;

 private:
  std::shared_ptr<const Mesh> mesh_;
  P spec_;
};

// An array as blocks on the devices of a mesh.
class ShardedArray {
 public:
  ShardedArray(NamedSharding sharding, Shape shape, DType dtype, std::vector<Array> shards);

  const NamedSharding& sharding() const { return sharding_; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  // Device `device`'s block.
  const Array& shard(int64_t device) const { return shards_.at(static_cast<size_t>(device)); }
  const std::vector<Array>& shards() const { return shards_; }

  // The whole array (a replicated block is taken from the first device that holds it).
  Array gather() const;
  operator Array() const { return gather(); }

 private:
  NamedSharding sharding_;
  Shape shape_;
  DType dtype_;
  std::vector<Array> shards_;
};

// Splits `array` over the mesh as `sharding` says.
ShardedArray device_put(const Array& array, const NamedSharding& sharding,
                        std::source_location loc = std::source_location::current());

// The box picture of which device holds which block of a 1-D or 2-D array (printed to stdout, and
// returned), like jax.debug.visualize_array_sharding.
std::string visualize_array_sharding(const ShardedArray& array, bool print = true);

}  // namespace tessera
