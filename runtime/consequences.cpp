#include "runtime/consequences.h"

#include <fmt/format.h>

#include <algorithm>

#include "jit/ir/diagnostics.h"

namespace tessera::rt {

namespace {

// A note stays one short line: the first line of a message, cut at this many characters.
constexpr size_t kNoteWidth = 160;

// A long line is cut after its last clause that fits ("...has already ended: a device may only..."
// keeps what happened and drops the explanation), or at the width when no clause ends in reach.
std::string first_line(std::string_view text) {
  std::string_view line = text.substr(0, text.find('\n'));
  if (line.size() <= kNoteWidth) return std::string(line);
  size_t cut = kNoteWidth;
  for (std::string_view end : {": ", "; "})
    if (size_t at = line.rfind(end, kNoteWidth); at != std::string_view::npos && at >= kNoteWidth / 3)
      cut = cut == kNoteWidth ? at : std::max(cut, at);
  return fmt::format("{} ...", line.substr(0, cut));
}

}  // namespace

void Consequences::line(std::string text) {
  if (std::find(lines_.begin(), lines_.end(), text) == lines_.end()) lines_.push_back(std::move(text));
}

void Consequences::add_text(const std::string& who, std::string_view message) {
  if (!message.starts_with(kDeadlockReport)) {
    line(fmt::format("{} then failed: {}", who, first_line(message)));
    return;
  }
  // A deadlock report names every participant; what the blocked ones wait on is what the cause left
  // undone (finished, stopped and running ones add nothing). Every waiter throws the same report,
  // so its lines come out once.
  bool any = false;
  size_t at = message.find('\n');
  while (at != std::string_view::npos) {
    const size_t end = message.find('\n', at + 1);
    std::string_view row = message.substr(at + 1, end == std::string_view::npos ? end : end - at - 1);
    at = end;
    if (!row.starts_with("    ")) continue;  // the participants' rows are indented under the headline
    row.remove_prefix(4);
    const size_t colon = row.find(": ");
    if (colon == std::string_view::npos) continue;
    const std::string_view participant = row.substr(0, colon), state = row.substr(colon + 2);
    if (state == "finished the kernel" || state == "running" || state.starts_with("stopped before") ||
        state.starts_with("waits or is done"))
      continue;
    line(fmt::format("{} then waited for what never came: {}", participant, first_line(state)));
    any = true;
  }
  if (!any) line(fmt::format("{} then failed: {}", who, first_line(message)));
}

void Consequences::add(const std::string& who, const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const RuntimeError& e) {
    const std::string place = who.empty() ? fmt::format("device {}, core {}", e.where().device, e.where().core) : who;
    if (e.problem().starts_with(kDeadlockReport) || !e.loc().known())
      add_text(place, e.problem());
    else
      line(fmt::format("{} then failed: {} (at {})", place, first_line(e.problem()), e.loc().str()));
  } catch (const std::exception& e) {
    add_text(who.empty() ? "another participant" : who, e.what());
  } catch (...) {
    add_text(who.empty() ? "another participant" : who, "an unknown failure");
  }
}

std::vector<std::string> Consequences::notes() const {
  std::vector<std::string> shown(lines_.begin(), lines_.begin() + static_cast<std::ptrdiff_t>(std::min(lines_.size(), kShown)));
  if (lines_.size() > kShown) shown.push_back(fmt::format("and {} more", lines_.size() - kShown));
  return shown;
}

void rethrow_with_notes(const std::exception_ptr& cause, const std::vector<std::string>& notes, const std::string* problem) {
  try {
    std::rethrow_exception(cause);
  } catch (const RuntimeError& e) {
    if (notes.empty() && !problem) throw;
    throw e.retold(problem ? *problem : e.problem(), notes);
  }
  std::rethrow_exception(cause);  // not reached: the handler throws
}

}  // namespace tessera::rt
