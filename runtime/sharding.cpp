#include "runtime/sharding.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <map>
#include <set>

#include "runtime/array_ops.h"

namespace tessera {

std::string P::str() const {
  std::vector<std::string> parts;
  for (const PartitionDim& d : dims_) {
    if (d.axes().empty()) parts.push_back("None");
    else if (d.axes().size() == 1) parts.push_back(fmt::format("'{}'", d.axes()[0]));
    else {
      std::vector<std::string> q;
      for (const std::string& a : d.axes()) q.push_back(fmt::format("'{}'", a));
      parts.push_back(fmt::format("({})", fmt::join(q, ", ")));
    }
  }
  return fmt::format("P({})", fmt::join(parts, ", "));
}

void NamedSharding::check(const Shape& shape, const std::string& what, SourceLoc loc) const {
  if (spec_.dims().size() > shape.size())
    throw UserError(fmt::format("{}: the partition spec has more dims than the array", what),
                    fmt::format("{} for an array of shape {}", spec_.str(), shape_tuple_str(shape)),
                    "give at most one entry per array dim", loc);
  std::set<std::string> used;
  for (size_t d = 0; d < spec_.dims().size(); ++d) {
    int64_t parts = 1;
    for (const std::string& a : spec_.dims()[d].axes()) {
      parts *= mesh_->axis_size(a, loc);
      if (!used.insert(a).second)
        throw UserError(fmt::format("{}: mesh axis `{}` splits two dims", what, a), spec_.str(),
                        "use every mesh axis at most once in a partition spec", loc);
    }
    if (shape[d] % parts != 0)
      throw UserError(fmt::format("{}: dim {} of size {} does not split evenly into {} parts", what, d, shape[d], parts),
                      fmt::format("{} of shape {} on {}", spec_.str(), shape_tuple_str(shape), mesh_->str()),
                      "make the dim a multiple of the product of the axes that split it, or split another dim", loc);
  }
}

std::vector<int64_t> NamedSharding::blocks(size_t rank) const {
  std::vector<int64_t> b(rank, 1);
  for (size_t d = 0; d < spec_.dims().size() && d < rank; ++d)
    for (const std::string& a : spec_.dims()[d].axes()) b[d] *= mesh_->axis_size(a);
  return b;
}

std::vector<int64_t> NamedSharding::block_of(int64_t device, size_t rank) const {
  const std::vector<int64_t> c = mesh_->coords(device);
  std::vector<int64_t> b(rank, 0);
  for (size_t d = 0; d < spec_.dims().size() && d < rank; ++d)
    for (const std::string& a : spec_.dims()[d].axes()) {
      const int64_t axis = mesh_->axis(a);
      b[d] = b[d] * mesh_->shape()[axis] + c[axis];
    }
  return b;
}

Shape NamedSharding::shard_shape(const Shape& shape) const {
  Shape s = shape;
  const std::vector<int64_t> b = blocks(shape.size());
  for (size_t d = 0; d < s.size(); ++d) s[d] /= b[d];
  return s;
}

ShardedArray::ShardedArray(NamedSharding sharding, Shape shape, DType dtype, std::vector<Array> shards)
    : sharding_(std::move(sharding)), shape_(std::move(shape)), dtype_(dtype), shards_(std::move(shards)) {}

Array ShardedArray::gather() const {
  Array out = Array::empty(shape_, dtype_);
  const Shape part = sharding_.shard_shape(shape_);
  std::set<std::vector<int64_t>> done;
  for (int64_t d = 0; d < sharding_.mesh().size(); ++d) {
    std::vector<int64_t> b = sharding_.block_of(d, shape_.size());
    if (!done.insert(b).second) continue;  // a replica of a block already placed
    for (size_t i = 0; i < b.size(); ++i) b[i] *= part[i];
    out = rt::update_slice(out, shards_[static_cast<size_t>(d)], b);
  }
  return out;
}

ShardedArray device_put(const Array& array, const NamedSharding& sharding, std::source_location loc) {
  sharding.check(array.shape(), "device_put", loc);
  const Shape part = sharding.shard_shape(array.shape());
  std::vector<Array> shards;
  for (int64_t d = 0; d < sharding.mesh().size(); ++d) {
    std::vector<int64_t> at = sharding.block_of(d, array.shape().size());
    for (size_t i = 0; i < at.size(); ++i) at[i] *= part[i];
    shards.push_back(rt::slice(array, at, part));
  }
  return ShardedArray(sharding, array.shape(), array.dtype(), std::move(shards));
}

std::string visualize_array_sharding(const ShardedArray& array, bool print) {
  const NamedSharding& s = array.sharding();
  const size_t rank = array.shape().size();
  if (rank == 0 || rank > 2) {
    std::string text = fmt::format("(a {}-D array: only 1-D and 2-D arrays are drawn)\n", rank);
    if (print) std::fputs(text.c_str(), stdout);
    return text;
  }
  const std::vector<int64_t> b = s.blocks(rank);
  const int64_t rows = rank == 2 ? b[0] : 1, cols = rank == 2 ? b[1] : b[0];
  // Which devices hold each block.
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> holders;
  for (int64_t d = 0; d < s.mesh().size(); ++d) {
    const std::vector<int64_t> at = s.block_of(d, rank);
    holders[{rank == 2 ? at[0] : 0, rank == 2 ? at[1] : at[0]}].push_back(d);
  }
  std::vector<std::string> labels;
  size_t width = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      labels.push_back(fmt::format("device {}", fmt::join(holders[{r, c}], ",")));
      width = std::max(width, labels.back().size());
    }
  width += 4;
  auto line = [&](const char* left, const char* mid, const char* right) {
    std::string l = left;
    for (int64_t c = 0; c < cols; ++c) {
      for (size_t i = 0; i < width; ++i) l += "─";
      l += c + 1 < cols ? mid : right;
    }
    return l + "\n";
  };
  std::string text = line("┌", "┬", "┐");
  for (int64_t r = 0; r < rows; ++r) {
    text += "│";
    for (int64_t c = 0; c < cols; ++c) {
      const std::string& label = labels[static_cast<size_t>(r * cols + c)];
      const size_t pad = width - label.size();
      text += std::string(pad / 2, ' ') + label + std::string(pad - pad / 2, ' ') + "│";
    }
    text += "\n";
    text += r + 1 < rows ? line("├", "┼", "┤") : line("└", "┴", "┘");
  }
  if (print) std::fputs(text.c_str(), stdout);
  return text;
}

}  // namespace tessera
