#include "runtime/timeline.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>

#include "runtime/config.h"
#include "runtime/mesh.h"

namespace tessera::rt::timeline {

namespace detail {
std::atomic<bool> recording{false};
}

namespace {

struct Event {
  Track track;
  std::string name;
  const char* cat;
  double start, dur;
  std::vector<std::pair<std::string, std::string>> args;
  bool async = false;
};

struct Recorder {
  std::mutex mutex;
  std::string path;
  std::chrono::steady_clock::time_point origin;
  std::vector<Event> events;
  std::map<int64_t, std::string> device_names;  // pid -> name, for the metadata
};

Recorder& recorder() {
  static Recorder* r = new Recorder();  // outlives every thread that records
  return *r;
}

std::string escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", static_cast<int>(c));
        else out += c;
    }
  }
  return out;
}

// The inverse of Track::core / Track::copies / Track::host.
std::string track_name(int64_t tid) {
  if (tid == 0) return "host";
  return tid % 2 ? fmt::format("core {}", (tid - 1) / 2) : fmt::format("core {} copies", (tid - 2) / 2);
}

void write(const std::string& path, const std::vector<Event>& events, const std::map<int64_t, std::string>& devices) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw std::runtime_error(fmt::format("tessera: cannot write the timeline to `{}`", path));
  std::fputs("{\"displayTimeUnit\": \"ns\", \"traceEvents\": [\n", f);
  bool first = true;
  auto line = [&](const std::string& s) {
    std::fputs(first ? "  " : ",\n  ", f);
    std::fputs(s.c_str(), f);
    first = false;
  };
  std::map<int64_t, std::map<int64_t, bool>> tracks;
  for (const Event& e : events) tracks[e.track.device][e.track.tid] = true;
  for (const auto& [pid, tids] : tracks) {
    auto it = devices.find(pid);
    line(fmt::format(R"({{"name": "process_name", "ph": "M", "pid": {}, "tid": 0, "args": {{"name": "{}"}}}})", pid,
                     escape(it != devices.end() ? it->second : fmt::format("device {}", pid))));
    line(fmt::format(R"({{"name": "process_sort_index", "ph": "M", "pid": {}, "tid": 0, "args": {{"sort_index": {}}}}})",
                     pid, pid));
    for (const auto& [tid, _] : tids) {
      line(fmt::format(R"({{"name": "thread_name", "ph": "M", "pid": {}, "tid": {}, "args": {{"name": "{}"}}}})", pid, tid,
                       track_name(tid)));
      line(fmt::format(R"({{"name": "thread_sort_index", "ph": "M", "pid": {}, "tid": {}, "args": {{"sort_index": {}}}}})",
                       pid, tid, tid));
    }
  }
  int64_t async_id = 0;
  for (const Event& e : events) {
    std::string args;
    for (const auto& [k, v] : e.args) args += fmt::format(R"({}"{}": "{}")", args.empty() ? "" : ", ", escape(k), escape(v));
    if (!e.async) {
      line(fmt::format(R"({{"name": "{}", "cat": "{}", "ph": "X", "ts": {:.3f}, "dur": {:.3f}, "pid": {}, "tid": {}, "args": {{{}}}}})",
                       escape(e.name), e.cat, e.start, e.dur, e.track.device, e.track.tid, args));
      continue;
    }
    ++async_id;
    line(fmt::format(R"({{"name": "{}", "cat": "{}", "ph": "b", "id": {}, "ts": {:.3f}, "pid": {}, "tid": {}, "args": {{{}}}}})",
                     escape(e.name), e.cat, async_id, e.start, e.track.device, e.track.tid, args));
    line(fmt::format(R"({{"name": "{}", "cat": "{}", "ph": "e", "id": {}, "ts": {:.3f}, "pid": {}, "tid": {}}})",
                     escape(e.name), e.cat, async_id, e.start + e.dur, e.track.device, e.track.tid));
  }
  std::fputs("\n]}\n", f);
  const bool ok = std::fclose(f) == 0;
  if (!ok) throw std::runtime_error(fmt::format("tessera: cannot write the timeline to `{}`", path));
}

// TESSERA_TRACE=<file>: record from start-up, write at exit.
struct EnvRecording {
  EnvRecording() {
    const std::string p = config::trace_path();  // any text is a path: this read cannot throw
    if (p.empty()) return;
    start(p);
    std::atexit([] {
      try {
        const std::string written = stop();
        if (!written.empty()) std::fprintf(stderr, "tessera: timeline written to %s\n", written.c_str());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
      }
    });
  }
};
const EnvRecording env_recording;

}  // namespace

Track Track::host() {
  const DeviceContext* d = current_device();
  return {d ? d->logical : 0, 0};
}

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - recorder().origin).count();
}

namespace {
void record(Event e) {
  if (!recording()) return;
  Recorder& r = recorder();
  std::lock_guard lock(r.mutex);
  if (r.device_names.find(e.track.device) == r.device_names.end()) {
    // Name the device by its mesh coordinates when the recording thread knows them.
    const DeviceContext* d = current_device();
    if (d && d->logical == e.track.device) r.device_names[e.track.device] = d->mesh->device_str(d->logical);
  }
  r.events.push_back(std::move(e));
}
}  // namespace

void span(Track track, std::string name, const char* cat, double start_us, double dur_us,
          std::vector<std::pair<std::string, std::string>> args) {
  record(Event{track, std::move(name), cat, start_us, dur_us, std::move(args), false});
}

void async_span(Track track, std::string name, const char* cat, double start_us, double dur_us,
                std::vector<std::pair<std::string, std::string>> args) {
  record(Event{track, std::move(name), cat, start_us, dur_us, std::move(args), true});
}

bool start(std::string path) {
  Recorder& r = recorder();
  std::lock_guard lock(r.mutex);
  if (recording()) return false;
  r.path = std::move(path);
  r.events.clear();
  r.device_names.clear();
  r.origin = std::chrono::steady_clock::now();
  detail::recording.store(true);
  return true;
}

std::string stop() {
  Recorder& r = recorder();
  std::vector<Event> events;
  std::map<int64_t, std::string> names;
  std::string path;
  {
    std::lock_guard lock(r.mutex);
    if (!recording()) return {};
    detail::recording.store(false);
    events.swap(r.events);
    names.swap(r.device_names);
    path.swap(r.path);
  }
  write(path, events, names);
  return path;
}

std::string path() {
  Recorder& r = recorder();
  std::lock_guard lock(r.mutex);
  return recording() ? r.path : std::string();
}

Scope::Scope(Track track, std::string name, const char* cat)
    : on_(recording()), track_(track), name_(on_ ? std::move(name) : std::string()), cat_(cat), start_(on_ ? now_us() : 0) {}

Scope::~Scope() {
  if (on_) span(track_, std::move(name_), cat_, start_, now_us() - start_, std::move(args_));
}

void Scope::arg(std::string key, std::string value) {
  if (on_) args_.emplace_back(std::move(key), std::move(value));
}

}  // namespace tessera::rt::timeline
