#include "runtime/consequences.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>

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

// "E" for a failure of its own, "D" for a deadlock report; then the message, the notes, whether it is
// a RuntimeError ("1") and then its device, core, grid point, pipeline step, file, line and column;
// last, for a deadlock report, each wait's participant and what it waits on.
std::string encode_failure(const std::exception_ptr& failure) {
  if (!failure) return "";
  std::string out;
  const auto put_notes = [&](const std::vector<std::string>& notes) {
    put(out, std::to_string(notes.size()));
    for (const std::string& note : notes) put(out, note);
  };
  try {
    std::rethrow_exception(failure);
  } catch (const RuntimeError& e) {
    out = e.deadlock() ? "D" : "E";
    put(out, e.problem());
    put_notes(e.notes());
    put(out, "1");
    const ExecutionPoint& at = e.where();
    put(out, std::to_string(at.device));
    put(out, std::to_string(at.core));
    put(out, fmt::format("{}", fmt::join(at.grid_point, ",")));
    put(out, fmt::format("{}", fmt::join(at.inner_point, ",")));
    put(out, e.loc().file ? std::string_view(e.loc().file) : std::string_view());
    put(out, std::to_string(e.loc().line));
    put(out, std::to_string(e.loc().column));
    if (e.deadlock())
      for (const Deadlock::Wait& wait : e.deadlock()->waits) {
        put(out, wait.participant);
        put(out, wait.on);
      }
  } catch (const std::exception& e) {
    out = "E";
    put(out, e.what());
    put_notes({});
    put(out, "0");
  } catch (...) {
    out = "E";
    put(out, "unknown failure");
    put_notes({});
    put(out, "0");
  }
  return out;
}

std::optional<SentFailure> decode_failure(std::string_view encoded) {
  if (encoded.empty()) return std::nullopt;
  const std::string_view sent_text = encoded;
  const auto undecodable = [&]() {
    return InternalError("the processes' failure exchange", fmt::format("an undecodable failure: `{}`", sent_text));
  };
  const auto field = [&]() {
    const std::optional<std::string_view> f = take(encoded);
    if (!f) throw undecodable();
    return *f;
  };
  const auto integer = [&](std::string_view text) {
    int64_t value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size() || text.empty()) throw undecodable();
    return value;
  };
  const auto integers = [&](std::string_view text) {
    std::vector<int64_t> values;
    while (!text.empty()) {
      const size_t comma = std::min(text.find(','), text.size());
      values.push_back(integer(text.substr(0, comma)));
      text.remove_prefix(std::min(comma + 1, text.size()));
    }
    return values;
  };
  const char kind = encoded.front();
  encoded.remove_prefix(1);
  if (kind != 'D' && kind != 'E') throw undecodable();
  SentFailure sent;
  sent.message = std::string(field());
  const int64_t notes = integer(field());
  for (int64_t n = 0; n < notes; ++n) sent.notes.emplace_back(field());
  if (field() == "1") {
    ExecutionPoint& at = sent.where.emplace();
    at.device = static_cast<int>(integer(field()));
    at.core = static_cast<int>(integer(field()));
    at.grid_point = integers(field());
    at.inner_point = integers(field());
    const std::string_view file = field();
    // SourceLoc keeps a pointer: the name must outlive this message.
    if (!file.empty()) sent.loc.file = interned_file_name(file);
    sent.loc.line = static_cast<uint32_t>(integer(field()));
    sent.loc.column = static_cast<uint32_t>(integer(field()));
  }
  if (kind == 'E') {
    if (!encoded.empty()) throw undecodable();
    return sent;
  }
  sent.deadlock.emplace();
  while (!encoded.empty()) {
    const std::string_view participant = field(), on = field();
    sent.deadlock->waits.push_back(Deadlock::Wait{std::string(participant), std::string(on)});
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
