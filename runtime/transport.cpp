#include "runtime/transport.h"

#include <fmt/format.h>

#include <atomic>

#include "runtime/collective.h"
#include "runtime/launch.h"
#include "runtime/memory.h"

namespace tessera::rt {

namespace {

[[noreturn]] void not_kernel_memory(const char* what) {
  throw Fault(fmt::format("{} is not memory the other device's kernel has: it must be an operand, scratch or run_scoped "
                          "buffer of the kernel (a window of one), which every device has",
                          what));
}

std::atomic_ref<int64_t> counter(int64_t* sem) { return std::atomic_ref<int64_t>(*sem); }

// Memory of the device's operands (negative keys, MemoryRegion in runtime/launch.h): it outlives the kernel.
bool is_operand(RemoteAddress a) { return a.key < 0; }

// Every device is a thread of this process: the sender writes the target's memory itself, under the
// group's lock, once the target is ready (LaunchGroup::with_target).
class ThreadsTransport final : public Transport {
 public:
  void put(LaunchGroup& group, CoreContext& from, int64_t target, const RemotePut& p, SourceLoc loc) override {
    group.with_target(from.seat(), target, "a remote copy", loc, [&](CoreContext& t) {
      std::byte* to = local_address(t, p.dst, p.extent, "the destination of a remote copy");
      auto* recv = reinterpret_cast<int64_t*>(local_address(t, p.recv_sem, sizeof(int64_t), "the receive semaphore"));
      copy_box(to, p.dst_strides, p.src, p.src_strides, p.shape, p.es);
      counter(recv).fetch_add(p.bytes);
    }, is_operand(p.dst) && is_operand(p.recv_sem));
  }

  void signal(LaunchGroup& group, CoreContext& from, int64_t target, RemoteAddress sem, int64_t inc,
              SourceLoc loc) override {
    group.with_target(from.seat(), target, "a remote semaphore_signal", loc, [&](CoreContext& t) {
      counter(reinterpret_cast<int64_t*>(local_address(t, sem, sizeof(int64_t), "the signalled semaphore"))).fetch_add(inc);
    }, is_operand(sem));
  }

  void idle(LaunchGroup&, std::unique_lock<std::mutex>& lock, std::condition_variable& changed) override {
    changed.wait(lock);
  }
  bool stuck_everywhere(LaunchGroup&) override { return true; }
  bool others_ready(LaunchGroup&) override { return true; }
};

}  // namespace

std::pair<int64_t, int64_t> process_devices(int64_t size, int process, int count) {
  return {size * process / count, size * (process + 1) / count};
}

std::pair<int64_t, int64_t> Transport::local_devices(int64_t size) const {
  return process_devices(size, process_index(), process_count());
}

Transport& threads_transport() {
  static ThreadsTransport transport;
  return transport;
}

namespace {
std::atomic<Transport*> g_process_transport{nullptr};
}  // namespace

Transport& process_transport() {
  Transport* t = g_process_transport.load();
  return t ? *t : threads_transport();
}

void set_process_transport(Transport* transport) { g_process_transport.store(transport); }

RemoteAddress remote_address(const CoreContext& core, const std::byte* p, int64_t extent, const char* what) {
  const MemoryRegion* r = core.region_containing(p, extent);
  if (!r) not_kernel_memory(what);
  return RemoteAddress{r->key, p - r->lo};
}

std::byte* local_address(const CoreContext& core, RemoteAddress at, int64_t extent, const char* what) {
  const MemoryRegion* r = core.region(at.key);
  if (!r || at.offset < 0 || at.offset + extent > r->hi - r->lo) not_kernel_memory(what);
  return const_cast<std::byte*>(r->lo + at.offset);
}

}  // namespace tessera::rt
