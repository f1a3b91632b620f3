#include "runtime/executable.h"

#include "runtime/memory.h"

namespace tessera::rt {

int Executable::output_operand(int o) const {
  int k = 0;
  for (const OperandInfo& op : operands) {
    if (op.role == OperandRole::output && o-- == 0) return k;
    ++k;
  }
  return -1;
}

int Executable::num_outputs() const {
  int n = 0;
  for (const OperandInfo& op : operands) n += op.role == OperandRole::output;
  return n;
}

Executable::Split Executable::split_for(int cores) const {
  std::lock_guard lock(mutex_);
  if (split_.cores != cores) {
    split_.cores = cores;
    split_.ranges = split_steps(grid, semantics, cores);
    split_.active = 0;
    for (int c = 0; c < cores; ++c)
      if (split_.ranges[c].lo < split_.ranges[c].hi) split_.active = c + 1;
  }
  return split_;
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
