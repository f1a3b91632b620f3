// tessera's three error types and the source positions they point at.
//
// Every layer may use this header; it depends on nothing but the standard library.
//   UserError     misuse of the API, found while tracing or compiling: what is wrong, what was given,
//                 how to fix it, and the user's file:line.
//   InternalError a broken invariant inside tessera (a pass produced invalid IR, ...).
//   RuntimeError  a running kernel failed (bounds, revisits, ...): thrown on the host after the
//                 launch returns, with the device, core and grid point.
//   MismatchError differential mode: compiled code and the interpreter disagree on an output.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <source_location>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

// A position in the user's source. Built from std::source_location, whose strings have static
// storage, so a SourceLoc can be copied freely and kept in the IR.
struct SourceLoc {
  const char* file = nullptr;
  uint32_t line = 0;
  uint32_t column = 0;

  constexpr SourceLoc() = default;
  constexpr SourceLoc(const std::source_location& l) : file(l.file_name()), line(l.line()), column(l.column()) {}

  bool known() const { return file != nullptr && line != 0; }
  bool operator==(const SourceLoc&) const = default;
  // "path/to/file.cpp:42", or "<unknown location>".
  std::string str() const;
};

// A file name received from another process, kept for the program's life (SourceLoc holds a pointer,
// which std::source_location's static strings satisfy and a received message does not): one copy per
// distinct name, and a failure names few.
const char* interned_file_name(std::string_view file);

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Misuse of tessera. The message reads:
//   <what is wrong>
//     given: <what the user gave>
//     fix:   <how to fix it>
//     at:    <file>:<line>
class UserError : public Error {
 public:
  UserError(std::string what, std::string given, std::string fix, SourceLoc loc);
  const std::string& problem() const { return what_; }
  const std::string& given() const { return given_; }
  const std::string& fix() const { return fix_; }
  SourceLoc loc() const { return loc_; }

 private:
  std::string what_, given_, fix_;
  SourceLoc loc_;
};

// A bug in tessera itself: a pass broke the IR, an invariant does not hold. The message names the
// component (e.g. the pass) and carries the IR text when there is one.
class InternalError : public Error {
 public:
  InternalError(std::string component, std::string what, std::string ir_text = {});
};

// Where a running kernel was when it failed.
struct ExecutionPoint {
  int device = 0;
  int core = 0;
  std::vector<int64_t> grid_point;  // empty when the failure happened outside any grid step
  std::vector<int64_t> inner_point;  // the step of the innermost emit_pipeline running, if any
  // "device 0, core 1, grid point (2, 0, 5)[, emit_pipeline step (1, 0)]"
  std::string str() const;
};

// A process-wide count of failures, taken when each happens: of several failures of one launch (a
// device's, and what the others then ran into), the lowest is the cause.
uint64_t next_failure_sequence();

// A deadlock, as data: every participant of a launch waits or is done, and these are the blocked
// ones, each with what it waits on (as its report words it). A failure that carries one is what the
// participants left waiting ran into: when another failure of the launch exists, that one is the
// cause and this a consequence (rt::Consequences tells it as one note per wait). Set where the
// deadlock is found (rt::LaunchGroup), never read back out of the report's text.
struct Deadlock {
  struct Wait {
    std::string participant;  // "device 1 (i=1)", "device 0 (i=0), core 1", "function 1 (...) at c=0"
    std::string on;           // "semaphore_wait on ... at k.cpp:12: holds 1 of 2"
    bool operator==(const Wait&) const = default;
  };
  std::vector<Wait> waits;
};

// A failure inside a running kernel, reported on the host after the launch returned.
class RuntimeError : public Error {
 public:
  RuntimeError(std::string what, ExecutionPoint where, SourceLoc loc);
  // A deadlock report (`deadlock` not null): `what` is the report's text, `deadlock` its waits.
  RuntimeError(std::string what, ExecutionPoint where, SourceLoc loc, std::shared_ptr<const Deadlock> deadlock);
  // A failure found at an instant taken earlier (a next_failure_sequence() value): a check after a
  // launch that several devices made together dates its failure by the launch, so that the devices'
  // findings tie and the first device's wins (rt::run_on_devices), whichever thread got there first.
  RuntimeError(std::string what, ExecutionPoint where, SourceLoc loc, uint64_t sequence);
  const std::string& problem() const { return what_; }
  const ExecutionPoint& where() const { return where_; }
  SourceLoc loc() const { return loc_; }
  // When the failure happened (next_failure_sequence() at construction; copies keep it).
  uint64_t sequence() const { return sequence_; }
  // The deadlock this failure reports, or null when it is a failure of its own (copies and retold
  // ones keep it).
  const std::shared_ptr<const Deadlock>& deadlock() const { return deadlock_; }
  // What others (cores, devices, processes) ran into after this failure, one line each: shown after
  // the error as "note:" lines, never instead of it.
  const std::vector<std::string>& notes() const { return notes_; }
  // The same failure (its place, line and time) told as `what`, with `more` notes after its own.
  RuntimeError retold(std::string what, const std::vector<std::string>& more = {}) const;

 private:
  std::string what_;
  ExecutionPoint where_;
  SourceLoc loc_;
  uint64_t sequence_;
  std::vector<std::string> notes_;
  std::shared_ptr<const Deadlock> deadlock_;
};

// Differential mode (CallOptions::check_against_interpreter): an output of the compiled kernel differs
// from the interpreter's beyond the tolerance of its dtype. The message names the call and the output,
// the first differing element's index, both values, the tolerance, how many elements differ, and the
// grid point whose block holds the element (when a block write-back put it there).
class MismatchError : public Error {
 public:
  MismatchError(std::string message, std::string output, std::vector<int64_t> index, std::string compiled,
                std::string interpreted, std::optional<ExecutionPoint> writer, SourceLoc loc);
  const std::string& output() const { return output_; }  // "output 0"
  const std::vector<int64_t>& index() const { return index_; }
  const std::string& compiled() const { return compiled_; }
  const std::string& interpreted() const { return interpreted_; }
  // The device, core and grid point that wrote back the block holding the element (interpreted run).
  const std::optional<ExecutionPoint>& writer() const { return writer_; }
  SourceLoc loc() const { return loc_; }

 private:
  std::string output_;
  std::vector<int64_t> index_;
  std::string compiled_, interpreted_;
  std::optional<ExecutionPoint> writer_;
  SourceLoc loc_;
};

}  // namespace tessera
