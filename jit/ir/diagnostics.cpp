#include "jit/ir/diagnostics.h"

#include <fmt/format.h>

#include <atomic>
#include <mutex>
#include <set>
#include <fmt/ranges.h>

namespace tessera {

std::string SourceLoc::str() const {
  if (!known()) return "<unknown location>";
  return fmt::format("{}:{}", file, line);
}

const char* interned_file_name(std::string_view file) {
  static std::mutex mutex;
  static std::set<std::string, std::less<>> names;
  std::lock_guard lock(mutex);
  auto it = names.find(file);
  if (it == names.end()) it = names.emplace(file).first;
  return it->c_str();
}

static std::string user_message(const std::string& what, const std::string& given, const std::string& fix,
                                SourceLoc loc) {
  std::string msg = what;
  if (!given.empty()) msg += fmt::format("\n  given: {}", given);
  if (!fix.empty()) msg += fmt::format("\n  fix:   {}", fix);
  msg += fmt::format("\n  at:    {}", loc.str());
  return msg;
}

UserError::UserError(std::string what, std::string given, std::string fix, SourceLoc loc)
    : Error(user_message(what, given, fix, loc)),
      what_(std::move(what)),
      given_(std::move(given)),
      fix_(std::move(fix)),
      loc_(loc) {}

InternalError::InternalError(std::string component, std::string what, std::string ir_text)
    : Error(fmt::format("tessera internal error in {}: {}{}{}", component, what, ir_text.empty() ? "" : "\n",
                        ir_text)) {}

std::string ExecutionPoint::str() const {
  std::string s = fmt::format("device {}, core {}", device, core);
  if (!grid_point.empty()) s += fmt::format(", grid point ({})", fmt::join(grid_point, ", "));
  if (!inner_point.empty()) s += fmt::format(", emit_pipeline step ({})", fmt::join(inner_point, ", "));
  return s;
}

uint64_t next_failure_sequence() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

RuntimeError::RuntimeError(std::string what, ExecutionPoint where, SourceLoc loc)
    : RuntimeError(std::move(what), std::move(where), loc, next_failure_sequence()) {}

RuntimeError::RuntimeError(std::string what, ExecutionPoint where, SourceLoc loc, uint64_t sequence)
    : Error(fmt::format("{}\n  where: {}\n  at:    {}", what, where.str(), loc.str())),
      what_(std::move(what)),
      where_(std::move(where)),
      loc_(loc),
      sequence_(sequence) {}

RuntimeError::RuntimeError(std::string what, ExecutionPoint where, SourceLoc loc, std::shared_ptr<const Deadlock> deadlock)
    : RuntimeError(std::move(what), std::move(where), loc) {
  deadlock_ = std::move(deadlock);
}

RuntimeError RuntimeError::retold(std::string what, const std::vector<std::string>& more) const {
  RuntimeError told(std::move(what), where_, loc_, sequence_);
  told.notes_ = notes_;
  told.deadlock_ = deadlock_;
  told.notes_.insert(told.notes_.end(), more.begin(), more.end());
  std::string message = told.Error::what();
  for (const std::string& note : told.notes_) message += "\n  note:  " + note;
  static_cast<Error&>(told) = Error(message);
  return told;
}

MismatchError::MismatchError(std::string message, std::string output, std::vector<int64_t> index, std::string compiled,
                             std::string interpreted, std::optional<ExecutionPoint> writer, SourceLoc loc)
    : Error(std::move(message)),
      output_(std::move(output)),
      index_(std::move(index)),
      compiled_(std::move(compiled)),
      interpreted_(std::move(interpreted)),
      writer_(std::move(writer)),
      loc_(loc) {}

}  // namespace tessera
