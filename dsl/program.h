// What pallas_call and mpmd_map share between tracing a kernel and launching it: the call's name,
// backend and error title, the checks of input_output_aliases, scratch allocated in a traced kernel,
// and building the rt::Executable of a traced kernel (lower it, then pick the backend: the
// interpreter or compiled code).
//
// Front-end layer (dsl/), internal: used by dsl/pallas_call.cpp and dsl/mpmd_map.cpp.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dsl/ref.h"
#include "dsl/specs.h"
#include "dsl/trace.h"
#include "runtime/array.h"
#include "runtime/executable.h"

namespace tessera::detail {

// A traced kernel for one signature of arguments, and what launches it.
struct Program {
  ir::Function traced;
  std::shared_ptr<const rt::Executable> exe;
  // Differential mode: the same kernel in the interpreter, run after `exe` to check its outputs.
  std::shared_ptr<const rt::Executable> reference;
};

// Throws the caller's UserError ("pallas_call `k`: what", given, fix, at).
using FailFn = std::function<void(std::string what, std::string given, std::string fix, SourceLoc at)>;

// Checks input_output_aliases ({argument index, output index}) against the arguments: each names an
// existing input and output, no output is aliased twice, and aliased arrays agree in shape and
// dtype. `num_prefetch`: for a call with scalar-prefetch operands (the first arguments; they count
// but cannot be aliased), how many; none for a call without them. `loc`: the call.
void check_aliases(const std::map<int, int>& aliases, std::span<const Array> args, std::optional<int> num_prefetch,
                   const std::vector<ShapeDtype>& out_shapes, SourceLoc loc, const FailFn& fail);

// What pallas_call and mpmd_map settle when the call is made, and how their misuse errors name it:
// the name (options.name, set to "kernel" when empty), the backend, and the title "api `name`".
class CallBase {
 public:
  bool interpreted() const { return interpreted_; }
  // Differential mode: compiled, and asked to check against the interpreter (by its options or
  // TESSERA_CHECK_AGAINST_INTERPRETER as the call is made).
  bool checks_against_interpreter() const { return checks_; }

 protected:
  // `loc`: where the call is made (pallas_call(...), mpmd_map(...)), where an invalid TESSERA_INTERPRET
  // or other switch read here is reported.
  CallBase(std::string_view api, CallOptions& options, SourceLoc loc);
  // "pallas_call `k`": opens every error message and names the call in IR dumps.
  const std::string& title() const { return title_; }
  // Throws UserError("<title>: what", given, fix, loc).
  [[noreturn]] void fail(std::string what, std::string given, std::string fix, SourceLoc loc) const;
  // No kernel is being traced on this thread: a kernel cannot launch kernels, and a call made while
  // its own kernel is traced would wait for itself on the call's lock.
  void check_not_tracing(SourceLoc loc) const;
  // Every output shape is one an array can have (jit/ir/type.h: shape_error); the error points at
  // the ShapeDtype's line, before tracing could blame whichever op first meets the shape.
  void check_out_shapes(const std::vector<ShapeDtype>& out_shapes) const;
  // InterpretParams::num_schedules, when interpreting: at least 1, and above 1 only with on_wait
  // copies (exploration varies the order in which copies complete). `loc`: the call's options.
  void check_num_schedules(const CallOptions& options, SourceLoc loc) const;
  // check_aliases below, failing with this call's title.
  void check_aliases(const std::map<int, int>& aliases, std::span<const Array> args, std::optional<int> num_prefetch,
                     const std::vector<ShapeDtype>& out_shapes, SourceLoc loc) const;

  std::string name_;

 private:
  std::string title_;
  bool interpreted_ = false;
  bool checks_ = false;
};

// Differential mode: compares the outputs of a compiled run with those of the interpreted run of the
// same call, and throws MismatchError for the first output that differs beyond `tolerance` (unset:
// each dtype's default). `writes`: the blocks the interpreted run wrote back (null when it has no
// grid), to name the grid point that wrote the differing element; `num_inputs`: the grid pipeline's
// inputs before its outputs (scalar-prefetch operands excluded); `check_unwritten`: false skips the
// elements the interpreter leaves as poison (CallOptions::check_unwritten).
void compare_with_interpreter(std::span<const Array> compiled, std::span<const Array> interpreted,
                              const rt::BlockWriteLog* writes, int num_inputs, std::optional<rt::Tolerance> tolerance,
                              const std::string& title, SourceLoc loc, bool check_unwritten = true);

// Allocates scratch buffer `k` in the kernel being traced: each core's own, named "scratch k".
Ref trace_scratch(TraceContext& ctx, const ScratchShape& scratch, size_t k);

// Lowers `traced` and builds its executable: `exe` comes with its key, operands, aliases and grid,
// and gets the lowered kernel and the backend (`interpreted`: the interpreter, set up by
// options.interpret; else compiled code). options.debug prints both IRs under `title`.
void build_executable(rt::Executable& exe, const ir::Function& traced, const CallOptions& options, bool interpreted,
                      const std::string& title);

// Schedule exploration (InterpretParams::num_schedules), the one loop of pallas_call and mpmd_map:
// runs the interpreted call under the seeds first_seed, first_seed + 1, ... (`count` of them), each
// by `run(options)`, which launches it under the schedule of `options.seed`, logs the blocks its grid
// writes back into `*options.block_writes` (a call without a grid leaves it empty) and sets
// `*options.instant` if it can. A schedule's RuntimeError is rethrown naming its seed; outputs that
// differ from the first schedule's are a RuntimeError naming both seeds, the output, its first
// differing element and the grid point whose block holds it (when one does; `num_inputs`: the grid
// pipeline's inputs before its outputs), dated by the launch's instant: the devices of a shard_map
// whose outputs all differ under one collective launch tie, and the first device's report is the
// error whichever finished first. Returns the first schedule's outputs.
using ScheduleRun = std::function<std::vector<Array>(const rt::LaunchOptions& options)>;
std::vector<Array> explore_schedules(const ScheduleRun& run, uint64_t first_seed, int64_t count, int num_inputs,
                                     const std::string& title, SourceLoc loc);
// pallas_call's: each schedule is one rt::launch of the interpreted `exe`.
std::vector<Array> explore_schedules(const rt::Executable& exe, std::span<const Array> args, uint64_t first_seed,
                                     int64_t count, int num_inputs, const std::string& title, SourceLoc loc);

}  // namespace tessera::detail
