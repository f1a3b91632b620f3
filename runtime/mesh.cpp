#include "runtime/mesh.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <set>

namespace tessera {

Mesh::Mesh(std::vector<int64_t> shape, std::vector<std::string> axis_names, std::source_location loc)
    : shape_(std::move(shape)), names_(std::move(axis_names)) {
  const auto given = [&] { return fmt::format("shape ({}) with axes ({})", fmt::join(shape_, ", "), fmt::join(names_, ", ")); };
  if (shape_.size() != names_.size() || shape_.empty())
    throw UserError("a mesh needs one name per axis and at least one axis", given(),
                    "give as many names as dims: pl::Mesh({2, 2}, {\"x\", \"y\"})", loc);
  std::set<std::string> seen;
  for (size_t a = 0; a < shape_.size(); ++a) {
    if (shape_[a] < 1)
      throw UserError("mesh axes need at least one device", given(), "use sizes >= 1", loc);
    if (names_[a].empty() || !seen.insert(names_[a]).second)
      throw UserError("mesh axis names must be distinct and non-empty", given(), "name every axis once", loc);
    size_ *= shape_[a];
  }
}

int64_t Mesh::axis(std::string_view name, SourceLoc loc) const {
  for (size_t a = 0; a < names_.size(); ++a)
    if (names_[a] == name) return static_cast<int64_t>(a);
  throw UserError(fmt::format("the mesh has no axis `{}`", name), str(),
                  fmt::format("use one of its axes: {}", fmt::join(names_, ", ")), loc);
}

std::vector<int64_t> Mesh::coords(int64_t logical) const {
  std::vector<int64_t> c(shape_.size());
  for (size_t a = shape_.size(); a-- > 0;) {
    c[a] = logical % shape_[a];
    logical /= shape_[a];
  }
  return c;
}

int64_t Mesh::logical(std::span<const int64_t> coords) const {
  int64_t id = 0;
  for (size_t a = 0; a < shape_.size(); ++a) id = id * shape_[a] + coords[a];
  return id;
}

std::string Mesh::str() const {
  std::vector<std::string> axes;
  for (size_t a = 0; a < shape_.size(); ++a) axes.push_back(fmt::format("'{}': {}", names_[a], shape_[a]));
  return fmt::format("Mesh({})", fmt::join(axes, ", "));
}

std::string Mesh::device_str(int64_t logical) const {
  std::vector<int64_t> c = coords(logical);
  std::vector<std::string> parts;
  for (size_t a = 0; a < c.size(); ++a) parts.push_back(fmt::format("{}={}", names_[a], c[a]));
  return fmt::format("device {} ({})", logical, fmt::join(parts, ", "));
}

namespace rt {

namespace {
thread_local DeviceContext* t_device = nullptr;
}  // namespace

DeviceContext* current_device() { return t_device; }

DeviceScope::DeviceScope(DeviceContext* device) : previous_(t_device) { t_device = device; }
DeviceScope::~DeviceScope() { t_device = previous_; }

}  // namespace rt
}  // namespace tessera
