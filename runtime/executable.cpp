#include "runtime/executable.h"

#include <fmt/format.h>

#include "runtime/grid_check.h"
#include "runtime/memory.h"

namespace tessera::rt {

int Executable::num_outputs() const {
  int n = 0;
  for (const OperandInfo& op : operands) n += op.role == OperandRole::output;
  return n;
}

Executable::Split Executable::split_of(const std::vector<int64_t>& sizes, int cores) const {
  Split split;
  split.ranges = split_steps(sizes, semantics, cores);
  for (int c = 0; c < cores; ++c)
    if (split.ranges[c].lo < split.ranges[c].hi) split.active = c + 1;
  return split;
}

const Executable::Split& Executable::split_for(int cores) const {
  std::lock_guard lock(mutex_);
  auto [it, fresh] = splits_.try_emplace(cores);
  if (fresh) it->second = split_of(grid, cores);
  return it->second;
}

std::vector<int64_t> Executable::grid_of(std::span<const Array> args) const {
  std::vector<int64_t> sizes = grid;
  for (const GridFromArg& d : grid_from_args) sizes[d.dim] = args[d.operand].item_int();
  if (grid_from_args.empty()) return sizes;
  if (auto error = grid_sizes_error(sizes, fmt::format("pallas_call `{}`", name()))) {
    // Blame the line of the dim at fault (static dims were checked when tracing), else the first.
    SourceLoc loc = grid_from_args.front().loc;
    if (const std::optional<size_t> bad = bad_grid_dim(sizes))
      for (const GridFromArg& d : grid_from_args)
        if (d.dim == *bad) loc = d.loc;
    throw RuntimeError(*error, ExecutionPoint{}, loc);
  }
  return sizes;
}

std::vector<std::unique_ptr<Buffer>> Executable::take_arena() const {
  std::lock_guard lock(mutex_);
  if (arenas_.empty()) return {};
  auto a = std::move(arenas_.back());
  arenas_.pop_back();
  return a;
}

void Executable::give_arena(std::vector<std::unique_ptr<Buffer>> arena) const {
  std::lock_guard lock(mutex_);
  arenas_.push_back(std::move(arena));
}

}  // namespace tessera::rt
