#include "runtime/executable.h"

#include "runtime/memory.h"

namespace tessera::rt {

int Executable::num_outputs() const {
  int n = 0;
  for (const OperandInfo& op : operands) n += op.role == OperandRole::output;
  return n;
}

const Executable::Split& Executable::split_for(int cores) const {
  std::lock_guard lock(mutex_);
  auto [it, fresh] = splits_.try_emplace(cores);
  Split& split = it->second;
  if (fresh) {
    split.ranges = split_steps(grid, semantics, cores);
    for (int c = 0; c < cores; ++c)
      if (split.ranges[c].lo < split.ranges[c].hi) split.active = c + 1;
  }
  return split;
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
