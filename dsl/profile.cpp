#include "dsl/profile.h"

#include <fmt/format.h>

#include <stdexcept>

#include "dsl/trace.h"

namespace tessera {

namespace detail {

bool kernel_scope_boundary(const std::string& name, bool start, std::source_location loc) {
  TraceContext* ctx = TraceContext::active();
  if (!ctx) return false;
  ctx->emit(start ? ir::OpKind::TraceStart : ir::OpKind::TraceStop, {}, {}, name, loc);
  return true;
}

}  // namespace detail

void start_trace(const std::string& path, std::source_location loc) {
  if (path.empty())
    throw UserError("pl::start_trace needs a file to write the timeline to", "an empty path",
                    "pass e.g. \"trace.json\"", loc);
  if (!rt::timeline::start(path))
    throw UserError("a timeline is already being recorded", fmt::format("into `{}`", rt::timeline::path()),
                    "stop it first (pl::stop_trace), or record one profile at a time", loc);
}

std::string stop_trace(std::source_location loc) {
  if (!rt::timeline::recording())
    throw UserError("pl::stop_trace: no timeline is being recorded", "a stop without a start",
                    "call pl::start_trace(path) first", loc);
  try {
    return rt::timeline::stop();
  } catch (const std::runtime_error& e) {
    throw UserError(e.what(), "the path given to pl::start_trace / pl::profile",
                    "pass a path in a directory that exists and is writable", loc);
  }
}

}  // namespace tessera
