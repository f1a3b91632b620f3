// What the others ran into after the first failure of a launch: told as short notes after that
// failure, never instead of it.
//
// When one device (core, participant, process) fails, the others are often left waiting for it and
// fail too: a deadlock report, a copy into an instance that has already ended. The first failure in
// time is the error (its type, place, line and first line); these consequences follow it as
// "note:" lines, one line each, deduplicated and capped, so a reader sees the cause first and what
// it led to after.
#pragma once

#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jit/ir/diagnostics.h"

namespace tessera::rt {

// The start of every deadlock report's text (LaunchGroup): the failure of the ones left waiting. Only
// words: whether a failure is a deadlock is its RuntimeError::deadlock, never this text.
inline constexpr std::string_view kDeadlockReport = "deadlock: nothing can make progress";

// Gathers the consequences of one first failure, in the order they happened.
class Consequences {
 public:
  // At most this many notes are told; the rest are counted ("and K more").
  static constexpr size_t kShown = 4;

  // `failure` of `who` ("device 1, core 0"; empty: the failure's own place) happened after the cause.
  void add(const std::string& who, const std::exception_ptr& failure);
  // A failure known only as text (a transport's late report, another process's failure).
  void add_text(const std::string& who, std::string_view message);
  // A deadlock `who` ran into (`message`, its report): a note for each blocked participant.
  void add_deadlock(const std::string& who, const Deadlock& deadlock, std::string_view message);
  // The notes, deduplicated and capped.
  std::vector<std::string> notes() const;

 private:
  std::vector<std::string> lines_;  // deduplicated, in order
  void line(std::string text);
};

// Whether `failure` is a deadlock report (RuntimeError::deadlock): what the ones left waiting ran
// into, which a failure of their own goes before.
bool is_deadlock(const std::exception_ptr& failure);

// A failure as it crosses between processes (Transport::exchange): its problem, the notes already
// told after it, for a RuntimeError its execution point and source line, and for a deadlock the waits,
// so that every process tells the cause from its consequences by the same data and reports the cause
// under the header (where, at) of the process that failed.
struct SentFailure {
  std::string message;                 // a RuntimeError's problem; any other error's what()
  std::vector<std::string> notes;      // a RuntimeError's notes
  std::optional<ExecutionPoint> where;  // set: a RuntimeError
  SourceLoc loc;                        // its file (interned_file_name) and line; unknown for any other error
  std::optional<Deadlock> deadlock;     // set: a deadlock report, which another failure goes before
};
// "" when `failure` is null.
std::string encode_failure(const std::exception_ptr& failure);
// What encode_failure wrote; nullopt for "".
std::optional<SentFailure> decode_failure(std::string_view encoded);

// Rethrows `cause` with `notes` after it: a RuntimeError keeps its type, place, line, time and
// first line (`problem` replaces its problem when given); any other error is rethrown as it is.
[[noreturn]] void rethrow_with_notes(const std::exception_ptr& cause, const std::vector<std::string>& notes,
                                     const std::string* problem = nullptr);

}  // namespace tessera::rt
