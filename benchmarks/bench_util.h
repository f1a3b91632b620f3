// Timing for the benchmarks: run a function several times after a warm-up, report the median (this
// machine is noisy; medians repeat, means do not), print each figure as a ratio against a baseline
// measured in the same run, and write everything as JSON with --json FILE.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace bench {

struct Stats {
  std::vector<double> seconds;
  double median() const {
    std::vector<double> s = seconds;
    std::sort(s.begin(), s.end());
    return s.empty() ? 0 : s.size() % 2 ? s[s.size() / 2] : 0.5 * (s[s.size() / 2 - 1] + s[s.size() / 2]);
  }
  double min() const { return seconds.empty() ? 0 : *std::min_element(seconds.begin(), seconds.end()); }
  double max() const { return seconds.empty() ? 0 : *std::max_element(seconds.begin(), seconds.end()); }
};

inline double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Runs f `warmup` times untimed, then `runs` times timed. When one call is very short, each sample
// times `batch` calls and records the time per call.
inline Stats measure(const std::function<void()>& f, int runs, int warmup = 1, int batch = 1) {
  for (int i = 0; i < warmup; ++i) f();
  Stats s;
  for (int r = 0; r < runs; ++r) {
    double t0 = now();
    for (int b = 0; b < batch; ++b) f();
    s.seconds.push_back((now() - t0) / batch);
  }
  return s;
}

// Lets other libraries' worker threads (OpenBLAS's, oneDNN's OpenMP team), which spin a while after
// each call, go to sleep before the next measurement needs the cores: otherwise one of them holds a
// core through the next row, and a 2-thread row runs at about 1-thread speed.
inline void settle() { std::this_thread::sleep_for(std::chrono::milliseconds(200)); }

// Calls a and b in turn `runs` times (which goes first alternates) after one warm-up call each:
// their times and the median of the pairs' ratios (b's time over a's: a's speed relative to b's).
// On a host whose speed drifts (a shared VM: up to 2x within a second), two medians taken one after
// the other compare the drift as much as the code; pairs of neighbouring calls compare the code.
// `between`, if given, runs untimed before every call (settle, when one side is a library whose
// workers spin after a call).
struct Paired {
  Stats a, b;
  double ratio = 0;
};
inline Paired paired(const std::function<void()>& a, const std::function<void()>& b, int runs,
                     const std::function<void()>& between = {}) {
  a();
  b();
  Paired p;
  std::vector<double> ratios;
  auto timed = [&](const std::function<void()>& call, Stats& s) {
    if (between) between();
    const double t0 = now();
    call();
    s.seconds.push_back(now() - t0);
    return s.seconds.back();
  };
  for (int r = 0; r < runs; ++r) {
    double ta = 0, tb = 0;
    if (r % 2) {
      tb = timed(b, p.b);
      ta = timed(a, p.a);
    } else {
      ta = timed(a, p.a);
      tb = timed(b, p.b);
    }
    ratios.push_back(tb / ta);
  }
  p.ratio = Stats{ratios}.median();
  return p;
}

struct Row {
  std::string name;
  Stats stats;
  std::string unit;      // of `value`: "GFLOP/s", "GB/s", "ms", "us"
  double value = 0;      // the figure for the median
  std::string baseline;  // name of the row this one is compared with (empty: none)
  double ratio = 0;      // value / baseline value (or baseline time / this time)
};

class Report {
 public:
  explicit Report(std::string title) : title_(std::move(title)) {}

  // A row whose figure is `work / median seconds` (e.g. flops -> GFLOP/s with scale 1e-9).
  Row& add_rate(const std::string& name, const Stats& s, double work, double scale, const std::string& unit,
                const std::string& baseline = {}) {
    Row r{name, s, unit, work / s.median() * scale, baseline, 0};
    return push(std::move(r));
  }
  // A row whose figure is the median time itself (in `unit`: "ms" or "us").
  Row& add_time(const std::string& name, const Stats& s, const std::string& unit, const std::string& baseline = {}) {
    const double scale = unit == "us" ? 1e6 : unit == "ms" ? 1e3 : 1.0;
    Row r{name, s, unit, s.median() * scale, baseline, 0};
    return push(std::move(r));
  }
  void note(const std::string& line) { notes_.push_back(line); }

