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
  line(fmt::format("{} then failed: {}", who, first_line(message)));
}

void Consequences::add_deadlock(const std::string& who, const Deadlock& deadlock, std::string_view message) {
  // What the blocked ones wait on is what the cause left undone (finished, stopped and running ones
  // add nothing). Every waiter throws the same report, so its waits come out once.
  for (const Deadlock::Wait& wait : deadlock.waits)
    line(fmt::format("{} then waited for what never came: {}", wait.participant, first_line(wait.on)));
  if (deadlock.waits.empty()) add_text(who, message);
}

void Consequences::add(const std::string& who, const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const RuntimeError& e) {
    const std::string place = who.empty() ? fmt::format("device {}, core {}", e.where().device, e.where().core) : who;
    if (e.deadlock())
      add_deadlock(place, *e.deadlock(), e.problem());
    else if (!e.loc().known())
      add_text(place, e.problem());
    else
      line(fmt::format("{} then failed: {} (at {})", place, first_line(e.problem()), e.loc().str()));
  } catch (const std::exception& e) {
    add_text(who.empty() ? "another participant" : who, e.what());
  } catch (...) {
    add_text(who.empty() ? "another participant" : who, "an unknown failure");
  }
}

bool is_deadlock(const std::exception_ptr& failure) {
  if (!failure) return false;
  try {
    std::rethrow_exception(failure);
  } catch (const RuntimeError& e) {
    return e.deadlock() != nullptr;
  } catch (...) {
    return false;
  }
}

namespace {

// Length-prefixed fields ("<bytes>:<text>"), so that no text can be mistaken for the framing.
void put(std::string& out, std::string_view field) { out += fmt::format("{}:{}", field.size(), field); }

std::optional<std::string_view> take(std::string_view& in) {
  const size_t colon = in.find(':');
  if (colon == std::string_view::npos || colon == 0 || colon > 18) return std::nullopt;  // 18 digits: no overflow
  size_t size = 0;
  for (char c : in.substr(0, colon)) {
    if (c < '0' || c > '9') return std::nullopt;
    size = size * 10 + static_cast<size_t>(c - '0');
  }
  if (in.size() - colon - 1 < size) return std::nullopt;
  const std::string_view field = in.substr(colon + 1, size);
  in.remove_prefix(colon + 1 + size);
  return field;
}

}  // namespace

// "E" and the message for a failure of its own; "D", the message and each wait's participant and
// what it waits on for a deadlock report.
std::string encode_failure(const std::exception_ptr& failure) {
  if (!failure) return "";
  std::string out;
  try {
    std::rethrow_exception(failure);
  } catch (const RuntimeError& e) {
    out = e.deadlock() ? "D" : "E";
    put(out, e.what());
    if (e.deadlock())
      for (const Deadlock::Wait& wait : e.deadlock()->waits) {
        put(out, wait.participant);
        put(out, wait.on);
      }
  } catch (const std::exception& e) {
    out = "E";
    put(out, e.what());
  } catch (...) {
    out = "E";
    put(out, "unknown failure");
  }
  return out;
}

std::optional<SentFailure> decode_failure(std::string_view encoded) {
  if (encoded.empty()) return std::nullopt;
  const char kind = encoded.front();
  encoded.remove_prefix(1);
  const std::optional<std::string_view> message = take(encoded);
  if ((kind != 'D' && kind != 'E') || !message)
    throw InternalError("the processes' failure exchange", fmt::format("an undecodable failure: `{}`", encoded));
  SentFailure sent{std::string(*message), std::nullopt};
  if (kind == 'E') return sent;
  sent.deadlock.emplace();
  while (!encoded.empty()) {
    const std::optional<std::string_view> participant = take(encoded), on = take(encoded);
    if (!participant || !on)
      throw InternalError("the processes' failure exchange", fmt::format("an undecodable deadlock: `{}`", encoded));
    sent.deadlock->waits.push_back(Deadlock::Wait{std::string(*participant), std::string(*on)});
  }
  return sent;
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
