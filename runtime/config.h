// tessera's configuration: every TESSERA_* environment variable, declared once in one table (in
// config.cpp) with its kind, default, accepted values and one line of documentation, and the typed
// accessors that read it. Readers are the runtime (threads, DMA execution, random delays, timelines),
// the lowering (IR dumps, pass times), the LLVM backend (disk cache, logs, LLVM dumps) and the front
// end (TESSERA_INTERPRET). README.md's environment table is the text readme_table() renders from the
// same table; tests/runtime/config_test.cpp fails when the two disagree.
//
// When a variable is read: an accessor reads the environment each time it is called, so a program (or
// a test) may change a variable between calls; the text is parsed once and the result kept until the
// text changes, so a read on a hot path costs a getenv and a compare. Settings the runtime fixes for
// the process (TESSERA_NUM_THREADS, TESSERA_DMA, TESSERA_CHAOS_US) are read by their owners on first
// use, not at start-up, and kept.
//
// Invalid values: an accessor that finds a value it does not accept throws tessera::UserError naming
// the variable, the value given and the values accepted. The error comes from the call that read the
// variable (a pallas_call, a launch, a compile), as an exception: never at start-up, never an abort,
// and points at the line of the user's call that read it (CallSite below). Nothing invalid is kept:
// every read throws again until the variable is fixed or unset, and the next call after that works.
//
// Thread safety: accessors may be called from any thread at once. Changing the environment while
// another thread reads it is unsafe in POSIX itself: change variables between calls.
//
// Adding a variable: an enumerator in Var, a row at the same position in the table in config.cpp,
// a typed accessor below if its readers want one, and the row in README.md (config_test prints the
// table it expects).
//
// Runtime layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "jit/ir/diagnostics.h"

namespace tessera::config {

// The variables, in the order of the table (and of README.md's table).
enum class Var : uint8_t {
  dump_ir,
  time_passes,
  dump_llvm,
  log,
  interpret,
  check_against_interpreter,
  detect_races,
  num_threads,
  dma,
  chaos_us,
  trace,
  cache_dir,
  cache,
  target,
  update_golden,
  exhaustive,
};
inline constexpr size_t var_count = static_cast<size_t>(Var::exhaustive) + 1;

enum class Kind : uint8_t {
  flag,     // 1, true, on, yes / 0, false, off, no (any case); set but empty is 0
  integer,  // a decimal integer from `min` to `max`
  choice,   // one of `choices`
  list,     // a comma-separated list of `choices`
  text,     // any text, e.g. a path (`placeholder` says what)
};

struct Variable {
  Var var;
  const char* name;  // "TESSERA_DMA"
  Kind kind;
  // The value that applies when the variable is unset (for all kinds but flags, also when empty),
  // written as the variable would be; empty when "unset" means something no value says (doc).
  std::string_view default_value;
  std::span<const std::string_view> choices;  // choice, list
  int64_t min = 0, max = 0;                   // integer
  std::string_view placeholder;               // text
  std::string_view doc;                       // one line: what it does
};

// The table, indexed by Var.
std::span<const Variable> variables();
const Variable& variable(Var v);
// The declared variable of that name, or nullptr.
const Variable* find(std::string_view name);
// What it accepts, as error messages say it: "one of auto, eager, worker", "an integer from 1 to 4096".
std::string accepted_values(const Variable& v);
// README.md's environment table (Markdown, one row per variable, ending with a newline).
std::string readme_table();

// ---- generic reads: each checks the variable's kind and throws UserError on an invalid value ------
bool flag(Var v);                        // flag: the default when unset
std::optional<int64_t> integer(Var v);   // integer: the default when unset; nullopt if there is none
std::string_view choice(Var v);          // choice: the table's spelling of the value (static storage)
bool listed(Var v, std::string_view item);  // list: whether the value names `item` (or "all")
std::string text(Var v);                 // text: the value; the default when unset or empty

// ---- where an invalid value is reported --------------------------------------------------------------
// The user's call being made on this thread, while it is alive: the front end opens one for a
// pallas_call or mpmd_map as it is made (TESSERA_INTERPRET and the other switches of a call are read
// then, at its line) and as it is called (its compile reads the dump, log and cache settings, its
// launch TESSERA_NUM_THREADS, TESSERA_DMA and TESSERA_CHAOS_US; a call inside pl::shard_map runs on
// its device's thread and opens its own). An invalid value read meanwhile is that call's error, at
// its line, as a bad argument of the call would be; the innermost call wins. Entry points that read a
// variable outside any call open one at their caller's line: pl::set_num_threads and pl::num_threads
// (the latter only when no call is open: inside a launch the pallas_call's line stays), and the kept
// calls of tessera's collectives and libraries for TESSERA_INTERPRET (dsl/kept_call.h).
class CallSite {
 public:
  explicit CallSite(SourceLoc loc);
  ~CallSite();
  CallSite(const CallSite&) = delete;
  CallSite& operator=(const CallSite&) = delete;

 private:
  SourceLoc previous_;
};
// The line of the innermost CallSite alive on this thread; unknown when there is none.
SourceLoc call_site();

// ---- typed accessors --------------------------------------------------------------------------------
// TESSERA_DUMP_IR: "0" (nothing), "1" (as traced), "all", or a lowering pass's name.
std::string_view dump_ir();
bool time_passes();                  // TESSERA_TIME_PASSES
bool dump_llvm();                    // TESSERA_DUMP_LLVM
bool log_enabled(std::string_view topic);  // TESSERA_LOG lists `topic` ("cache"), or "all"
bool interpret();                    // TESSERA_INTERPRET
bool check_against_interpreter();    // TESSERA_CHECK_AGAINST_INTERPRETER
bool detect_races();                 // TESSERA_DETECT_RACES
std::optional<int> num_threads();    // TESSERA_NUM_THREADS; nullopt: one per hardware thread
std::string_view dma();              // TESSERA_DMA: "auto", "eager" or "worker"
int64_t chaos_us();                  // TESSERA_CHAOS_US; 0: no delays
std::string trace_path();            // TESSERA_TRACE; empty: no whole-run timeline
std::string cache_dir();             // TESSERA_CACHE_DIR; empty: the default directory
bool disk_cache();                   // TESSERA_CACHE
std::string target();               // TESSERA_TARGET: a CPU target name (jit/llvm/target.h)

}  // namespace tessera::config
