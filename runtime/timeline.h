// Timelines: a recorder of what the devices did and when, written as Chrome trace JSON (open it in
// https://ui.perfetto.dev or chrome://tracing).
//
// One process per device (pid = logical device id), and in it one track per core (its grid steps,
// its semaphore and DMA waits, named scopes in the kernel), one per core's copies (start to
// completion), and one for host code on that device (named scopes in host code, shard_map bodies).
// Both backends record through the same hooks: the grid-step, wait, copy and scope calls of the
// runtime, so interpreted and compiled runs give the same kinds of events.
//
// Recording is off unless started: by TESSERA_TRACE=<file> (from start-up, written at exit), or by
// pl::profile / pl::start_trace. When off, every hook costs one relaxed atomic load.
//
// Runtime layer.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::rt::timeline {

namespace detail {
extern std::atomic<bool> recording;
}
inline bool recording() { return detail::recording.load(std::memory_order_relaxed); }

// The tracks of one device.
struct Track {
  int64_t device = 0;
  int64_t tid = 0;
  static Track core(int64_t device, int core) { return {device, 1 + 2 * static_cast<int64_t>(core)}; }
  static Track copies(int64_t device, int core) { return {device, 2 + 2 * static_cast<int64_t>(core)}; }
  // The host thread of the current device (device 0 outside a mesh).
  static Track host();
};

// Microseconds since recording started.
double now_us();

// A finished span [start_us, start_us + dur_us) named `name` in category `cat` (step, dma, wait,
// scope, kernel), with string arguments shown when the event is selected.
void span(Track track, std::string name, const char* cat, double start_us, double dur_us,
          std::vector<std::pair<std::string, std::string>> args = {});

// The same for spans that may overlap others on their track (copies in flight together): written as
// an async begin/end pair, which viewers stack instead of nesting.
void async_span(Track track, std::string name, const char* cat, double start_us, double dur_us,
                std::vector<std::pair<std::string, std::string>> args = {});

// Starts recording into `path` (written by stop()); false when already recording.
bool start(std::string path);
// Stops recording and writes the file; returns its path (empty when nothing was recording). Throws
// std::runtime_error when the file cannot be written.
std::string stop();
// Where the current recording will be written (empty when off).
std::string path();

// A span from construction to destruction, recorded only if recording was on when it began.
class Scope {
 public:
  Scope(Track track, std::string name, const char* cat);
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  ~Scope();
  void arg(std::string key, std::string value);

 private:
  bool on_;
  Track track_;
  std::string name_;
  const char* cat_;
  double start_ = 0;
  std::vector<std::pair<std::string, std::string>> args_;
};

}  // namespace tessera::rt::timeline
