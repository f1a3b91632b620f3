#include "runtime/cpu_placement.h"

#include <cstring>

#if defined(__linux__)
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace tessera::rt {

#if defined(__linux__)

static_assert(sizeof(cpu_set_t) == sizeof(std::array<uint64_t, 16>));

int current_cpu() { return ::sched_getcpu(); }

ThreadPlacement ThreadPlacement::of_calling_thread() {
  ThreadPlacement p;
  p.tid_ = static_cast<int64_t>(::syscall(SYS_gettid));
  cpu_set_t cores;
  CPU_ZERO(&cores);
  ::sched_getaffinity(0, sizeof cores, &cores);
  std::memcpy(p.cores_.data(), &cores, sizeof cores);
  return p;
}

bool ThreadPlacement::move_off(int cpu) const {
  cpu_set_t cores;
  std::memcpy(&cores, cores_.data(), sizeof cores);
  if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &cores)) return false;
  CPU_CLR(cpu, &cores);
  if (CPU_COUNT(&cores) == 0) return false;
  return ::sched_setaffinity(static_cast<pid_t>(tid_), sizeof cores, &cores) == 0;
}

void ThreadPlacement::restore() const {
  cpu_set_t cores;
  std::memcpy(&cores, cores_.data(), sizeof cores);
  ::sched_setaffinity(0, sizeof cores, &cores);
}

#else

int current_cpu() { return -1; }
ThreadPlacement ThreadPlacement::of_calling_thread() { return {}; }
bool ThreadPlacement::move_off(int) const { return false; }
void ThreadPlacement::restore() const {}

#endif

}  // namespace tessera::rt