  void print() const {
    std::printf("\n== %s ==\n", title_.c_str());
    for (const Row& r : rows_) {
      std::string ratio = r.baseline.empty() ? "" : fmt::format("  {:.2f}x {}", r.ratio, r.baseline);
      std::printf("  %-46s %10.3f %-8s [min %.3g, max %.3g s, %zu runs]%s\n", r.name.c_str(), r.value, r.unit.c_str(),
                  r.stats.min(), r.stats.max(), r.stats.seconds.size(), ratio.c_str());
    }
    for (const std::string& n : notes_) std::printf("  %s\n", n.c_str());
  }

  // JSON has no inf or nan: a figure that is not finite (a baseline lost in the noise) is null.
  static std::string json_number(double v) { return std::isfinite(v) ? fmt::format("{}", v) : "null"; }

  std::string json() const {
    std::string out = fmt::format("{{\"benchmark\": \"{}\", \"results\": [", title_);
    for (size_t i = 0; i < rows_.size(); ++i) {
      const Row& r = rows_[i];
      out += fmt::format(
          "{}\n  {{\"name\": \"{}\", \"median_s\": {}, \"min_s\": {}, \"max_s\": {}, \"runs\": {}, \"value\": {}, "
          "\"unit\": \"{}\", \"baseline\": \"{}\", \"ratio\": {}}}",
          i ? "," : "", r.name, json_number(r.stats.median()), json_number(r.stats.min()), json_number(r.stats.max()),
          r.stats.seconds.size(), json_number(r.value), r.unit, r.baseline, json_number(r.ratio));
    }
    out += "\n], \"notes\": [";
    for (size_t i = 0; i < notes_.size(); ++i) out += fmt::format("{}\"{}\"", i ? ", " : "", notes_[i]);
    return out + "]}\n";
  }

 private:
  Row& push(Row r) {
    if (!r.baseline.empty())
      for (const Row& b : rows_)
        if (b.name == r.baseline) {
          // Rates: bigger is better; times: smaller is better. Ratios read "this is x times the baseline".
          const bool time = r.unit == "ms" || r.unit == "us" || r.unit == "s";
          r.ratio = time ? b.value / r.value : r.value / b.value;
        }
    rows_.push_back(std::move(r));
    return rows_.back();
  }

  std::string title_;
  std::vector<Row> rows_;
  std::vector<std::string> notes_;
};

// The CPU's marketing name from /proc/cpuinfo, printed beside every benchmark's ratios.
inline std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.starts_with("model name"))
      if (size_t colon = line.find(':'); colon != std::string::npos) return line.substr(colon + 2);
  return "unknown";
}

// The value of `--flag VALUE` on the command line, or `fallback`.
inline std::string arg(int argc, char** argv, const char* flag, const std::string& fallback = {}) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0) return argv[i + 1];
  return fallback;
}
inline bool has_flag(int argc, char** argv, const char* flag) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0) return true;
  return false;
}

// Writes the reports as one JSON array to --json FILE, if given.
inline void write_json(int argc, char** argv, const std::vector<const Report*>& reports) {
  std::string path = arg(argc, argv, "--json");
  if (path.empty()) return;
  std::ofstream out(path);
  out << "[\n";
  for (size_t i = 0; i < reports.size(); ++i) out << (i ? ",\n" : "") << reports[i]->json();
  out << "]\n";
  std::printf("\nwrote %s\n", path.c_str());
}
// The same for reports kept by value.
inline void write_reports_json(int argc, char** argv, const std::vector<Report>& reports) {
  std::vector<const Report*> all;
  for (const Report& r : reports) all.push_back(&r);
  write_json(argc, argv, all);
}

}  // namespace bench
