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
#include <string>
#include <string_view>
#include <vector>

namespace tessera::rt {

// The start of every deadlock report (LaunchGroup::report): the failure of the ones left waiting.
inline constexpr std::string_view kDeadlockReport = "deadlock: nothing can make progress";

// Gathers the consequences of one first failure, in the order they happened.
class Consequences {
 public:
  // At most this many notes are told; the rest are counted ("and K more").
  static constexpr size_t kShown = 4;

  // `failure` of `who` ("device 1, core 0"; empty: the failure's own place) happened after the cause.
  void add(const std::string& who, const std::exception_ptr& failure);
  // A failure known only as text (a message from another process, a transport's late report).
  void add_text(const std::string& who, std::string_view message);
  // The notes, deduplicated and capped.
  std::vector<std::string> notes() const;

 private:
  std::vector<std::string> lines_;  // deduplicated, in order
  void line(std::string text);
};

// Rethrows `cause` with `notes` after it: a RuntimeError keeps its type, place, line, time and
// first line (`problem` replaces its problem when given); any other error is rethrown as it is.
[[noreturn]] void rethrow_with_notes(const std::exception_ptr& cause, const std::vector<std::string>& notes,
                                     const std::string* problem = nullptr);

}  // namespace tessera::rt
